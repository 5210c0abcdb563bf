package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// Issue 16: "soma-trial: soma-trial: interrupted by terminated": the
// loop's error carried the prefix the command adds.
func TestInterruptedSaysSomaTrialOnce(t *testing.T) {
	e := newEnv(t)
	c := e.cmd([]string{"SLOW_TRIAL=0", "SLOW_SECONDS=30"}, append(budget(1), "--trial", "0", "--kill-grace", "1s")...)
	log := interrupt(t, e, c, "0.0.start", syscall.SIGTERM).String()
	if strings.Contains(log, "soma-trial: soma-trial:") || !strings.Contains(log, "soma-trial: interrupted by terminated") {
		t.Errorf("stderr:\n%s\nwant one prefix: soma-trial: interrupted by terminated", log)
	}
}

// Issue 16: a failed trial's line said only "failed exit status 1", and
// an objective that fails every trial (a python3 without numpy) said so
// only in soma logs --stderr, one quiet line per trial. The line ends with
// the last line of stderr, and when the first trials all fail the same
// way soma-trial says so once, loudly.
func TestFailuresSayWhy(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	c := exec.Command(bin, "--root", root, "--study", "s", "--param", "x=float:0:1", "--budget", "5", "--sampler", "random",
		"--", "/bin/sh", "-c", "echo starting >&2; echo 'ModuleNotFoundError: No module named numpy' >&2; exit 1")
	out, _ := c.CombinedOutput()
	log := string(out)
	if c.ProcessState.ExitCode() != exitAllFailed {
		t.Errorf("exit %d, want %d", c.ProcessState.ExitCode(), exitAllFailed)
	}
	if n := strings.Count(log, "failed exit status 1: ModuleNotFoundError: No module named numpy ("); n != 5 {
		t.Errorf("%d trial lines end with stderr's last line, want 5:\n%s", n, log)
	}
	if n := strings.Count(log, "WARNING: the first 3 trials all failed the same way: ModuleNotFoundError: No module named numpy"); n != 1 {
		t.Errorf("the loud warning came %d times, want once:\n%s", n, log)
	}
	// Issue 16 too: failed trials (max_retries 0: final) kept their empty
	// work folders, though the README said only folders with something in
	// them stay.
	if left, _ := os.ReadDir(filepath.Join(root, "work", "s")); len(left) != 0 {
		t.Errorf("work/s holds %d folders after 5 final failures that wrote nothing, want none", len(left))
	}

	// Failures that differ, or a success among the first, are not "the same way".
	root = filepath.Join(t.TempDir(), "root")
	c = exec.Command(bin, "--root", root, "--study", "s", "--param", "x=float:0:1", "--budget", "4", "--sampler", "random",
		"--", "/bin/sh", "-c", `echo "error in trial $SOMA_TRIAL" >&2; exit 1`)
	out, _ = c.CombinedOutput()
	if strings.Contains(string(out), "WARNING") {
		t.Errorf("warned about different failures:\n%s", out)
	}
}
