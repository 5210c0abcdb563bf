package slurm

// Tests on a real Slurm: scripts/slurm-local.sh start gives one here. They
// skip when sinfo cannot reach Slurm, and fail instead under SOMA_REQUIRE=1
// (make test). Each job body is this test binary in a helper mode (see
// main_test.go), exec'd by a script that Script.Render wrote, so the
// scripts are exactly what `soma slurm submit` would write around
// soma-trial. Later end-to-end tests of soma-trial can reuse needSlurm,
// submitScript and waitEnded.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/soma-hpc/soma/internal/testutil"
)

// needSlurm returns a Client for the local Slurm, or skips t (fails it
// under SOMA_REQUIRE=1) when sinfo cannot reach one.
func needSlurm(t *testing.T) Client {
	t.Helper()
	testutil.NeedSlurm(t, Client{}.Ping)
	return Client{}
}

// submitScript renders s into dir/name.sh, submits it and returns the job
// id. A cleanup cancels the job if the test leaves it running
// (Client.CancelUnended).
func submitScript(t *testing.T, c Client, s Script, dir, name string) JobID {
	t.Helper()
	text, err := s.Render()
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	path := filepath.Join(dir, name+".sh")
	if err := os.WriteFile(path, text, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, err := c.Submit(ctx, path)
	if err != nil {
		t.Fatalf("Submit %s: %v", path, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = c.CancelUnended(ctx, id, 200*time.Millisecond)
	})
	return id
}

// waitEnded waits up to limit for every task of job id to end.
func waitEnded(t *testing.T, c Client, id JobID, limit time.Duration) []Task {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	tasks, err := c.Wait(ctx, id, 200*time.Millisecond)
	if err != nil {
		t.Fatalf("job %s: %v (tasks: %+v)", id, err, tasks)
	}
	return tasks
}

// waitFile waits up to limit for path to exist, while job id runs.
func waitFile(t *testing.T, c Client, id JobID, path string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			tasks, err := c.Tasks(context.Background(), id)
			t.Fatalf("no %s after %v; job %s: %+v, %v", path, limit, id, tasks, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestSlurmArray submits a rendered script as a 4-task array: every task
// runs, knows its ids from the environment, logs to <array id>_<index>.out
// in a directory whose name needs quoting, and is the batch shell itself.
// It also checks that the real sbatch reads the quoted #SBATCH values as
// sbatchArgument does.
func TestSlurmArray(t *testing.T) {
	c := needSlurm(t)
	t.Parallel()
	dir := t.TempDir()
	logDir := filepath.Join(dir, `log dir's $x %y`)
	if err := os.Mkdir(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	const name = `soma test: it's "q" $x \ #1`
	const comment = `a b\c 'd' "e" #f`
	s := Script{
		Name:    name,
		Array:   "0-3",
		Time:    10 * time.Minute,
		Command: helperCommand(t, "who", dir),
		LogDir:  logDir,
		Sbatch:  []string{"--comment=" + comment},
	}
	id := submitScript(t, c, s, dir, "array")
	tasks := waitEnded(t, c, id, 90*time.Second)

	var indices []string
	for _, task := range tasks {
		if task.State != "COMPLETED" {
			log, _ := os.ReadFile(filepath.Join(logDir, fmt.Sprintf("%s_%s.out", id, task.ArrayTask)))
			t.Errorf("task %+v did not complete; its log:\n%s", task, log)
		}
		indices = append(indices, task.ArrayTask)
		if task.ArrayJobID != id {
			t.Errorf("task %+v: ArrayJobID %s, want %s", task, task.ArrayJobID, id)
		}
	}
	slices.Sort(indices)
	if want := []string{"0", "1", "2", "3"}; !slices.Equal(indices, want) {
		t.Fatalf("array task indices = %q, want %q", indices, want)
	}

	for _, task := range tasks {
		i, _ := strconv.Atoi(task.ArrayTask)
		var rep whoReport
		readJSON(t, filepath.Join(dir, fmt.Sprintf("who-%d.json", i)), &rep)
		if want := fmt.Sprintf("%s %s_%d pid %d", rep.Job.Node, id, i, rep.PID); rep.Who != want || rep.Job.Node == "" {
			t.Errorf("task %d: Who() = %q, want %q", i, rep.Who, want)
		}
		if !rep.InJob || rep.Job.ID != task.ID || rep.Job.ArrayJobID != id || rep.Job.ArrayTaskID != i || rep.Job.Name != name {
			t.Errorf("task %d: Job = %+v, want ID %s, array %s_%d, name %q", i, rep.Job, task.ID, id, i, name)
		}
		if rep.TaskPID != strconv.Itoa(rep.PID) {
			t.Errorf("task %d: SLURM_TASK_PID = %s, pid %d: the exec'd program should be the batch shell", i, rep.TaskPID, rep.PID)
		}
		log, err := os.ReadFile(filepath.Join(logDir, fmt.Sprintf("%s_%d.out", id, i)))
		if err != nil {
			t.Errorf("task %d: log named %%A_%%a: %v", i, err)
			continue
		}
		if want := fmt.Sprintf("soma: job %s (task %s_%d), restart 0, on %s, ", task.ID, id, i, rep.Job.Node); !strings.HasPrefix(string(log), want) {
			t.Errorf("task %d: log = %q, want it to start %q", i, log, want)
		}
	}
	if entries, _ := os.ReadDir(logDir); len(entries) != 4 {
		t.Errorf("log dir holds %d files, want the 4 task logs", len(entries))
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	infos, err := c.ShowJob(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range infos {
		if info.Name != name || info.Fields["Comment"] != comment {
			t.Errorf("scontrol: JobName %q, Comment %q; want %q, %q (the #SBATCH quoting)", info.Name, info.Fields["Comment"], name, comment)
		}
		// scontrol shows the pattern half expanded: %A and %a, but not the
		// %% that stands for the directory's % (the file itself is right,
		// as read above).
		if want := filepath.Join(dir, fmt.Sprintf(`log dir's $x %%%%y/%s_%s.out`, id, info.ArrayTask)); info.StdOut != want {
			t.Errorf("scontrol: StdOut %q, want %q", info.StdOut, want)
		}
		if info.Fields["Requeue"] != "1" {
			t.Errorf("scontrol: Requeue=%s, want 1 (--requeue)", info.Fields["Requeue"])
		}
	}
}

// TestSlurmSignal proves the exec design of the generated script: USR1
// sent the way --signal=B:USR1@grace sends it (to the batch shell only;
// scancel --signal=USR1 --batch does the same on demand) reaches the
// exec'd program, and, as the control, does not reach a program that the
// batch shell runs as a child.
func TestSlurmSignal(t *testing.T) {
	c := needSlurm(t)
	t.Parallel()
	tests := []struct {
		name     string
		command  func(report string) []string
		wantUSR1 bool
	}{
		{"exec'd program receives USR1", func(report string) []string {
			return helperCommand(t, "sigwait", report)
		}, true},
		{"a child of the batch shell does not", func(report string) []string {
			quoted := make([]string, 0, 4)
			for _, a := range helperCommand(t, "sigwait", report) {
				quoted = append(quoted, shellQuote(a))
			}
			// "; true" keeps bash from exec'ing its last command itself.
			return []string{"bash", "-c", strings.Join(quoted, " ") + "; true"}
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			report := filepath.Join(dir, "signals.json")
			s := Script{Name: "soma signal test", Time: 10 * time.Minute, Command: tc.command(report), LogDir: dir}
			id := submitScript(t, c, s, dir, "job")
			waitFile(t, c, id, report+".ready", 60*time.Second)

			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := c.Cancel(ctx, Ref{Job: id}, CancelOptions{Signal: "USR1", Batch: true}); err != nil {
				t.Fatal(err)
			}
			tasks := waitEnded(t, c, id, 60*time.Second)
			var rep sigReport
			readJSON(t, report, &rep)
			log, _ := os.ReadFile(filepath.Join(dir, id.String()+".out"))
			if got := slices.Contains(rep.Signals, "USR1"); got != tc.wantUSR1 {
				t.Errorf("program received %q (pid %d, batch shell pid %s), want USR1 among them: %v; job %+v; log:\n%s",
					rep.Signals, rep.PID, rep.TaskPID, tc.wantUSR1, tasks, log)
			}
			if isShell := rep.TaskPID == strconv.Itoa(rep.PID); isShell != tc.wantUSR1 {
				t.Errorf("program pid %d, batch shell pid %s: want them equal only with exec", rep.PID, rep.TaskPID)
			}
			if tc.wantUSR1 && (len(tasks) != 1 || tasks[0].State != "COMPLETED") {
				t.Errorf("job = %+v, want COMPLETED (the program exits 0 on USR1)", tasks)
			}
		})
	}
}

// TestSlurmRequeue: a requeued task starts its script again with the same
// ids, SLURM_RESTART_COUNT set (so Who says "restart 1"), and appends to
// its log (--open-mode=append) instead of truncating it.
func TestSlurmRequeue(t *testing.T) {
	c := needSlurm(t)
	t.Parallel()
	dir := t.TempDir()
	s := Script{Name: "soma requeue test", Array: "5", Command: helperCommand(t, "who", dir), LogDir: dir}
	id := submitScript(t, c, s, dir, "job")
	if tasks := waitEnded(t, c, id, 60*time.Second); len(tasks) != 1 || tasks[0].State != "COMPLETED" {
		t.Fatalf("first run: %+v, want one COMPLETED task", tasks)
	}
	var first whoReport
	readJSON(t, filepath.Join(dir, "who-5.json"), &first)

	ref := Ref{Job: id, Task: 5, IsTask: true}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Requeue(ctx, ref); err != nil {
		t.Fatal(err)
	}
	// Requeue leaves the task PENDING at once; it starts again after
	// cred_expire (see Requeue: 11 s here, 121 s on a default Slurm).
	tasks := waitEnded(t, c, id, 200*time.Second)
	var second whoReport
	readJSON(t, filepath.Join(dir, "who-5.json"), &second)
	if want := fmt.Sprintf("%s %s_5 restart 1 pid %d", second.Job.Node, id, second.PID); second.Who != want {
		t.Errorf("after requeue Who() = %q, want %q (tasks %+v)", second.Who, want, tasks)
	}
	if len(tasks) != 1 || tasks[0].State != "COMPLETED" {
		t.Errorf("second run: %+v, want one COMPLETED task", tasks)
	}
	if second.Job.ID != first.Job.ID {
		t.Errorf("after requeue job id %s, want the same %s", second.Job.ID, first.Job.ID)
	}
	log, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("%s_5.out", id)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), ", restart 0, ") || !strings.Contains(string(log), ", restart 1, ") {
		t.Errorf("log = %q, want the header lines of both runs", log)
	}
}

// TestSlurmUnknownJob: Slurm's "Invalid job id specified" is ErrUnknownJob.
func TestSlurmUnknownJob(t *testing.T) {
	c := needSlurm(t)
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, id := range []JobID{67000000, 4000000000} { // below and above MaxJobId
		if _, err := c.Tasks(ctx, id); !errors.Is(err, ErrUnknownJob) {
			t.Errorf("Tasks(%s): %v, want ErrUnknownJob", id, err)
		}
		if _, err := c.ShowJob(ctx, id); !errors.Is(err, ErrUnknownJob) {
			t.Errorf("ShowJob(%s): %v, want ErrUnknownJob", id, err)
		}
	}
}

// TestSlurmCancelUnended: a running job is cancelled and waited for; an
// ended or forgotten one is left alone, without an error.
func TestSlurmCancelUnended(t *testing.T) {
	c := needSlurm(t)
	t.Parallel()
	dir := t.TempDir()
	s := Script{Name: "soma cancel-unended test", Command: []string{"sleep", "300"}, LogDir: dir}
	id := submitScript(t, c, s, dir, "job")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.CancelUnended(ctx, id, 200*time.Millisecond); err != nil {
		t.Fatalf("CancelUnended of a running job: %v", err)
	}
	tasks, err := c.Tasks(ctx, id)
	if err != nil && !errors.Is(err, ErrUnknownJob) {
		t.Fatal(err)
	}
	for _, task := range tasks {
		if !task.Ended() {
			t.Errorf("after CancelUnended: task %+v has not ended", task)
		}
	}
	if err := c.CancelUnended(ctx, id, 200*time.Millisecond); err != nil {
		t.Errorf("CancelUnended of an ended job: %v", err)
	}
	if err := c.CancelUnended(ctx, 67000000, 200*time.Millisecond); err != nil {
		t.Errorf("CancelUnended of a job Slurm does not know: %v", err)
	}
}
