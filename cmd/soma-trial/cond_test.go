package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/soma-hpc/soma/internal/testutil"
	"github.com/soma-hpc/soma/study"
)

// condObjective checks, inside a real trial, that the conditional knob m
// reaches the objective exactly when opt is sgd: in SOMA_PARAMS, as
// SOMA_PARAM_M and as {m?} (its first argument); elsewhere it is in none.
const condObjective = `import json, os, sys
p = json.loads(os.environ["SOMA_PARAMS"])
sgd = p["opt"] == "sgd"
assert ("m" in p) == sgd, p
assert ("SOMA_PARAM_M" in os.environ) == sgd, os.environ
assert sys.argv[1] == (os.environ["SOMA_PARAM_M"] if sgd else ""), sys.argv
assert sys.argv[2] == p["opt"], sys.argv
print(p.get("m", 1.0))
`

func TestConditionalParamReachesTheObjective(t *testing.T) {
	testutil.NeedPython(t, "json")
	dir := t.TempDir()
	obj := filepath.Join(dir, "obj.py")
	if err := os.WriteFile(obj, []byte(condObjective), 0o644); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "root")
	c := exec.Command(bin, "--root", root, "--study", "s", "--param", "opt=choice:adam,sgd",
		"--param", "m=float:0:0.9:step=0.3 if opt == sgd", "--direction", "minimize",
		"--sampler", "grid", "--budget", "0", "--no-wait", "--", testutil.Python(), obj, "{m?}", "{opt}")
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	s := openStudy(t, root)
	recs, err := s.Finished(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var points []string
	for _, r := range recs {
		if r.State != study.StateDone {
			t.Errorf("trial %d: %s (%s)", r.Number, r.State, r.PointText)
		}
		points = append(points, r.PointText)
	}
	slices.Sort(points)
	// The grid has 5 valid cells, not 2×4: adam has no m.
	want := []string{"opt=adam", "opt=sgd,m=0", "opt=sgd,m=0.3", "opt=sgd,m=0.6", "opt=sgd,m=0.9"}
	if !slices.Equal(points, want) {
		t.Errorf("points %q, want %q", points, want)
	}
}

func TestConditionalParamNeedsOptionalPlaceholder(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	c := exec.Command(bin, "--root", root, "--study", "s", "--param", "opt=choice:adam,sgd",
		"--param", "m=float:0:1 if opt == sgd", "--direction", "minimize", "--budget", "3", "--",
		"/bin/echo", "--m={m}")
	out, err := c.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitUsage {
		t.Fatalf("soma-trial with {m}: %v, want exit %d\n%s", err, exitUsage, out)
	}
	if want := "param m is absent where its condition (opt == 'sgd') is false; write {m?}"; !strings.Contains(string(out), want) {
		t.Errorf("output %q lacks %q", out, want)
	}
}
