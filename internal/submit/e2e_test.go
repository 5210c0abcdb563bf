package submit

// End-to-end tests on a real Slurm: scripts/slurm-local.sh start gives one
// here (make test's: two emulated nodes, 8 CPUs advertised on each). They skip when sinfo cannot reach
// Slurm, and fail instead under SOMA_REQUIRE=1 (make test). Each submits
// through Submit, so the jobs run exactly the scripts that `soma slurm
// submit` writes, with a soma-trial built from this tree and
// testdata/objective.py as the objective. The tests run in parallel; each
// uses at most 4 CPUs at once, and they poll with deadlines, never assert
// on timing.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/internal/testutil"
	"github.com/soma-hpc/soma/slurm"
	"github.com/soma-hpc/soma/study"
)

// trialBin is the soma-trial built by TestMain (with -race, as the other
// packages' tests build it, so a race in a job shows in its log).
var trialBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "soma-submit-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	trialBin = filepath.Join(dir, TrialBinName)
	out, err := exec.Command("go", "build", "-race", "-o", trialBin, "github.com/soma-hpc/soma/cmd/soma-trial").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build soma-trial: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// needSlurm returns a Client for the local Slurm, or skips t (fails it
// under SOMA_REQUIRE=1) when sinfo cannot reach one or Python lacks
// signal.
func needSlurm(t *testing.T) slurm.Client {
	t.Helper()
	testutil.NeedSlurm(t, slurm.Client{}.Ping)
	testutil.NeedPython(t, "signal")
	return slurm.Client{}
}

// e2e is one end-to-end test's study: a store, a folder for the
// objective's marks, and the Slurm client.
type e2e struct {
	c     slurm.Client
	store *fsstore.Store
	marks string
	obj   string
	study string
}

func newE2E(t *testing.T, c slurm.Client) e2e {
	t.Helper()
	dir := t.TempDir()
	store, err := fsstore.Open(filepath.Join(dir, "root"), fsstore.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	marks := filepath.Join(dir, "marks")
	if err := os.Mkdir(marks, 0o777); err != nil {
		t.Fatal(err)
	}
	obj, err := filepath.Abs(filepath.Join("testdata", "objective.py"))
	if err != nil {
		t.Fatal(err)
	}
	return e2e{c: c, store: store, marks: marks, obj: obj, study: "s"}
}

// submit submits the study with objective.py in mode (and its args). A
// cleanup cancels the job if the test leaves it running.
func (e e2e) submit(t *testing.T, budget int, o Options, mode ...string) Result {
	t.Helper()
	o.Study = e.study
	o.Spec = testSpec(t, budget)
	o.Objective = append([]string{testutil.Python(), e.obj, e.marks}, mode...)
	o.TrialBin = trialBin
	o.Slurm = e.c
	o.Sbatch = append(o.Sbatch, "--comment=soma internal/submit test "+t.Name())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := Submit(ctx, e.store, o)
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	cancelAtEnd(t, e.c, res.Submission.Job)
	return res
}

// cancelAtEnd cancels job id when t ends, if it still runs.
func cancelAtEnd(t *testing.T, c slurm.Client, id slurm.JobID) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = c.CancelUnended(ctx, id, 200*time.Millisecond)
	})
}

// waitEnded waits up to limit for every task of job id to end, and
// returns them; on timeout it fails t, showing the job's logs.
func (e e2e) waitEnded(t *testing.T, id slurm.JobID, limit time.Duration) []slurm.Task {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	tasks, err := e.c.Wait(ctx, id, 250*time.Millisecond)
	if err != nil {
		t.Fatalf("job %s: %v (tasks: %+v)\n%s", id, err, tasks, e.logs(id))
	}
	return tasks
}

// logs returns the Slurm logs of job id, for failure messages.
func (e e2e) logs(id slurm.JobID) string {
	var b strings.Builder
	paths, _ := filepath.Glob(filepath.Join(LogDir(e.store.Root(), e.study), id.String()+"*.out"))
	for _, p := range paths {
		text, _ := os.ReadFile(p)
		fmt.Fprintf(&b, "--- %s\n%s", filepath.Base(p), text)
	}
	return b.String()
}

// mark returns the text of a mark objective.py left, and whether it
// exists.
func (e e2e) mark(name string) (string, bool) {
	b, err := os.ReadFile(filepath.Join(e.marks, name))
	return string(b), err == nil
}

// waitMark waits up to limit for a mark to appear, and returns its text.
func (e e2e) waitMark(t *testing.T, id slurm.JobID, name string, limit time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		if text, ok := e.mark(name); ok {
			return text
		}
		if time.Now().After(deadline) {
			tasks, err := e.c.Tasks(context.Background(), id)
			t.Fatalf("no mark %s after %v; job %s: %+v, %v\n%s", name, limit, id, tasks, err, e.logs(id))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// attempts returns every attempt of the study, with curves and reasons.
func (e e2e) attempts(t *testing.T) []study.Record {
	t.Helper()
	ctx := context.Background()
	st, err := study.Open(ctx, e.store, e.study, nil, study.Options{})
	if err != nil {
		t.Fatal(err)
	}
	recs, corrupt, err := st.Attempts(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(corrupt) > 0 {
		t.Errorf("corrupt records: %v", corrupt)
	}
	return recs
}

// checkDoneOnce checks that trials 0..budget-1 each have exactly one done
// attempt, which is their latest, and exactly one objective that finished
// (one .done mark, left by that attempt, in the Slurm task its record
// names). It returns the done attempts by trial.
func (e e2e) checkDoneOnce(t *testing.T, budget int, recs []study.Record) map[int]study.Record {
	t.Helper()
	done := map[int]study.Record{}
	for _, r := range recs {
		if r.State != study.StateDone {
			continue
		}
		if prev, dup := done[r.Number]; dup {
			t.Errorf("trial %d done twice: attempts %d (%s) and %d (%s)", r.Number, prev.Attempt, prev.Who, r.Attempt, r.Who)
		}
		done[r.Number] = r
	}
	entries, err := os.ReadDir(e.marks)
	if err != nil {
		t.Fatal(err)
	}
	finished := map[string]int{} // trial -> .done marks
	for _, en := range entries {
		if trial, rest, ok := strings.Cut(en.Name(), "."); ok && strings.HasSuffix(rest, ".done") {
			finished[trial]++
		}
	}
	for n := range budget {
		r, ok := done[n]
		if !ok {
			t.Errorf("trial %d is not done", n)
			continue
		}
		if c := finished[fmt.Sprint(n)]; c != 1 {
			t.Errorf("trial %d: its objective finished %d times, want once", n, c)
		}
		if job, ok := e.mark(fmt.Sprintf("%d.%d.done", n, r.Attempt)); !ok || job != r.Who.Job {
			t.Errorf("trial %d attempt %d: record says job %q, the objective ran in %q (mark present: %v)", n, r.Attempt, r.Who.Job, job, ok)
		}
	}
	if len(done) != budget {
		t.Errorf("%d trials done, want the budget %d", len(done), budget)
	}
	return done
}

// TestE2EArray: `sbatch --array=0-3` of soma-trial over one study with a
// budget of 12. Every trial is done exactly once; the records name the
// array tasks that ran them ("<array job>_<task>"), and each of the 4
// tasks ran some (the objective holds its first trial until all 4 tasks
// run one). The script on disk is the one recorded, sbatch ran it as
// written (scontrol shows its options), and Jobs reports the tasks.
func TestE2EArray(t *testing.T) {
	c := needSlurm(t)
	t.Parallel()
	e := newE2E(t, c)
	const budget = 12
	res := e.submit(t, budget, Options{Array: "0-3", Time: 10 * time.Minute, Grace: time.Minute}, "barrier", "4")
	id := res.Submission.Job
	tasks := e.waitEnded(t, id, 150*time.Second)

	var indices []string
	for _, task := range tasks {
		indices = append(indices, task.ArrayTask)
		if task.State != "COMPLETED" {
			t.Errorf("task %s_%s ended %s, want COMPLETED", id, task.ArrayTask, task.State)
		}
	}
	slices.Sort(indices)
	if want := []string{"0", "1", "2", "3"}; !slices.Equal(indices, want) {
		t.Errorf("array tasks %q, want %q", indices, want)
	}

	recs := e.attempts(t)
	done := e.checkDoneOnce(t, budget, recs)
	if len(recs) != budget {
		t.Errorf("%d attempts, want %d (no retries)", len(recs), budget)
	}
	ran := map[string]int{}
	for _, r := range done {
		ran[r.Who.Job]++
	}
	for i := range 4 {
		if job := fmt.Sprintf("%s_%d", id, i); ran[job] == 0 {
			t.Errorf("no trial names array task %s; trials by task: %v", job, ran)
		}
	}
	if len(ran) != 4 {
		t.Errorf("trials by task %v, want the 4 tasks of %s only", ran, id)
	}

	// The script: as recorded, run by sbatch with its options.
	script, err := os.ReadFile(res.Submission.ScriptPath)
	if err != nil {
		t.Fatal(err)
	}
	if blob, err := e.store.Get(context.Background(), res.Submission.Digest); err != nil || string(blob) != string(script) {
		t.Errorf("script file and recorded blob differ (%v)", err)
	}
	wantExec := fmt.Sprintf("\nexec %s --root %s --study %s --requeue-on-usr1 -- %s %s %s barrier 4\n", trialBin, e.store.Root(), e.study, testutil.Python(), e.obj, e.marks)
	if !strings.Contains(string(script), wantExec) {
		t.Errorf("script lacks the line %q:\n%s", wantExec, script)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	infos, err := c.ShowJob(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range infos {
		f := info.Fields
		if f["Command"] != res.Submission.ScriptPath || f["Requeue"] != "1" || f["TimeLimit"] != "00:10:00" || info.Name != "soma-s" {
			t.Errorf("scontrol: Command=%s Requeue=%s TimeLimit=%s JobName=%s; want %s, 1, 00:10:00, soma-s",
				f["Command"], f["Requeue"], f["TimeLimit"], info.Name, res.Submission.ScriptPath)
		}
		if want := filepath.Join(res.Submission.LogDir, fmt.Sprintf("%s_%s.out", id, info.ArrayTask)); info.StdOut != want {
			t.Errorf("scontrol: StdOut=%s, want %s", info.StdOut, want)
		}
	}
	// Each task ends with its summary: the study's budget reached, or
	// (issue 19) nothing claimable while another task keeps watch over
	// the last running trials; at least one task saw the budget reached.
	reached := 0
	for i := range 4 {
		log, err := os.ReadFile(filepath.Join(res.Submission.LogDir, fmt.Sprintf("%s_%d.out", id, i)))
		done := strings.Contains(string(log), "stopped: the study's budget is reached")
		if done {
			reached++
		}
		if err != nil || !strings.Contains(string(log), "soma-trial: s: ran ") || !done && !strings.Contains(string(log), "stopped: nothing claimable now; another process keeps watch") {
			t.Errorf("log of task %d (%v) lacks soma-trial's summary:\n%s", i, err, log)
		}
	}
	if reached == 0 {
		t.Errorf("no task's log says the study's budget was reached")
	}

	l, err := Jobs(ctx, e.store, e.study, JobsOptions{Slurm: c})
	if err != nil {
		t.Fatal(err)
	}
	if !l.Live || len(l.Jobs) != 1 || l.Jobs[0].Job != id || l.Jobs[0].Active() || l.Jobs[0].Counts()["COMPLETED"] != 4 {
		t.Errorf("Jobs = %+v, want job %s live with 4 COMPLETED tasks", l, id)
	}
}

// TestE2EScancel: scancel of the array task that runs trial 0, mid-trial.
// Killed outright (scancel --signal=KILL --batch: soma-trial gets no
// chance to write anything, as when a node dies), its attempt goes stale
// after the lease (--lease 3s here) and the other task retries it.
// Cancelled the ordinary way (plain scancel: SIGTERM to every process of
// the task, then SIGKILL after KillWait), soma-trial records the attempt
// interrupted and the other task retries it at once; it does not go
// stale. (A plain `scancel --signal=KILL` is no hard kill: Slurm turns it
// into the ordinary cancel, SIGTERM first.) Either way the study
// completes its budget and nothing is done twice.
func TestE2EScancel(t *testing.T) {
	c := needSlurm(t)
	t.Parallel()
	tests := []struct {
		name      string
		cancel    slurm.CancelOptions
		wantState study.State
	}{
		{"kill: the attempt goes stale", slurm.CancelOptions{Signal: "KILL", Batch: true}, study.StateStale},
		{"cancel: the attempt is interrupted", slurm.CancelOptions{}, study.StateInterrupted},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newE2E(t, c)
			const budget = 4
			res := e.submit(t, budget, Options{
				Array: "0-1", Time: 10 * time.Minute, Grace: time.Minute,
				TrialArgs: []string{"--lease", "3s"},
			}, "victim")
			id := res.Submission.Job
			victim := e.waitMark(t, id, "victim", 90*time.Second)
			ref, err := slurm.ParseRef(victim)
			if err != nil || ref.Job != id || !ref.IsTask {
				t.Fatalf("victim mark %q: %v, want a task of %s", victim, err, id)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := c.Cancel(ctx, ref, tc.cancel); err != nil {
				t.Fatal(err)
			}
			tasks := e.waitEnded(t, id, 120*time.Second)
			for _, task := range tasks {
				r, _ := task.Ref()
				if r != ref && task.State != "COMPLETED" {
					t.Errorf("task %s ended %s, want COMPLETED\n%s", r, task.State, e.logs(id))
				}
				if r == ref {
					t.Logf("the victim %s ended %s", r, task.State)
				}
			}

			recs := e.attempts(t)
			done := e.checkDoneOnce(t, budget, recs)
			first := recs[0]
			if first.Number != 0 || first.Attempt != 0 || first.State != tc.wantState || first.Who.Job != victim {
				t.Errorf("trial 0 attempt 0 = %s by %q (%s), want %s by %s", first.State, first.Who.Job, first.Reason, tc.wantState, victim)
			}
			if r := done[0]; r.Attempt < 1 || r.Who.Job == victim {
				t.Errorf("trial 0 was done by attempt %d in %q, want a retry by the other task than %s", r.Attempt, r.Who.Job, victim)
			}
			if _, ok := e.mark("0.0.done"); ok {
				t.Errorf("the victim's objective finished, want it killed")
			}
		})
	}
}

// TestE2ETimeLimit: a job with a 1-minute time limit whose trial outlasts
// it. The pre-timeout SIGUSR1 (--signal=B:USR1@15, about 15 s before the
// limit, give or take Slurm's 30 s) reaches soma-trial through the
// script's exec; it stops the objective, records the attempt interrupted
// and, since the script runs it with --requeue-on-usr1, requeues its job.
// The job's next run retries the trial and finishes the study: nothing is
// lost and nobody had to resubmit.
func TestE2ETimeLimit(t *testing.T) {
	c := needSlurm(t)
	t.Parallel()
	e := newE2E(t, c)
	const budget = 2
	res := e.submit(t, budget, Options{Time: time.Minute, Grace: 15 * time.Second}, "until-signal")
	id := res.Submission.Job
	if want := "#SBATCH --signal=B:USR1@15\n"; !strings.Contains(string(res.Script), want) {
		t.Fatalf("script lacks %q:\n%s", want, res.Script)
	}
	e.waitMark(t, id, "victim", 60*time.Second)
	// The limit is 60 s and Slurm kills within about 30 s after it; the
	// requeued run starts some seconds later and retries the trial.
	tasks := e.waitEnded(t, id, 180*time.Second)
	if len(tasks) != 1 || tasks[0].State == "TIMEOUT" {
		t.Errorf("job ended %+v, want it to end on the warning, before its time limit, and its requeued run to complete\n%s", tasks, e.logs(id))
	}
	if sig, ok := e.mark("0.0.signal"); !ok || sig != "USR1" {
		t.Errorf("the objective was stopped by %q (mark present: %v), want USR1 forwarded by soma-trial\n%s", sig, ok, e.logs(id))
	}
	recs := e.attempts(t)
	if len(recs) == 0 || recs[0].Number != 0 || recs[0].State != study.StateInterrupted || !strings.Contains(recs[0].Reason, "user defined signal 1") {
		t.Fatalf("attempts %+v, want trial 0 attempt 0 interrupted by SIGUSR1\n%s", recs, e.logs(id))
	}
	if recs[0].Who.Job != id.String() {
		t.Errorf("interrupted attempt names job %q, want %s", recs[0].Who.Job, id)
	}

	// The job requeued itself; its second run (same job id) retried trial 0.
	done := e.checkDoneOnce(t, budget, e.attempts(t))
	if r := done[0]; r.Attempt != 1 || r.Who.Job != id.String() {
		t.Errorf("trial 0 done by attempt %d in job %q, want attempt 1 in the requeued job %s\n%s", r.Attempt, r.Who.Job, id, e.logs(id))
	}
	if logs := e.logs(id); !strings.Contains(logs, "asked Slurm to requeue job") || !strings.Contains(logs, "restart 1") {
		t.Errorf("the job's log does not show the requeue and the restart:\n%s", logs)
	}
}
