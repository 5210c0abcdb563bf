package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/internal/rootstore"
	"github.com/soma-hpc/soma/internal/status"
	"github.com/soma-hpc/soma/internal/submit"
	"github.com/soma-hpc/soma/slurm"
	"github.com/soma-hpc/soma/study"
)

const submitDescription = `Writes an sbatch script whose body is soma-trial, keeps it beside the
study (<root>/slurm/<study>/<date>-<id>.sh, to audit or resubmit with plain
sbatch), submits it, and records the job in the store so 'soma slurm jobs'
and 'soma status' can show it. The study is created from --spec first, or
checked against it, so a mistake fails here rather than in 64 task logs.

The script asks Slurm for SIGUSR1 --grace before the time limit
(--signal=B:USR1@grace) and runs 'exec soma-trial': the signal goes to
the batch shell only, so soma-trial must be that shell. soma-trial then
records its running trial as interrupted (another task retries it) and
exits. Tasks log to <root>/slurm/<study>/logs/<array job>_<task>.out.

EXAMPLES:
   # 64 tasks, 8 at a time, on a GPU partition
   soma slurm submit /scratch/$USER/soma --study lr --spec lr.toml \
       --array 0-63%8 --time 4h --grace 5m \
       --sbatch-opt=--partition=gpu --sbatch-opt=--gres=gpu:1 \
       --setup 'module load cuda/12.4' \
       -- /scratch/$USER/venv/bin/python train.py --lr {lr}

   # print the script, change nothing
   soma slurm submit ./soma --study quad --spec spec.toml --array 0-3 --dry-run -- python3 obj.py {x}`

func newSlurmCommand() *cli.Command {
	return &cli.Command{
		Name:  "slurm",
		Usage: "submit a study to Slurm as an array job, and list its jobs",
		Subcommands: []*cli.Command{
			{
				Name:        "submit",
				Usage:       "write, keep and submit an sbatch array job that runs soma-trial",
				UsageText:   "soma slurm submit ROOT --study NAME [--spec FILE] --array 0-63%16 [--time 4h] [options] -- COMMAND [ARGS with {name}...]",
				Description: submitDescription,
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "study", Aliases: []string{"s"}, Usage: "the study's name (required)"},
					&cli.StringFlag{Name: "spec", Usage: "a TOML spec `FILE`: creates the study, or must match it"},
					&cli.StringFlag{Name: "array", Usage: "the --array `SPEC`, like 0-63%16 (64 tasks, 16 at once); empty: one job"},
					&cli.DurationFlag{Name: "time", Usage: "each task's time limit (0: the partition's default)"},
					&cli.DurationFlag{Name: "grace", Usage: "SIGUSR1 this long before the time limit", DefaultText: slurm.DefaultGrace.String()},
					&cli.StringFlag{Name: "name", Usage: "the job name (default soma-<study>)"},
					&cli.StringSliceFlag{Name: "sbatch-opt", Usage: "another #SBATCH option, like --partition=gpu (repeat)"},
					&cli.StringSliceFlag{Name: "setup", Usage: "a shell `LINE` the script runs before soma-trial, like 'module load cuda/12.4' (repeat)"},
					&cli.StringSliceFlag{Name: "trial-opt", Usage: "another soma-trial flag, like --lease=10m or --parallel=2 (repeat)"},
					&cli.StringFlag{Name: "soma-trial", Usage: "the soma-trial `PATH` the tasks run (default: next to soma, else PATH)"},
					&cli.BoolFlag{Name: "no-requeue", Usage: "submit with --no-requeue"},
					&cli.BoolFlag{Name: "dry-run", Usage: "print the script; write and submit nothing"},
				},
				Action: func(c *cli.Context) error {
					if c.NArg() == 0 {
						return usagef("no ROOT: soma slurm submit ROOT --study NAME --array 0-3 -- COMMAND")
					}
					root, objective := c.Args().First(), c.Args().Tail()
					if len(objective) == 0 {
						return usagef("no objective command: put it after --, e.g. -- python3 train.py --lr {lr}")
					}
					name, err := needStudy(c)
					if err != nil {
						return err
					}
					if own := ownFlags(c.Command, objective); len(own) > 0 {
						fmt.Fprintf(c.App.ErrWriter, "soma: warning: the objective's arguments hold %s, a flag of soma slurm submit: everything after -- goes to the objective, not to submit (put submit's flags before --)\n", strings.Join(own, ", "))
					}
					var spec *study.Spec
					if f := c.String("spec"); f != "" {
						b, err := os.ReadFile(f)
						if err != nil {
							return usageError{err}
						}
						if spec, err = study.ParseSpec(b); err != nil {
							return usagef("%s: %w", f, err)
						}
					}
					if rootstore.IsBucket(root) {
						// Its job records and logs are files (issue 17).
						return fmt.Errorf("soma slurm submit: %s is a bucket, and soma slurm works on a study folder only (run soma-trial --root %s in your own sbatch script)", root, root)
					}
					store, err := fsstore.Open(root, fsstore.Options{Create: spec != nil && !c.Bool("dry-run")})
					if errors.Is(err, fsstore.ErrNotFound) && c.Bool("dry-run") {
						return fmt.Errorf("%w; a dry run creates nothing: create the study first with soma init %s --study %s --spec FILE", err, root, name)
					}
					if err != nil {
						return err
					}
					defer store.Close()
					res, err := submit.Submit(c.Context, store, submit.Options{
						Study:     name,
						Spec:      spec,
						Objective: objective,
						Array:     c.String("array"),
						Time:      c.Duration("time"),
						Grace:     c.Duration("grace"),
						NoRequeue: c.Bool("no-requeue"),
						Name:      c.String("name"),
						Sbatch:    c.StringSlice("sbatch-opt"),
						Setup:     c.StringSlice("setup"),
						TrialArgs: c.StringSlice("trial-opt"),
						TrialBin:  c.String("soma-trial"),
						Note:      strings.Join(os.Args, " "),
						DryRun:    c.Bool("dry-run"),
					})
					if err != nil {
						return err
					}
					if c.Bool("dry-run") {
						_, err := c.App.Writer.Write(res.Script)
						return err
					}
					s := res.Submission
					fmt.Fprintf(c.App.Writer, "submitted job %s (array %q) for study %s\nscript: %s\nlogs:   %s\nwatch:  soma status %s --study %s --watch\n",
						s.Job, s.Array, s.Study, s.ScriptPath, s.LogDir, root, s.Study)
					return nil
				},
			},
			{
				Name:      "jobs",
				Usage:     "list the Slurm jobs submitted for a study, with their tasks' states when squeue answers",
				UsageText: "soma slurm jobs ROOT --study NAME [--json] [--offline]",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "study", Aliases: []string{"s"}, Usage: "the study's name (required)"},
					&cli.BoolFlag{Name: "json", Usage: "print JSON"},
					&cli.BoolFlag{Name: "offline", Usage: "read the records only; do not ask squeue"},
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
					st, err := status.Open(root)
					if err != nil {
						return err
					}
					defer st.Close()
					fs, err := rootstore.NeedFolder(st.Backend(), "soma slurm jobs")
					if err != nil {
						return err
					}
					list, err := submit.Jobs(c.Context, fs, name, submit.JobsOptions{Offline: c.Bool("offline"), FromRecords: true})
					if err != nil {
						return err
					}
					if c.Bool("json") {
						enc := json.NewEncoder(c.App.Writer)
						enc.SetIndent("", "  ")
						return enc.Encode(list)
					}
					printJobs(c, list)
					return nil
				},
			},
		},
	}
}

func printJobs(c *cli.Context, list submit.JobList) {
	w := c.App.Writer
	if len(list.Jobs) == 0 {
		// No header under it (an empty table followed; issue 16).
		fmt.Fprintf(w, "no Slurm jobs recorded for study %s (soma slurm submit records them, and so does each trial run in a Slurm job)\n", list.Study)
		for _, e := range list.Corrupt {
			fmt.Fprintf(w, "unreadable job record: %v\n", e)
		}
		return
	}
	switch {
	case list.LiveErr != nil && errors.Is(list.LiveErr, slurm.ErrUnavailable):
		fmt.Fprintln(w, "squeue is not reachable from here: showing the records only")
	case list.LiveErr != nil:
		fmt.Fprintf(w, "squeue failed (%v): showing the records only\n", list.LiveErr)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tARRAY\tSUBMITTED\tTASKS\tLOGS")
	for _, j := range list.Jobs {
		tasks := "?"
		switch {
		case j.Forgotten:
			tasks = "ended (forgotten by Slurm)"
		case j.Asked:
			var parts []string
			counts := j.Counts()
			keys := make([]string, 0, len(counts))
			for k := range counts {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				parts = append(parts, fmt.Sprintf("%d %s", counts[k], strings.ToLower(k)))
			}
			tasks = strings.Join(parts, ", ")
		}
		logs, submitted := j.LogDir, j.Submitted.Local().Format(time.DateTime)
		if j.FromRecords {
			// Named by trial records only: submitted by hand, so its logs
			// are wherever its script's #SBATCH --output says.
			logs = fmt.Sprintf("(not from soma slurm submit: named by %d trial records)", j.Trials)
			submitted = "~" + submitted
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", j.Job, j.Array, submitted, tasks, logs)
	}
	tw.Flush()
	for _, e := range list.Corrupt {
		fmt.Fprintf(w, "unreadable job record: %v\n", e)
	}
}

// ownFlags returns the words of argv that are flags of cmd, as typed.
// (Bug: `soma slurm submit ... -- cmd --dry-run` submitted for real and
// passed --dry-run to the objective, without a word; issue 16.)
func ownFlags(cmd *cli.Command, argv []string) []string {
	names := map[string]bool{}
	for _, f := range cmd.Flags {
		for _, n := range f.Names() {
			names[n] = true
		}
	}
	var own []string
	for _, a := range argv {
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if names[name] && len(name) > 1 {
			own = append(own, a)
		}
	}
	return own
}
