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
