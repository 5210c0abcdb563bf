package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/internal/admin"
	"github.com/soma-hpc/soma/internal/rootstore"
	"github.com/soma-hpc/soma/internal/submit"
	"github.com/soma-hpc/soma/slurm"
	"github.com/soma-hpc/soma/study"
)

// The commands that tend a study while it runs: extend, enqueue, fork, rm.
// Each change is a new record in the folder (no edit, no server), so
// they are safe while array tasks run.

const extendDescription = `Changes a study's budget in place, keeping its history: the change is a
newer version of the study's spec, a new record in the folder. Every
running soma-trial picks it up at its next look, without a restart, and
claims the new trials (or stops claiming past a lowered budget; with the
random, sobol and grid samplers a runner reuses its last look for a few
seconds). A budget below the trials already claimed is refused. soma status shows the change
and when it was made.

Array tasks that already exited are not restarted: soma extend says so
and prints the soma slurm submit line that continues the study.

EXAMPLES:
   soma extend /scratch/$USER/soma --study lr --budget 200
   soma extend ROOT --study lr --budget 80 --json`

func newExtendCommand() *cli.Command {
	return &cli.Command{
		Name:        "extend",
		Usage:       "raise (or lower) a study's budget while it runs, history kept",
		UsageText:   "soma extend ROOT --study NAME --budget N [--json]",
		Description: extendDescription,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "study", Aliases: []string{"s"}, Usage: "the study's name (required)"},
			&cli.IntFlag{Name: "budget", Usage: "the study's new number of trials, in all (required)"},
			&cli.BoolFlag{Name: "json", Usage: "write JSON for scripts"},
		},
		Action: extendAction,
	}
}

func extendAction(c *cli.Context) error {
	root, name, err := rootAndStudy(c, 0)
	if err != nil {
		return err
	}
	if !c.IsSet("budget") {
		return usagef("--budget is required: the study's new number of trials, in all (soma status ROOT --study %s shows the current one)", name)
	}
	if c.Int("budget") < 1 {
		return usagef("--budget %d: want the number of trials, at least 1", c.Int("budget"))
	}
	s, err := rootstore.Open(c.Context, root, rootstore.Options{})
	if err != nil {
		return err
	}
	defer s.Close()
	ext, err := study.Extend(c.Context, s, name, c.Int("budget"), study.Me(""))
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return writeJSON(c.App.Writer, map[string]any{
			"study": ext.Study, "from": ext.From, "to": ext.To, "unchanged": ext.Unchanged,
			"version": ext.Version.Number, "time": jsonTime(ext.Version.Time),
			"claimed": ext.Claimed, "ended": ext.Ended, "running": ext.Running,
		})
	}
	w := c.App.Writer
	if ext.Unchanged {
		fmt.Fprintf(w, "study %s: the budget already is %d; nothing written\n", name, ext.To)
		return nil
	}
	fmt.Fprintf(w, "study %s: budget %d → %d (spec version %d, %s); %d trials claimed, %d ended, %d running\n",
		name, ext.From, ext.To, ext.Version.Number, ext.Version.Time.UTC().Format(time.RFC3339), ext.Claimed, ext.Ended, ext.Running)
	if ext.To > ext.From {
		fmt.Fprintf(w, "running soma-trials claim the new trials at their next look, without a restart.\n")
		fmt.Fprintf(w, "array tasks that already exited are not restarted; to run the %d new trials with fresh tasks:\n   %s\n",
			ext.To-ext.Claimed, continueLine(c, s, root, name, ext.To-ext.Claimed))
	} else {
		fmt.Fprintf(w, "running soma-trials claim no trial past %d from their next look; their running trials finish.\n", ext.To-1)
	}
	return nil
}

// jobsOf is submit.Jobs of a folder store; none for a bucket.
func jobsOf(c *cli.Context, fs *fsstore.Store, folder bool, name string) (submit.JobList, error) {
	if !folder {
		return submit.JobList{}, nil
	}
	return submit.Jobs(c.Context, fs, name, submit.JobsOptions{Offline: true})
}

// continueLine is the soma slurm submit line that continues a study with
// n more trials, shaped like its last submission when one is recorded.
func continueLine(c *cli.Context, s rootstore.Store, root, name string, n int) string {
	arr, extra := fmt.Sprintf("0-%d", max(n, 1)-1), ""
	// Slurm job records are files: a bucket has none (fs is nil, and
	// Jobs is not asked).
	fs, folder := rootstore.Folder(s)
	if l, err := jobsOf(c, fs, folder, name); err == nil && len(l.Jobs) > 0 {
		last := l.Jobs[len(l.Jobs)-1]
		if a, err := slurm.ParseArray(last.Array); err == nil && a.Throttle > 0 {
			arr += fmt.Sprintf("%%%d", a.Throttle)
		}
		if last.TimeLimit > 0 {
			extra += " --time " + last.TimeLimit.String()
		}
		extra += fmt.Sprintf(" -- COMMAND  (as in job %s: %s)", last.Job, last.ScriptPath)
	} else {
		extra = " -- COMMAND {param}..."
	}
	return fmt.Sprintf("soma slurm submit %s --study %s --array %s%s", root, name, arr, extra)
}

const enqueueDescription = `Adds known points to a study's queue: they are evaluated before any
sampled point, in order, each exactly once across every process (a trial
claims a queued point by link(2)). Each is a trial of the budget, and the
sampler (tpe) learns from its score like any other. Every point is
checked against the study's space first: one that does not fit is refused
with the param named, and nothing is enqueued.

A point is name=value pairs joined by ',' (fixed params may be left out).
--from reads a CSV file: a header row of param names, one point per row.

EXAMPLES:
   soma enqueue ROOT --study lr --point 'lr=0.01,batch=64' --point 'lr=0.001,batch=128'
   soma enqueue ROOT --study lr --from known-good.csv`

func newEnqueueCommand() *cli.Command {
	return &cli.Command{
		Name:        "enqueue",
		Usage:       "evaluate known points first, each exactly once",
		UsageText:   "soma enqueue ROOT --study NAME (--point 'k=v,...' ... | --from FILE.csv) [--json]",
		Description: enqueueDescription,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "study", Aliases: []string{"s"}, Usage: "the study's name (required)"},
			&cli.StringSliceFlag{Name: "point", Aliases: []string{"p"}, Usage: "a point, `name=value,...` (repeat)"},
			&cli.StringFlag{Name: "from", Usage: "a CSV `FILE` of points: a header row of param names, one point per row"},
			&cli.BoolFlag{Name: "json", Usage: "write JSON for scripts"},
		},
		Action: enqueueAction,
	}
}

func enqueueAction(c *cli.Context) error {
	root, name, err := rootAndStudy(c, 0)
	if err != nil {
		return err
	}
	points, file := c.StringSlice("point"), c.String("from")
	switch {
	case len(points) > 0 && file != "":
		return usagef("give --point or --from, not both")
	case len(points) == 0 && file == "":
		return usagef("no points: give --point 'name=value,...' (repeat) or --from FILE.csv")
	}
	s, err := rootstore.Open(c.Context, root, rootstore.Options{})
	if err != nil {
		return err
	}
	defer s.Close()
	if file != "" {
		st, err := study.Open(c.Context, s, name, nil, study.Options{})
		if err != nil {
			return err
		}
		f, err := os.Open(file)
		if err != nil {
			return usageError{err}
		}
		points, err = st.Space().ParseCSVPoints(f)
		f.Close()
		if err != nil {
			return usagef("%s: %w", file, err)
		}
	}
	res, err := study.Enqueue(c.Context, s, name, points)
	var pe *study.PointError
	if errors.As(err, &pe) {
		return usageError{err}
	}
	if err != nil {
		return err
	}
	room := res.Limit - res.Claimed
	if c.Bool("json") {
		pts := make([]map[string]any, len(res.Points))
		for i, p := range res.Points {
			pts[i] = map[string]any{"entry": p.ID.String(), "point": p.Text}
		}
		return writeJSON(c.App.Writer, map[string]any{"study": name, "enqueued": pts, "waiting": res.Waiting, "room": room, "limit": res.Limit})
	}
	w := c.App.Writer
	for _, p := range res.Points {
		fmt.Fprintf(w, "enqueued %s: %s\n", p.ID, p.Text)
	}
	fmt.Fprintf(w, "study %s: %d points wait in the queue; they run before any sampled point, at each runner's next claim\n", name, res.Waiting)
	if res.Waiting > room {
		fmt.Fprintf(c.App.ErrWriter, "soma: warning: only %d trials of the budget (%d) are left unclaimed, so %d queued points will not run; raise it: soma extend %s --study %s --budget %d\n",
			max(room, 0), res.Limit, res.Waiting-max(room, 0), root, name, res.Claimed+res.Waiting)
	}
	return nil
}

const forkDescription = `Creates a new study whose history starts with another study's ended
trials (done, pruned, failed for good) whose points fit the new space:
they become its first trials, with their scores and curves, so its
sampler (tpe) and pruner learn from them. Trials that do not fit (a param
added, removed, or a value now outside its range) are listed with why,
never silently dropped. The study forked from is only read.

--spec gives the new study's spec (its budget: the trials to run beyond
those carried); without it, the same spec. The direction must stay.

EXAMPLES:
   soma fork ROOT --study lr --to lr-wide --spec wide.toml
   soma fork ROOT --study lr --to lr-again`

func newForkCommand() *cli.Command {
	return &cli.Command{
		Name:        "fork",
		Usage:       "a new study that starts with another's history",
		UsageText:   "soma fork ROOT --study NAME --to NEW [--spec FILE] [--json]",
		Description: forkDescription,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "study", Aliases: []string{"s"}, Usage: "the study to fork from (required; only read)"},
			&cli.StringFlag{Name: "to", Usage: "the new study's `NAME` (required)"},
			&cli.StringFlag{Name: "spec", Usage: "the new study's TOML spec `FILE` (default: the same spec)"},
			&cli.BoolFlag{Name: "json", Usage: "write JSON for scripts"},
		},
		Action: forkAction,
	}
}

func forkAction(c *cli.Context) error {
	root, name, err := rootAndStudy(c, 0)
	if err != nil {
		return err
	}
	to := c.String("to")
	if to == "" {
		return usagef("--to is required: the new study's name")
	}
	if err := study.ValidateName(to); err != nil {
		return usageError{err}
	}
	var spec *study.Spec
	if file := c.String("spec"); file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return usageError{err}
		}
		if spec, err = study.ParseSpec(b); err != nil {
			return usagef("%s: %w", file, err)
		}
	}
	s, err := rootstore.Open(c.Context, root, rootstore.Options{})
	if err != nil {
		return err
	}
	defer s.Close()
	res, err := study.Fork(c.Context, s, name, to, spec)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		left := make([]map[string]any, len(res.Left))
		for i, l := range res.Left {
			left[i] = map[string]any{"trial": l.Trial, "point": l.Point, "why": l.Why}
		}
		return writeJSON(c.App.Writer, map[string]any{"from": name, "to": to, "carried": res.Carried, "left": left, "running": res.Running, "budget": res.Budget})
	}
	w := c.App.Writer
	fmt.Fprintf(w, "study %s forked from %s: %d ended trials carried (trials 0 to %d of %s); budget %d (%d to run)\n",
		to, name, res.Carried, res.Carried-1, to, res.Budget, res.Budget-res.Carried)
	if len(res.Left) > 0 {
		fmt.Fprintf(w, "%d ended trials do not fit the new space, not carried:\n", len(res.Left))
		for _, l := range res.Left {
			fmt.Fprintf(w, "   trial %d (%s): %s\n", l.Trial, l.Point, l.Why)
		}
	}
	if res.Running > 0 {
		fmt.Fprintf(w, "%d trials of %s had not ended and were not carried\n", res.Running, name)
	}
	fmt.Fprintf(w, "run it with: soma-trial --root %s --study %s -- COMMAND {param}...\n", root, to)
	return nil
}

const rmDescription = `Removes a study: its records (spec, versions, queue, trials, packs,
submissions), its logs (ROOT/logs/NAME, ROOT/slurm/NAME) and its work
folders (ROOT/work/NAME). On a bucket root (s3://...): its records in the
bucket, and its logs and work folders in soma-trial's --local folder on
this machine (default ./soma-local). Other studies in the root are not
touched; blobs nothing refers to any more go at the next soma gc. It says
what it removes first; --dry-run stops there.

It refuses while any trial is running (stop the array job first: scancel),
unless --force; a runner still running after --force fails at its next
write, or writes its last record back.

EXAMPLES:
   soma rm ROOT --study old --dry-run
   soma rm ROOT --study old
   soma rm ROOT --study old --force`

func newRmCommand() *cli.Command {
	return &cli.Command{
		Name:        "rm",
		Usage:       "remove a study's records, logs and work folders",
		UsageText:   "soma rm ROOT --study NAME [--force] [--dry-run] [--local DIR]",
		Description: rmDescription,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "study", Aliases: []string{"s"}, Usage: "the study to remove (required)"},
			&cli.BoolFlag{Name: "force", Aliases: []string{"f"}, Usage: "remove even while trials run"},
			&cli.BoolFlag{Name: "dry-run", Aliases: []string{"n"}, Usage: "say what would be removed; remove nothing"},
			localFlag(),
		},
		Action: rmAction,
	}
}

func rmAction(c *cli.Context) error {
	root, name, err := rootAndStudy(c, 0)
	if err != nil {
		return err
	}
	if err := study.ValidateName(name); err != nil {
		return usageError{err}
	}
	local, err := localFolder(c, root)
	if err != nil {
		return err
	}
	s, err := rootstore.Open(c.Context, root, rootstore.Options{})
	if err != nil {
		return err
	}
	defer s.Close()
	rep, err := admin.Remove(c.Context, s, name, admin.RemoveOptions{Force: c.Bool("force"), DryRun: c.Bool("dry-run"), Local: local})
	w := c.App.Writer
	if rep.Root != "" && len(rep.Parts) > 0 {
		verb := "removes"
		switch {
		case c.Bool("dry-run"):
			verb = "would remove"
		case err != nil:
			verb = "would remove (refused)"
		}
		fmt.Fprintf(w, "soma rm %s: study %s (%d trials, %d running)\n", verb, name, rep.Trials, len(rep.Running))
		for _, p := range rep.Parts {
			size := ""
			if p.What != "records" {
				size = ", " + humanBytes(p.Bytes)
			}
			fmt.Fprintf(w, "   %-12s %s (%d files%s)\n", p.What, p.Path, p.Files, size)
		}
		for _, r := range rep.Running {
			fmt.Fprintf(w, "   running: trial %d attempt %d (%s)\n", r.Number, r.Attempt, r.Who)
		}
	}
	if err != nil {
		return err
	}
	if rep.Removed {
		fmt.Fprintf(w, "removed study %s; soma gc %s removes the blobs nothing refers to any more\n", name, root)
	}
	return nil
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func jsonTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
