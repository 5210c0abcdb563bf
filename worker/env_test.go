package worker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gofrs/flock"
	"github.com/soma-hpc/soma/internal/testutil"
)

// testPkg is the project the tests build into a wheel and install
// offline. Its name has "-" and "_" so that normalisation is exercised.
const (
	testPkgName   = "soma_test-pkg"
	testPkgModule = "somatestpkg"
)

// buildWheel builds testPkgName 1.0 into a wheel, offline, and returns
// the folder holding it.
func buildWheel(t testing.TB) string {
	t.Helper()
	testutil.NeedPython(t, "venv", "setuptools", "wheel", "pip")
	src := filepath.Join(t.TempDir(), "pkg")
	writeFiles(t, src, map[string]string{
		"setup.py":            fmt.Sprintf("from setuptools import setup\nsetup(name=%q, version=\"1.0\", py_modules=[%q])\n", testPkgName, testPkgModule),
		testPkgModule + ".py": "VALUE = 42\n",
	})
	wheels := filepath.Join(t.TempDir(), "wheels")
	cmd := exec.Command(testutil.Python(), "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", wheels, src)
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build wheel: %v\n%s", err, out)
	}
	return wheels
}

// newTestPool returns a pool over dir that counts its pip runs.
func newTestPool(t testing.TB, dir string, maxBytes int64) (*EnvPool, *atomic.Int32) {
	t.Helper()
	p, err := NewEnvPool(EnvOptions{Dir: dir, Python: testutil.Python(), MaxBytes: maxBytes})
	if err != nil {
		t.Fatal(err)
	}
	var pips atomic.Int32
	p.pipStarted = func(string, int) { pips.Add(1) }
	p.poll = 5 * time.Millisecond
	return p, &pips
}

// importValue runs env's python and returns what it prints for code.
func runPython(t *testing.T, env *Env, code string) (string, error) {
	t.Helper()
	out, err := exec.Command(env.Python, "-c", code).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func wheelSpec(wheels string) EnvSpec {
	// Spelled unlike the project's own name: normalisation must match it.
	return EnvSpec{Requirements: []string{"Soma.Test_Pkg == 1.0"}, NoIndex: true, FindLinks: []string{wheels}}
}

func TestEnvPool(t *testing.T) {
	testutil.NeedPython(t, "venv")
	wheels := buildWheel(t)
	ctx := context.Background()

	t.Run("builds once, then reuses without pip", func(t *testing.T) {
		p, pips := newTestPool(t, t.TempDir(), 0)
		env, err := p.Get(ctx, wheelSpec(wheels))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := runPython(t, env, "import "+testPkgModule+"; print("+testPkgModule+".VALUE)"); err != nil || got != "42" {
			t.Fatalf("import %s in the env: %q, %v; want 42", testPkgModule, got, err)
		}
		env.Release()
		env.Release() // twice is harmless
		respelled := EnvSpec{Requirements: []string{"  soma-test-pkg==1.0 ", ""}, NoIndex: true, FindLinks: []string{wheels, wheels}}
		again, err := p.Get(ctx, respelled)
		if err != nil {
			t.Fatal(err)
		}
		defer again.Release()
		if again.Dir != env.Dir || again.Key != env.Key {
			t.Errorf("second Get = %s, want the first env %s", again.Dir, env.Dir)
		}
		if got := pips.Load(); got != 1 {
			t.Errorf("pip ran %d times for two Gets, want 1", got)
		}
		// A new pool over the same folder (a restarted worker) reuses it too.
		p2, pips2 := newTestPool(t, p.dir, 0)
		third, err := p2.Get(ctx, wheelSpec(wheels))
		if err != nil {
			t.Fatal(err)
		}
		third.Release()
		if third.Dir != env.Dir || pips2.Load() != 0 {
			t.Errorf("restarted pool: env %s after %d pip runs, want %s after 0", third.Dir, pips2.Load(), env.Dir)
		}
	})

	// An interpreter without pip >= 22.3 (a cluster's bare Python)
	// builds with the venv's own pip, from ensurepip.
	t.Run("with the venv's own pip", func(t *testing.T) {
		p, pips := newTestPool(t, t.TempDir(), 0)
		p.basePip = false
		env, err := p.Get(ctx, wheelSpec(wheels))
		if err != nil {
			t.Fatal(err)
		}
		defer env.Release()
		if got, err := runPython(t, env, "import "+testPkgModule+"; print("+testPkgModule+".VALUE)"); err != nil || got != "42" {
			t.Fatalf("import %s in the env: %q, %v; want 42", testPkgModule, got, err)
		}
		if _, err := runPython(t, env, "import pip"); err != nil || pips.Load() != 1 {
			t.Errorf("venv's own pip: import pip: %v, pip runs %d; want pip in the venv, run once", err, pips.Load())
		}
	})

	t.Run("goroutines build once", func(t *testing.T) {
		p, pips := newTestPool(t, t.TempDir(), 0)
		const n = 6
		dirs := make([]string, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				env, err := p.Get(ctx, wheelSpec(wheels))
				if err != nil {
					t.Error(err)
					return
				}
				dirs[i] = env.Dir
				env.Release()
			})
		}
		wg.Wait()
		if got := pips.Load(); got != 1 {
			t.Errorf("pip ran %d times for %d concurrent Gets, want 1", got, n)
		}
		for i, d := range dirs {
			if d != dirs[0] {
				t.Errorf("Get %d = %s, want %s", i, d, dirs[0])
			}
		}
	})

	t.Run("processes build once", func(t *testing.T) {
		dir, count := t.TempDir(), filepath.Join(t.TempDir(), "pip-runs")
		start := filepath.Join(t.TempDir(), "go")
		const n = 4
		cmds := make([]*exec.Cmd, n)
		outs := make([]strings.Builder, n)
		for i := range cmds {
			cmds[i] = envHelper(t, "get", dir, wheelSpec(wheels), "SOMA_ENV_COUNT="+count, "SOMA_ENV_START="+start)
			cmds[i].Stdout, cmds[i].Stderr = &outs[i], &outs[i]
			if err := cmds[i].Start(); err != nil {
				t.Fatal(err)
			}
		}
		// All wait for this file, so their Gets meet at the same moment.
		if err := os.WriteFile(start, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		var dirs []string
		for i, c := range cmds {
			if err := c.Wait(); err != nil {
				t.Fatalf("helper %d: %v\n%s", i, err, outs[i].String())
			}
			d, ok := field(outs[i].String(), "ENV")
			if !ok {
				t.Fatalf("helper %d printed no env:\n%s", i, outs[i].String())
			}
			dirs = append(dirs, d)
		}
		runs, _ := os.ReadFile(count)
		if got := strings.Count(string(runs), "\n"); got != 1 {
			t.Errorf("pip ran %d times in %d processes, want 1:\n%s", got, n, runs)
		}
		for i, d := range dirs {
			if d != dirs[0] {
				t.Errorf("process %d got %s, want %s", i, d, dirs[0])
			}
		}
	})

	t.Run("a builder killed mid-pip leaves nothing used", func(t *testing.T) {
		dir, started := t.TempDir(), filepath.Join(t.TempDir(), "started")
		cmd := envHelper(t, "hang", dir, wheelSpec(wheels), "SOMA_ENV_STARTED="+started)
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var buildDir string
		var pipPID int
		for buildDir == "" { // the helper writes "dir pid" once pip runs
			b, _ := os.ReadFile(started)
			if f := strings.Fields(string(b)); len(f) == 2 && strings.HasSuffix(string(b), "\n") {
				buildDir = f[0]
				pipPID, _ = strconv.Atoi(f[1])
			}
			if cmd.ProcessState != nil {
				t.Fatalf("helper exited:\n%s", out.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
		// kill -9 the builder, then its pip: a worker and its child
		// killed by the OOM killer or a node's cleanup, mid-pip.
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		cmd.Wait()
		killAndWait(t, pipPID)

		p, pips := newTestPool(t, dir, 0)
		env, err := p.Get(ctx, wheelSpec(wheels))
		if err != nil {
			t.Fatal(err)
		}
		defer env.Release()
		if env.Dir == buildDir || pips.Load() != 1 {
			t.Errorf("after a killed build: env %s after %d pip runs; want a new build, not %s", env.Dir, pips.Load(), buildDir)
		}
		if got, err := runPython(t, env, "import "+testPkgModule+"; print("+testPkgModule+".VALUE)"); err != nil || got != "42" {
			t.Errorf("rebuilt env: %q, %v; want 42", got, err)
		}
		if _, err := os.Stat(buildDir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the killed build %s is still there after the next build's prune (%v)", buildDir, err)
		}
	})

	t.Run("missing requirement is pip's error", func(t *testing.T) {
		dir := t.TempDir()
		p, _ := newTestPool(t, dir, 0)
		spec := EnvSpec{Requirements: []string{"soma-no-such-package==9"}, NoIndex: true, FindLinks: []string{wheels}}
		env, err := p.Get(ctx, spec)
		var be *EnvBuildError
		if !errors.As(err, &be) || be.Step != "pip install" || !strings.Contains(err.Error(), "No matching distribution found for soma-no-such-package==9") {
			t.Fatalf("Get with a missing requirement: %v, %v; want an *EnvBuildError carrying pip's message", env, err)
		}
		if env != nil {
			t.Errorf("Get returned env %+v with its error; want none (no fallback interpreter)", env)
		}
		for _, sub := range []string{"envs", "store"} {
			if entries, _ := os.ReadDir(filepath.Join(dir, sub)); len(entries) != 0 {
				t.Errorf("%s after a failed build holds %v, want nothing", sub, entries)
			}
		}
	})

	t.Run("index URL", func(t *testing.T) {
		// A PEP 503 simple index on loopback, serving the test's wheel.
		whl, err := filepath.Glob(filepath.Join(wheels, "*.whl"))
		if err != nil || len(whl) != 1 {
			t.Fatalf("wheels: %v, %v", whl, err)
		}
		name := filepath.Base(whl[0])
		var hits atomic.Int32
		mux := http.NewServeMux()
		mux.HandleFunc("/simple/soma-test-pkg/", func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			fmt.Fprintf(w, "<html><body><a href=\"/files/%s\">%s</a></body></html>\n", name, name)
		})
		mux.Handle("/files/", http.StripPrefix("/files/", http.FileServer(http.Dir(wheels))))
		srv := httptest.NewServer(mux)
		defer srv.Close()
		p, pips := newTestPool(t, t.TempDir(), 0)
		env, err := p.Get(ctx, EnvSpec{Requirements: []string{testPkgName}, IndexURL: srv.URL + "/simple/"})
		if err != nil {
			t.Fatal(err)
		}
		defer env.Release()
		if got, err := runPython(t, env, "import "+testPkgModule+"; print("+testPkgModule+".VALUE)"); err != nil || got != "42" {
			t.Errorf("env from the index: %q, %v; want 42", got, err)
		}
		if hits.Load() == 0 || pips.Load() != 1 {
			t.Errorf("index hit %d times, pip ran %d times; want the index used by one pip run", hits.Load(), pips.Load())
		}
	})

	t.Run("system site packages", func(t *testing.T) {
		testutil.NeedPython(t, "numpy")
		p, _ := newTestPool(t, t.TempDir(), 0)
		for _, ssp := range []bool{true, false} {
			env, err := p.Get(ctx, EnvSpec{SystemSitePackages: ssp})
			if err != nil {
				t.Fatal(err)
			}
			_, err = runPython(t, env, "import numpy")
			if sees := err == nil; sees != ssp {
				t.Errorf("SystemSitePackages %v: import numpy succeeded = %v", ssp, sees)
			}
			env.Release()
		}
	})
}

// A Get waiting for another's build stops when its context ends.
func TestEnvPoolGetCancelled(t *testing.T) {
	testutil.NeedPython(t, "venv")
	p, _ := newTestPool(t, t.TempDir(), 0)
	key, err := p.Key(EnvSpec{})
	if err != nil {
		t.Fatal(err)
	}
	// Another process is building key: it holds the build lock.
	builder := flock.New(filepath.Join(p.dir, "locks", key+".lock"))
	if err := builder.Lock(); err != nil {
		t.Fatal(err)
	}
	defer builder.Close()
	ctx, cancel := context.WithCancel(context.Background())
	type result struct {
		env *Env
		err error
	}
	done := make(chan result)
	go func() {
		env, err := p.Get(ctx, EnvSpec{})
		done <- result{env, err}
	}()
	cancel() // before or during the wait: either way Get must give up
	r := <-done
	if !errors.Is(r.err, context.Canceled) || r.env != nil {
		t.Fatalf("Get while another builds, cancelled: %v, %v; want context.Canceled", r.env, r.err)
	}
	if entries, _ := os.ReadDir(filepath.Join(p.dir, "store")); len(entries) != 0 {
		t.Errorf("store after a cancelled wait holds %v, want nothing", entries)
	}
}

// A venv that pyvenv.cfg says another interpreter built (copied in, or
// left by an upgrade in place) is rebuilt, not used.
func TestEnvPoolOtherInterpreter(t *testing.T) {
	testutil.NeedPython(t, "venv")
	ctx := context.Background()
	for _, tc := range []struct{ name, from, to string }{
		{"version", "version = ", "version = 3.0.1\n#"},
		{"home", "home = ", "home = /opt/other-python/bin\n#"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := newTestPool(t, t.TempDir(), 0)
			env, err := p.Get(ctx, EnvSpec{})
			if err != nil {
				t.Fatal(err)
			}
			env.Release()
			cfg := filepath.Join(env.Dir, "pyvenv.cfg")
			b, err := os.ReadFile(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(cfg, []byte(strings.Replace(string(b), tc.from, tc.to, 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			again, err := p.Get(ctx, EnvSpec{})
			if err != nil {
				t.Fatal(err)
			}
			defer again.Release()
			if again.Dir == env.Dir {
				t.Fatalf("Get used %s, whose pyvenv.cfg names another interpreter", env.Dir)
			}
			if err := p.checkInterpreter(again.Dir); err != nil {
				t.Errorf("the rebuilt env: %v", err)
			}
			if _, err := os.Stat(env.Dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the replaced env %s is still there (%v)", env.Dir, err)
			}
		})
	}
}

func TestEnvPoolEviction(t *testing.T) {
	testutil.NeedPython(t, "venv")
	ctx := context.Background()
	dir := t.TempDir()
	p, _ := newTestPool(t, dir, 1) // every env is over the bound
	spec := func(i int) EnvSpec {
		d := filepath.Join(dir, "links", strconv.Itoa(i))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return EnvSpec{FindLinks: []string{d}} // a distinct key, no pip run
	}
	exists := func(e *Env) bool { _, err := os.Stat(e.Dir); return err == nil }

	a, err := p.Get(ctx, spec(0))
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Get(ctx, spec(1)) // prunes: a is in use
	if err != nil {
		t.Fatal(err)
	}
	if !exists(a) || !exists(b) {
		t.Fatalf("envs in use were evicted: a %v, b %v", exists(a), exists(b))
	}
	a.Release()
	if err := p.Prune(ctx); err != nil {
		t.Fatal(err)
	}
	if exists(a) || !exists(b) {
		t.Fatalf("after releasing a: a exists %v, b exists %v; want a evicted, b (in use) kept", exists(a), exists(b))
	}
	b.Release()

	// In use by another process: a helper holds env c.
	cmd := envHelper(t, "hold", dir, spec(2))
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	held := ""
	sc := bufio.NewScanner(stdout)
	for held == "" && sc.Scan() {
		held, _ = strings.CutPrefix(sc.Text(), "HELD ")
	}
	if held == "" {
		t.Fatal("helper did not hold an env")
	}
	if err := p.Prune(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(held); err != nil {
		t.Fatalf("env %s in use by another process was evicted: %v", held, err)
	}
	if exists(b) {
		t.Errorf("b (released) survived a prune over the bound")
	}
	stdin.Close() // the helper releases and exits
	io.Copy(io.Discard, stdout)
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := p.Prune(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(held); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("env %s survived a prune once released (%v)", held, err)
	}

	// Least recently used goes first: build 6, 7, 8 with room for all,
	// use 6 again, then shrink the bound to two envs.
	p.maxBytes = 1 << 40
	var kept []*Env
	for i := 6; i < 9; i++ {
		e, err := p.Get(ctx, spec(i))
		if err != nil {
			t.Fatal(err)
		}
		e.Release()
		kept = append(kept, e)
	}
	reuse, err := p.Get(ctx, spec(6)) // 6 is now more recent than 7
	if err != nil {
		t.Fatal(err)
	}
	reuse.Release()
	var m marker
	mb, _ := os.ReadFile(filepath.Join(kept[0].Dir, markerFile))
	if err := json.Unmarshal(mb, &m); err != nil {
		t.Fatal(err)
	}
	p.maxBytes = 2*m.SizeBytes + m.SizeBytes/2 // room for two of the three
	if err := p.Prune(ctx); err != nil {
		t.Fatal(err)
	}
	if !exists(kept[0]) || exists(kept[1]) || !exists(kept[2]) {
		t.Errorf("after pruning to two envs: 6 %v, 7 %v, 8 %v; want 7 (least recently used) evicted",
			exists(kept[0]), exists(kept[1]), exists(kept[2]))
	}
}

func TestNormaliseSpec(t *testing.T) {
	links := t.TempDir()
	tests := []struct {
		name    string
		in      EnvSpec
		want    EnvSpec
		wantErr string
	}{
		{name: "empty", in: EnvSpec{}, want: EnvSpec{}},
		{
			name: "names, order, duplicates, spaces",
			in:   EnvSpec{Requirements: []string{" NumPy >= 1.0 ", "scikit_learn", "numpy>=1.0", "Zope.Interface", ""}},
			want: EnvSpec{Requirements: []string{"numpy>=1.0", "scikit-learn", "zope-interface"}},
		},
		{
			name: "markers keep their spaces",
			in:   EnvSpec{Requirements: []string{`torch >= 1.13 ;  python_version >= "3.8"  and sys_platform == "linux"`}},
			want: EnvSpec{Requirements: []string{`torch>=1.13; python_version >= "3.8" and sys_platform == "linux"`}},
		},
		{
			name: "direct reference",
			in:   EnvSpec{Requirements: []string{"Pkg @ file:///wheels/pkg-1.0-py3-none-any.whl"}},
			want: EnvSpec{Requirements: []string{"pkg @ file:///wheels/pkg-1.0-py3-none-any.whl"}},
		},
		// Regression: a first version took "Local/Pkg" and a wheel file's
		// name for project names, lowercasing them and folding "_" and "."
		// (so pip was asked for "pkg-a-1-0-py3-none-any-whl").
		{
			name: "paths and URLs keep their case",
			in:   EnvSpec{Requirements: []string{"./local/Pkg", "Local/Pkg", "Pkg_A-1.0-py3-none-any.whl", "git+https://example.org/Org/Repo.git"}},
			want: EnvSpec{Requirements: []string{"./local/Pkg", "Local/Pkg", "Pkg_A-1.0-py3-none-any.whl", "git+https://example.org/Org/Repo.git"}},
		},
		{name: "find links", in: EnvSpec{FindLinks: []string{links, " " + links + " ", "https://example.org/wheels/"}}, want: EnvSpec{FindLinks: []string{links, "https://example.org/wheels/"}}},
		{name: "pip option", in: EnvSpec{Requirements: []string{"--index-url=http://evil/"}}, wantErr: "is a pip option"},
		{name: "requirements file", in: EnvSpec{Requirements: []string{"-r requirements.txt"}}, wantErr: "is a pip option"},
		{name: "line break", in: EnvSpec{Requirements: []string{"numpy\n--pre"}}, wantErr: "line break"},
		{name: "missing find-links folder", in: EnvSpec{FindLinks: []string{filepath.Join(links, "nope")}}, wantErr: "does not exist on this node"},
		{name: "bad index URL", in: EnvSpec{IndexURL: "pypi.example.org/simple"}, wantErr: "not an http, https or file URL"},
		{name: "index URL with no-index", in: EnvSpec{IndexURL: "https://pypi.example.org/simple", NoIndex: true}, wantErr: "drop one of them"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := normaliseSpec(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("normaliseSpec(%+v) error = %v, want %q", tc.in, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			g, _ := json.Marshal(got)
			w, _ := json.Marshal(tc.want)
			if string(g) != string(w) {
				t.Errorf("normaliseSpec(%+v) = %s, want %s", tc.in, g, w)
			}
		})
	}
}

func TestNewEnvPoolRefuses(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		o       EnvOptions
		wantErr string
	}{
		{name: "no interpreter", o: EnvOptions{Dir: dir}, wantErr: "no Python interpreter configured"},
		{name: "relative interpreter", o: EnvOptions{Dir: dir, Python: "python3"}, wantErr: "not an absolute path"},
		{name: "missing interpreter", o: EnvOptions{Dir: dir, Python: filepath.Join(dir, "python9")}, wantErr: "install it or name another"},
		{name: "not a python", o: EnvOptions{Dir: dir, Python: "/bin/true"}, wantErr: "not its identity"},
		{name: "no folder", o: EnvOptions{Python: "/usr/bin/python3"}, wantErr: "no cache folder"},
		{name: "negative bound", o: EnvOptions{Dir: dir, Python: "/usr/bin/python3", MaxBytes: -1}, wantErr: "negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewEnvPool(tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("NewEnvPool(%+v) = %v, %v; want error %q", tc.o, p, err, tc.wantErr)
			}
		})
	}
}

// envHelper returns a command that runs an env-pool child process (the
// role "env-"+mode, see envChild) over the pool folder dir with spec.
func envHelper(t *testing.T, mode, dir string, spec EnvSpec, env ...string) *exec.Cmd {
	t.Helper()
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	return testutil.Child(t, "env-"+mode, append([]string{"SOMA_ENV_DIR=" + dir, "SOMA_ENV_SPEC=" + string(b)}, env...)...)
}

// envChild is one of the OS processes the env tests start (roles
// env-get, env-hang and env-hold: see TestMain). Modes:
//
//	get   wait for $SOMA_ENV_START to exist, Get, append a line to
//	      $SOMA_ENV_COUNT per pip run, print "ENV <dir>", release
//	hang  Get; once pip runs, write "<dir> <pid>\n" to $SOMA_ENV_STARTED and block
//	hold  Get, print "HELD <dir>", hold it until stdin closes
func envChild(mode string) error {
	var spec EnvSpec
	if err := json.Unmarshal([]byte(os.Getenv("SOMA_ENV_SPEC")), &spec); err != nil {
		return err
	}
	p, err := NewEnvPool(EnvOptions{Dir: os.Getenv("SOMA_ENV_DIR"), Python: testutil.Python()})
	if err != nil {
		return err
	}
	p.poll = 5 * time.Millisecond
	switch mode {
	case "get":
		p.pipStarted = func(dir string, pid int) {
			f, err := os.OpenFile(os.Getenv("SOMA_ENV_COUNT"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
			if err != nil {
				panic(err)
			}
			fmt.Fprintf(f, "%d %s\n", os.Getpid(), dir)
			f.Close()
		}
		for {
			if _, err := os.Stat(os.Getenv("SOMA_ENV_START")); err == nil {
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
	case "hang":
		p.pipStarted = func(dir string, pid int) {
			tmp := os.Getenv("SOMA_ENV_STARTED") + ".tmp"
			if err := os.WriteFile(tmp, fmt.Appendf(nil, "%s %d\n", dir, pid), 0o644); err != nil {
				panic(err)
			}
			if err := os.Rename(tmp, os.Getenv("SOMA_ENV_STARTED")); err != nil {
				panic(err)
			}
			select {} // until kill -9
		}
	}
	env, err := p.Get(context.Background(), spec)
	if err != nil {
		return err
	}
	defer env.Release()
	switch mode {
	case "get":
		fmt.Printf("ENV %s\n", env.Dir)
	case "hold":
		fmt.Printf("HELD %s\n", env.Dir)
		io.Copy(io.Discard, os.Stdin)
	}
	return nil
}

// field returns the value after "name " on a line of out.
func field(out, name string) (string, bool) {
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v, true
		}
	}
	return "", false
}

// killAndWait kills pid (an orphan: its parent was killed) and waits
// until it has stopped running: gone, or a zombie no one reaps.
func killAndWait(t *testing.T, pid int) {
	t.Helper()
	_ = syscall.Kill(pid, syscall.SIGKILL)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return
		}
		// The state follows the command name's closing parenthesis.
		if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X') {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// BenchmarkEnvPoolGetWarm is the cost of handing out an env that is
// already built (what every plan after the first pays): a readlink and
// the key; the marker and pyvenv.cfg are checked once per process, the
// in-use lock is held between plans (envLinger) and the use time set at
// most once per envTouchEvery. It reports the pip runs it caused, which
// must be 0.
func BenchmarkEnvPoolGetWarm(b *testing.B) {
	testutil.NeedPython(b, "venv")
	p, pips := newTestPool(b, b.TempDir(), 0)
	ctx := context.Background()
	env, err := p.Get(ctx, EnvSpec{})
	if err != nil {
		b.Fatal(err)
	}
	env.Release()
	for b.Loop() {
		e, err := p.Get(ctx, EnvSpec{})
		if err != nil {
			b.Fatal(err)
		}
		e.Release()
	}
	b.ReportMetric(float64(pips.Load()), "pip-runs")
}

// TestHeldEnvHandedWithoutLink: an env this process holds, and has
// checked through its link, is handed again without reading the link (a
// readlink per plan was part of issue 14's round trip): with the link
// removed by hand, the next Get still gets the held env, and builds
// nothing.
func TestHeldEnvHandedWithoutLink(t *testing.T) {
	testutil.NeedPython(t, "venv")
	ctx := context.Background()
	p, _ := newTestPool(t, t.TempDir(), 0)
	var dir string
	for range 2 { // built, then opened through the link and checked
		env, err := p.Get(ctx, EnvSpec{})
		if err != nil {
			t.Fatal(err)
		}
		dir = env.Dir
		env.Release()
	}
	links, err := filepath.Glob(filepath.Join(p.dir, "envs", "*"))
	if err != nil || len(links) != 1 {
		t.Fatalf("links %v, %v; want one", links, err)
	}
	if err := os.Remove(links[0]); err != nil {
		t.Fatal(err)
	}
	env, err := p.Get(ctx, EnvSpec{})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Release()
	if env.Dir != dir {
		t.Errorf("Get = %s, want the held %s", env.Dir, dir)
	}
	if entries, _ := os.ReadDir(filepath.Join(p.dir, "store")); len(entries) != 1 {
		t.Errorf("store holds %d envs, want the one built first", len(entries))
	}
}
