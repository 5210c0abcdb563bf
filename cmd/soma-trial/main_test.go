package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/internal/testutil"
	"github.com/soma-hpc/soma/study"
)

var bin string // the soma-trial binary, built once

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "soma-trial-test-")
	if err != nil {
		panic(err)
	}
	bin = filepath.Join(dir, "soma-trial")
	out, err := exec.Command("go", "build", "-race", "-o", bin, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build soma-trial: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type env struct {
	root, marks, obj string
}

func newEnv(t *testing.T) env {
	t.Helper()
	testutil.NeedPython(t, "json")
	d := t.TempDir()
	e := env{root: filepath.Join(d, "root"), marks: filepath.Join(d, "marks")}
	os.Mkdir(e.marks, 0o777)
	e.obj, _ = filepath.Abs("testdata/obj.py")
	return e
}

// cmd builds a soma-trial command over the test study.
func (e env) cmd(extraEnv []string, flags ...string) *exec.Cmd {
	args := append([]string{"--root", e.root, "--study", "s"}, flags...)
	args = append(args, "--", testutil.Python(), e.obj, "{x}", "{y}")
	c := exec.Command(bin, args...)
	c.Env = append(os.Environ(), append([]string{"MARKS=" + e.marks}, extraEnv...)...)
	return c
}

var specFlags = []string{"--param", "x=float:-3:3", "--param", "y=float:-3:3", "--direction", "minimize", "--sampler", "random", "--seed", "11"}

// runAtOnce starts every command, each with its stderr kept, and waits
// for them all; a failure names the process and shows its stderr.
func runAtOnce(t *testing.T, cmds []*exec.Cmd) {
	t.Helper()
	logs := make([]*bytes.Buffer, len(cmds))
	for i, c := range cmds {
		logs[i] = new(bytes.Buffer)
		c.Stderr = logs[i]
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatalf("process %d: %v\n%s", i, err, logs[i])
		}
	}
}

// killThenRetry starts first, kills it with SIGKILL once trial 0's
// objective has started (its mark 0.0.start in marks), then runs second
// to its end; second's stderr is logged if the test fails.
func killThenRetry(t *testing.T, first, second *exec.Cmd, marks string) {
	t.Helper()
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	waitFile(t, filepath.Join(marks, "0.0.start"))
	first.Process.Signal(syscall.SIGKILL)
	first.Wait()
	var log bytes.Buffer
	second.Stderr = &log
	if err := second.Run(); err != nil {
		t.Fatalf("second process: %v\n%s", err, log.String())
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("second process's stderr:\n%s", log.String())
		}
	})
}

// checkExactlyOnce checks that trials 0..n-1 each finished exactly once
// (done: finishes by trial number) and no other trial did.
func checkExactlyOnce(t *testing.T, done map[int]int, n int) {
	t.Helper()
	for i := range n {
		if done[i] != 1 {
			t.Errorf("trial %d finished %d times, want exactly once", i, done[i])
		}
	}
	if len(done) != n {
		t.Errorf("%d trials finished, want %d", len(done), n)
	}
}

func budget(n int) []string {
	return append(append([]string{}, specFlags...), "--budget", strconv.Itoa(n))
}

func (e env) open(t *testing.T) *study.Study {
	t.Helper()
	return openStudy(t, e.root)
}

// openStudy opens study "s" of the store at root.
func openStudy(t *testing.T, root string) *study.Study {
	t.Helper()
	st, err := fsstore.Open(root, fsstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := study.Open(context.Background(), st, "s", nil, study.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// done returns, per trial, how many runs of it finished (".done" marks).
func (e env) done(t *testing.T) map[int]int {
	t.Helper()
	out := map[int]int{}
	ms, _ := filepath.Glob(filepath.Join(e.marks, "*.done"))
	for _, m := range ms {
		n, _ := strconv.Atoi(strings.Split(filepath.Base(m), ".")[0])
		out[n]++
	}
	return out
}

func TestFourProcessesRunTheBudgetOnce(t *testing.T) {
	e := newEnv(t)
	const n = 16
	var cmds []*exec.Cmd
	for range 4 {
		cmds = append(cmds, e.cmd(nil, budget(n)...))
	}
	runAtOnce(t, cmds)
	checkExactlyOnce(t, e.done(t), n)
	// Each process removed its temp folder and clock file as it ended.
	// Bug: each left them in tmp/ until soma gc's grace passed.
	if es, err := os.ReadDir(filepath.Join(e.root, "tmp")); err != nil || len(es) != 0 {
		var names []string
		for _, x := range es {
			names = append(names, x.Name())
		}
		t.Errorf("tmp/ after 4 soma-trial processes ended: %v, %v; want it empty", names, err)
	}
	st := e.open(t)
	snap, err := st.Trials(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if c := snap.Counts(); c[study.StateDone] != n {
		t.Errorf("records: %v, want %d done", c, n)
	}
	best, err := snap.Best()
	if err != nil {
		t.Fatal(err)
	}
	min := math.Inf(1)
	for _, r := range snap.Finished() {
		min = math.Min(min, r.Score)
	}
	if best.Score != min {
		t.Errorf("best score %v, want the minimum %v", best.Score, min)
	}
	// The record's score is what the objective computed for that point.
	ms, _ := filepath.Glob(filepath.Join(e.marks, "*.done"))
	for _, m := range ms {
		b, _ := os.ReadFile(m)
		v, _ := strconv.ParseFloat(string(b), 64)
		num, _ := strconv.Atoi(strings.Split(filepath.Base(m), ".")[0])
		r, _ := snap.Trial(num)
		if r.Score != v {
			t.Errorf("trial %d: record score %v, objective computed %v", num, r.Score, v)
		}
	}
}

func waitFile(t *testing.T, p string) {
	t.Helper()
	for i := 0; i < 600; i++ {
		if _, err := os.Stat(p); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s never appeared", p)
}

func TestKill9MidTrialIsRetriedElsewhere(t *testing.T) {
	e := newEnv(t)
	const n = 4
	flags := append(budget(n), "--lease", "1500ms")
	slow := []string{"SLOW_TRIAL=0", "SLOW_SECONDS=30"}
	killThenRetry(t, e.cmd(slow, append(flags, "--trial", "0")...), e.cmd(slow, flags...), e.marks)
	checkExactlyOnce(t, e.done(t), n)
	st := e.open(t)
	snap, _ := st.Trials(context.Background())
	r, ok := snap.Trial(0)
	if !ok || r.State != study.StateDone || r.Attempt != 1 {
		t.Errorf("trial 0: %+v, want done by attempt 1 (the retry of the killed one)", r)
	}
	// The killed process's objective died with it (Pdeathsig).
	pid, _ := os.ReadFile(filepath.Join(e.marks, "0.0.start"))
	if p, _ := strconv.Atoi(string(pid)); p > 0 && syscall.Kill(p, 0) == nil {
		t.Errorf("objective pid %d of the killed soma-trial is still alive", p)
	}
}

// interrupt starts c, sends sig once the objective has written the start
// mark (a name in e.marks), and wants soma-trial to exit as interrupted.
// It returns soma-trial's stderr so far (the log c writes to).
func interrupt(t *testing.T, e env, c *exec.Cmd, mark string, sig syscall.Signal) *bytes.Buffer {
	t.Helper()
	var log bytes.Buffer
	c.Stderr = &log
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	waitFile(t, filepath.Join(e.marks, mark))
	c.Process.Signal(sig)
	err := c.Wait()
	if code := c.ProcessState.ExitCode(); code != exitInterrupted {
		t.Fatalf("exit = %v (%d), want %d\n%s", err, code, exitInterrupted, log.String())
	}
	return &log
}

func TestSIGUSR1InterruptsAndIsRetried(t *testing.T) {
	e := newEnv(t)
	flags := budget(2)
	a := e.cmd([]string{"SLOW_TRIAL=0", "SLOW_SECONDS=30"}, append(flags, "--trial", "0", "--kill-grace", "1s")...)
	log := interrupt(t, e, a, "0.0.start", syscall.SIGUSR1)
	st := e.open(t)
	snap, _ := st.Trials(context.Background())
	if r, _ := snap.Trial(0); r.State != study.StateInterrupted {
		t.Fatalf("trial 0 state %s, want interrupted", r.State)
	}
	b := e.cmd(nil, flags...)
	b.Stderr = log
	if err := b.Run(); err != nil {
		t.Fatalf("rerun: %v\n%s", err, log.String())
	}
	snap, _ = st.Trials(context.Background())
	if r, _ := snap.Trial(0); r.State != study.StateDone || r.Attempt != 1 {
		t.Errorf("trial 0 after rerun: %s attempt %d, want done at attempt 1", r.State, r.Attempt)
	}
	if d := e.done(t); d[0] != 1 || d[1] != 1 {
		t.Errorf("finished runs %v, want each trial once", d)
	}
}

func TestUsageAndSpecErrors(t *testing.T) {
	e := newEnv(t)
	tests := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"no command", []string{"--root", e.root, "--study", "s", "--param", "x=float:0:1"}, exitUsage, "no objective command"},
		{"spec and param", []string{"--root", e.root, "--study", "s", "--spec", "x.toml", "--param", "x=float:0:1", "--", "true"}, exitUsage, "not both"},
		{"bad param", []string{"--root", e.root, "--study", "s", "--param", "x=float:1:0", "--", "true"}, exitUsage, "x"},
		{"missing spec file", []string{"--root", e.root, "--study", "s", "--spec", "/nonexistent.toml", "--", "true"}, exitUsage, "nonexistent"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			c := exec.Command(bin, tc.args...)
			c.Stderr = &out
			c.Run()
			if got := c.ProcessState.ExitCode(); got != tc.code || !strings.Contains(out.String(), tc.msg) {
				t.Errorf("exit %d, stderr %q; want %d mentioning %q", got, out.String(), tc.code, tc.msg)
			}
		})
	}
	t.Run("changed spec is refused with a diff", func(t *testing.T) {
		if out, err := e.cmd(nil, append(budget(1), "--no-wait")...).CombinedOutput(); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		c := e.cmd(nil, append(specFlags, "--budget", "5")...)
		out, _ := c.CombinedOutput()
		if c.ProcessState.ExitCode() != exitUsage || !strings.Contains(string(out), "budget") {
			t.Errorf("exit %d, %s; want a refusal naming budget", c.ProcessState.ExitCode(), out)
		}
	})
	t.Run("objective that cannot start stops the loop", func(t *testing.T) {
		c := exec.Command(bin, "--root", e.root+"2", "--study", "s", "--param", "x=float:0:1", "--budget", "3", "--sampler", "random", "--", "/nonexistent/train")
		out, _ := c.CombinedOutput()
		if c.ProcessState.ExitCode() != exitError || !strings.Contains(string(out), "cannot start") {
			t.Errorf("exit %d, %s; want 1 and 'cannot start'", c.ProcessState.ExitCode(), out)
		}
	})
}

// At the end of its loop soma-trial packs the ended trials, so that views
// of a large study open a few packs instead of a file per trial.
func TestLoopEndPacksEndedTrials(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	c := exec.Command(bin, "--root", root, "--study", "s", "--param", "x=float:0:1", "--sampler", "random",
		"--budget", "300", "--parallel", "4", "-v", "--", "/bin/echo", "{x}")
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	s, err := fsstore.Open(root, fsstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	packs, err := s.List(context.Background(), "study/s/pack")
	if err != nil || len(packs) == 0 {
		t.Fatalf("packs after the loop: %v, %v\n%s", packs, err, out)
	}
	st, _ := study.Open(context.Background(), s, "s", nil, study.Options{})
	snap, err := st.Trials(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if c := snap.Counts(); c[study.StateDone] != 300 {
		t.Errorf("counts with packs %v, want 300 done", c)
	}
}

// Slurm's pre-timeout USR1 with --requeue-on-usr1: the attempt is recorded
// interrupted and the job asks to be requeued (scontrol requeue), so that
// the task starts again and retries it. scontrol here is a stand-in that
// records its arguments; the real requeue is Slurm's.
func TestRequeueOnUSR1(t *testing.T) {
	e := newEnv(t)
	bin2 := t.TempDir()
	calls := filepath.Join(bin2, "calls")
	os.WriteFile(filepath.Join(bin2, "scontrol"), []byte("#!/bin/sh\necho \"$@\" >> "+calls+"\n"), 0o755)
	slurmEnv := []string{"SLURM_JOB_ID=4243", "SLURM_ARRAY_JOB_ID=4242", "SLURM_ARRAY_TASK_ID=1", "SLURMD_NODENAME=node7",
		"PATH=" + bin2 + ":" + os.Getenv("PATH"), "SLOW_TRIAL=0", "SLOW_SECONDS=30"}
	c := e.cmd(slurmEnv, append(budget(2), "--trial", "0", "--kill-grace", "1s", "--requeue-on-usr1")...)
	var log bytes.Buffer
	c.Stderr = &log
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	waitFile(t, filepath.Join(e.marks, "0.0.start"))
	c.Process.Signal(syscall.SIGUSR1)
	c.Wait()
	if code := c.ProcessState.ExitCode(); code != exitInterrupted {
		t.Fatalf("exit %d, want %d\n%s", code, exitInterrupted, log.String())
	}
	got, _ := os.ReadFile(calls)
	if strings.TrimSpace(string(got)) != "requeue 4243" {
		t.Errorf("scontrol called with %q, want \"requeue 4243\"\n%s", got, log.String())
	}
	// Issue 16: the message named the raw job id 4243, which users and
	// soma status know as 4242_1.
	if !strings.Contains(log.String(), "requeue job 4242_1 (job id 4243)") {
		t.Errorf("requeue message does not name 4242_1:\n%s", log.String())
	}
	snap, _ := e.open(t).Trials(context.Background())
	if r, _ := snap.Trial(0); r.State != study.StateInterrupted || r.Who.Job != "4242_1" || r.Who.Host != "node7" {
		t.Errorf("trial 0: %s by %+v, want interrupted by node7 4242_1", r.State, r.Who)
	}
	// SIGTERM (scancel) is not the pre-timeout warning: no requeue.
	os.Remove(calls)
	c = e.cmd(append(slurmEnv[:len(slurmEnv)-2], "SLOW_TRIAL=1", "SLOW_SECONDS=30"), append(budget(2), "--trial", "1", "--kill-grace", "1s", "--requeue-on-usr1")...)
	c.Start()
	waitFile(t, filepath.Join(e.marks, "1.0.start"))
	c.Process.Signal(syscall.SIGTERM)
	c.Wait()
	if _, err := os.Stat(calls); err == nil {
		t.Errorf("scontrol was called after SIGTERM")
	}
}

// Regression: urfave/cli split slice flags on commas, so a choice knob
// given as --param opt=choice:adam,sgd was read as two params.
func TestParamChoiceKeepsItsCommas(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	c := exec.Command(bin, "--root", root, "--study", "s", "--param", "x=int:0:1", "--param", "opt=choice:adam,sgd,rmsprop",
		"--sampler", "grid", "--budget", "0", "--no-wait", "--", "/bin/echo", "1")
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	s := openStudy(t, root)
	knobs := s.Space().Knobs()
	if len(knobs) != 2 || len(knobs[1].Choices) != 3 {
		t.Errorf("knobs %+v, want x and opt with 3 choices", knobs)
	}
}

// $SOMA_TRIAL_DIR is the trial's folder across attempts: a retry finds
// what the interrupted attempt left there. A folder a trial that ended
// for good left empty is removed (each new trial gets an empty one:
// obj.py asserts attempt 0 does), so work/ does not fill with one empty
// folder per trial.
func TestTrialDirKeptAcrossRetriesRemovedWhenEmpty(t *testing.T) {
	e := newEnv(t)
	flags := budget(8)
	a := e.cmd([]string{"SLOW_TRIAL=0", "SLOW_SECONDS=30", "CHECKPOINT_TRIAL=0"}, append(flags, "--trial", "0", "--kill-grace", "1s")...)
	log := interrupt(t, e, a, "0.0.start", syscall.SIGUSR1)
	b := e.cmd([]string{"KEEP_TRIAL=3", "CHECKPOINT_TRIAL=0"}, flags...)
	b.Stderr = log
	if err := b.Run(); err != nil {
		t.Fatalf("rest of the budget: %v\n%s", err, log.String())
	}
	if d := e.done(t); len(d) != 8 {
		t.Fatalf("finished trials %v, want all 8 (an objective that found no folder, or a used one, fails)\n%s", d, log.String())
	}
	got, err := os.ReadFile(filepath.Join(e.marks, "0.1.resumed"))
	if err != nil || string(got) != "0.0" {
		t.Errorf("attempt 1 of trial 0 resumed from %q (%v), want the checkpoint attempt 0 wrote (0.0)", got, err)
	}
	work := filepath.Join(e.root, "work", "s")
	for _, f := range []string{"0/ckpt", "3/keep"} {
		if _, err := os.Stat(filepath.Join(work, f)); err != nil {
			t.Errorf("work/s/%s: %v, want it kept", f, err)
		}
	}
	ents, _ := os.ReadDir(work)
	var names []string
	for _, en := range ents {
		names = append(names, en.Name())
	}
	// 0 and 3 hold files; the others were left empty and removed.
	if !slices.Equal(names, []string{"0", "3"}) {
		t.Errorf("work/s holds %v, want only 0 and 3 (the folders with something in them)", names)
	}
}

// A signal during a budget run leaves no trial running: the one it
// interrupted is recorded interrupted, and a trial claimed while the last
// one was being recorded (soma-trial overlaps the two) is given back at
// once, not left to go stale.
func TestSignalLeavesNothingRunning(t *testing.T) {
	e := newEnv(t)
	c := e.cmd([]string{"SLOW_TRIAL=3", "SLOW_SECONDS=30"}, append(budget(8), "--kill-grace", "1s")...)
	log := interrupt(t, e, c, "3.0.start", syscall.SIGTERM)
	snap, err := e.open(t).Trials(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range snap.Trials {
		if r.State == study.StateRunning {
			t.Errorf("trial %d left running after soma-trial exited\n%s", r.Number, log.String())
		}
	}
	if r, _ := snap.Trial(3); r.State != study.StateInterrupted {
		t.Errorf("trial 3: %s, want interrupted", r.State)
	}
}

// treeCmd is soma-trial running trial 0 of the test study with
// testdata/tree.sh as the objective.
func (e env) treeCmd(t *testing.T, flags ...string) *exec.Cmd {
	t.Helper()
	script, _ := filepath.Abs("testdata/tree.sh")
	args := append([]string{"--root", e.root, "--study", "s"}, budget(2)...)
	args = append(append(args, flags...), "--trial", "0", "--", "/bin/sh", script)
	c := exec.Command(bin, args...)
	c.Env = append(os.Environ(), "MARKS="+e.marks)
	return c
}

// treeGone waits until no process of trial 0's tree (the pids tree.sh
// wrote) is alive, and fails naming the ones that outlive a generous
// deadline. Only liveness has a deadline; how fast is not asserted.
func treeGone(t *testing.T, e env) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(e.marks, "0.0.pid.*"))
	if len(files) != 6 {
		t.Fatalf("pid files %v, want the objective's and its 5 processes'", files)
	}
	pids := map[string]int{}
	for _, f := range files {
		b, _ := os.ReadFile(f)
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatalf("%s: %q", f, b)
		}
		pids[strings.TrimPrefix(filepath.Ext(f), ".")] = pid
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var left []string
		for name, pid := range pids {
			if alive(pid) {
				left = append(left, fmt.Sprintf("%s (pid %d)", name, pid))
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("processes of the objective's tree outlived soma-trial: %s", strings.Join(left, ", "))
			for _, pid := range pids {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// alive reports whether pid is a live process (a zombie has ended).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

// Issue 13: with soma-trial killed by SIGKILL, Pdeathsig killed only the
// objective itself; its children (the sleep of sh -c 'sleep 6; echo end',
// a setsid escape, a child ignoring SIGTERM) lived on, reparented to
// init, while the retry of the trial ran elsewhere. Likewise on SIGTERM.
func TestObjectiveTreeEndsWithSomaTrial(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			e := newEnv(t)
			c := e.treeCmd(t, "--kill-grace", "1s")
			var log bytes.Buffer
			c.Stderr = &log
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			waitFile(t, filepath.Join(e.marks, "0.0.start"))
			c.Process.Signal(sig)
			c.Wait()
			if sig == syscall.SIGTERM && c.ProcessState.ExitCode() != exitInterrupted {
				t.Errorf("exit %d, want %d\n%s", c.ProcessState.ExitCode(), exitInterrupted, log.String())
			}
			treeGone(t, e)
		})
	}
}
