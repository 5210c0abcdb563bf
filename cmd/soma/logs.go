package main

import (
	"fmt"
	"os"
	"strconv"

	"github.com/urfave/cli/v2"

	"github.com/soma-hpc/soma/internal/rootstore"
	"github.com/soma-hpc/soma/internal/runlog"
	"github.com/soma-hpc/soma/internal/status"
)

// localFlag is --local of the commands that read or remove the files
// soma-trial keeps beside a bucket (its own --local, same default).
func localFlag() cli.Flag {
	return &cli.StringFlag{Name: "local", Value: "soma-local", Usage: "with a bucket root: the folder soma-trial kept the logs and work folders in (its --local)"}
}

// localFolder returns --local for a bucket root, and "" for a folder,
// which holds those files itself: --local with a folder root is refused.
func localFolder(c *cli.Context, root string) (string, error) {
	if !rootstore.IsBucket(root) {
		if c.IsSet("local") {
			return "", usagef("--local %s: only for a bucket root (s3://...); a folder root keeps its logs and work folders itself", c.String("local"))
		}
		return "", nil
	}
	return c.String("local"), nil
}

const logsDescription = `Prints what the objective of trial N wrote: its standard output, or its
standard error with --stderr. The latest attempt by default. soma-trial
keeps both for every attempt under ROOT/logs/STUDY/: each of its workers
appends its objectives' output to its own HOST.PID.WORKER.out and .err,
and notes in HOST.PID.WORKER.idx where each attempt's output starts and
ends (one file per worker, not per trial: a study of 100k trials does not
leave 100k small files on the shared filesystem).

On a bucket root (s3://...), soma-trial keeps these files in its --local
folder (default ./soma-local) on the machine where it ran, not in the
bucket: run soma logs there, or point --local at that folder.

--follow keeps printing as the objective writes (like tail -f, polling,
since the objective usually runs on another node) until the attempt ends;
a line on stderr then says how it ended.

EXAMPLES:
   soma logs ROOT --study lr 17                 trial 17's output
   soma logs ROOT --study lr 17 --stderr        ... its errors (a failed trial's traceback)
   soma logs ROOT --study lr 17 --attempt 0     the first attempt of a retried trial
   soma logs ROOT --study lr 42 --follow        while it runs`

func newLogsCommand() *cli.Command {
	return &cli.Command{
		Name:        "logs",
		Usage:       "the objective's output for one trial",
		UsageText:   "soma logs ROOT --study NAME N [--attempt A] [--stderr] [--follow] [--local DIR]",
		Description: logsDescription,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "study", Aliases: []string{"s"}, Usage: "the study (required)"},
			&cli.IntFlag{Name: "attempt", Value: -1, Usage: "the attempt (0 is the first run; 1 its first retry)", DefaultText: "the trial's latest"},
			&cli.BoolFlag{Name: "stderr", Aliases: []string{"e"}, Usage: "show standard error instead of standard output"},
			&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "keep printing until the attempt ends (Ctrl-C stops)"},
			localFlag(),
		},
		Action: func(c *cli.Context) error {
			root, name, err := rootAndStudy(c, 1)
			if err != nil {
				return err
			}
			if c.NArg() < 2 {
				return usagef("no trial number: soma logs ROOT --study %s N", name)
			}
			n, err := strconv.Atoi(c.Args().Get(1))
			if err != nil || n < 0 {
				return usagef("trial %q: want a trial number (0, 1, ...)", c.Args().Get(1))
			}
			if a := c.Int("attempt"); a < -1 {
				return usagef("--attempt %d: want 0 or more", a)
			}
			local, err := localFolder(c, root)
			if err != nil {
				return err
			}
			s, st, err := openStudy(c, root, name, 0)
			if err != nil {
				return err
			}
			defer s.Close()
			files := s.Root()
			if local != "" {
				files = local
				if _, err := os.Stat(runlog.Dir(local, name)); err != nil {
					return fmt.Errorf("soma logs: %s is a bucket, and the objectives' logs stay where soma-trial ran them, in its --local folder: %s has none of study %s (run soma logs on that machine, or give --local)", root, runlog.Dir(local, name), name)
				}
			}
			return status.Logs(c.Context, st, files, status.LogOptions{
				Trial:   n,
				Attempt: c.Int("attempt"),
				Stderr:  c.Bool("stderr"),
				Follow:  c.Bool("follow"),
				Notes:   c.App.ErrWriter,
			}, c.App.Writer)
		},
	}
}
