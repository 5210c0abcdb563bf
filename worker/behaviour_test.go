package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMisbehavingFilters: a filter that prints, raises, exits the
// interpreter, crashes it with SIGSEGV or hangs past its timeout fails
// only its own plan (printing fails nothing), and the worker serves the
// next plan.
func TestMisbehavingFilters(t *testing.T) {
	tw := newTestWorker(t, testOptions{})
	for _, tc := range []struct {
		class   string
		timeout float64
		state   PlanState
		err     string // in Result.Error
		tb      string // in Result.Traceback
		log     string // in Result.LogTail
	}{
		{class: "Printer", state: StateSucceeded, log: "printed by the filter\nand written to sys.stdout\nand to fd 1\nand to stderr\n"},
		{class: "Raiser", state: StateFailed, err: "ValueError: the filter refused its input", tb: `raise ValueError("the filter refused its input")`},
		{class: "Exiter", state: StateFailed, err: "Python daemon died: exit status 3 during forward of node \"n\""},
		{class: "Segfault", state: StateFailed, err: "killed by signal segmentation fault", log: "Fatal Python error: Segmentation fault"},
		{class: "Sleeper", timeout: 0.5, state: StateFailed, err: "plan timed out after 500ms", log: "going to sleep"},
		{class: "Stubborn", timeout: 0.5, state: StateFailed, err: "plan timed out after 500ms", log: "ignoring SIGINT"},
		{class: "BadState", state: StateFailed, err: "get_state of BadState returned str, want bytes"},
		// Regression: NaN in a plain object went out as JSON NaN, which
		// Go's JSON refuses; the daemon was killed as if it had crashed.
		{class: "NaN", state: StateFailed, err: "NaN or Infinity cannot cross as a plain object"},
	} {
		t.Run(tc.class, func(t *testing.T) {
			p := behaviourPlan(t, "p-"+tc.class, tc.class)
			p.TimeoutSeconds = tc.timeout
			if tc.class == "BadState" {
				p.Mode = Fit
			}
			res := run(t, tw, p)
			if res.State != tc.state || !strings.Contains(res.Error, tc.err) {
				t.Fatalf("state %s, error %q; want %s with %q\nlog:\n%s", res.State, res.Error, tc.state, tc.err, res.LogTail)
			}
			if !strings.Contains(res.Traceback, tc.tb) {
				t.Errorf("traceback %q, want it to contain %q", res.Traceback, tc.tb)
			}
			if !strings.Contains(res.LogTail, tc.log) {
				t.Errorf("log %q, want it to contain %q", res.LogTail, tc.log)
			}
			next := run(t, tw, behaviourPlan(t, "next-"+tc.class, "NoOp"))
			mustSucceed(t, next)
			if got := next.Outputs["n"].Object; got != "x" {
				t.Errorf("next plan's output = %v, want x", got)
			}
		})
	}
}

// TestWarmReuse: a second plan with the same environment runs in the same
// Python process (no start-up), and a plan after a crash gets a new one.
func TestWarmReuse(t *testing.T) {
	tw := newTestWorker(t, testOptions{})
	pid := func(id string) any {
		res := run(t, tw, behaviourPlan(t, id, "Pid"))
		mustSucceed(t, res)
		return res.Outputs["n"].Object
	}
	first, second := pid("a"), pid("b")
	if first != second {
		t.Fatalf("second plan ran in pid %v, first in %v: want the same warm daemon", second, first)
	}
	if got := tw.w.DaemonsStarted(); got != 1 {
		t.Fatalf("daemons started = %d, want 1", got)
	}
	run(t, tw, behaviourPlan(t, "crash", "Exiter"))
	if third := pid("c"); third == first {
		t.Fatalf("plan after a crash ran in the crashed pid %v", third)
	}
	if got := tw.w.DaemonsStarted(); got != 2 {
		t.Fatalf("daemons started = %d, want 2", got)
	}
}

// TestNoGPUsVisible: a plan that asks for no GPU sees none, even when the
// worker's own environment shows some.
func TestNoGPUsVisible(t *testing.T) {
	t.Setenv("CUDA_VISIBLE_DEVICES", "0,1")
	tw := newTestWorker(t, testOptions{})
	res := run(t, tw, behaviourPlan(t, "env", "Env"))
	mustSucceed(t, res)
	if got := res.Outputs["n"].Object; got != "" {
		t.Fatalf("CUDA_VISIBLE_DEVICES in the plan = %q, want empty", got)
	}
	p := behaviourPlan(t, "gpu", "Env")
	p.Resources.GPUs = 1
	res = run(t, tw, p)
	if res.State != StateFailed || !strings.Contains(res.Error, "asks for 1 GPUs, this worker offers 0") {
		t.Fatalf("state %s, error %q; want failed: no GPU to give", res.State, res.Error)
	}
}

// TestCancel: DELETE /plans/<id> interrupts the Python side; a filter that
// ignores SIGINT is killed after the grace; the plan ends cancelled and
// the worker serves the next plan.
func TestCancel(t *testing.T) {
	tw := newTestWorker(t, testOptions{})
	ctx := context.Background()
	for _, class := range []string{"Sleeper", "Stubborn"} {
		t.Run(class, func(t *testing.T) {
			id := "cancel-" + class
			if _, err := tw.client.Submit(ctx, behaviourPlan(t, id, class)); err != nil {
				t.Fatal(err)
			}
			waitLog(t, tw, id)
			if err := tw.client.Cancel(ctx, id); err != nil {
				t.Fatal(err)
			}
			res, err := tw.client.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if res.State != StateCancelled || !strings.Contains(res.Error, "cancelled") {
				t.Fatalf("state %s, error %q; want cancelled", res.State, res.Error)
			}
			mustSucceed(t, run(t, tw, behaviourPlan(t, "after-"+class, "NoOp")))
		})
	}
	if err := tw.client.Cancel(ctx, "no-such-plan"); err == nil || !strings.Contains(err.Error(), "unknown plan") {
		t.Errorf("Cancel(unknown) = %v, want unknown plan", err)
	}
}

// waitLog waits until plan id's filter has printed (so it is inside its
// Python call), as GET /plans/ID shows a running plan's output. Polling
// for an event, not asserting on time.
// It returns what the plan had printed.
func waitLog(t *testing.T, tw *testWorker, id string) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		res, err := tw.client.Get(context.Background(), id)
		var re *RemoteError
		if errors.As(err, &re) && re.Status == http.StatusNotFound {
			time.Sleep(10 * time.Millisecond) // not submitted yet
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(res.LogTail, "ing") {
			return res.LogTail
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("plan %s never started its filter", id)
	return ""
}

// TestWarmReuseNewFiles: a warm daemon keeps a plan's modules imported
// for the next plan with the same files, but a plan that ships another
// version of a file (same name) runs the new code, not the cached module.
func TestWarmReuseNewFiles(t *testing.T) {
	tw := newTestWorker(t, testOptions{})
	version := func(id, code string) any {
		f := File{Name: "v.py", Content: []byte(code)}
		p := &Plan{ID: id, Files: []File{f}, Nodes: []Node{{ID: "n", File: "v.py", Class: "V"}}, Input: Value{Kind: KindNone}}
		res := run(t, tw, p)
		mustSucceed(t, res)
		return res.Outputs["n"].Object
	}
	const v1 = "class V:\n    def forward(self, x):\n        return 1\n"
	const v2 = "class V:\n    def forward(self, x):\n        return 2\n"
	for i, tc := range []struct {
		code string
		want any
	}{{v1, int8(1)}, {v1, int8(1)}, {v2, int8(2)}, {v1, int8(1)}} {
		if got := version(fmt.Sprintf("v%d", i), tc.code); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Fatalf("plan %d returned %v, want %v", i, got, tc.want)
		}
	}
	if got := tw.w.DaemonsStarted(); got != 1 {
		t.Fatalf("daemons started = %d, want 1 (all warm)", got)
	}
}

// TestImportInterruptible: a plan whose module hangs at import is
// interrupted like a filter call (SIGINT), not killed: the daemon stays
// warm. (The import used to run with SIGINT ignored, so the daemon was
// killed after the grace and a new one started.)
func TestImportInterruptible(t *testing.T) {
	tw := newTestWorker(t, testOptions{})
	mustSucceed(t, run(t, tw, behaviourPlan(t, "warm", "NoOp")))
	code := "import time\nprint('importing', flush=True)\ntime.sleep(3600)\nclass Never:\n    pass\n"
	p := &Plan{ID: "slow-import", TimeoutSeconds: 0.5, Files: []File{{Name: "slow.py", Content: []byte(code)}},
		Nodes: []Node{{ID: "n", File: "slow.py", Class: "Never"}}, Input: Value{Kind: KindNone}}
	res := run(t, tw, p)
	if res.State != StateFailed || !strings.Contains(res.Error, "timed out") {
		t.Fatalf("state %s, error %q; want failed: timed out", res.State, res.Error)
	}
	mustSucceed(t, run(t, tw, behaviourPlan(t, "after", "NoOp")))
	if got := tw.w.DaemonsStarted(); got != 1 {
		t.Fatalf("daemons started = %d, want 1: the import should have been interrupted, not killed", got)
	}
}

// TestPlanOutputIsItsOwn: a warm daemon writes every plan's output to one
// log, and each result's LogTail is what that plan printed, nothing of the
// plans before it; a log grown past maxDaemonLog is emptied before the
// next plan; and the logs go with their daemons (a log file per plan id
// used to be left in the work folder for good).
func TestPlanOutputIsItsOwn(t *testing.T) {
	tw := newTestWorker(t, testOptions{})
	const printed = "printed by the filter\nand written to sys.stdout\nand to fd 1\nand to stderr\n"
	for i, class := range []string{"Printer", "Printer", "NoOp", "Printer"} {
		res := run(t, tw, behaviourPlan(t, fmt.Sprintf("p%d", i), class))
		mustSucceed(t, res)
		want := map[string]string{"Printer": printed, "NoOp": ""}[class]
		if res.LogTail != want {
			t.Fatalf("plan %d (%s): LogTail %q, want %q", i, class, res.LogTail, want)
		}
	}
	if n := tw.w.DaemonsStarted(); n != 1 {
		t.Fatalf("%d daemons started, want 1 (the plans shared a warm daemon)", n)
	}
	logs, err := filepath.Glob(filepath.Join(tw.w.o.WorkDir, "daemons", "*.log"))
	if err != nil || len(logs) != 1 {
		t.Fatalf("daemon logs %v (%v), want one", logs, err)
	}
	f, err := os.OpenFile(logs[0], os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(bytes.Repeat([]byte("old output\n"), maxDaemonLog/10)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	res := run(t, tw, behaviourPlan(t, "after-big", "Printer"))
	mustSucceed(t, res)
	st, err := os.Stat(logs[0])
	if err != nil {
		t.Fatal(err)
	}
	if res.LogTail != printed || st.Size() != int64(len(printed)) {
		t.Fatalf("after a log of %d bytes: LogTail %q, log now %d bytes; want the plan's output alone, the old emptied", maxDaemonLog/10*11, res.LogTail, st.Size())
	}
	tw.w.Close()
	if left, _ := filepath.Glob(filepath.Join(tw.w.o.WorkDir, "daemons", "*")); len(left) != 0 {
		t.Fatalf("left after Close: %v", left)
	}
}
