package slurm

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeSlurm writes shell scripts named after Slurm's commands into a fresh
// directory and returns a Client that runs them. Each script body may use
// $LOG, a file that records every call's argv.
func fakeSlurm(t *testing.T, scripts map[string]string) (Client, string) {
	t.Helper()
	dir := t.TempDir()
	log := filepath.Join(dir, "calls.log")
	for name, body := range scripts {
		text := "#!/bin/sh\nLOG=" + log + "\necho \"$0 $*\" >>\"$LOG\"\n" + body + "\n"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return Client{Dir: dir, Env: []string{"PATH=/usr/bin:/bin"}}, log
}

const (
	stderrUnreachable = `echo "slurm_load_jobs error: Unable to contact slurm controller (connect failure)" >&2; exit 1`
	stderrNoConfig    = `echo "squeue: fatal: Could not establish a configuration source" >&2; exit 1`
	stderrUnknownJob  = `echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1`
)

func TestClientErrors(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name     string
		squeue   string // "" leaves squeue out
		wantKind error
		wantMsg  string
	}{
		{"not installed", "", ErrUnavailable, "Slurm is not reachable"},
		{"controller down", stderrUnreachable, ErrUnavailable, "scripts/slurm-local.sh start"},
		{"no configuration", stderrNoConfig, ErrUnavailable, "Could not establish a configuration source"},
		{"unknown job", stderrUnknownJob, ErrUnknownJob, "unknown job"},
		{"other failure", `echo "squeue: error: something else" >&2; exit 2`, nil, "something else"},
		{"garbage output", `echo "what is this"`, nil, `squeue line "what is this"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			scripts := map[string]string{}
			if tc.squeue != "" {
				scripts["squeue"] = tc.squeue
			}
			c, _ := fakeSlurm(t, scripts)
			_, err := c.Tasks(ctx, 5)
			if err == nil {
				t.Fatal("Tasks succeeded, want an error")
			}
			for _, kind := range []error{ErrUnavailable, ErrUnknownJob} {
				if got, want := errors.Is(err, kind), kind == tc.wantKind; got != want {
					t.Errorf("errors.Is(%v, %v) = %v, want %v", err, kind, got, want)
				}
			}
			if !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("error %q, want it to contain %q", err, tc.wantMsg)
			}
			var ce *CommandError
			if tc.name != "garbage output" && !errors.As(err, &ce) {
				t.Errorf("error %v is not a *CommandError", err)
			}
		})
	}
}

func TestClientSubmit(t *testing.T) {
	c, log := fakeSlurm(t, map[string]string{"sbatch": `echo "1234;somalocal"`})
	id, err := c.Submit(context.Background(), "/x/job.sh", "--hold", "--partition=p")
	if err != nil || id != 1234 {
		t.Fatalf("Submit = %v, %v; want 1234", id, err)
	}
	calls, _ := os.ReadFile(log)
	if want := filepath.Join(c.Dir, "sbatch") + " --parsable --hold --partition=p /x/job.sh\n"; string(calls) != want {
		t.Errorf("sbatch ran as %q, want %q", calls, want)
	}
}

func TestClientShowJob(t *testing.T) {
	c, _ := fakeSlurm(t, map[string]string{"scontrol": `cat ` + filepath.Join(mustAbs(t, "testdata"), "scontrol-array-oneline.txt")})
	jobs, err := c.ShowJob(context.Background(), 19)
	if err != nil || len(jobs) != 5 {
		t.Fatalf("ShowJob = %d records, %v; want 5", len(jobs), err)
	}
	c, _ = fakeSlurm(t, map[string]string{"scontrol": `true`})
	if _, err := c.ShowJob(context.Background(), 19); !errors.Is(err, ErrUnknownJob) {
		t.Errorf("ShowJob with no output: %v, want ErrUnknownJob", err)
	}
}

func TestClientCancel(t *testing.T) {
	ctx := context.Background()
	c, log := fakeSlurm(t, map[string]string{"scancel": `true`})
	if err := c.Cancel(ctx, Ref{Job: 19, Task: 3, IsTask: true}, CancelOptions{Signal: "USR1", Batch: true}); err != nil {
		t.Fatal(err)
	}
	calls, _ := os.ReadFile(log)
	if want := " --signal=USR1 --batch 19_3\n"; !strings.HasSuffix(string(calls), want) {
		t.Errorf("scancel ran as %q, want it to end in %q", calls, want)
	}
	if err := c.Cancel(ctx, Ref{}, CancelOptions{}); err == nil {
		t.Errorf("Cancel of the zero Ref succeeded")
	}
	if err := c.Cancel(ctx, Ref{Job: 1}, CancelOptions{Signal: "USR1; rm"}); err == nil {
		t.Errorf("Cancel with a malformed signal succeeded")
	}

	c, _ = fakeSlurm(t, map[string]string{"scancel": `echo "scancel: error: Kill job error on job id 5: Job/step already completing or completed" >&2; exit 1`})
	if err := c.Cancel(ctx, Ref{Job: 5}, CancelOptions{}); err != nil {
		t.Errorf("Cancel of an ending job: %v, want nil", err)
	}
	c, _ = fakeSlurm(t, map[string]string{"scancel": `echo "scancel: error: Kill job error on job id 5: Invalid job id specified" >&2; exit 1`})
	if err := c.Cancel(ctx, Ref{Job: 5}, CancelOptions{}); !errors.Is(err, ErrUnknownJob) {
		t.Errorf("Cancel of an unknown job: %v, want ErrUnknownJob", err)
	}
}

func TestClientWait(t *testing.T) {
	ctx := context.Background()
	// The fake squeue reports the job running twice, then completed.
	c, log := fakeSlurm(t, map[string]string{"squeue": `
n=$(wc -l <"$LOG")
if [ "$n" -lt 3 ]; then echo "7|7|N/A|RUNNING|n1|None"; else echo "7|7|N/A|COMPLETED|n1|None"; fi`})
	tasks, err := c.Wait(ctx, 7, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if want := []Task{{ID: 7, ArrayJobID: 7, State: "COMPLETED", Nodes: "n1", Reason: "None"}}; !reflect.DeepEqual(tasks, want) {
		t.Errorf("Wait = %+v, want %+v", tasks, want)
	}
	if calls, _ := os.ReadFile(log); strings.Count(string(calls), "\n") != 3 {
		t.Errorf("squeue ran %d times, want 3", strings.Count(string(calls), "\n"))
	}

	c, _ = fakeSlurm(t, map[string]string{"squeue": stderrUnknownJob})
	if tasks, err := c.Wait(ctx, 7, time.Millisecond); err != nil || tasks != nil {
		t.Errorf("Wait for a forgotten job = %v, %v; want nil, nil", tasks, err)
	}

	c, _ = fakeSlurm(t, map[string]string{"squeue": `echo "7|7|N/A|RUNNING|n1|None"`})
	ctx2, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := c.Wait(ctx2, 7, 10*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait past its deadline: %v, want context.DeadlineExceeded", err)
	}
}

// TestClientContext: a hung command is ended with the context: the
// process is gone when the call returns.
func TestClientContext(t *testing.T) {
	c, _ := fakeSlurm(t, map[string]string{"sinfo": `echo $$ >"$LOG.pid"; exec sleep 30`})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := c.Ping(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Ping of a hung sinfo: %v, want context.DeadlineExceeded", err)
	}
	b, err := os.ReadFile(filepath.Join(c.Dir, "calls.log.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("kill(%d, 0) = %v after Ping returned, want ESRCH (the command ended)", pid, err)
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
