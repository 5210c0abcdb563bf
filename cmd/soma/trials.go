package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/soma-hpc/soma/internal/status"
	"github.com/soma-hpc/soma/study"
)

const trialsDescription = `Writes every attempt of a study (retries and superseded attempts too),
sorted by trial and attempt, for pandas, R or a spreadsheet. Unreadable
records are left out and counted on stderr.

EXAMPLES:
   soma trials ROOT --study lr > lr.csv
   soma trials ROOT --study lr --format json > lr.json
   soma trials ROOT --study lr --format jsonl | jq 'select(.state == "done") | .score'
   soma trials ROOT --study lr --curves --format json     with every intermediate curve

   python3 -c 'import pandas as pd; df = pd.read_csv("lr.csv"); print(df.nsmallest(5, "score"))'
   pd.read_json("lr.json")       # one row per attempt, the same columns

COLUMNS (csv header, json keys), in order:
`

func newTrialsCommand() *cli.Command {
	return &cli.Command{
		Name:        "trials",
		Usage:       "every attempt of a study, as CSV or JSON (for pandas)",
		UsageText:   "soma trials ROOT --study NAME [--format csv|json|jsonl] [--curves]",
		Description: trialsDescription + indent(status.TrialColumns, "   "),
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "study", Aliases: []string{"s"}, Usage: "the study (required)"},
			&cli.StringFlag{Name: "format", Aliases: []string{"f"}, Value: "csv", Usage: "csv, json (one array) or jsonl (one object per line)"},
			&cli.BoolFlag{Name: "curves", Usage: "add each attempt's reason and intermediate curve (one more file read per attempt)"},
			&cli.DurationFlag{Name: "lease", Usage: "a running trial silent this long reads stale (give the runners' --lease)", DefaultText: study.DefaultGrace.String()},
		},
		Action: func(c *cli.Context) error {
			root, name, err := rootAndStudy(c, 0)
			if err != nil {
				return err
			}
			if d := c.Duration("lease"); d < 0 {
				return usagef("--lease %s: want the runners' --lease (0: soma-trial's default)", d)
			}
			switch f := c.String("format"); f {
			case status.FormatCSV, status.FormatJSON, status.FormatJSONL:
			default:
				return usagef("--format %q: want csv, json or jsonl", f)
			}
			s, st, err := openStudy(c, root, name, c.Duration("lease"))
			if err != nil {
				return err
			}
			defer s.Close()
			problems, err := status.WriteTrials(c.Context, st, c.App.Writer, status.TrialsOptions{Format: c.String("format"), Curves: c.Bool("curves")})
			if err != nil {
				return err
			}
			if len(problems) > 0 {
				fmt.Fprintf(c.App.ErrWriter, "soma: warning: %d unreadable records left out (first: %s); soma status ROOT --study %s --verbose lists them\n",
					len(problems), oneLine(problems[0].Error()), name)
			}
			return nil
		},
	}
}
