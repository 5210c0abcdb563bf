package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/soma-hpc/soma/internal/admin"
	"github.com/soma-hpc/soma/study"
)

const initDescription = `Creates a study from a TOML spec without running a trial (and the store
folder, if it does not exist yet). Runners then join it with no spec:
soma-trial --root ROOT --study NAME -- COMMAND. Running it again with the
same spec changes nothing; a different spec is refused, with the
difference shown (use a new study name).

SPEC (TOML):
   direction = "minimize"          # or "maximize"
   metric = "val_loss"             # optional: the score's name
   budget = 100                    # trials
   seed = 7
   max_retries = 1                 # retries of a failed attempt
   [sampler]                       # tpe (default), random, sobol, grid
   name = "tpe"
   [pruner]                        # none (default), median, percentile, asha
   name = "median"
   [param]
   lr = { type = "float", low = 1e-5, high = 1e-1, log = true }
   layers = { type = "int", low = 1, high = 8 }
   opt = { type = "choice", choices = ["adam", "sgd"] }

EXAMPLES:
   soma init /scratch/$USER/soma --study lr --spec lr.toml
   soma init ./soma --study quad --spec examples/quadratic/spec.toml`

func newInitCommand() *cli.Command {
	return &cli.Command{
		Name:        "init",
		Usage:       "create a study from a spec, without running a trial",
		UsageText:   "soma init ROOT --study NAME --spec FILE",
		Description: initDescription,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "study", Aliases: []string{"s"}, Usage: "the study's name (letters, digits, -_.; required)"},
			&cli.StringFlag{Name: "spec", Usage: "the TOML spec `FILE` (required)"},
		},
		Action: func(c *cli.Context) error {
			root, err := rootArg(c, 0)
			if err != nil {
				return err
			}
			name, err := needStudy(c)
			if err != nil {
				return err
			}
			if err := study.ValidateName(name); err != nil {
				return usageError{err}
			}
			file := c.String("spec")
			if file == "" {
				return usagef("--spec is required: a TOML file with the space, direction, sampler, pruner and budget")
			}
			b, err := os.ReadFile(file)
			if err != nil {
				return usageError{err}
			}
			spec, err := study.ParseSpec(b)
			if err != nil {
				return usagef("%s: %w", file, err)
			}
			res, err := admin.Init(c.Context, root, name, spec)
			if err != nil {
				return err
			}
			verb := "created"
			if !res.Created {
				verb = "exists, same spec:"
			}
			fmt.Fprintf(c.App.Writer, "study %s %s %d params, %d trials, in %s\nrun trials with: soma-trial --root %s --study %s -- COMMAND {param}...\n",
				res.Study, verb, res.Params, res.Limit, res.Root, root, res.Study)
			return nil
		},
	}
}
