package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/study"
)

// endRun is a soma-trial process of TestEndOfStudyOneWatcher.
type endRun struct {
	c    *exec.Cmd
	log  string // its stderr, a file
	code int    // its exit status, once exited is closed
	done chan struct{}
}

func (r *endRun) exited() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

func (r *endRun) output() string {
	b, _ := os.ReadFile(r.log)
	return string(b)
}

// within polls cond until it holds, failing after a generous deadline
// (only liveness has a deadline; how fast is not asserted).
func within(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Issue 19: at the end of a study every soma-trial with nothing to claim
// waited for the last trials (to retry any that die), each holding its
// allocation and polling the folder. Now one keeps watch and the others
// exit at once with status 0; the watcher retries a trial whose runner
// is killed; a killed watcher is replaced by the next process that
// starts once its lease has passed.
func TestEndOfStudyOneWatcher(t *testing.T) {
	d := t.TempDir()
	root, marks, gate := filepath.Join(d, "root"), filepath.Join(d, "marks"), filepath.Join(d, "gate")
	if err := os.Mkdir(marks, 0o777); err != nil {
		t.Fatal(err)
	}
	const lease = 4 * time.Second
	// Long trials: each runs until the test creates the gate file.
	obj := `echo $$ > "$MARKS/$SOMA_TRIAL.$SOMA_ATTEMPT.start"; while [ ! -e "$GATE" ]; do sleep 0.05; done; echo 1`
	var runs []*endRun
	start := func() *endRun {
		t.Helper()
		args := []string{"--root", root, "--study", "s", "--param", "x=float:0:1", "--sampler", "random", "--budget", "3",
			"--lease", lease.String(), "--", "/bin/sh", "-c", obj}
		r := &endRun{c: exec.Command(bin, args...), log: filepath.Join(d, fmt.Sprintf("log.%d", len(runs))), done: make(chan struct{})}
		r.c.Env = append(os.Environ(), "MARKS="+marks, "GATE="+gate)
		f, err := os.Create(r.log)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		r.c.Stderr = f
		if err := r.c.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			r.c.Wait()
			r.code = r.c.ProcessState.ExitCode()
			close(r.done)
		}()
		runs = append(runs, r)
		return r
	}
	t.Cleanup(func() {
		os.WriteFile(gate, nil, 0o666)
		for _, r := range runs {
			if !r.exited() {
				r.c.Process.Kill()
				<-r.done
			}
		}
	})
	exitedNow := func() (n int) {
		for _, r := range runs {
			if r.exited() {
				n++
			}
		}
		return n
	}
	byPID := func(pid int) *endRun {
		for _, r := range runs {
			if r.c.Process.Pid == pid {
				return r
			}
		}
		return nil
	}
	ctx := context.Background()
	var st *study.Study
	openStudy := func() bool {
		s, err := fsstore.Open(root, fsstore.Options{})
		if err != nil {
			return false
		}
		st, err = study.Open(ctx, s, "s", nil, study.Options{Grace: lease})
		return err == nil
	}
	watcher := func() (study.WatchState, bool) {
		w, found, err := st.Watching(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return w, found
	}
	runner := func(trial, attempt int) int {
		rs, _, err := st.Attempts(ctx, false)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if r.Number == trial && r.Attempt == attempt {
				return r.Who.PID
			}
		}
		return 0
	}
	mark := func(trial, attempt int) bool {
		_, err := os.Stat(filepath.Join(marks, fmt.Sprintf("%d.%d.start", trial, attempt)))
		return err == nil
	}

	for range 6 {
		start()
	}
	within(t, "two processes have exited", func() bool { return exitedNow() >= 2 })
	within(t, "the study can be opened", openStudy)
	within(t, "the three trials run", func() bool { return mark(0, 0) && mark(1, 0) && mark(2, 0) })
	var w study.WatchState
	within(t, "a process keeps watch", func() bool {
		var found bool
		w, found = watcher()
		return found && w.Live
	})
	if n := exitedNow(); n != 2 {
		t.Fatalf("%d processes exited, want 2 (3 running trials, 1 watching)", n)
	}
	for _, r := range runs {
		if r.exited() && (r.code != 0 || !strings.Contains(r.output(), "stopped: nothing claimable now; another process keeps watch")) {
			t.Errorf("a process with nothing to claim exited %d, want 0 (another keeps watch):\n%s", r.code, r.output())
		}
	}
	first := byPID(w.Who.PID)
	if first == nil || first.exited() {
		t.Fatalf("the watcher is pid %d, not one of the live processes", w.Who.PID)
	}
	running := map[int]int{} // trial -> pid
	for n := range 3 {
		pid := runner(n, 0)
		if pid == w.Who.PID || byPID(pid) == nil || byPID(pid).exited() {
			t.Fatalf("trial %d is run by pid %d; want one of the live processes other than the watcher %d", n, pid, w.Who.PID)
		}
		running[n] = pid
	}

	t.Log("kill -9 of the watcher: the next process to start once its lease has passed takes over")
	first.c.Process.Signal(syscall.SIGKILL)
	<-first.done
	within(t, "the killed watcher's lease has passed", func() bool { w, _ := watcher(); return !w.Live })
	next := start()
	within(t, "the new process keeps watch", func() bool {
		w, _ := watcher()
		return w.Live && w.Who.PID == next.c.Process.Pid || next.exited()
	})
	if next.exited() {
		t.Fatalf("the process started after the watcher died exited %d instead of keeping watch:\n%s", next.code, next.output())
	}

	t.Log("kill -9 of a running one: the watcher retries its trial once the lease has passed")
	victim := byPID(running[1])
	victim.c.Process.Signal(syscall.SIGKILL)
	<-victim.done
	within(t, "trial 1 is retried", func() bool { return mark(1, 1) })
	if pid := runner(1, 1); pid != next.c.Process.Pid {
		t.Errorf("trial 1's retry is run by pid %d, want the watcher %d", pid, next.c.Process.Pid)
	}

	t.Log("the trials end: every process left exits 0")
	if err := os.WriteFile(gate, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		<-r.done
		if r != first && r != victim && r.code != 0 {
			t.Errorf("exit %d, want 0:\n%s", r.code, r.output())
		}
	}
	if !strings.Contains(next.output(), "stopped: the study's budget is reached") {
		t.Errorf("the watcher's log:\n%s\nwant it to stop when the budget is reached", next.output())
	}
	snap, err := st.Trials(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for n, attempt := range map[int]int{0: 0, 1: 1, 2: 0} {
		if r, ok := snap.Trial(n); !ok || r.State != study.StateDone || r.Attempt != attempt {
			t.Errorf("trial %d = %s attempt %d, want done by attempt %d", n, r.State, r.Attempt, attempt)
		}
	}
	if w, _ := watcher(); w.Live || !w.Released {
		t.Errorf("the watcher role after the end: %+v, want released", w)
	}
}
