package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/internal/testutil"
)

func TestParamValue(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want any
	}{
		// An integer must stay an int: torch.nn.Linear(64, 16.0) fails.
		{"16", int64(16)},
		{"-3", int64(-3)},
		{"0.01", 0.01},
		{"1e-3", 0.001},
		{"true", true},
		{"false", false},
		{"True", "True"}, // Python's spelling is a string, as in TOML
		{"adam", "adam"},
		{"", ""},
	} {
		if got := paramValue(tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("paramValue(%q) = %#v, want %#v", tc.in, got, tc.want)
		}
	}
}

// scoreFilters: Mean's forward returns one number; Twice returns an
// array of several.
const scoreFilters = `
import numpy as np
class Mean:
    def __init__(self, k=1, name="x"):
        self.k = k
        print("k is", type(k).__name__, k, "name is", name)
    def forward(self, X):
        return float(np.asarray(X).mean()) * self.k
class Twice:
    def forward(self, X):
        return np.asarray(X) * 2
`

const scorePlanText = `
id = "score"
[env]
system_site_packages = true
[input]
dtype = "float32"
shape = [2, 2]
values = [1, 2, 3, 4]
[[nodes]]
id = "twice"
file = "f.py"
class = "Twice"
[[nodes]]
id = "mean"
file = "f.py"
class = "Mean"
inputs = ["twice"]
[nodes.config]
k = 1
`

// TestRunParamScore: soma run --param sets a node's config (an integer
// arrives in Python as an int) and --score prints one output as stdout's
// last line, which is how soma-trial reads an objective's score (issue
// 15: soma run as the objective of a study). Bad --param and --score
// are refused with the fix.
func TestRunParamScore(t *testing.T) {
	testutil.NeedPython(t, "numpy")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f.py"), []byte(scoreFilters), 0o644); err != nil {
		t.Fatal(err)
	}
	plan := filepath.Join(dir, "score.toml")
	if err := os.WriteFile(plan, []byte(scorePlanText), 0o644); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(t.TempDir(), "root")
	if _, err := fsstore.Open(root, fsstore.Options{Create: true}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", t.TempDir())
	py := testutil.Python()

	code, out, errOut := soma("run", root, plan, "--python", py, "--param", "mean.k=3", "--param", "mean.name=adam", "--score", "mean")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != exitOK || lines[len(lines)-1] != "15" { // mean of 2,4,6,8 times 3
		t.Fatalf("exit %d, last line %q, want 15\n%s\n%s", code, lines[len(lines)-1], out, errOut)
	}
	if !strings.Contains(out, "k is int 3 name is adam") {
		t.Errorf("--param mean.k=3: the filter did not get the int 3:\n%s", out)
	}
	// --id renames the run: a study's trials run one plan file at once,
	// and a worker refuses a second plan with a running plan's id.
	code, out, errOut = soma("run", root, plan, "--python", py, "--id", "score-7.0")
	if code != exitOK || !strings.Contains(out, "plan score-7.0: succeeded") {
		t.Errorf("--id score-7.0: exit %d\n%s\n%s", code, out, errOut)
	}

	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"bad id", []string{"--id", "a/b"}, exitError, `id "a/b": want 1-128 letters`},
		{"no such node", []string{"--param", "clf.k=3"}, exitUsage, `plan score has no node "clf" (nodes: twice,mean)`},
		{"no key", []string{"--param", "mean=3"}, exitUsage, "want NODE.KEY=VALUE"},
		{"no value", []string{"--param", "mean.k"}, exitUsage, "want NODE.KEY=VALUE"},
		{"score and json", []string{"--score", "mean", "--json"}, exitUsage, "--score and --json: give one"},
		{"score of a non-output", []string{"--score", "twice"}, exitUsage, "--score twice: not an output of plan score"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := soma(append([]string{"run", root, plan, "--python", py}, tc.args...)...)
			if code != tc.code || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q\n%s", code, errOut, tc.code, tc.want, out)
			}
		})
	}

	// An output that is not one number: the plan ran, the score is refused.
	twice := filepath.Join(dir, "twice.toml")
	if err := os.WriteFile(twice, []byte(strings.Replace(scorePlanText, `id = "score"`, "id = \"twice\"\noutputs = [\"twice\"]", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = soma("run", root, twice, "--python", py, "--score", "twice")
	if code != exitError || !strings.Contains(errOut, "--score twice: output is float32[2 2]") || !strings.Contains(errOut, "want one number") {
		t.Errorf("score of an array: exit %d\n%s\n%s", code, out, errOut)
	}
}
