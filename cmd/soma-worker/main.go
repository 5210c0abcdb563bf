// Command soma-worker is soma's per-node daemon: it runs plans of Python
// filters where the hardware is, in pooled virtual environments, with the
// node's GPUs handed to plans exclusively.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/slurm"
	"github.com/soma-hpc/soma/worker"
	"github.com/soma-hpc/soma/zarr"
)

// Exit statuses (documented in --help).
const (
	exitOK    = 0 // stopped by a signal after a clean shutdown
	exitError = 1 // could not start or serve: the message says why
	exitUsage = 2 // bad flags
)

func main() { os.Exit(run(os.Args, os.Stdout, os.Stderr)) }

type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

const description = `soma-worker runs once per node and executes plans of Python filters sent
to it (soma run, or worker.Client from Go): each plan in a Python process
started from the plan's environment (a venv built from its requirements,
pooled by content under --env-dir and kept warm for the next plan), with
the GPUs it asks for given to it alone (CUDA_VISIBLE_DEVICES).

   # a laptop: loopback needs no token
   soma-worker --root ~/soma --python /usr/bin/python3

   # a Slurm node: one per node, reachable from the cluster, with a token
   openssl rand -hex 32 > ~/.soma/token && chmod 600 ~/.soma/token
   srun --ntasks-per-node=1 soma-worker --root /scratch/$USER/soma \
        --listen 0.0.0.0:7070 --token-file ~/.soma/token --tag torch \
        --python /usr/bin/python3

   soma run --worker http://node12:7070 --token-file ~/.soma/token plan.toml

THE STORE (--root) is the soma folder, usually on the shared filesystem:
plans may send values as blob:sha256:... references and zarr:PATH?rows=A:B
(PATH relative to the root), the Python files by digest, and large outputs
and trained states come back as blob references. Without --root every
value travels inline.

REGISTRATION: with --root the worker announces itself at ROOT/workers/ID
(address, CPUs, memory, GPUs, tags, --max-plans slots, Slurm job) and
touches that record every --timeout/3; soma run ROOT plan.toml places
plans on it through leases, one per slot, and soma workers ROOT lists it.
SIGINT/SIGTERM removes the record before the server stops; a worker that
is killed is counted dead once its heartbeat is older than --timeout. The
worker refuses (HTTP 503) a plan beyond its --max-plans slots.

SAFETY: a worker runs whatever code a plan ships. It refuses to listen
beyond loopback without --token-file, and refuses a token file that group
or others can read (fix: chmod 600 FILE). Requests carry the token as
"Authorization: Bearer TOKEN".

THE INTERPRETER is explicit: --python or $SOMA_PYTHON; there is no silent
fallback to whatever python3 is on PATH. Plans' venvs are built from it
(offline-friendly: a plan may ask for --system-site-packages, pip
--no-index --find-links DIR, or an index URL).

ENDPOINTS: POST /plans, GET /plans/ID, DELETE /plans/ID (cancel),
GET /plans/stream (WebSocket), GET /health (no token), GET /capabilities.

EXIT STATUS: 0 stopped by SIGINT/SIGTERM after a clean shutdown; 1 could
not start or serve (one line on stderr says why); 2 bad usage.`

func newApp(stdout, stderr io.Writer) *cli.App {
	return &cli.App{
		Name:            "soma-worker",
		Usage:           "run plans of Python filters on this node (one per node)",
		UsageText:       "soma-worker --python PY [--root ROOT] [--listen ADDR --token-file FILE] [flags]",
		Description:     description,
		Writer:          stdout,
		ErrWriter:       stderr,
		HideHelpCommand: true,
		ExitErrHandler:  func(*cli.Context, error) {},
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return usageError{err}
		},
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "root", Usage: "the soma folder (store) for references, shipped files and large outputs", EnvVars: []string{"SOMA_ROOT"}},
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:7070", Usage: "address to serve on; beyond loopback needs --token-file"},
			&cli.StringFlag{Name: "token-file", Usage: "file holding the bearer token (mode 600)", EnvVars: []string{"SOMA_TOKEN_FILE"}},
			&cli.StringSliceFlag{Name: "tag", Usage: "a tag to advertise (repeatable), e.g. --tag torch --tag a100"},
			&cli.StringFlag{Name: "python", Usage: "the interpreter plans' venvs are built from (required)", EnvVars: []string{"SOMA_PYTHON"}},
			&cli.StringFlag{Name: "env-dir", Usage: "node-local folder of pooled venvs (default: $SLURM_TMPDIR or $TMPDIR/soma-envs-UID)"},
			&cli.StringFlag{Name: "work-dir", Usage: "node-local folder for the Python daemons' logs and shipped files (default: next to --env-dir)"},
			&cli.StringFlag{Name: "zarr-cache", Usage: "node-local Zarr chunk cache (default: as soma zarr, $SOMA_ZARR_CACHE)"},
			&cli.Int64Flag{Name: "max-env-bytes", Usage: "evict least recently used venvs past this size (0: the pool's default)"},
			&cli.IntFlag{Name: "max-cpus", Usage: "CPUs to offer (0: all the node's, or Slurm's share)"},
			&cli.StringFlag{Name: "max-memory", Usage: "memory to offer, e.g. 64GiB (empty: all)"},
			&cli.IntFlag{Name: "max-gpus", Usage: "GPUs to offer (0: all visible ones)"},
			&cli.IntFlag{Name: "max-plans", Usage: "plans run at once (0: one per CPU)"},
			&cli.DurationFlag{Name: "plan-timeout", Value: worker.DefaultPlanTimeout, Usage: "timeout of a plan that sets none"},
			&cli.DurationFlag{Name: "cancel-grace", Value: worker.DefaultCancelGrace, Usage: "between SIGINT and SIGKILL for a cancelled plan"},
			&cli.DurationFlag{Name: "stop-grace", Value: worker.DefaultStopGrace, Usage: "on SIGTERM (scancel), how long running plans get to end before they are cancelled; with --cancel-grace, keep it under Slurm's KillWait (30 s by default)"},
			&cli.StringFlag{Name: "nvml", Usage: "path of libnvidia-ml.so.1 (default: the loader's search)"},
			&cli.StringFlag{Name: "advertise", Usage: "with --root: the URL placers send plans to (default http://HOST:PORT: the --listen address, or this host's name when listening on all addresses)"},
			&cli.StringFlag{Name: "worker-id", Usage: "with --root: the worker's id in ROOT/workers/ (default NODE-PORT)"},
			&cli.DurationFlag{Name: "timeout", Value: worker.DefaultHeartbeatTimeout, Usage: "with --root: readers count the worker dead after this long without a heartbeat (soma workers --timeout must match)"},
			&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "log each daemon start and plan"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("unexpected arguments %q (soma-worker takes only flags)", c.Args().Slice())
			}
			return serve(c, stderr)
		},
	}
}

func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := newApp(stdout, stderr).RunContext(ctx, args)
	var ue usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "soma-worker: %s (see soma-worker --help)\n", err)
		return exitUsage
	default:
		fmt.Fprintf(stderr, "soma-worker: %s\n", strings.TrimRight(err.Error(), "\n"))
		return exitError
	}
}

// serve wires the flags to the worker package and serves until a signal.
func serve(c *cli.Context, stderr io.Writer) error {
	level := slog.LevelWarn
	if c.Bool("verbose") {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	python := c.String("python")
	if python == "" {
		return usagef("no Python interpreter: pass --python /path/to/python3 or set SOMA_PYTHON (soma never guesses from PATH)")
	}
	token := ""
	if f := c.String("token-file"); f != "" {
		t, err := worker.ReadTokenFile(f)
		if err != nil {
			return err
		}
		token = t
	}
	if err := worker.CheckListen(c.String("listen"), token); err != nil {
		return err
	}
	limits, err := limitsOf(c)
	if err != nil {
		return err
	}
	// Bug: the worker takes a zero grace for its default, so
	// --stop-grace 0 gave running plans 10 s, not none; and a negative
	// one the same. Refused rather than read a way nobody means.
	for _, f := range []string{"stop-grace", "cancel-grace", "plan-timeout"} {
		if d := c.Duration(f); d <= 0 {
			return usagef("--%s %s: must be more than 0 (1ms to give no time at all)", f, d)
		}
	}
	var store *fsstore.Store
	if root := c.String("root"); root != "" {
		if store, err = fsstore.Open(root, fsstore.Options{Create: true}); err != nil {
			return err
		}
		defer store.Close()
	}
	envDir, workDir := dirsOf(c)
	envs, err := worker.NewEnvPool(worker.EnvOptions{Dir: envDir, Python: python, MaxBytes: c.Int64("max-env-bytes"), Logger: logger})
	if err != nil {
		return err
	}
	res, err := worker.DetectResources(worker.ResourceOptions{Limits: limits, NVMLPath: c.String("nvml"), Env: os.Getenv})
	if err != nil {
		return err
	}
	if res.GPUNote != "" {
		fmt.Fprintf(stderr, "soma-worker: no GPUs: %s\n", res.GPUNote)
	}
	zdir := c.String("zarr-cache")
	if zdir == "" {
		zdir = zarr.DefaultCacheDir()
	}
	cache, err := zarr.OpenCache(zdir, zarr.CacheOptions{})
	if err != nil {
		return err
	}
	if c.Duration("timeout") <= 0 {
		return usagef("--timeout %s: want a positive duration such as 30s", c.Duration("timeout"))
	}
	ln, err := net.Listen("tcp", c.String("listen"))
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer ln.Close()
	// The record's load follows the plans: OnChange keeps only the
	// latest view and wakes the updater, which rewrites the record at
	// most once per wake-up (a burst of plans costs one Update, not one
	// per plan).
	var (
		loadMu  sync.Mutex
		active  []string
		changes = make(chan struct{}, 1)
	)
	w, err := worker.New(worker.Options{
		Store: store, Envs: envs, Python: python, WorkDir: workDir, ZarrCache: cache,
		Resources: res, Limits: limits, Tags: c.StringSlice("tag"),
		PlanTimeout: c.Duration("plan-timeout"), CancelGrace: c.Duration("cancel-grace"), Logger: logger,
		OnChange: func(ids []string) {
			loadMu.Lock()
			active = ids
			loadMu.Unlock()
			select {
			case changes <- struct{}{}:
			default:
			}
		},
	})
	if err != nil {
		return err
	}
	defer w.Close()

	serveCtx, stopServing := context.WithCancel(context.Background())
	defer stopServing()
	served := make(chan error, 1)
	srv := worker.NewServer(w, token)
	srv.StopGrace = c.Duration("stop-grace")
	go func() { served <- srv.Serve(serveCtx, ln) }()

	var reg *worker.Registration
	runCtx, stopRun := context.WithCancel(context.Background())
	defer stopRun()
	var owned sync.WaitGroup
	if store != nil {
		rec, err := recordOf(c, ln.Addr().(*net.TCPAddr), res, w.Capabilities().MaxPlans)
		if err != nil {
			stopServing()
			<-served
			return err
		}
		// A signal that arrives while announcing must not leave the
		// record behind: announce to the end, then Close below unbinds
		// it (a SIGTERM right after start used to exit 1 with "context
		// canceled" and no cleanup).
		actx, cancel := context.WithTimeout(context.WithoutCancel(c.Context), time.Minute)
		reg, err = worker.Announce(actx, store, rec, worker.RegistryOptions{Timeout: c.Duration("timeout"), Logger: logger})
		cancel()
		if err != nil {
			stopServing()
			<-served
			return err
		}
		fmt.Fprintf(stderr, "soma-worker: registered as %s at %s (%d slots)\n", rec.ID, rec.Address, rec.Slots)
		owned.Add(2)
		go func() {
			defer owned.Done()
			if err := reg.Run(runCtx); err != nil && !errors.Is(err, worker.ErrRegistrationClosed) {
				logger.Warn("heartbeats stopped", "err", err)
			}
		}()
		go func() {
			defer owned.Done()
			for {
				select {
				case <-runCtx.Done():
					return
				case <-changes:
				}
				loadMu.Lock()
				ids := active
				loadMu.Unlock()
				r := reg.Record()
				r.Load, r.ActivePlans = len(ids), ids
				if err := reg.Update(runCtx, r); err != nil && runCtx.Err() == nil && !errors.Is(err, worker.ErrRegistrationClosed) {
					logger.Warn("record update failed; the next change tries again", "err", err)
				}
			}
		}()
	}

	// "serving" is printed once the worker is reachable and, with
	// --root, registered: scripts and tests wait for this line.
	fmt.Fprintf(stderr, "soma-worker: serving http://%s (%d CPUs, %d GPUs, python %s)\n", ln.Addr(), res.CPUs, len(res.GPUs), python)
	var serveErr error
	select {
	case <-c.Context.Done():
	case serveErr = <-served:
	}
	// Leave placement first, so no placer picks this worker while it
	// stops; then end the owned goroutines; then stop the server.
	var closeErr error
	if reg != nil {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		closeErr = reg.Close(cctx)
		cancel()
	}
	stopRun()
	owned.Wait()
	if serveErr == nil {
		stopServing()
		serveErr = <-served
	}
	return errors.Join(serveErr, closeErr)
}

// recordOf is the worker's record in the store: its id, the URL plans
// reach it at, what it offers, and where it runs (Slurm's job and node
// are filled here: package worker does not import slurm).
func recordOf(c *cli.Context, addr *net.TCPAddr, res worker.Resources, slots int) (worker.WorkerRecord, error) {
	me, err := slurm.Self()
	if err != nil {
		return worker.WorkerRecord{}, fmt.Errorf("reading the Slurm environment: %w", err)
	}
	node := me.Host
	if me.InJob && me.Job.Node != "" {
		node = me.Job.Node
	}
	id := worker.DefaultWorkerID(node, addr.Port)
	if s := c.String("worker-id"); s != "" {
		if id, err = worker.ParseWorkerID(s); err != nil {
			return worker.WorkerRecord{}, usagef("--worker-id: %v", err)
		}
	}
	address := c.String("advertise")
	if address == "" {
		// A worker listening on one address is reached there; one
		// listening on all of them (0.0.0.0) by this node's name —
		// advertising 0.0.0.0 would send placers to themselves.
		host := node
		if !addr.IP.IsUnspecified() {
			host = addr.IP.String()
		}
		address = "http://" + net.JoinHostPort(host, strconv.Itoa(addr.Port))
	} else if u, err := url.Parse(address); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return worker.WorkerRecord{}, usagef("--advertise %q: want a URL such as http://node12:7070", address)
	}
	rec := worker.WorkerRecord{
		ID: id, Address: strings.TrimRight(address, "/"), Capabilities: worker.RecordCapabilitiesOf(res),
		Tags: c.StringSlice("tag"), Slots: max(slots, 1), SomaVersion: somaVersion(),
		Host: me.Host, PID: me.PID,
	}
	if me.InJob {
		rec.SlurmJob = me.Job.Ref().String()
		rec.SlurmNode = me.Job.Node
	}
	return rec, nil
}

// somaVersion is the module version the binary was built from, or
// "(devel)" for a build from a checkout.
func somaVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// dirsOf returns the env and work folders: node-local by default.
func dirsOf(c *cli.Context) (envDir, workDir string) {
	base := os.Getenv("SLURM_TMPDIR")
	if base == "" {
		base = os.TempDir()
	}
	envDir = c.String("env-dir")
	if envDir == "" {
		envDir = filepath.Join(base, "soma-envs-"+strconv.Itoa(os.Getuid()))
	}
	workDir = c.String("work-dir")
	if workDir == "" {
		workDir = filepath.Join(filepath.Dir(filepath.Clean(envDir)), "soma-worker-"+strconv.Itoa(os.Getuid()))
	}
	return envDir, workDir
}

func limitsOf(c *cli.Context) (worker.Limits, error) {
	l := worker.Limits{MaxCPUs: c.Int("max-cpus"), MaxGPUs: c.Int("max-gpus"), MaxPlans: c.Int("max-plans")}
	if l.MaxCPUs < 0 || l.MaxGPUs < 0 || l.MaxPlans < 0 {
		return l, usagef("--max-cpus, --max-gpus and --max-plans must be 0 (no limit) or more")
	}
	if s := c.String("max-memory"); s != "" {
		n, err := worker.ParseSize(s)
		if err != nil {
			return l, usagef("--max-memory %q: %v", s, err)
		}
		l.MaxMemory = n
	}
	return l, nil
}
