// Package testutil holds helpers shared by soma's tests. Import it only
// from _test.go files.
package testutil

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// Required reports whether the suite runs with every optional dependency
// demanded: `make test` (and so CI) sets SOMA_REQUIRE=1 after installing
// Debian's python3 packages, Slurm and Chromium. A plain `go test ./...`
// skips what is missing instead.
func Required() bool { return os.Getenv("SOMA_REQUIRE") == "1" }

// Need skips t (or, under SOMA_REQUIRE=1, fails it) when ok is false.
// what names the missing thing and how to get it.
func Need(t testing.TB, ok bool, what string) {
	t.Helper()
	if ok {
		return
	}
	if Required() {
		t.Fatalf("missing %s (SOMA_REQUIRE=1: 'make test' should have installed it; see scripts/test-deps.sh)", what)
	}
	t.Skipf("skipping: missing %s (run 'make test' to install test dependencies)", what)
}

// Python returns the interpreter tests run: $SOMA_PYTHON, else Debian's
// /usr/bin/python3 (the one that sees python3-numpy, -optuna, -zarr...),
// never whatever python3 is first on PATH.
func Python() string {
	if p := os.Getenv("SOMA_PYTHON"); p != "" {
		return p
	}
	return "/usr/bin/python3"
}

var (
	modMu    sync.Mutex
	modCache = map[string]bool{}
)

// PythonHas reports whether Python() can import every module in mods.
func PythonHas(mods ...string) bool {
	key := strings.Join(mods, ",")
	modMu.Lock()
	defer modMu.Unlock()
	if v, ok := modCache[key]; ok {
		return v
	}
	err := exec.Command(Python(), "-c", "import "+key).Run()
	modCache[key] = err == nil
	return err == nil
}

// NeedPython skips or fails t unless Python() imports mods.
func NeedPython(t testing.TB, mods ...string) {
	t.Helper()
	Need(t, PythonHas(mods...), Python()+" with modules "+strings.Join(mods, ", ")+" (Debian packages python3-<name>)")
}

var slurmPing struct {
	once sync.Once
	err  error
}

// NeedSlurm skips t (or, under SOMA_REQUIRE=1, fails it) unless ping
// reaches a running Slurm. ping is asked once per test binary: with
// slurmctld down, sinfo retries for about 9 s before it gives up. Callers
// pass slurm.Client{}.Ping: testutil cannot import package slurm, whose
// own tests import testutil (an import cycle).
func NeedSlurm(t testing.TB, ping func(context.Context) error) {
	t.Helper()
	slurmPing.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		slurmPing.err = ping(ctx)
	})
	what := "a running Slurm (scripts/slurm-local.sh start)"
	if slurmPing.err != nil {
		what += "; " + slurmPing.err.Error()
	}
	Need(t, slurmPing.err == nil, what)
}
