package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soma-hpc/soma/internal/studytest"
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
