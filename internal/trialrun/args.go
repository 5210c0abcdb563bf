package trialrun

import (
	"github.com/soma-hpc/soma/internal/objective"
	"github.com/soma-hpc/soma/study"
)

// vars are the placeholders every trial substitutes besides its params.
var vars = []string{"study", "trial", "attempt", "trial_dir"}

// CheckArgs checks the objective command's {name} placeholders against the
// study's space before any trial runs: each must name a param or one of
// {study} {trial} {attempt} {trial_dir}, and a conditional param, which
// some points lack, must be written {name?} (empty where it is absent).
func CheckArgs(argv []string, space *study.Space) error {
	var names []string
	cond := map[string]string{}
	for _, k := range space.Knobs() {
		names = append(names, k.Name)
		if k.When != "" {
			cond[k.Name] = k.When
		}
	}
	return objective.CheckArgs(argv, names, cond, vars)
}
