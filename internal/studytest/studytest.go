// Package studytest makes real studies for the tests of soma's views.
// Import it only from _test.go files.
//
// Build runs soma-trial's loop (package trialrun) with the quadratic
// example's objective, from two "machines" at once, so that every done,
// pruned and failed trial is the product of a real run; it then leaves
// what crashed runners, signals and foreign writers leave: a running
// attempt, a stale one (its runner died an hour ago), an interrupted one,
// a corrupt record and stray files. Nothing in the fixture is written by
// hand except the damage.
package studytest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/internal/objective"
	"github.com/soma-hpc/soma/internal/testutil"
	"github.com/soma-hpc/soma/internal/trialrun"
	"github.com/soma-hpc/soma/study"
)

// Names of the fixture's studies.
const (
	Main  = "quad"  // the rich one
	Other = "other" // a small second study, for one-line-per-study views
	// Broken is a study whose spec record is corrupt.
	Broken = "broken"
)

// Trial numbers of the records Build leaves in Main after the runs.
const (
	Ran         = 16 // trials 0..15 were run by the loop
	Running     = 16 // a live attempt, with intermediate reports
	Stale       = 17 // an attempt whose runner died an hour ago
	Interrupted = 18 // stopped by a signal
	Corrupt     = 19 // a record that is not a record
	Budget      = 24
)

// Spec is Main's spec: the quadratic example, with a third choice "bad"
// that the objective refuses (so some trials fail, for real).
const Spec = `direction = "minimize"
metric = "loss"
budget = 24
seed = 7
max_retries = 0

[sampler]
name = "tpe"
startup = 8

[pruner]
name = "median"
startup = 4
warmup = 1

[param]
x = { type = "float", low = -4.0, high = 4.0 }
y = { type = "float", low = -4.0, high = 4.0 }
noise = { type = "choice", choices = ["low", "high", "bad"] }
`

const otherSpec = `direction = "maximize"
budget = 4
seed = 3
[sampler]
name = "random"
[param]
x = { type = "float", low = -4.0, high = 4.0 }
y = { type = "int", low = -4, high = 4 }
noise = { type = "choice", choices = ["low", "high"] }
`

// Fixture is a built root.
type Fixture struct {
	Root string
	// Built is when Build finished: the Running attempt reads running
	// until study.DefaultGrace after it, then stale.
	Built time.Time
}

// RepoRoot returns the repository's root folder.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Build makes the fixture in dir/root (dir must outlive the tests that
// use it: a TestMain's folder, say). It skips t (fails it under
// SOMA_REQUIRE=1) without Python 3.
func Build(t testing.TB, dir string) *Fixture {
	t.Helper()
	testutil.NeedPython(t, "argparse")
	ctx := context.Background()
	root := filepath.Join(dir, "root")
	store, err := fsstore.Open(root, fsstore.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	// As a command does: the fixture's root is the tests' own, and they
	// check what commands leave in tmp/.
	defer store.Close()
	helper := filepath.Join(dir, "helper")
	if err := os.MkdirAll(helper, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(helper, "soma_report.py"), objective.Helper, 0o644); err != nil {
		t.Fatal(err)
	}
	obj := filepath.Join(RepoRoot(), "examples", "quadratic", "objective.py")
	argv := []string{testutil.Python(), obj, "--x", "{x}", "--y", "{y}", "--noise", "{noise}", "--epochs", "6", "--sleep", "0.005"}
	run := func(name, spec string, n int, hosts ...string) {
		sp, err := study.ParseSpec([]byte(spec))
		if err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, len(hosts))
		for i, h := range hosts {
			st, err := study.Open(ctx, store, name, sp, study.Options{})
			if err != nil {
				t.Fatal(err)
			}
			// One host after the other: concurrent claimers spread over
			// the lowest free numbers after a lost race (study.Next), and
			// the fixture needs trials 0..Ran-1 taken and the next ones free.
			func() {
				_, err := trialrun.Run(ctx, st, root, trialrun.Options{
					Argv: argv, Trial: -1, MaxTrials: n / len(hosts), Parallel: 1,
					Who:        study.Who{Host: h, PID: 1000 + i, Job: "77_" + string(rune('1'+i))},
					PythonPath: helper, NoWait: true, KillGrace: 5 * time.Second,
					Guard: "/proc/self/exe", // a binary whose TestMain is Shared.Main
				}, nil)
				errs <- err
			}()
		}
		for range hosts {
			if err := <-errs; err != nil {
				t.Fatalf("trialrun %s: %v", name, err)
			}
		}
	}
	run(Main, Spec, Ran, "node1", "node2")
	run(Other, otherSpec, 4, "node3")

	st, err := study.Open(ctx, store, Main, nil, study.Options{})
	if err != nil {
		t.Fatal(err)
	}
	who := study.Who{Host: "node2", PID: 4242, Job: "77_9"}
	running, err := st.Take(ctx, Running, who)
	if err != nil {
		t.Fatal(err)
	}
	for step := range 3 {
		if _, err := running.Report(ctx, int64(step), 12-float64(step)); err != nil {
			t.Fatal(err)
		}
	}
	stale, err := st.Take(ctx, Stale, study.Who{Host: "node9", PID: 99, Job: "77_8"})
	if err != nil {
		t.Fatal(err)
	}
	// Its runner died an hour ago: the record's server time says so.
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(filepath.Join(root, "names", filepath.FromSlash(stale.Name())), old, old); err != nil {
		t.Fatal(err)
	}
	intr, err := st.Take(ctx, Interrupted, who)
	if err != nil {
		t.Fatal(err)
	}
	if err := intr.Finish(ctx, study.StateInterrupted, 0, "SIGTERM from Slurm"); err != nil {
		t.Fatal(err)
	}
	// A curve blob rots on disk: trial 0's.
	b, err := store.Resolve(ctx, "study/"+Main+"/trial/0/0")
	if err != nil {
		t.Fatal(err)
	}
	blob := filepath.Join(root, "blobs", "sha256", b.Digest.Hex()[:2], b.Digest.Hex()[2:])
	if err := os.WriteFile(blob, []byte(`{"v":1,"curve":[{"step":0,"value":1}]}`), 0o666); err != nil {
		t.Fatal(err)
	}
	Damage(t, root)
	return &Fixture{Root: root, Built: time.Now()}
}

// Copy copies the fixture's root to dst (which must not exist), keeping
// modification times (the records' server times), for tests that change
// it.
func (f *Fixture) Copy(t testing.TB, dst string) string {
	t.Helper()
	err := filepath.WalkDir(f.Root, func(p string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(f.Root, p)
		to := filepath.Join(dst, rel)
		info, err := e.Info()
		if err != nil {
			return err
		}
		if e.IsDir() {
			return os.MkdirAll(to, 0o777)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.WriteFile(to, b, 0o666); err != nil {
			return err
		}
		return os.Chtimes(to, info.ModTime(), info.ModTime())
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// Damage leaves, in a store's root, what foreign writers and crashes
// leave: a corrupt record (trial Corrupt of Main), a study whose spec
// record is corrupt (Broken), stray files among the records, in the
// blobs and at the top, and an old temp file. (Build also rots the curve
// blob of Main's trial 0.)
func Damage(t testing.TB, root string) {
	t.Helper()
	trials := filepath.Join(root, "names", "study", Main, "trial")
	write := func(path, text string) {
		if err := os.MkdirAll(filepath.Dir(path), 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o666); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(trials, "19", "0"), "soma-record 1\ndigest sha256:nonsense\nm kind trial\n") // truncated: no end line
	write(filepath.Join(trials, "notes.txt"), "my notes about this study\n")
	write(filepath.Join(trials, ".DS_Store"), "\x00\x01")
	write(filepath.Join(trials, "3", "backup.old"), "editor droppings\n")
	write(filepath.Join(root, "README.txt"), "what this folder is\n")
	write(filepath.Join(root, "blobs", "sha256", "zz", "not-a-blob"), "x")
	write(filepath.Join(root, "names", "study", "junk"), "not a study\n")
	write(filepath.Join(root, "names", "study", Broken, "spec"), "soma-record 1\ndigest sha256:00\nend 00000000\n")
	tmp := filepath.Join(root, "tmp", "deadhost.1.1-abcdef")
	write(tmp, "half a record")
	old := time.Now().Add(-3 * time.Hour)
	if err := os.Chtimes(tmp, old, old); err != nil {
		t.Fatal(err)
	}
}

// Chromium returns the path of a Chromium for headless tests, or "".
func Chromium() string {
	for _, p := range []string{os.Getenv("SOMA_CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	return ""
}

// Shared is a fixture built at most once per test binary, in a folder
// that outlives each test (tests that change it work on a Copy). A test
// binary declares one, calls Main from its TestMain and Get from tests.
type Shared struct {
	dir  string
	once sync.Once
	f    *Fixture
}

// Main makes the fixture's folder, runs the tests and removes it; it
// returns m.Run's code for os.Exit.
func (s *Shared) Main(m *testing.M) int {
	// The fixture runs objectives: this test binary is their guard
	// (objective.Options.Guard).
	objective.GuardMain()
	dir, err := os.MkdirTemp("", "soma-fixture-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	s.dir = dir
	code := m.Run()
	os.RemoveAll(dir)
	return code
}

// Get returns the fixture (real soma-trial runs), building it on first
// use; it skips or fails t where Python is missing (testutil.NeedPython).
func (s *Shared) Get(t *testing.T) *Fixture {
	t.Helper()
	testutil.NeedPython(t, "argparse")
	s.once.Do(func() { s.f = Build(t, s.dir) })
	if s.f == nil {
		t.Fatal("the fixture could not be built (see the first test that failed)")
	}
	return s.f
}
