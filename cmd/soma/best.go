package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/soma-hpc/soma/internal/status"
)

const bestDescription = `Prints the best done trial of a study: the lowest (minimize) or highest
(maximize) final score; pruned trials never count, their scores were
measured early. Fails (exit 1) while no trial is done. A study with
several objectives has no single best: soma best lists its Pareto front,
the done trials no other done trial beats in one metric without losing in
another: as text, or as JSON (--format json) with study, directions,
metrics, done and front[], each with trial, attempt, scores, point,
point_text and time, instead of the shape below.

EXAMPLES:
   soma best ROOT --study lr                    for people
   soma best ROOT --study lr --format json | jq .point.lr
   soma best ROOT --study lr --format args      --lr 0.0031 --opt adam

   # retrain with the best point (args are quoted for the shell: use eval)
   eval "python3 train.py --epochs 100 $(soma best ROOT --study lr --format args)"

JSON (--format json), one field per line: path, type, meaning:
`

func newBestCommand() *cli.Command {
	return &cli.Command{
		Name:        "best",
		Usage:       "the best finished point of a study, as text, JSON or --name value arguments",
		UsageText:   "soma best ROOT --study NAME [--format text|json|args]",
		Description: bestDescription + indent(status.BestShape, "   "),
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "study", Aliases: []string{"s"}, Usage: "the study (required)"},
			&cli.StringFlag{Name: "format", Aliases: []string{"f"}, Value: "text", Usage: "text, json, or args (shell-ready --name value words)"},
		},
		Action: func(c *cli.Context) error {
			root, name, err := rootAndStudy(c, 0)
			if err != nil {
				return err
			}
			format := c.String("format")
			switch format {
			case status.BestText, status.BestJSON, status.BestArgs:
			default:
				return usagef("--format %q: want text, json or args", format)
			}
			s, st, err := openStudy(c, root, name, 0)
			if err != nil {
				return err
			}
			defer s.Close()
			if st.Spec().Objectives() > 1 {
				f, err := status.FindFront(c.Context, st)
				if err != nil {
					return err
				}
				return status.WriteFront(c.App.Writer, f, format)
			}
			b, err := status.FindBest(c.Context, st)
			if err != nil {
				return err
			}
			if n := len(b.Unreadable); n > 0 {
				fmt.Fprintf(c.App.ErrWriter, "soma: warning: %d unreadable records left out, and the best may be among them (first: %s); soma status ROOT --study %s --verbose lists them\n",
					n, oneLine(b.Unreadable[0].Error()), name)
			}
			return status.WriteBest(c.App.Writer, b, format)
		},
	}
}
