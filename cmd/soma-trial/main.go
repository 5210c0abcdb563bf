// Command soma-trial joins a study in a folder and runs trials of it: the
// command every Slurm array task and every laptop runs.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/soma-hpc/soma/internal/objective"
	"github.com/soma-hpc/soma/internal/rootstore"
	"github.com/soma-hpc/soma/internal/trialrun"
	"github.com/soma-hpc/soma/slurm"
	"github.com/soma-hpc/soma/study"
)

// Exit statuses (documented in --help and the README).
const (
	exitOK          = 0 // the budget is reached, the asked share is done, or nothing is claimable and another process keeps watch
	exitError       = 1 // an error: the store, the spec, an objective that cannot start
	exitUsage       = 2 // bad flags or spec
	exitInterrupted = 3 // a signal stopped it; the running attempts will be retried
	// exitAllFailed: every trial this process ran failed (none done or
	// pruned). A Slurm array task whose objective fails every time must
	// not look like a success to sacct or a dependency (issue 16: it
	// exited 0).
	exitAllFailed = 4
)

func main() {
	// soma-trial re-executes itself as the objectives' guards (one per
	// concurrent objective, kept: the process that ends an objective's
	// whole tree with its attempt).
	objective.GuardMain()
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

const description = `soma-trial runs trials of a study that lives in a folder (--root). The
first process creates the study from --spec or --param flags; every later
one, on any machine, must present the same spec (or none, to join). Each
trial is claimed with an atomic link(2), so no trial runs twice, and the
objective is run once per trial with the point in its arguments and
environment.

THE OBJECTIVE gets the point as {name} substitutions in its arguments, as
SOMA_PARAMS (JSON) and SOMA_PARAM_<NAME>, plus SOMA_STUDY, SOMA_TRIAL,
SOMA_ATTEMPT and SOMA_TRIAL_DIR (a folder kept across retries, for
checkpoints). A conditional param ("mom=float:0:0.99 if opt==sgd") is
absent where its condition is false: not in SOMA_PARAMS, no
SOMA_PARAM_<NAME>, and written {mom?} in the command, which is empty
there ({mom} alone is refused). It reports on file descriptor 3 ($SOMA_REPORT_FD), one line
each:
    report <step> <value>      an intermediate value (the pruner judges it)
    final <score>              the final score (a study with several
                               objectives: one per metric, in order)
and after each report reads "continue" or "prune" on fd 4
($SOMA_CONTROL_FD). Python: "from soma_report import report, final"
works as is (soma-trial puts the helper on PYTHONPATH); a loop that
reports every step can call report(step, value, wait=False), which does
not wait for the verdict (it returns True up to 10 ms after a prune; it
sends its reports in batches, "reports <steps> <values>": the base64 of
n little-endian int64 steps, then of their float64 values, one verdict). A program that
does none of this just prints its score as the last line of stdout.
A non-zero exit, no score, or NaN fails the trial (stderr's tail is kept).

THE OBJECTIVE'S PROCESSES end with its attempt. It runs in its own
process group under a small guard (soma-trial itself, re-executed once
per --parallel slot and kept) that adopts every process of its tree,
setsid or not. When the objective
exits, whatever it left running gets 2 s to end on its own, then SIGTERM,
then SIGKILL 2 s later. On prune (verdict, then after --kill-grace
SIGTERM, then SIGKILL), --timeout and signals, its process group gets
the signals, and what is left once it has exited ends as above. If
soma-trial dies, even by SIGKILL, the guard kills the whole tree at once,
so a retry of the trial never runs beside a survivor.

THE END OF A STUDY: when every remaining trial runs elsewhere, one
process of the study keeps watch: it waits for them, to retry any that go
stale (no heartbeat for --lease), looking at the study every --lease/5 at
most, and exits once the budget is reached. The first process to find
nothing to claim takes the role; every other one exits at once, with
status 0, freeing its allocation. If the watcher dies, the next process
that finds nothing to claim after its lease has passed takes over.
--no-wait: exit, never wait nor watch.

EXIT STATUS: 0 budget reached, share done, or nothing claimable (another
process keeps watch, or --no-wait); 1 error; 2 bad usage;
3 interrupted by a signal (SIGTERM, SIGINT, SIGUSR1 — Slurm's pre-timeout
warning): the running attempts are recorded interrupted and retried by
whoever comes next; 4 every trial this process ran failed (none done or
pruned: see soma logs ROOT --study NAME TRIAL --stderr).`

func newApp(stdout, stderr io.Writer, sig <-chan os.Signal) *cli.App {
	return &cli.App{
		Name:      "soma-trial",
		Usage:     "run trials of a study that lives in a folder",
		UsageText: "soma-trial --root DIR --study NAME [--spec FILE | --param ...] [options] -- COMMAND [ARGS with {name}...]",
		Description: description + `

EXAMPLES:
    # on a laptop: 2 objectives at once, until the budget is reached
    soma-trial --root ./soma --study quad --spec examples/quadratic/spec.toml --parallel 2 -- \
        python3 examples/quadratic/objective.py --x {x} --y {y}

    # in an sbatch --array job script: the same line on every task
    soma-trial --root /scratch/$USER/soma --study spam --spec spam.toml -- python train.py --lr {lr}

    # flags instead of a spec file
    soma-trial --root ./soma --study s --direction minimize --budget 20 \
        --param lr=float:1e-5:1e-1:log --param opt=choice:adam,sgd -- ./train.sh {lr} {opt}

    # two objectives: the objective prints "<error> <latency_ms>" last
    soma-trial --root ./soma --study s2 --direction minimize,minimize --metrics error,latency_ms \
        --budget 100 --param lr=float:1e-5:1e-1:log -- ./train.sh {lr}`,
		Writer:          stdout,
		ErrWriter:       stderr,
		HideHelpCommand: true,
		// urfave splits slice flags on commas by default, which cut
		// --param opt=choice:adam,sgd into "opt=choice:adam" and "sgd"
		// (bug found after the README showed exactly that example).
		DisableSliceFlagSeparator: true,
		ExitErrHandler:            func(*cli.Context, error) {},
		OnUsageError: func(c *cli.Context, err error, _ bool) error {
			return usageError{err}
		},
		Flags: []cli.Flag{
			// --root and --study are required, but checked in action, not by
			// urfave's Required: its error exited 1 without the usage hint
			// (issue 16).
			&cli.StringFlag{Name: "root", Usage: "the study folder (created if missing; required), or a bucket: s3://bucket/prefix (AWS_* variables and ~/.aws as the AWS CLI reads them; AWS_ENDPOINT_URL for an S3-compatible server)", EnvVars: []string{"SOMA_ROOT"}},
			&cli.StringFlag{Name: "local", Usage: "with --root s3://...: the folder for the objectives' logs and working folders (logs/ and work/, which a folder root holds itself)", Value: "soma-local"},
			&cli.StringFlag{Name: "study", Usage: "the study's name (letters, digits, -_.; required)"},
			&cli.StringFlag{Name: "spec", Usage: "a TOML study spec (space, direction, sampler, pruner, budget)"},
			&cli.StringSliceFlag{Name: "param", Usage: "a knob, instead of --spec: name=float:LOW:HIGH[:log|:step=S], int:LOW:HIGH[:log|:step=S], choice:A,B, fixed:V; add \" if COND\" to make it conditional: \"mom=float:0:0.99 if opt==sgd\" (COND: opt==sgd, opt!=sgd, opt in [sgd,adam], layers>=3 (<, <=, >, >= on int params), joined by and)"},
			// Slices, so that a repeated --direction adds an objective
			// rather than silently replacing the first; commas do too.
			&cli.StringSliceFlag{Name: "direction", Usage: "with --param: minimize or maximize; for several objectives one per objective, joined by commas (or the flag repeated) and named by --metrics: --direction minimize,maximize --metrics error,latency_ms"},
			&cli.StringSliceFlag{Name: "metrics", Usage: "with --param: the objectives' names, one per --direction entry, in the order the objective prints its scores (final 0.12 35.1): error,latency_ms"},
			&cli.StringFlag{Name: "sampler", Usage: "with --param: tpe (default; with several objectives, multi-objective TPE), random, sobol, grid, nsga2 (several objectives); options as tpe:startup=20"},
			&cli.StringFlag{Name: "pruner", Usage: "with --param: none (default), median, percentile, asha; options as median:warmup=5; with several objectives name the metric it judges: median:metric=error"},
			&cli.IntFlag{Name: "budget", Usage: "with --param: number of trials (at least 1; for grid, leave it out for the grid's size)", DefaultText: "none"},
			&cli.Uint64Flag{Name: "seed", Usage: "with --param: the study's seed"},
			&cli.IntFlag{Name: "trial", Value: -1, Usage: "run exactly this trial number (0 to budget-1) and exit (one trial per array task)", DefaultText: "none"},
			&cli.IntFlag{Name: "max-trials", Usage: "run at most this many trials in this process (0: no cap)"},
			&cli.IntFlag{Name: "parallel", Value: 1, Usage: "objectives to run at once in this process"},
			&cli.DurationFlag{Name: "timeout", Usage: "fail a trial that runs longer than this (0: no limit)"},
			&cli.DurationFlag{Name: "kill-grace", Value: 10 * time.Second, Usage: "time between prune verdict, SIGTERM and SIGKILL (more than 0)"},
			&cli.DurationFlag{Name: "lease", Value: study.DefaultGrace, Usage: "a running trial with no heartbeat for this long is stale and retried (at least 1s, 3s on a bucket; all processes of a study should agree)"},
			&cli.BoolFlag{Name: "no-wait", Usage: "exit when every remaining trial runs elsewhere, and never keep watch to retry the ones that go stale (see THE END OF A STUDY)"},
			&cli.BoolFlag{Name: "requeue-on-usr1", Usage: "in a Slurm job: when SIGUSR1 (the pre-timeout warning) interrupts it, ask Slurm to requeue this job (scontrol requeue), so the task starts again and retries the interrupted trial (soma slurm submit sets it)"},
			&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "log trial starts and every report"},
		},
		Action: func(c *cli.Context) error { return action(c, sig) },
	}
}

func action(c *cli.Context, sig <-chan os.Signal) error {
	argv := c.Args().Slice()
	if len(argv) == 0 {
		return usageError{errors.New("no objective command: put it after --, e.g. -- python3 train.py --lr {lr}")}
	}
	// Everything the user typed is checked before anything is created in
	// the store. (Bug: a bad study name or a {typo} placeholder was
	// refused only after the store, or even the study, was made.)
	if err := checkFlags(c); err != nil {
		return usageError{err}
	}
	spec, err := specFromFlags(c)
	if err != nil {
		return usageError{err}
	}
	if spec != nil {
		if err := checkAgainstSpec(c, spec, spec.Budget, argv); err != nil {
			return usageError{err}
		}
	}
	ctx := c.Context
	// Without a spec this process joins a study that must exist: a
	// missing root is not created for it.
	store, err := rootstore.Open(ctx, c.String("root"), rootstore.Options{Create: spec != nil})
	if err != nil {
		return err
	}
	// Last to run: after every trial, heartbeat and pack of this run.
	defer store.Close()
	// Logs and working folders are files the objective writes: in the
	// root when it is a folder, else in --local.
	local := store.Root()
	logsCmd := "soma logs " + store.Root()
	if rootstore.IsBucket(local) {
		local = c.String("local")
		// soma logs reads a bucket study's logs from --local: the hints
		// name it (they said "soma logs soma-local", which is no root).
		logsCmd += " --local " + local
		if err := os.MkdirAll(local, 0o777); err != nil {
			return fmt.Errorf("--local %s: %w", local, err)
		}
	}
	st, err := study.Open(ctx, store, c.String("study"), spec, study.Options{Grace: c.Duration("lease")})
	if sme := (*study.SpecMismatchError)(nil); errors.As(err, &sme) {
		sme.Root = c.String("root") // the soma extend line names it
	}
	if err != nil {
		return err
	}
	// Again against the study as it is: a joining process brought no
	// spec, and a discrete space may hold fewer points than the budget.
	if err := checkAgainstSpec(c, st.Spec(), st.Limit(), argv); err != nil {
		return usageError{err}
	}
	if err := trialrun.CheckArgs(argv, st.Space()); err != nil {
		return usageError{err}
	}
	helperDir, err := os.MkdirTemp("", "soma-trial-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(helperDir)
	if err := os.WriteFile(filepath.Join(helperDir, "soma_report.py"), objective.Helper, 0o644); err != nil {
		return err
	}
	job, inJob, err := slurm.FromEnv(os.Getenv)
	if err != nil {
		fmt.Fprintf(c.App.ErrWriter, "soma-trial: warning: ignoring the Slurm environment: %v\n", err)
		inJob = false
	}
	who := study.Me("")
	if inJob {
		who.Job = job.Ref().String()
		if job.Node != "" {
			who.Host = job.Node
		}
	}
	sum, err := trialrun.Run(ctx, st, local, trialrun.Options{
		Argv:        argv,
		Trial:       c.Int("trial"),
		MaxTrials:   c.Int("max-trials"),
		Parallel:    c.Int("parallel"),
		Timeout:     c.Duration("timeout"),
		KillGrace:   c.Duration("kill-grace"),
		NoWait:      c.Bool("no-wait"),
		Who:         who,
		Log:         c.App.ErrWriter,
		Verbose:     c.Bool("verbose"),
		PythonPath:  helperDir,
		LogsCommand: logsCmd,
		// The running executable's own file, even if it is replaced on
		// disk while the study runs.
		Guard: "/proc/self/exe",
	}, sig)
	if err == nil {
		fmt.Fprintf(c.App.ErrWriter, "soma-trial: %s: ran %d trials (%s); stopped: %s\n", st.Name(), sum.Ran, sum.StatesText(), stopReason(sum.Stopped))
		if allFailed(sum) {
			return fmt.Errorf("%w (%d): see why with %s --study %s TRIAL --stderr", errAllFailed, sum.States["failed"], logsCmd, st.Name())
		}
	}
	if errors.Is(err, trialrun.ErrInterrupted) && sum.Signal == syscall.SIGUSR1 && c.Bool("requeue-on-usr1") {
		requeue(c, job, inJob)
	}
	return err
}

// requeue asks Slurm to start this job again after the pre-timeout
// warning: nothing else restarts a task that ran out of time (--requeue
// covers node failure and preemption only), and the interrupted trial
// would wait for the next submission. A failure is reported, not fatal:
// the trial is recorded interrupted either way.
func requeue(c *cli.Context, job slurm.Job, inJob bool) {
	if !inJob {
		fmt.Fprintln(c.App.ErrWriter, "soma-trial: --requeue-on-usr1: not in a Slurm job; nothing to requeue")
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Context), 20*time.Second)
	defer cancel()
	// Requeued by its own job id (an array task's SLURM_JOB_ID), named
	// as users and soma status know it: 25_0, not 26 (issue 16).
	ref := slurm.Ref{Job: job.ID}
	name := job.Ref().String()
	if name != ref.String() {
		name += " (job id " + ref.String() + ")"
	}
	if err := (slurm.Client{}).Requeue(ctx, ref); err != nil {
		fmt.Fprintf(c.App.ErrWriter, "soma-trial: warning: could not requeue job %s (the interrupted trial waits for another task or submission): %v\n", name, err)
		return
	}
	fmt.Fprintf(c.App.ErrWriter, "soma-trial: asked Slurm to requeue job %s; it will retry the interrupted trial\n", name)
}

// errAllFailed: every trial this process ran failed (exitAllFailed).
var errAllFailed = errors.New("every trial this process ran failed")

// allFailed reports whether the process ran trials and every one failed:
// none ended done or pruned.
func allFailed(sum trialrun.Summary) bool {
	return sum.States["failed"] > 0 && sum.States["done"]+sum.States["pruned"] == 0
}

// minLease is the shortest --lease: heartbeats go every lease/5, and a
// lease of a few milliseconds expired between a process's claim and its
// first heartbeat, so the process superseded its own claim (issue 16).
const minLease = time.Second

// minBucketLease is the shortest --lease on a bucket, whose times are
// whole seconds (Last-Modified, Date): a heartbeat and the now it is
// judged against may each read up to a second early, so a fresh holder's
// gap (lease/5 at most, between heartbeats) can look a second longer than
// it is. At 3 s that still leaves over a second to spare; at the folder's
// 1 s minimum a live trial could be judged stale and run twice at once.
const minBucketLease = 3 * time.Second

// checkFlags checks the flags that need no spec: the required ones, the
// study's name and the ranges of the numbers, naming the valid range.
func checkFlags(c *cli.Context) error {
	if c.String("root") == "" {
		return errors.New("--root is required: the study folder, e.g. --root /scratch/$USER/soma (or set SOMA_ROOT)")
	}
	if c.String("study") == "" {
		return errors.New("--study is required: the study's name, e.g. --study lr-sweep")
	}
	if err := study.ValidateName(c.String("study")); err != nil {
		return err
	}
	if c.IsSet("trial") && c.Int("trial") < 0 {
		return fmt.Errorf("--trial %d: want a trial number, 0 to the budget minus 1", c.Int("trial"))
	}
	if n := c.Int("max-trials"); n < 0 {
		return fmt.Errorf("--max-trials %d: want 0 (no cap) or more", n)
	}
	if n := c.Int("parallel"); n < 1 {
		return fmt.Errorf("--parallel %d: want at least 1", n)
	}
	if d := c.Duration("timeout"); d < 0 {
		return fmt.Errorf("--timeout %s: want 0 (no limit) or more", d)
	}
	if d := c.Duration("kill-grace"); d <= 0 {
		return fmt.Errorf("--kill-grace %s: want more than 0 (default 10s)", d)
	}
	if d := c.Duration("lease"); d < minLease {
		return fmt.Errorf("--lease %s: want at least %s (heartbeats go every lease/5; give minutes on a shared filesystem, default %s)", d, minLease, study.DefaultGrace)
	}
	if d := c.Duration("lease"); d < minBucketLease && rootstore.IsBucket(c.String("root")) {
		return fmt.Errorf("--lease %s: want at least %s on a bucket, whose times are whole seconds (default %s)", d, minBucketLease, study.DefaultGrace)
	}
	return nil
}

// checkAgainstSpec checks what depends on the study's spec: the
// objective's {name} placeholders and --trial's range (0 to limit-1).
func checkAgainstSpec(c *cli.Context, spec *study.Spec, limit int, argv []string) error {
	knobs := spec.Space.Knobs()
	params := make([]objective.Param, len(knobs))
	for i, k := range knobs {
		params[i] = objective.Param{Name: k.Name}
	}
	vars := map[string]string{"study": "", "trial": "", "attempt": "", "trial_dir": ""}
	if _, err := objective.Substitute(argv, params, vars); err != nil {
		return err
	}
	if t := c.Int("trial"); c.IsSet("trial") && t >= limit {
		return fmt.Errorf("--trial %d: the study runs %d trials, numbered 0 to %d", t, limit, limit-1)
	}
	return nil
}

// stopReason explains a Summary.Stopped word.
func stopReason(s string) string {
	switch s {
	case "budget":
		return "the study's budget is reached"
	case "trial":
		return "ran the trial asked for"
	case "max-trials":
		return "ran --max-trials"
	case "no-work":
		return "nothing claimable now (--no-wait)"
	case "watched":
		return "nothing claimable now; another process keeps watch"
	case "space-exhausted":
		return "every point of the discrete space is taken"
	}
	return s
}

func specFromFlags(c *cli.Context) (*study.Spec, error) {
	file, params := c.String("spec"), c.StringSlice("param")
	switch {
	case file != "" && len(params) > 0:
		return nil, errors.New("give --spec or --param, not both")
	case file != "":
		for _, f := range []string{"direction", "metrics", "sampler", "pruner", "budget", "seed"} {
			if c.IsSet(f) {
				return nil, fmt.Errorf("--%s goes with --param; with --spec, set it in %s", f, file)
			}
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		s, err := study.ParseSpec(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		return s, nil
	case len(params) > 0:
		return study.SpecFlags{
			Params:    params,
			Direction: strings.Join(c.StringSlice("direction"), ","),
			Metrics:   strings.Join(c.StringSlice("metrics"), ","),
			Sampler:   c.String("sampler"),
			Pruner:    c.String("pruner"),
			Budget:    c.Int("budget"),
			Seed:      c.Uint64("seed"),
		}.Spec()
	}
	return nil, nil // join the existing study
}

func run(args []string, stdout, stderr io.Writer) int {
	// SOMA_CPUPROFILE=FILE writes a Go CPU profile of this process, for
	// finding where the time of a trial goes (go tool pprof FILE).
	if p := os.Getenv("SOMA_CPUPROFILE"); p != "" {
		if f, err := os.Create(p); err == nil && pprof.StartCPUProfile(f) == nil {
			defer func() { pprof.StopCPUProfile(); f.Close() }()
		}
	}
	ctx := context.Background()
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1)
	defer signal.Stop(sig)
	err := newApp(stdout, stderr, sig).RunContext(ctx, args)
	if err == nil {
		// A signal that came after the loop's last trial (Slurm's time
		// limit as the budget completes) still means "you were stopped".
		select {
		case s := <-sig:
			err = fmt.Errorf("%w by %s after the loop ended", trialrun.ErrInterrupted, s)
		default:
		}
	}
	var ue usageError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, trialrun.ErrInterrupted):
		fmt.Fprintf(stderr, "soma-trial: %v; the running attempts are recorded interrupted and will be retried\n", err)
		return exitInterrupted
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "soma-trial: %v (see soma-trial --help)\n", err)
		return exitUsage
	case errors.Is(err, errAllFailed):
		fmt.Fprintf(stderr, "soma-trial: %v\n", err)
		return exitAllFailed
	case errors.Is(err, study.ErrSpecMismatch):
		fmt.Fprintf(stderr, "soma-trial: %v\n", err)
		return exitUsage
	default:
		fmt.Fprintf(stderr, "soma-trial: %v\n", err)
		return exitError
	}
}
