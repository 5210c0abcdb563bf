package study

import (
	"strings"
	"testing"
)

// Issue 16: SpecFromFlags, used for --param flags, gave Validate's TOML
// hints ("set budget = 100") to a user who typed flags. Each hint names
// the flag, and no TOML assignment is suggested.
func TestSpecFromFlagsHintsNameTheFlag(t *testing.T) {
	params := []string{"x=float:0:1"}
	grid := []string{"x=int:0:3"}
	tests := []struct {
		name                      string
		params                    []string
		direction, sampler, prune string
		budget                    int
		want                      string
	}{
		{"no budget", params, "minimize", "", "", 0, "--budget 0: want the number of trials, at least 1 (e.g. --budget 100)"},
		{"negative budget", params, "minimize", "random", "", -3, "--budget -3"},
		{"negative grid budget", grid, "minimize", "grid", "", -1, "--budget -1"},
		{"no direction with tpe", params, "", "", "", 5, "needs --direction minimize or maximize"},
		{"no direction with a pruner", params, "", "random", "median", 5, "--pruner median compares scores, so it needs --direction"},
		{"grid too small", grid, "minimize", "grid", "", 9, "--budget 9: the grid has only 4 cells (give --budget 4"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := SpecFromFlags(tc.params, tc.direction, tc.sampler, tc.prune, tc.budget, 0)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), " = ") {
				t.Errorf("got %v, want an error with %q and no TOML hint", err, tc.want)
			}
		})
	}
	s, err := SpecFromFlags(grid, "minimize", "grid", "", 0, 0)
	if err != nil || s.Budget != 4 {
		t.Errorf("grid without --budget: %v, budget %v; want the grid's 4", err, s)
	}
}

// Issue 21: several objectives could be declared in a TOML spec but not
// with flags. --direction takes one direction per objective joined by
// commas and --metrics their names; the spec is the TOML one's.
func TestSpecFlagsSeveralObjectives(t *testing.T) {
	toml, err := ParseSpec([]byte(`direction = ["minimize", "maximize"]
metrics = ["error", "throughput"]
budget = 6
sampler = "nsga2"
seed = 3
[param]
x = "float:0:1"
`))
	if err != nil {
		t.Fatal(err)
	}
	flags, err := SpecFlags{Params: []string{"x=float:0:1"}, Direction: "minimize, maximize", Metrics: "error,throughput", Sampler: "nsga2", Budget: 6, Seed: 3}.Spec()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(flags.Canonical()), string(toml.Canonical()); got != want {
		t.Errorf("flags give\n%s\nwant the TOML spec's\n%s", got, want)
	}
	// The default sampler, tpe, is multi-objective TPE here.
	s, err := SpecFlags{Params: []string{"x=float:0:1"}, Direction: "minimize,minimize", Metrics: "a,b", Budget: 6}.Spec()
	if err != nil {
		t.Fatal(err)
	}
	if sm, err := s.NewSampler(); err != nil || !sm.(*TPESampler).multi() {
		t.Errorf("default sampler with two directions: %#v, %v; want multi-objective tpe", sm, err)
	}
	// One direction with one name is a single named objective.
	one, err := SpecFlags{Params: []string{"x=float:0:1"}, Direction: "maximize", Metrics: "accuracy", Budget: 6}.Spec()
	if err != nil || one.Direction != Maximize || one.Metric != "accuracy" || one.Directions != nil {
		t.Errorf("one direction, one metric: %+v, %v", one, err)
	}
}

func TestSpecFlagsSeveralObjectivesRefuses(t *testing.T) {
	x := []string{"x=float:0:1"}
	tests := []struct {
		name                              string
		direction, metrics, sampler, prun string
		want                              string
	}{
		{"no metrics", "minimize,maximize", "", "", "", "--direction minimize,maximize: 2 objectives need names: add --metrics NAME,NAME"},
		{"fewer metrics", "minimize,maximize", "error", "", "", "--direction has 2 entries (minimize,maximize) but --metrics has 1 (error): give one direction per metric"},
		{"more metrics", "minimize", "error,latency", "", "", "--direction has 1 entries (minimize) but --metrics has 2 (error,latency)"},
		{"metrics alone", "", "error,latency", "random", "", "--metrics error,latency needs a direction per metric (--direction minimize,minimize)"},
		{"bad entry", "minimize,maxim", "a,b", "", "", `--direction "maxim" (entry 2): want minimize or maximize`},
		{"empty entry", "minimize,", "a,b", "", "", `--direction "minimize,": entry 2 is empty (write e.g. --direction minimize,maximize)`},
		{"empty metric", "minimize,minimize", "a,,", "", "", `--metrics "a,,": entry 2 is empty`},
		{"unknown", "unknown", "", "random", "", `--direction "unknown": want minimize or maximize`},
		{"nsga2 with one", "minimize", "", "nsga2", "", "--sampler nsga2 is for several objectives (--direction minimize,maximize --metrics error,latency_ms)"},
		{"pruner without metric", "minimize,minimize", "a,b", "", "median", "--pruner median with several objectives: name the metric it judges, one of --metrics a,b (e.g. --pruner median:metric=a)"},
		{"pruner unknown metric", "minimize,minimize", "a,b", "", "median:metric=c", "(e.g. --pruner median:metric=a)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := SpecFlags{Params: x, Direction: tc.direction, Metrics: tc.metrics, Sampler: tc.sampler, Pruner: tc.prun, Budget: 5}.Spec()
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), " = ") {
				t.Errorf("got %v, want an error with %q and no TOML hint", err, tc.want)
			}
		})
	}
	if _, err := (SpecFlags{Params: x, Direction: "minimize,minimize", Metrics: "a,b", Pruner: "median:metric=b", Budget: 5}).Spec(); err != nil {
		t.Errorf("pruner judging metric b: %v", err)
	}
}
