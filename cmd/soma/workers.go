package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/soma-hpc/soma/internal/rootstore"
	"github.com/soma-hpc/soma/internal/status"
	"github.com/soma-hpc/soma/worker"
)

const workersDescription = `Shows every soma-worker registered in the folder, alive or not: its
address, load (plans placed on it over its slots), GPUs, tags, last
heartbeat and the Slurm job it runs in. A worker is alive while its
heartbeat (the file server's time on its record, never this machine's
clock) is younger than --timeout; a dead one is kept in the list until
its record is removed, and is never placed on. Records that cannot be
read (corrupt, or written by a newer soma) are listed as problems.
A worker registers by being started with soma-worker --root ROOT (and
leaves the list on SIGINT/SIGTERM); soma run ROOT plan.toml places plans
on the live ones.

PRUNING: a worker killed without its clean shutdown (scancel's SIGKILL,
a lost node) leaves its record, and a worker started with a random port
registers under a new id each time, so dead workers pile up. --prune
removes the records of workers silent for longer than --older-than
(default 1h; at least --timeout), and the leases and lease markers of
workers with no record left that nobody touched for as long. It is safe
while workers and placers run: a worker that was only paused binds its
record again at its next heartbeat. --dry-run lists what would go.

EXAMPLES:
   soma workers /scratch/$USER/soma
   soma workers ROOT --watch --interval 2s
   soma workers ROOT --json | jq '.workers[] | select(.alive) | .address'
   soma workers ROOT --prune --older-than 24h --dry-run

JSON (--json): {"server_time", "timeout_s", "workers": [{"id", "address",
"alive", "last_heartbeat", "age_s", "slots", "leases", "load", "gpus_used",
"tags", "cpus", "memory_bytes", "gpus": [{"index", "uuid", "name",
"memory_bytes"}], "active_plans", "soma_version", "host", "pid",
"slurm_job"?, "slurm_node"?}], "problems": [{"name", "reason"}]} — the
coordinator's GET /workers answers the same. With --watch, one document
per line at each refresh. With --prune: {"server_time", "older_than_s",
"dry_run", "workers": [{"id", "last_heartbeat", "age_s"}], "leases":
[names], "kept"}.`

func newWorkersCommand() *cli.Command {
	return &cli.Command{
		Name:        "workers",
		Usage:       "the soma-workers registered in a folder, alive or not",
		UsageText:   "soma workers ROOT [--json] [--watch [--interval D]] [--timeout D]\n   soma workers ROOT --prune [--older-than D] [--dry-run] [--json]",
		Description: workersDescription,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "write JSON for scripts (shape below)"},
			&cli.BoolFlag{Name: "watch", Aliases: []string{"w"}, Usage: "refresh every --interval, until Ctrl-C"},
			&cli.DurationFlag{Name: "interval", Value: 2 * time.Second, Usage: "with --watch: the refresh period"},
			&cli.DurationFlag{Name: "timeout", Value: worker.DefaultHeartbeatTimeout, Usage: "a worker silent this long is dead (give the workers' --timeout if they were started with one)"},
			&cli.BoolFlag{Name: "prune", Usage: "remove dead workers' records and abandoned leases (see PRUNING)"},
			&cli.DurationFlag{Name: "older-than", Value: worker.DefaultPruneAge, Usage: "with --prune: remove what has been silent this long"},
			&cli.BoolFlag{Name: "dry-run", Usage: "with --prune: list what would be removed, remove nothing"},
		},
		Action: workersAction,
	}
}

func workersAction(c *cli.Context) error {
	root, err := rootArg(c, 0)
	if err != nil {
		return err
	}
	if c.IsSet("interval") && !c.Bool("watch") {
		return usagef("--interval goes with --watch")
	}
	if c.Duration("interval") <= 0 || c.Duration("timeout") <= 0 {
		return usagef("--interval %s, --timeout %s: want positive durations such as 2s", c.Duration("interval"), c.Duration("timeout"))
	}
	for _, f := range []string{"older-than", "dry-run"} {
		if c.IsSet(f) && !c.Bool("prune") {
			return usagef("--%s goes with --prune", f)
		}
	}
	if c.Bool("prune") && c.Bool("watch") {
		return usagef("--prune and --watch do not go together")
	}
	s, err := status.Open(root)
	if err != nil {
		return err
	}
	defer s.Close()
	if _, err := rootstore.NeedFolder(s.Backend(), "soma workers"); err != nil {
		return err
	}
	if c.Bool("prune") {
		return pruneWorkers(c, s)
	}
	// s.Now: a root this process cannot write is listed with this
	// machine's clock, said once on stderr.
	opts := worker.ListOptions{Timeout: c.Duration("timeout"), Now: s.Now}
	warned := false
	render := func(ctx context.Context, out io.Writer) error {
		rep, err := worker.ReadWorkers(ctx, s.FS(), opts)
		if err != nil {
			return err
		}
		if clock, why := s.Clock(); clock != "server" && why != nil && !warned {
			warned = true
			fmt.Fprintf(c.App.ErrWriter, "soma: warning: %v\n", why)
		}
		if c.Bool("json") {
			enc := json.NewEncoder(out)
			if !c.Bool("watch") {
				enc.SetIndent("", "  ")
			}
			return enc.Encode(rep)
		}
		return writeWorkers(out, rep)
	}
	out := c.App.Writer
	if !c.Bool("watch") {
		return render(c.Context, out)
	}
	// Polling, whatever the filesystem: liveness changes with time, not
	// only with writes (a dead worker writes nothing).
	w, err := status.NewWatcher(s.Root(), status.WatchOptions{
		Mode:         status.WatchPoll,
		Interval:     c.Duration("interval"),
		IgnorePrefix: status.OwnTempPrefix(),
	})
	if err != nil {
		return err
	}
	defer w.Close()
	clear := !c.Bool("json") && isTerminal(out)
	return w.Run(c.Context, func(ctx context.Context) error {
		var b bytes.Buffer
		if err := render(ctx, &b); err != nil {
			return err
		}
		if clear {
			fmt.Fprintf(out, "\x1b[H\x1b[2J%s\n\n", time.Now().Format("15:04:05"))
		} else if !c.Bool("json") {
			fmt.Fprintf(out, "--- %s\n", time.Now().Format(time.RFC3339))
		}
		_, err := out.Write(b.Bytes())
		return err
	})
}

// writeWorkers prints rep as a table, then its problems.
func writeWorkers(out io.Writer, rep worker.WorkersReport) error {
	sum := rep.Summary()
	fmt.Fprintf(out, "workers  %d alive, %d dead; %d of %d slots held; %d of %d GPUs in use (timeout %s)\n",
		sum.Alive, sum.Dead, sum.Leases, sum.Slots, sum.GPUsUsed, sum.GPUs, time.Duration(rep.TimeoutSeconds*float64(time.Second)))
	if len(rep.Workers) == 0 {
		fmt.Fprintln(out, "no worker has registered in this folder (start one: soma-worker --root ROOT)")
	} else {
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "WORKER\tSTATE\tLOAD\tGPUS\tCPUS\tMEMORY\tTAGS\tHEARTBEAT\tJOB\tADDRESS")
		for _, w := range rep.Workers {
			state := "alive"
			if !w.Alive {
				state = "dead"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%s\t%d\t%s\t%s\t%s ago\t%s\t%s\n",
				w.ID, state, w.Leases, w.Slots, gpusText(w), w.CPUs, gibText(w.MemoryBytes),
				orDash(strings.Join(w.Tags, ",")), ageText(w.AgeSeconds), jobText(w), w.Address)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	for _, p := range rep.Problems {
		fmt.Fprintf(out, "problem  %s: %s\n", p.Name, p.Reason)
	}
	return nil
}

// gpusText says "2×A100 80GiB (1 used)", or "-".
func gpusText(w worker.WorkerView) string {
	if len(w.GPUs) == 0 {
		return "-"
	}
	g := w.GPUs[0]
	same := true
	for _, o := range w.GPUs[1:] {
		same = same && o.Name == g.Name && o.MemoryBytes == g.MemoryBytes
	}
	s := fmt.Sprintf("%d×%s %s", len(w.GPUs), strings.ReplaceAll(g.Name, " ", "_"), gibText(g.MemoryBytes))
	if !same {
		s = fmt.Sprintf("%d mixed", len(w.GPUs))
	}
	if w.GPUsUsed > 0 {
		s += fmt.Sprintf(" (%d used)", w.GPUsUsed)
	}
	return s
}

func gibText(n uint64) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0fGiB", float64(n)/(1<<30))
}

func ageText(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d < 0:
		return "0s"
	case d < 10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < 48*time.Hour:
		return d.Round(time.Minute).String()
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func jobText(w worker.WorkerView) string {
	switch {
	case w.SlurmJob != "" && w.SlurmNode != "":
		return w.SlurmJob + "@" + w.SlurmNode
	case w.SlurmJob != "":
		return w.SlurmJob
	}
	return "-"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// pruneWorkers is soma workers --prune.
func pruneWorkers(c *cli.Context, s *status.Store) error {
	rep, err := worker.PruneWorkers(c.Context, s.FS(), worker.PruneOptions{
		OlderThan: c.Duration("older-than"),
		Timeout:   c.Duration("timeout"),
		DryRun:    c.Bool("dry-run"),
	})
	if errors.Is(err, worker.ErrPruneAge) {
		return usagef("--older-than %s is shorter than --timeout %s: a live worker could be removed", c.Duration("older-than"), c.Duration("timeout"))
	}
	if err != nil {
		return err
	}
	out := c.App.Writer
	if c.Bool("json") {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	verb := "removed"
	if rep.DryRun {
		verb = "would remove"
	}
	for _, w := range rep.Workers {
		fmt.Fprintf(out, "%s worker %s (silent %s)\n", verb, w.ID, ageText(w.AgeSeconds))
	}
	for _, l := range rep.Leases {
		fmt.Fprintf(out, "%s lease %s\n", verb, l)
	}
	fmt.Fprintf(out, "%s %d dead workers and %d leases silent for over %s; %d workers kept\n",
		verb, len(rep.Workers), len(rep.Leases), c.Duration("older-than"), rep.Kept)
	return nil
}
