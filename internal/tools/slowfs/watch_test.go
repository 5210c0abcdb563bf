package slowfs_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The end of a study on the counting filesystem (issue 19): of the
// processes that find nothing to claim, one keeps watch and the others
// exit at once, and the watcher's looks cost the file server what the
// lease allows, not a look a second. The one process running the last
// trial is stopped (SIGSTOP) while the operations are counted, so that
// every operation counted is the watcher's.
func TestWatcherOpsOnSlowFS(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: 30 s of waiting")
	}
	m, backing := mount(t)
	trial, _ := binaries(t)
	const lease = 30 * time.Second
	root := filepath.Join(m.Dir(), "r")
	side := t.TempDir() // off the mount: the objective's signals
	started, gate := filepath.Join(side, "started"), filepath.Join(side, "gate")
	if err := syscall.Mkfifo(gate, 0o644); err != nil {
		t.Fatal(err)
	}
	// The objective blocks on a fifo off the mount, with no process of
	// its own coming and going (each one's exit closes the log files it
	// inherited, on the mount).
	obj := fmt.Sprintf("touch %s; read x < %s; echo 1", started, gate)
	start := func() (*exec.Cmd, *strings.Builder) {
		var out strings.Builder
		cmd := exec.Command(trial, "--root", root, "--study", "s", "--param", "x=float:0:1",
			"--sampler", "random", "--budget", "1", "--lease", lease.String(), "--", "/bin/sh", "-c", obj)
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		return cmd, &out
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(2 * time.Minute); !cond(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("gave up waiting: %s", what)
			}
		}
	}
	exists := func(p string) func() bool {
		return func() bool { _, err := os.Stat(p); return err == nil }
	}

	runner, runnerOut := start()
	waitFor("the trial to start", exists(started))
	watcher, watcherOut := start()
	waitFor("the second process to keep watch", exists(filepath.Join(backing, "r", "names", "study", "s", "watch", "0")))
	// A third process exits at once: someone keeps watch.
	third, thirdOut := start()
	if err := third.Wait(); err != nil || !strings.Contains(thirdOut.String(), "keeps watch") {
		t.Errorf("the third process: %v, want exit 0 saying another keeps watch:\n%s", err, thirdOut)
	}

	if err := runner.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The watcher's first looks come fast (10 ms, doubling): let them
	// pass, then count a window of several look intervals.
	time.Sleep(4 * time.Second)
	const window = 12 * time.Second
	m.Reset()
	time.Sleep(window)
	got := m.Reset()
	if err := runner.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// The bound that follows from the lease: a look and a refresh of the
	// role at most every lease/5, each a bounded number of operations,
	// plus one of each for a window's partial interval. Measured
	// (2026-12-01): 108 in 12 s, 2 periods of about 25 for a look (the
	// trial folder's listing, the running trial's record) and 29 for a
	// refresh (the server's time, the role's record rewritten). Looking
	// once a second, as every waiting process did before issue 19, would
	// be over 300: the bound tells the two apart.
	interval := lease / 5
	periods := float64(window/interval) + 1
	const perLook, perRefresh = 30, 30
	bound := periods * (perLook + perRefresh)
	t.Logf("the watcher sent %d metadata operations in %s (%v); bound %.0f (lease %s, a look every %s at most)", got.Metadata(), window, got, bound, lease, interval)
	if float64(got.Metadata()) > bound {
		t.Errorf("the watcher sent %d metadata operations in %s, want at most %.0f for a lease of %s", got.Metadata(), window, bound, lease)
	}
	if got.Metadata() == 0 {
		t.Errorf("the watcher sent no operation in %s: it does not look at all", window)
	}

	if err := os.WriteFile(gate, []byte("go\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		cmd *exec.Cmd
		out *strings.Builder
	}{"runner": {runner, runnerOut}, "watcher": {watcher, watcherOut}} {
		if err := c.cmd.Wait(); err != nil {
			t.Errorf("the %s: %v\n%s", name, err, c.out)
		}
	}
	if !strings.Contains(watcherOut.String(), "budget is reached") {
		t.Errorf("the watcher's log:\n%s\nwant it to stop when the budget is reached", watcherOut)
	}
}
