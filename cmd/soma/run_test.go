package main

import (
	"encoding/json"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/internal/testutil"
	"github.com/soma-hpc/soma/worker"
)

const runFilters = `
import numpy as np
class Scale:
    def __init__(self, k=1):
        self.k = k
        self.bias = None
    def fit(self, X, y):
        self.bias = float(np.asarray(y).mean())
    def forward(self, X):
        if self.bias is None:
            raise RuntimeError("no state")
        print("scaling", X.shape)
        return (X * self.k + self.bias).astype(np.float32)
    def get_state(self):
        return repr(self.bias).encode()
    def set_state(self, b):
        self.bias = float(b.decode())
`

const runPlanText = `
id = "%s"
mode = "%s"
[env]
system_site_packages = true
[input]
dtype = "float32"
shape = [2, 2]
values = [1, 2, 3, 4]
[targets]
dtype = "float64"
values = [10, 20]
[[nodes]]
id = "s"
file = "f.py"
class = "Scale"
[nodes.config]
k = 2
`

// TestRun: soma run against a real worker prints the result as text and
// JSON, sends a fit's state back with --state, and exits 1 on failure
// with the traceback printed.
func TestRun(t *testing.T) {
	testutil.NeedPython(t, "numpy")
	dir := t.TempDir()
	store, err := fsstore.Open(filepath.Join(dir, "root"), fsstore.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	envs, err := worker.NewEnvPool(worker.EnvOptions{Dir: filepath.Join(dir, "envs"), Python: testutil.Python()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(worker.Options{Store: store, Envs: envs, Python: testutil.Python(), WorkDir: filepath.Join(dir, "work")})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	srv := httptest.NewServer(worker.NewServer(w, "tok-0123456789abcdef").Handler())
	defer srv.Close()
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte("tok-0123456789abcdef\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "f.py"), []byte(runFilters), 0o644)
	plan := func(id, mode string) string {
		p := filepath.Join(dir, id+".toml")
		text := strings.Replace(strings.Replace(runPlanText, "%s", id, 1), "%s", mode, 1)
		os.WriteFile(p, []byte(text), 0o644)
		return p
	}

	code, out, errOut := soma("run", "--worker", srv.URL, "--token-file", tok, plan("fit", "fit"))
	if code != exitOK || !regexp.MustCompile(`plan fit-[0-9a-f]{8}: succeeded`).MatchString(out) || !strings.Contains(out, "output s: float32[2 2] (inline, 16 bytes): 17 19 21 23") {
		t.Fatalf("fit: exit %d\n%s\n%s", code, out, errOut)
	}
	ref := ""
	for _, line := range strings.Split(out, "\n") {
		if r, ok := strings.CutPrefix(line, "state s: "); ok {
			ref = r
		}
	}
	if !strings.HasPrefix(ref, "blob:sha256:") {
		t.Fatalf("no state line in\n%s", out)
	}

	code, out, errOut = soma("run", "--worker", srv.URL, "--token-file", tok, plan("fwd", "forward"), "--state", "s="+ref, "--json", "--save-dir", filepath.Join(dir, "out"))
	if code != exitOK {
		t.Fatalf("forward: exit %d\n%s\n%s", code, out, errOut)
	}
	var res struct {
		State   string
		Outputs map[string]struct{ Values []float64 }
		Log     string
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("--json output: %v\n%s", err, out)
	}
	if got := res.Outputs["s"].Values; res.State != "succeeded" || len(got) != 4 || got[0] != 17 || !strings.Contains(res.Log, "scaling (2, 2)") {
		t.Fatalf("forward result = %+v", res)
	}
	npy, err := os.ReadFile(filepath.Join(dir, "out", "s.npy"))
	if err != nil {
		t.Fatal(err)
	}
	if v, err := worker.ParseNpy(npy); err != nil || v.DType != "float32" || len(v.Data) != 16 {
		t.Fatalf("saved s.npy: %+v, %v", v, err)
	}

	code, out, errOut = soma("run", "--worker", srv.URL, "--token-file", tok, plan("nostate", "forward"))
	if code != exitError || !strings.Contains(out, "RuntimeError: no state") || !strings.Contains(out, "traceback:") || !strings.Contains(errOut, "plan failed") {
		t.Fatalf("failing plan: exit %d\n%s\n%s", code, out, errOut)
	}
	if code, _, errOut := soma("run", "--worker", srv.URL, plan("x", "fit")); code != exitError || !strings.Contains(errOut, "bearer token") {
		t.Fatalf("no token: exit %d, %q", code, errOut)
	}
	if code, _, errOut := soma("run", plan("y", "fit")); code != exitUsage || !strings.Contains(errOut, "--worker") {
		t.Fatalf("no --worker: exit %d, %q", code, errOut)
	}
}

// TestRunWaitsForWorker: soma run --worker waits (--wait-worker) for a
// worker that does not listen yet, as after "soma-worker ... &", and says
// so; with nothing listening by then, it fails naming the address. Bug:
// it failed at once with "connection refused", which the README's own
// two lines (start the worker in the background, then run) hit on a
// loaded machine.
func TestRunWaitsForWorker(t *testing.T) {
	testutil.NeedPython(t, "numpy")
	dir := t.TempDir()
	envs, err := worker.NewEnvPool(worker.EnvOptions{Dir: filepath.Join(dir, "envs"), Python: testutil.Python()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(worker.Options{Envs: envs, Python: testutil.Python(), WorkDir: filepath.Join(dir, "work")})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	os.WriteFile(filepath.Join(dir, "f.py"), []byte(runFilters), 0o644)
	planFile := filepath.Join(dir, "p.toml")
	text := strings.Replace(strings.Replace(runPlanText, "%s", "p", 1), "%s", "fit", 1)
	os.WriteFile(planFile, []byte(text), 0o644)

	// An address where nothing listens (yet).
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()

	code, out, errOut := soma("run", "--worker", "http://"+addr, "--wait-worker", "1s", planFile)
	if code == exitOK || !strings.Contains(errOut, "nothing listens at http://"+addr+" yet; waiting up to 1s") || !strings.Contains(errOut, "nothing listens at http://"+addr+" (waited 1s)") {
		t.Fatalf("nothing listening: exit %d\n%s\n%s", code, out, errOut)
	}

	srv := httptest.NewUnstartedServer(worker.NewServer(w, "").Handler())
	started := make(chan struct{})
	go func() {
		defer close(started)
		time.Sleep(time.Second) // the worker starts after the run
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Error(err)
			return
		}
		srv.Listener = l
		srv.Start()
	}()
	defer func() { <-started; srv.Close() }()
	code, out, errOut = soma("run", "--worker", "http://"+addr, "--wait-worker", "2m", planFile)
	if code != exitOK || !strings.Contains(out, ": succeeded") {
		t.Fatalf("worker started late: exit %d\n%s\n%s", code, out, errOut)
	}
}
