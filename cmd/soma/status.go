package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/soma-hpc/soma/internal/status"
	"github.com/soma-hpc/soma/internal/submit"
	"github.com/soma-hpc/soma/study"
	"github.com/soma-hpc/soma/worker"
)

const statusDescription = `Shows a study as read from the folder at this moment: its settings; its
trials counted by state (done, running, pruned, failed, interrupted, and
stale: running but silent for longer than the lease, so its process died
or lost the folder; it will be retried); the best score and its point;
trials per hour and the ETA of the budget; the machines working on it and
when each was last seen; then the best N trials and the running ones as
aligned tables. With several studies in the root, one line per study.
In the TRIAL column a retried trial shows its attempt: "3 (attempt 1)"
is trial 3's first retry (attempts count from 0; soma logs --attempt).
If soma-workers have registered in the root, a short list of them follows
(alive or dead, slots held, tags; soma workers ROOT shows more).

Unreadable (corrupt) records are counted and listed, never results, and
never stop the view. Names among the records that are not the study's
(a trial number outside the budget, a name that is not a number, a stray
file) are listed as foreign: never run, never counted.

--watch refreshes the view as the folder changes. On a local filesystem
it uses inotify (fsnotify); on a network filesystem (NFS, Lustre, GPFS,
CIFS, Ceph, BeeGFS, FUSE) inotify never sees another node's writes, so it
polls every --interval (default 5s) instead. The first line says which is
in use. --poll forces polling. Each refresh reads only what can have
changed: a few folder listings, and per trial still running its folder
and record (ended trials are read once and kept), so a refresh costs the
file server about 4 + 2 x running operations, whatever the study's size.

EXAMPLES:
   soma status /scratch/$USER/soma                  every study, one line each
   soma status /scratch/$USER/soma --study lr       one study in full
   soma status ROOT --study lr --top 20             the 20 best
   soma status ROOT --study lr --all                every trial
   soma status ROOT --study lr --watch              refresh as it changes (Ctrl-C ends)
   soma status ROOT --json | jq '.studies[0].best.point'
   soma status ROOT --study lr --verbose            also: every problem, files opened, packs

JSON (--json): one document, the same shape with or without --study
(with --watch, one document per line at each refresh). Fields, one per
line: path ("[]": array elements; "?": may be absent), type ("|null":
may be null; "trial": the object of the trial.* lines), meaning.
Within a version fields are only added; ignore fields you do not know.

`

func newStatusCommand() *cli.Command {
	return &cli.Command{
		Name:        "status",
		Usage:       "what is happening in a study, now (or as it changes, with --watch)",
		UsageText:   "soma status ROOT [--study NAME] [--top N | --all] [--json] [--watch [--poll] [--interval D]] [--verbose]",
		Description: statusDescription + indent(status.JSONShape, "   "),
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "study", Aliases: []string{"s"}, Usage: "show this study only (default: every study of the root)"},
			&cli.IntFlag{Name: "top", Aliases: []string{"n"}, Value: 10, Usage: "list the best `N` trials"},
			&cli.BoolFlag{Name: "all", Aliases: []string{"a"}, Usage: "list every trial (latest attempt), by number"},
			&cli.BoolFlag{Name: "json", Usage: "write JSON for scripts (shape below)"},
			&cli.BoolFlag{Name: "watch", Aliases: []string{"w"}, Usage: "refresh as the folder changes, until Ctrl-C"},
			&cli.BoolFlag{Name: "poll", Usage: "with --watch: poll even on a local filesystem"},
			&cli.DurationFlag{Name: "interval", Value: 5 * time.Second, Usage: "with --watch: the polling period"},
			&cli.DurationFlag{Name: "lease", Usage: "a running trial silent this long is stale (give the runners' --lease)", DefaultText: "soma-trial's default, " + study.DefaultGrace.String()},
			&cli.DurationFlag{Name: "worker-timeout", Value: worker.DefaultHeartbeatTimeout, Usage: "a soma-worker silent this long is listed dead (the workers' --timeout)"},
			&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "list every problem, the packs and the number of files opened"},
		},
		Action: statusAction,
	}
}

func statusAction(c *cli.Context) error {
	root, err := rootArg(c, 0)
	if err != nil {
		return err
	}
	if c.Int("top") < 0 {
		return usagef("--top %d: want 0 or more", c.Int("top"))
	}
	if d := c.Duration("lease"); d < 0 {
		return usagef("--lease %s: want the runners' --lease (0: soma-trial's default)", d)
	}
	if (c.Bool("poll") || c.IsSet("interval")) && !c.Bool("watch") {
		return usagef("--poll and --interval go with --watch")
	}
	if c.Duration("interval") <= 0 {
		return usagef("--interval %s: want a positive duration such as 5s", c.Duration("interval"))
	}
	s, err := status.Open(root)
	if err != nil {
		return err
	}
	defer s.Close()
	v := status.NewViewer(s, status.StatusOptions{
		Study:   c.String("study"),
		Top:     c.Int("top"),
		All:     c.Bool("all"),
		JSON:    c.Bool("json"),
		Compact: c.Bool("json") && c.Bool("watch"),
		Verbose: c.Bool("verbose"),
		Lease:   c.Duration("lease"),

		WorkerTimeout: c.Duration("worker-timeout"),
	})
	out := c.App.Writer
	if !c.Bool("watch") {
		if err := v.Render(c.Context, out); err != nil {
			return err
		}
		if name := c.String("study"); name != "" && !c.Bool("json") && s.FS() != nil {
			// The study's Slurm jobs, as recorded by soma slurm submit.
			if list, err := submit.Jobs(c.Context, s.FS(), name, submit.JobsOptions{}); err == nil {
				for _, l := range list.Lines() {
					fmt.Fprintf(out, "slurm    %s\n", l)
				}
			}
		}
		return nil
	}
	mode := status.WatchAuto
	if c.Bool("poll") {
		mode = status.WatchPoll
	}
	w, err := status.NewWatcher(s.Root(), status.WatchOptions{
		Mode:         mode,
		Interval:     c.Duration("interval"),
		IgnorePrefix: status.OwnTempPrefix(),
		Warn:         func(s string) { fmt.Fprintf(c.App.ErrWriter, "soma: %s\n", s) },
	})
	if err != nil {
		return err
	}
	defer w.Close()
	clear := !c.Bool("json") && isTerminal(out)
	if !clear {
		fmt.Fprintf(c.App.ErrWriter, "soma: %s\n", w.Method())
	}
	return w.Run(c.Context, func(ctx context.Context) error {
		var b bytes.Buffer
		if err := v.Render(ctx, &b); err != nil {
			return err
		}
		if clear {
			// Home, clear, then the frame at once: no flicker.
			fmt.Fprintf(out, "\x1b[H\x1b[2J%s  ·  %s\n\n", time.Now().Format("15:04:05"), w.Method())
		} else if !c.Bool("json") {
			fmt.Fprintf(out, "--- %s\n", time.Now().Format(time.RFC3339))
		}
		_, err := out.Write(b.Bytes())
		return err
	})
}

// isTerminal reports whether w is a terminal (for clearing the screen).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// indent prefixes every line of s.
func indent(s, prefix string) string {
	var b bytes.Buffer
	for line := range bytes.Lines([]byte(s)) {
		b.WriteString(prefix)
		b.Write(line)
	}
	return b.String()
}
