package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/soma-hpc/soma/internal/report"
)

const reportDescription = `Writes one self-contained HTML file about a study: what a researcher
would otherwise need a dashboard server for. Open it in any browser,
mail it, put it next to the paper's draft: it loads nothing from the
network (inline SVG, no external script, font or style) and needs no
server. It shows:

   - the optimisation history: each trial's score and the best so far;
   - the intermediate curves, with pruned trials marked where they stopped;
   - each knob against the score;
   - parallel coordinates of the knobs and the score;
   - the best trials as a table.

Hovering a trial highlights it in every plot. Reading the curves costs one
file per trial.

EXAMPLES:
   soma report ROOT --study lr -o lr.html
   soma report ROOT --study lr -o - > lr.html          to stdout`

func newReportCommand() *cli.Command {
	return &cli.Command{
		Name:        "report",
		Usage:       "one self-contained HTML report of a study (plots, no server)",
		UsageText:   "soma report ROOT --study NAME -o FILE.html",
		Description: reportDescription,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "study", Aliases: []string{"s"}, Usage: "the study (required)"},
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "the HTML `FILE` to write (- for stdout; required)"},
			&cli.StringFlag{Name: "title", Usage: "the page's title (default: soma report: STUDY)"},
		},
		Action: func(c *cli.Context) error {
			root, name, err := rootAndStudy(c, 0)
			if err != nil {
				return err
			}
			out := c.String("output")
			if out == "" {
				return usagef("-o is required: the HTML file to write, e.g. -o %s.html", name)
			}
			s, st, err := openStudy(c, root, name, 0)
			if err != nil {
				return err
			}
			defer s.Close()
			o := report.Options{Title: c.String("title"), Source: s.Root()}
			if out == "-" {
				_, err := report.Write(c.Context, c.App.Writer, st, o)
				return err
			}
			// Write beside the target and rename: a reader never sees half a page.
			tmp, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".*")
			if err != nil {
				return fmt.Errorf("report: %w", err)
			}
			defer os.Remove(tmp.Name())
			info, err := report.Write(c.Context, tmp, st, o)
			if err != nil {
				tmp.Close()
				return err
			}
			if err := tmp.Close(); err != nil {
				return fmt.Errorf("report: %w", err)
			}
			if err := os.Chmod(tmp.Name(), 0o644); err != nil {
				return fmt.Errorf("report: %w", err)
			}
			if err := os.Rename(tmp.Name(), out); err != nil {
				return fmt.Errorf("report: %w", err)
			}
			fmt.Fprintf(c.App.ErrWriter, "soma: wrote %s (%d KiB): %d trials; plots: %s\n", out, (info.Bytes+1023)/1024, info.Trials, strings.Join(info.Plots, ", "))
			return nil
		},
	}
}
