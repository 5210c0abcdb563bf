package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/internal/studytest"
	"github.com/soma-hpc/soma/internal/trialrun"
	"github.com/soma-hpc/soma/study"
)

// Issue 16: `soma trials --help` said "(default 5m0s) (default: 0s)",
// `soma slurm submit --help` "--grace ... (default 2m) (default: 0s)":
// the usage text's default and urfave's, which was the zero value. Every
// flag of every command shows one default.
func TestHelpShowsOneDefaultPerFlag(t *testing.T) {
	app := newApp(nil, nil)
	var paths [][]string
	for _, c := range app.Commands {
		paths = append(paths, []string{c.Name})
		for _, s := range c.Subcommands {
			paths = append(paths, []string{c.Name, s.Name})
		}
	}
	for _, p := range paths {
		t.Run(strings.Join(p, " "), func(t *testing.T) {
			code, out, errOut := soma(append(p, "--help")...)
			if code != exitOK {
				t.Fatalf("exit %d\n%s", code, errOut)
			}
			for _, line := range strings.Split(out, "\n") {
				if strings.Count(line, "(default") > 1 {
					t.Errorf("two defaults: %s", strings.TrimSpace(line))
				}
			}
		})
	}
}

// Issue 16: `soma slurm submit ... -- cmd --dry-run` submitted for real
// and passed --dry-run to the objective without a word. A flag of submit
// among the objective's arguments is warned about.
func TestSubmitWarnsOfItsOwnFlagsAfterDashDash(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	spec := filepath.Join(studytest.RepoRoot(), "examples", "quadratic", "spec.toml")
	fakeTrial := filepath.Join(dir, "soma-trial")
	os.WriteFile(fakeTrial, []byte("#!/bin/sh\n"), 0o755)
	if code, _, errOut := soma("init", root, "--study", "q", "--spec", spec); code != exitOK {
		t.Fatal(errOut)
	}
	code, _, errOut := soma("slurm", "submit", root, "--study", "q", "--soma-trial", fakeTrial, "--dry-run", "--", "python3", "obj.py", "--x", "{x}", "--array=0-3", "--dry-run")
	if code != exitOK || !strings.Contains(errOut, "warning: the objective's arguments hold --array=0-3, --dry-run, a flag of soma slurm submit") {
		t.Errorf("exit %d, stderr %q; want a warning naming --array=0-3 and --dry-run", code, errOut)
	}
	if _, _, errOut := soma("slurm", "submit", root, "--study", "q", "--soma-trial", fakeTrial, "--dry-run", "--", "python3", "obj.py", "--x", "{x}"); strings.Contains(errOut, "warning") {
		t.Errorf("a warning without a cause: %q", errOut)
	}
}

// Issue 16: with several studies, soma status counted "(N foreign)" but
// never named them, even with --verbose. --verbose lists every problem;
// without it, a line says how to see them.
func TestStatusOfSeveralStudiesNamesItsProblems(t *testing.T) {
	f := fix(t)
	_, full, _ := soma("status", f.Root, "--study", studytest.Main, "--verbose")
	var want []string
	for _, line := range strings.Split(full, "\n") {
		if strings.HasPrefix(line, "  study: ") {
			want = append(want, "problem  "+strings.TrimSpace(line))
		}
	}
	if len(want) == 0 {
		t.Fatalf("the fixture's full view names no problem:\n%s", full)
	}
	code, out, errOut := soma("status", f.Root, "--verbose")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("soma status --verbose lacks %q:\n%s", w, out)
		}
	}
	if _, out, _ := soma("status", f.Root); !strings.Contains(out, "--verbose lists them") {
		t.Errorf("soma status does not say how to see its problems:\n%s", out)
	}
}

// Issue 16: soma best said nothing when records could not be read, though
// the true best may be among them; soma trials warned. It warns too.
func TestBestWarnsOfUnreadableRecords(t *testing.T) {
	f := fix(t)
	code, out, errOut := soma("best", f.Root, "--study", studytest.Main)
	if code != exitOK || out == "" {
		t.Fatalf("exit %d, %q %q", code, out, errOut)
	}
	if !strings.Contains(errOut, "unreadable records left out, and the best may be among them") {
		t.Errorf("stderr %q; want a warning about the fixture's corrupt record", errOut)
	}
}

// runStudy makes study s at a new root and runs its budget with argv.
func runStudy(t *testing.T, budget int, argv ...string) string {
	t.Helper()
	return runStudyAs(t, budget, study.Me(""), argv...)
}

// runStudyAs is runStudy with the runner's Who (its Slurm job).
func runStudyAs(t *testing.T, budget int, who study.Who, argv ...string) string {
	t.Helper()
	ctx := context.Background()
	root := filepath.Join(t.TempDir(), "root")
	s, err := fsstore.Open(root, fsstore.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	spec, err := study.SpecFromFlags([]string{"x=float:0:1"}, "minimize", "random", "none", budget, 1)
	if err != nil {
		t.Fatal(err)
	}
	st, err := study.Open(ctx, s, "s", spec, study.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := trialrun.Run(ctx, st, root, trialrun.Options{Argv: argv, Trial: -1, Who: who, Guard: "/proc/self/exe"}, nil); err != nil {
		t.Fatal(err)
	}
	return root
}

// Issue 16: soma logs printed nothing for an empty stdout, but "(trial 3
// attempt 0 wrote nothing to stderr)" for an empty stderr. Both say so.
func TestLogsSaysWhenAStreamIsEmpty(t *testing.T) {
	root := runStudy(t, 1, "/bin/sh", "-c", `echo "final 1" >&3`)
	for _, tc := range []struct {
		flags []string
		want  string
	}{
		{nil, "(trial 0 attempt 0 wrote nothing to stdout)"},
		{[]string{"--stderr"}, "(trial 0 attempt 0 wrote nothing to stderr)"},
	} {
		code, out, errOut := soma(append([]string{"logs", root, "--study", "s", "0", "--attempt", "0"}, tc.flags...)...)
		if code != exitOK || out != "" || !strings.Contains(errOut, tc.want) {
			t.Errorf("soma logs %q: exit %d, stdout %q, stderr %q; want 0, nothing, %q", tc.flags, code, out, errOut, tc.want)
		}
	}
}

// Issue 16: for a job script given to sbatch by hand, soma slurm jobs
// said "no Slurm jobs recorded" and then printed an empty table's header,
// though the trial records named the job. It lists the job.
func TestSlurmJobsListsJobsTheRecordsName(t *testing.T) {
	root := runStudyAs(t, 2, study.Me("4321_5"), "/bin/echo", "1")
	code, out, errOut := soma("slurm", "jobs", root, "--study", "s", "--offline")
	if code != exitOK || !strings.Contains(out, "4321") || !strings.Contains(out, "not from soma slurm submit: named by 2 trial records") || strings.Contains(out, "no Slurm jobs") {
		t.Errorf("exit %d, stdout:\n%s\nstderr %q; want job 4321 named by 2 trial records", code, out, errOut)
	}
	root = runStudy(t, 1, "/bin/echo", "1")
	if _, out, _ := soma("slurm", "jobs", root, "--study", "s", "--offline"); !strings.Contains(out, "no Slurm jobs recorded") || strings.Contains(out, "JOB") {
		t.Errorf("no jobs: %q; want the sentence and no table header", out)
	}
}

// Issue 16: a negative --lease was taken by the views (every running
// trial then read stale).
func TestViewsRefuseANegativeLease(t *testing.T) {
	for _, cmd := range [][]string{{"status", "ROOT"}, {"trials", "ROOT", "--study", "s"}} {
		code, _, errOut := soma(append(cmd, "--lease", "-1s")...)
		if code != exitUsage || !strings.Contains(errOut, "--lease -1s: want the runners' --lease") {
			t.Errorf("soma %s --lease -1s: exit %d, %q", cmd[0], code, errOut)
		}
	}
}
