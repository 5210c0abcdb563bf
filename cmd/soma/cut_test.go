package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// cutPlanText is three Scale nodes in a chain; %s are the id, the mode
// and each node's at line.
const cutPlanText = `
id = "%s"
mode = "%s"
[env]
system_site_packages = true
[input]
dtype = "float32"
shape = [2, 2]
values = [1, 2, 3, 4]
[targets]
dtype = "float64"
values = [10, 20]
[[nodes]]
id = "s1"
file = "f.py"
class = "Scale"
%s
[nodes.config]
k = 2
[[nodes]]
id = "s2"
file = "f.py"
class = "Scale"
inputs = ["s1"]
%s
[[nodes]]
id = "s3"
file = "f.py"
class = "Scale"
inputs = ["s2"]
%s
`

// TestRunCutAcrossWorkers: a plan whose nodes say at = { tags = [...] }
// runs across two soma-workers (s1 and s3 on the worker tagged a, s2 on
// the one tagged b): fit, then forward with the fit's states given by
// --state, each equal to the same plan run unsplit on one worker. A node
// whose at no worker meets fails the run naming the node.
func TestRunCutAcrossWorkers(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	startWorker(t, root, "--tag", "a", "--worker-id", "wa")
	startWorker(t, root, "--tag", "b", "--worker-id", "wb")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f.py"), []byte(runFilters), 0o644); err != nil {
		t.Fatal(err)
	}
	plan := func(id, mode string, at ...string) string {
		t.Helper()
		text := cutPlanText
		for _, s := range append([]string{id, mode}, at...) {
			text = strings.Replace(text, "%s", s, 1)
		}
		p := filepath.Join(dir, id+".toml")
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	type result struct {
		State   string
		Outputs map[string]struct {
			Values []float64
			Ref    string
		}
		States map[string]struct{ Ref string }
	}
	runJSON := func(args ...string) (result, string) {
		t.Helper()
		code, out, errOut := soma(append([]string{"run", root}, append(args, "--json")...)...)
		var r result
		if code != exitOK {
			t.Fatalf("soma run %q: exit %d\n%s\n%s", args, code, out, errOut)
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("--json output: %v\n%s", err, out)
		}
		return r, errOut
	}
	stateArgs := func(r result) []string {
		var args []string
		for _, id := range []string{"s1", "s2", "s3"} {
			if r.States[id].Ref == "" {
				t.Fatalf("no state for %s in %+v", id, r)
			}
			args = append(args, "--state", id+"="+r.States[id].Ref)
		}
		return args
	}
	atA, atB := `at = { tags = ["a"] }`, `at = { tags = ["b"] }`

	fitWhole, _ := runJSON(plan("fit-whole", "fit", "", "", ""))
	fitCut, errOut := runJSON(plan("fit-cut", "fit", atA, atB, atA))
	// Each run's id is the file's with a random suffix (runID).
	for _, want := range []string{`segment fit-cut-[0-9a-f]{8}\.1: nodes s1, needs tags a`, `segment fit-cut-[0-9a-f]{8}\.2: nodes s2, needs tags b`,
		`plan fit-cut-[0-9a-f]{8}\.1 placed on worker wa `, `plan fit-cut-[0-9a-f]{8}\.2 placed on worker wb `, `plan fit-cut-[0-9a-f]{8}\.3 placed on worker wa `} {
		if !regexp.MustCompile(want).MatchString(errOut) {
			t.Errorf("fit stderr lacks %q:\n%s", want, errOut)
		}
	}
	fwdWhole, _ := runJSON(append([]string{plan("fwd-whole", "forward", "", "", "")}, stateArgs(fitWhole)...)...)
	fwdCut, _ := runJSON(append([]string{plan("fwd-cut", "forward", atA, atB, atA)}, stateArgs(fitCut)...)...)
	for _, tc := range []struct {
		name      string
		got, want result
	}{{"fit", fitCut, fitWhole}, {"forward", fwdCut, fwdWhole}} {
		g, w := tc.got.Outputs["s3"].Values, tc.want.Outputs["s3"].Values
		if tc.got.State != "succeeded" || len(g) != 4 || !slices.Equal(g, w) {
			t.Errorf("%s: cut s3 = %v, unsplit %v", tc.name, g, w)
		}
		if len(tc.got.Outputs) != 1 {
			t.Errorf("%s: outputs %v, want only s3 (a crossing value is not an output)", tc.name, tc.got.Outputs)
		}
	}

	// A forward without states fails in its first segment, and says which.
	code, out, errOut := soma("run", root, plan("fwd-nostate", "forward", atA, atB, atA))
	if code != exitError || !regexp.MustCompile(`plan fwd-nostate-[0-9a-f]{8}\.1: failed`).MatchString(out) || !strings.Contains(out, "RuntimeError: no state") {
		t.Errorf("forward without states: exit %d\n%s\n%s\nwant segment fwd-nostate.1 failed", code, out, errOut)
	}
	// --worker sends everything to one worker, but the crossing values
	// still need the store: without --root the run is refused up front.
	if code, _, errOut := soma("run", "--worker", "http://127.0.0.1:1", plan("no-root", "fit", atA, atB, atA)); code != exitUsage || !strings.Contains(errOut, "give ROOT (or --root)") {
		t.Errorf("cut plan with --worker and no --root: exit %d, %q", code, errOut)
	}

	code, out, errOut = soma("run", root, plan("nobody", "fit", atA, `at = { tags = ["z"] }`, atA))
	if code != exitError || !strings.Contains(errOut, "nodes s2") || !strings.Contains(errOut, "no live worker meets the requirement") || !strings.Contains(errOut, "tags z") {
		t.Errorf("node at tags z: exit %d\n%s\n%s\nwant an error naming node s2 and tags z", code, out, errOut)
	}
}
