package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/soma-hpc/soma/internal/rootstore"
	"github.com/soma-hpc/soma/internal/testutil"
	"github.com/soma-hpc/soma/study"
)

// bucketEnv is newEnv with the root on the test S3 server: a fresh
// prefix of its bucket, the server's settings in the commands'
// environment, and the objectives' logs and work in a temp folder.
func bucketEnv(t *testing.T) (env, []string) {
	t.Helper()
	e := newEnv(t)
	srv := testutil.NeedS3(t)
	e.root = srv.FreshRoot(t, "trial")
	local := filepath.Join(t.TempDir(), "local")
	return e, append(srv.Env(), "STEPS=1", "SOMA_TEST_LOCAL="+local)
}

// bucketCmd is e.cmd for a bucket root: --local in a temp folder.
func bucketCmd(e env, extra []string, flags ...string) *exec.Cmd {
	local := ""
	for _, kv := range extra {
		if v, ok := strings.CutPrefix(kv, "SOMA_TEST_LOCAL="); ok {
			local = v
		}
	}
	return e.cmd(extra, append([]string{"--local", local}, flags...)...)
}

// openBucketStudy opens study "s" at a bucket root, with the test
// server's settings.
func openBucketStudy(t *testing.T, root string) *study.Study {
	t.Helper()
	testutil.NeedS3(t).Setenv(t)
	ctx := context.Background()
	s, err := rootstore.Open(ctx, root, rootstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := study.Open(ctx, s, "s", nil, study.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestBucketFourProcessesRunTheBudgetOnce: 200 trials by 4 soma-trial
// processes on a bucket: every trial runs exactly once, and no more than
// the budget.
func TestBucketFourProcessesRunTheBudgetOnce(t *testing.T) {
	e, extra := bucketEnv(t)
	const n = 200
	var cmds []*exec.Cmd
	for range 4 {
		cmds = append(cmds, bucketCmd(e, extra, budget(n)...))
	}
	runAtOnce(t, cmds)
	checkExactlyOnce(t, e.done(t), n)
	snap, err := openBucketStudy(t, e.root).Trials(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if c := snap.Counts(); c[study.StateDone] != n {
		t.Errorf("records: %v, want %d done", c, n)
	}
}

// TestBucketKill9MidTrialIsRetried: a soma-trial killed with SIGKILL in
// the middle of a trial on a bucket leaves a running attempt whose
// heartbeat stops; another process retries it once the lease is over
// (server time: Last-Modified against the Date of a probe write).
func TestBucketKill9MidTrialIsRetried(t *testing.T) {
	e, extra := bucketEnv(t)
	const n = 3
	// A lease of a few seconds: bucket times are whole seconds.
	flags := append(budget(n), "--lease", "3s")
	slow := append(extra, "SLOW_TRIAL=0", "SLOW_SECONDS=30")
	killThenRetry(t, bucketCmd(e, slow, append(flags, "--trial", "0")...), bucketCmd(e, slow, flags...), e.marks)
	checkExactlyOnce(t, e.done(t), n)
	snap, err := openBucketStudy(t, e.root).Trials(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	r, ok := snap.Trial(0)
	if !ok || r.State != study.StateDone || r.Attempt != 1 {
		t.Errorf("trial 0: %+v, want done by attempt 1 (the retry of the killed one)", r)
	}
	pid, _ := os.ReadFile(filepath.Join(e.marks, "0.0.start"))
	if p, _ := strconv.Atoi(string(pid)); p > 0 && syscall.Kill(p, 0) == nil {
		t.Errorf("objective pid %d of the killed soma-trial is still alive", p)
	}
}

// TestBucketFailureHintsNameLocal: with a bucket root the logs are in
// --local, so the hints after failed trials say soma logs ROOT --local
// DIR (they said "soma logs soma-local", which names no root at all).
func TestBucketFailureHintsNameLocal(t *testing.T) {
	e, extra := bucketEnv(t)
	local := filepath.Join(t.TempDir(), "here")
	c := exec.Command(bin, "--root", e.root, "--study", "s", "--local", local, "--param", "x=float:0:1",
		"--budget", "3", "--sampler", "random", "--", "/bin/sh", "-c", "echo broken >&2; exit 1")
	c.Env = append(os.Environ(), extra...)
	out, _ := c.CombinedOutput()
	if code := c.ProcessState.ExitCode(); code != exitAllFailed {
		t.Fatalf("exit %d, want %d\n%s", code, exitAllFailed, out)
	}
	want := "soma logs " + e.root + " --local " + local + " --study s TRIAL --stderr"
	if n := strings.Count(string(out), want); n != 2 {
		t.Errorf("%q appears %d times, want 2 (the warning after 3 failures, and the exit)\n%s", want, n, out)
	}
}
