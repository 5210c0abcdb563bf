package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soma-hpc/soma/study"
)

// echoTrial runs soma-trial over study s at root with /bin/echo as the
// objective (its score: 1), and returns its exit status and output.
func echoTrial(t *testing.T, root string, flags ...string) (int, string) {
	t.Helper()
	args := append([]string{"--root", root, "--study", "s"}, flags...)
	c := exec.Command(bin, append(args, "--", "/bin/echo", "1")...)
	out, err := c.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, string(out)
}

// Issue 13, item 1. Bug: with budget 45, `mkdir names/study/s1/trial/46 &&
// echo hello > names/study/s1/trial/46/0`, then soma-trial --no-wait ran
// "trial 46 (attempt 1)". Now only trial numbers of the budget run; every
// foreign name under trial/ is named in a warning, once, and never run.
func TestForeignTrialNamesAreNeverRun(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	if code, out := echoTrial(t, root, "--param", "x=float:0:1", "--sampler", "random", "--budget", "3"); code != 0 {
		t.Fatalf("first run: exit %d\n%s", code, out)
	}
	trials := filepath.Join(root, "names", "study", "s", "trial")
	for _, p := range []string{"3/0", "46/0", "007/0", "-3/0", "junk/0", "1/x"} {
		p = filepath.Join(trials, filepath.FromSlash(p))
		os.MkdirAll(filepath.Dir(p), 0o777)
		if err := os.WriteFile(p, []byte("hello\n"), 0o666); err != nil {
			t.Fatal(err)
		}
	}
	code, out := echoTrial(t, root, "--no-wait")
	if code != 0 || strings.Contains(out, "\ntrial ") || strings.HasPrefix(out, "trial ") {
		t.Errorf("soma-trial over foreign names: exit %d, want 0 and no trial run:\n%s", code, out)
	}
	for _, name := range []string{"trial/3: trial 3 is outside the budget", "trial/46: trial 46 is outside the budget", "trial/007:", "trial/-3:", "trial/junk:"} {
		if n := strings.Count(out, "warning: study: study/s/"+name); n != 1 {
			t.Errorf("soma-trial warned %d times of %q, want once:\n%s", n, name, out)
		}
	}
	if !strings.Contains(out, "stopped: the study's budget is reached") {
		t.Errorf("soma-trial did not stop at the budget:\n%s", out)
	}
}

// Issue 13, item 7. Bug: a sealed record damaged in place (it keeps its
// sealed mode) was never retried: soma-trial said only "the budget is
// reached" while soma status showed "1 corrupt". Now soma-trial says what
// it found (the record's path and why it cannot be read) and runs the
// trial again.
func TestDamagedSealedRecordIsRetried(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	if code, out := echoTrial(t, root, "--param", "x=float:0:1", "--sampler", "random", "--budget", "4"); code != 0 {
		t.Fatalf("first run: exit %d\n%s", code, out)
	}
	p := filepath.Join(root, "names", "study", "s", "trial", "2", "0")
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0) // in place: the mode stays
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("garbage\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	code, out := echoTrial(t, root, "--no-wait")
	if code != 0 || !strings.Contains(out, "trial 2 (attempt 1) ") || !strings.Contains(out, "stopped: the study's budget is reached") {
		t.Errorf("soma-trial after the damage: exit %d, want trial 2 run again, then the budget reached:\n%s", code, out)
	}
	if want := "warning: fsstore: corrupt study/s/trial/2/0 (" + p + "): "; strings.Count(out, want) != 1 {
		t.Errorf("soma-trial did not warn once of %q:\n%s", want, out)
	}
	st := openStudy(t, root)
	snap, err := st.Trials(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if c := snap.Counts(); c[study.StateDone] != 4 || len(snap.Corrupt) != 0 {
		t.Errorf("after the retry: %v, %d corrupt; want 4 done, none corrupt (the latest attempts)", c, len(snap.Corrupt))
	}
}

// Bug: a lone soma-trial --no-wait that ran a whole budget said it
// stopped with "nothing claimable now": its claim of the next trial was
// made while its own last trial was still being recorded, which it then
// took for a trial running elsewhere.
func TestNoWaitRunnerThatEndsTheBudgetSaysSo(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	code, out := echoTrial(t, root, "--param", "x=float:0:1", "--sampler", "random", "--budget", "6", "--no-wait")
	if code != 0 || !strings.Contains(out, "ran 6 trials (6 done); stopped: the study's budget is reached") {
		t.Errorf("soma-trial --no-wait over a whole budget: exit %d\n%s", code, out)
	}
}
