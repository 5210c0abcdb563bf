package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soma-hpc/soma/internal/testutil"
	"github.com/soma-hpc/soma/study"
)

// TestSeveralObjectives runs a two-objective study end to end: the
// objective prints both scores as its last line (or, for x < 0.3, only the
// first, which must fail naming the second), and the records hold both.
func TestSeveralObjectives(t *testing.T) {
	testutil.NeedPython(t, "json")
	dir := t.TempDir()
	obj := filepath.Join(dir, "obj.py")
	if err := os.WriteFile(obj, []byte(`import sys
x = float(sys.argv[1])
print(x if x < 0.3 else "%r %r" % (x, (1 - x) ** 2))
`), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := filepath.Join(dir, "spec.toml")
	if err := os.WriteFile(spec, []byte(`direction = ["minimize", "minimize"]
metrics = ["x", "y"]
budget = 8
sampler = "sobol"
[param]
x = "float:0:1"
`), 0o644); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "root")
	c := exec.Command(bin, "--root", root, "--study", "s", "--spec", spec, "--no-wait", "--", testutil.Python(), obj, "{x}")
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	s := openStudy(t, root)
	// Attempts with their blobs: a failed attempt's reason is there.
	recs, _, err := s.Attempts(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	done, failed := 0, 0
	for _, r := range recs {
		x := s.Space().Values(r.Point)[0].Text
		switch r.State {
		case study.StateDone:
			done++
			if len(r.Scores) != 2 || r.Scores[1] != (1-r.Scores[0])*(1-r.Scores[0]) {
				t.Errorf("trial %d (x=%s): scores %v", r.Number, x, r.Scores)
			}
		case study.StateFailed:
			failed++
			if !strings.Contains(r.Reason, "no score for y") {
				t.Errorf("trial %d (x=%s) failed with %q, want it to name y", r.Number, x, r.Reason)
			}
		default:
			t.Errorf("trial %d: state %s", r.Number, r.State)
		}
	}
	if done == 0 || failed == 0 || done+failed != 8 {
		t.Errorf("%d done and %d failed, want both, 8 in all", done, failed)
	}
}

// Issue 21: a study with several objectives declared by flags, in both
// forms (commas, and the flag repeated), runs with the default sampler
// (multi-objective tpe) and records both scores under the named metrics.
func TestSeveralObjectivesByFlags(t *testing.T) {
	testutil.NeedPython(t, "json")
	dir := t.TempDir()
	obj := filepath.Join(dir, "obj.py")
	if err := os.WriteFile(obj, []byte(`import sys
x = float(sys.argv[1])
print("%r %r" % (x, (1 - x) ** 2))
`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		flags []string
	}{
		{"commas", []string{"--direction", "minimize,maximize", "--metrics", "x,y"}},
		{"repeated", []string{"--direction", "minimize", "--direction", "maximize", "--metrics", "x", "--metrics", "y"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := filepath.Join(dir, tc.name)
			args := append([]string{"--root", root, "--study", "s", "--param", "x=float:0:1", "--budget", "14", "--no-wait"}, tc.flags...)
			c := exec.Command(bin, append(args, "--", testutil.Python(), obj, "{x}")...)
			if out, err := c.CombinedOutput(); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			s := openStudy(t, root)
			spec := s.Spec()
			if got := fmt.Sprintln(spec.Directions, spec.Metrics, spec.Sampler.Name); got != "[minimize maximize] [x y] tpe\n" {
				t.Errorf("spec: %s, want [minimize maximize] [x y] tpe", got)
			}
			recs, _, err := s.Attempts(context.Background(), false)
			if err != nil {
				t.Fatal(err)
			}
			done := 0
			for _, r := range recs {
				if r.State == study.StateDone && len(r.Scores) == 2 && r.Scores[1] == (1-r.Scores[0])*(1-r.Scores[0]) {
					done++
				}
			}
			if done != 14 {
				t.Errorf("%d of 14 trials done with both scores", done)
			}
		})
	}
}
