package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/zarr"
)

// Defaults, each in one place (the original had two defaults for one
// timeout, a CLI flag's and a struct's: seed 000). cmd/soma-worker's
// flags show these values; they do not restate them.
const (
	// DefaultPlanTimeout bounds a plan that sets no timeout.
	DefaultPlanTimeout = 30 * time.Minute
	// DefaultCancelGrace is how long a cancelled or timed-out plan's
	// Python gets between SIGINT and SIGKILL.
	DefaultCancelGrace = 5 * time.Second
	// DefaultStopGrace is how long the plans still running when a worker
	// is told to stop (SIGTERM: scancel) get to end before they are
	// cancelled. With DefaultCancelGrace it stays inside Slurm's default
	// KillWait (30 s) between SIGTERM and SIGKILL.
	DefaultStopGrace = 10 * time.Second
	// DefaultInlineLimit: outputs larger than this come back as blob
	// references when the worker has a store.
	DefaultInlineLimit = 1 << 20
	// keepResults and keepBytes bound the finished results GET
	// /plans/<id> can show: the latest 1024, holding at most 256 MiB of
	// inline values (a worker without a store returns every output
	// inline); older ones are forgotten first.
	keepResults = 1024
	keepBytes   = 256 << 20
)

// Errors of the plan table.
var (
	// ErrUnknownPlan: no plan with that id (GET or DELETE /plans/<id>).
	ErrUnknownPlan = errors.New("worker: unknown plan")
	// ErrDuplicatePlan: a plan with that id is already running.
	ErrDuplicatePlan = errors.New("worker: a plan with this id is running")
	// ErrInvalidPlan: a plan that cannot run as written.
	ErrInvalidPlan = errors.New("worker: invalid plan")
	// ErrClosed: the worker is shutting down.
	ErrClosed = errors.New("worker: closed")
	// ErrFull: the worker already runs as many plans as it has slots
	// (Limits.MaxPlans). Placement hands out one lease per slot, so a
	// placed plan never meets it; a plan sent past placement (soma run
	// --worker, a second placer with a stale view) does, and is refused
	// rather than queued: the issue asks the workers themselves to check
	// overbooking.
	ErrFull = errors.New("worker: every slot is busy")
)

// Options configure New.
type Options struct {
	// ID names the worker in capabilities; default host name.
	ID string
	// Store is the store under --root: blob references, file shipping by
	// digest and large outputs use it. Nil is allowed: then every value
	// must be inline.
	Store *fsstore.Store
	// Envs provides the plans' Python environments. Required.
	Envs *EnvPool
	// Python is the configured interpreter, reported in capabilities.
	Python string
	// WorkDir holds daemon.py, shipped files and plan logs (node-local).
	// Required.
	WorkDir string
	// ZarrCache is the node-local chunk cache for zarr references.
	ZarrCache *zarr.Cache
	// Resources are what the worker offers (DetectResources); Limits.MaxPlans
	// bounds concurrent plans (0: the number of CPUs).
	Resources Resources
	Limits    Limits
	Tags      []string
	// PlanTimeout (0: DefaultPlanTimeout), CancelGrace (0:
	// DefaultCancelGrace), InlineLimit (0: DefaultInlineLimit),
	// IdleDaemons (0: as many as the worker has slots, so that a burst of
	// plans of one environment finds a warm daemon for each; idle daemons
	// end with their env's hold, a minute after its last plan).
	PlanTimeout time.Duration
	CancelGrace time.Duration
	InlineLimit int
	IdleDaemons int
	Logger      *slog.Logger
	// OnChange, if set, is called after a plan is accepted and after one
	// ends, outside the worker's lock, with the ids of the plans not yet
	// ended (sorted). soma-worker uses it to keep its record's load
	// current. It must not block for long: calls are made from the
	// submitting and finishing goroutines.
	OnChange func(active []string)
}

// Worker runs plans. It is safe for concurrent use; Close ends it.
type Worker struct {
	o     Options
	log   *slog.Logger
	pool  *daemonPool
	gpus  *GPUSet
	slots chan struct{}
	res   *resolver

	mu    sync.Mutex
	plans map[string]*planRecord
	// live holds the plans that have not ended. Was: every plan start
	// counted them by walking plans, which keeps up to keepResults ended
	// ones (1024 map entries walked per plan, and twice more for Active
	// with OnChange set: issue 14's round trip).
	live  map[string]*planRecord
	order []string // finished plan ids, oldest first
	kept  int64    // inline bytes of the finished results in plans
	// keepBytes is keepBytes, lowered by tests.
	keepBytes int64
	closed    bool
	running   sync.WaitGroup
}

// planRecord is one plan the worker knows.
type planRecord struct {
	id     string
	cancel context.CancelCauseFunc
	done   chan struct{}
	state  PlanState
	result *Result
	size   int64 // inline bytes of result
	// output reads the end of what the running plan has printed (its
	// daemon's log since the plan began); nil until it runs.
	output func() string
}

// New returns a worker. It writes daemon.py into WorkDir.
func New(o Options) (*Worker, error) {
	if o.Envs == nil {
		return nil, errors.New("worker: Options.Envs is required")
	}
	if o.WorkDir == "" {
		return nil, errors.New("worker: Options.WorkDir is required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.ID == "" {
		o.ID, _ = os.Hostname()
	}
	if o.PlanTimeout <= 0 {
		o.PlanTimeout = DefaultPlanTimeout
	}
	if o.CancelGrace <= 0 {
		o.CancelGrace = DefaultCancelGrace
	}
	if o.InlineLimit <= 0 {
		o.InlineLimit = DefaultInlineLimit
	}
	maxPlans := o.Limits.MaxPlans
	if maxPlans <= 0 {
		maxPlans = max(o.Resources.CPUs, runtime.NumCPU())
	}
	if o.IdleDaemons <= 0 {
		// It was 2 whatever the slots: on a worker of 4 slots, each
		// burst of 4 plans ended 2 daemons and the next started 2 again,
		// a Python start-up (numpy: ~0.1 s; torch: seconds) each; placed
		// plans, spread over workers, paid it most (issue 15's bench).
		o.IdleDaemons = maxPlans
	}
	for _, sub := range []string{"daemons", "files", "tmp"} {
		if err := os.MkdirAll(filepath.Join(o.WorkDir, sub), 0o755); err != nil {
			return nil, fmt.Errorf("worker: work folder: %w", err)
		}
	}
	script, err := writeDaemonScript(o.WorkDir)
	if err != nil {
		return nil, err
	}
	pool := &daemonPool{script: script, logDir: filepath.Join(o.WorkDir, "daemons"), grace: o.CancelGrace, maxIdle: o.IdleDaemons, logger: o.Logger}
	o.Envs.onDrop(pool.envDropped)
	return &Worker{
		o:     o,
		log:   o.Logger,
		pool:  pool,
		gpus:  NewGPUSet(o.Resources.GPUs),
		slots: make(chan struct{}, maxPlans),
		res:   &resolver{store: o.Store, cache: o.ZarrCache, tmp: filepath.Join(o.WorkDir, "tmp")},
		plans: map[string]*planRecord{},
		live:  map[string]*planRecord{},

		keepBytes: keepBytes,
	}, nil
}

// Submit validates p and starts it; the plan runs until it ends, is
// cancelled (Cancel) or the worker closes. Wait or Status read its result.
func (w *Worker) Submit(p *Plan) error {
	rec, ctx, stop, err := w.register(p)
	if err != nil {
		return err
	}
	w.changed()
	go w.runRegistered(rec, ctx, stop, p)
	return nil
}

// runRegistered runs a registered plan to its end (register's contract)
// and returns its result.
func (w *Worker) runRegistered(rec *planRecord, ctx context.Context, stop context.CancelFunc, p *Plan) *Result {
	defer w.running.Done()
	defer stop()
	res := w.execute(ctx, p, func(out func() string) { w.started(rec, out) })
	w.finish(rec, res)
	return res
}

// register validates p and records it as queued. The caller owns the
// returned context (ended by Cancel, the plan's timeout or Close), must
// call stop, and must end the plan with finish and w.running.Done.
func (w *Worker) register(p *Plan) (*planRecord, context.Context, context.CancelFunc, error) {
	if err := ValidatePlan(p); err != nil {
		return nil, nil, nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, nil, nil, ErrClosed
	}
	if _, ok := w.live[p.ID]; ok {
		return nil, nil, nil, fmt.Errorf("%w: %q", ErrDuplicatePlan, p.ID)
	}
	if n := w.runningLocked(); n >= cap(w.slots) {
		return nil, nil, nil, fmt.Errorf("%w: %d of %d plans running; plan %q refused (place plans with soma run ROOT, which waits for a free slot, or start the worker with a larger --max-plans)", ErrFull, n, cap(w.slots), p.ID)
	}
	timeout := w.o.PlanTimeout
	if p.TimeoutSeconds > 0 {
		timeout = time.Duration(p.TimeoutSeconds * float64(time.Second))
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	ctx, stop := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("%w after %s", ErrTimeout, timeout))
	rec := &planRecord{id: p.ID, cancel: cancel, done: make(chan struct{}), state: StateQueued}
	if _, ok := w.plans[p.ID]; ok {
		w.forget(p.ID) // an ended plan of the same id
	}
	w.plans[p.ID] = rec
	w.live[p.ID] = rec
	w.running.Add(1)
	return rec, ctx, func() { stop(); cancel(nil) }, nil
}

// changed tells Options.OnChange which plans have not ended.
func (w *Worker) changed() {
	if w.o.OnChange != nil {
		w.o.OnChange(w.Active())
	}
}

// Active returns the ids of the plans that have not ended, sorted.
func (w *Worker) Active() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var ids []string
	for id := range w.live {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Run runs p and returns its result; the error is Submit's. If ctx ends
// first the plan is cancelled (as Cancel does) and ends cancelled. The
// plan is registered as Submit does (Status, Wait and Cancel see it) but
// runs in the calling goroutine: Submit and Wait cost a warm no-op plan
// one more goroutine start and hand-off.
func (w *Worker) Run(ctx context.Context, p *Plan) (*Result, error) {
	rec, pctx, stop, err := w.register(p)
	if err != nil {
		return nil, err
	}
	w.changed()
	unwatch := context.AfterFunc(ctx, func() { rec.cancel(ErrCancelled) })
	defer unwatch()
	return w.runRegistered(rec, pctx, stop, p), nil
}

// Wait returns the result of plan id once it has ended.
func (w *Worker) Wait(ctx context.Context, id string) (*Result, error) {
	w.mu.Lock()
	rec, ok := w.plans[id]
	w.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownPlan, id)
	}
	select {
	case <-rec.done:
		return rec.result, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Status returns where plan id is, with its result once it has ended;
// while it runs, LogTail is the end of what it has printed so far.
func (w *Worker) Status(id string) (*Result, error) {
	w.mu.Lock()
	rec, ok := w.plans[id]
	if !ok {
		w.mu.Unlock()
		return nil, fmt.Errorf("%w: %q", ErrUnknownPlan, id)
	}
	if rec.result != nil {
		w.mu.Unlock()
		return rec.result, nil
	}
	r := &Result{Version: ProtocolVersion, ID: id, State: rec.state}
	out := rec.output
	w.mu.Unlock()
	if out != nil && !r.State.Done() {
		// What it printed so far: progress of a long plan.
		r.LogTail = out()
	}
	return r, nil
}

// Cancel asks plan id to stop: its Python is interrupted, then killed
// after the grace; the plan ends cancelled. Cancelling an ended plan does
// nothing.
func (w *Worker) Cancel(id string) error {
	w.mu.Lock()
	rec, ok := w.plans[id]
	w.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownPlan, id)
	}
	rec.cancel(ErrCancelled)
	return nil
}

// Running returns how many plans have not ended.
func (w *Worker) Running() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.runningLocked()
}

// runningLocked is Running with w.mu held.
func (w *Worker) runningLocked() int {
	return len(w.live)
}

// DaemonsStarted returns how many Python daemons the worker has started
// (a warm plan starts none).
func (w *Worker) DaemonsStarted() int { return w.pool.started() }

// Capabilities returns what the worker offers.
func (w *Worker) Capabilities() Capabilities {
	c := Capabilities{
		Version:     ProtocolVersion,
		WorkerID:    w.o.ID,
		CPUs:        w.o.Resources.CPUs,
		MemoryBytes: w.o.Resources.MemoryBytes,
		GPUNote:     w.o.Resources.GPUNote,
		MaxPlans:    cap(w.slots),
		Tags:        w.o.Tags,
		Python:      w.o.Python,
		HasStore:    w.o.Store != nil,
	}
	for _, g := range w.o.Resources.GPUs {
		//lint:ignore S1016 GPU belongs to gpu.go and may grow fields the wire does not carry
		c.GPUs = append(c.GPUs, GPUInfo{Index: g.Index, UUID: g.UUID, Name: g.Name,
			MemoryTotal: g.MemoryTotal, MemoryFree: g.MemoryFree, Utilization: g.Utilization})
	}
	return c
}

// Close cancels the running plans, waits for them to end and stops the
// idle daemons. Submit fails afterwards.
func (w *Worker) Close() error {
	w.mu.Lock()
	w.closed = true
	for _, rec := range w.live {
		rec.cancel(ErrClosed)
	}
	w.mu.Unlock()
	w.running.Wait()
	w.pool.close()
	return nil
}

// started marks rec running; out reads what it has printed so far.
func (w *Worker) started(rec *planRecord, out func() string) {
	w.mu.Lock()
	rec.state = StateRunning
	rec.output = out
	w.mu.Unlock()
}

func (w *Worker) finish(rec *planRecord, res *Result) {
	w.mu.Lock()
	rec.state = res.State
	rec.result = res
	delete(w.live, rec.id)
	rec.size = int64(payloadSize(res))
	w.kept += rec.size
	w.order = append(w.order, rec.id)
	// Waiters hold rec itself, so even the newest result may go.
	for len(w.order) > keepResults || (w.kept > w.keepBytes && len(w.order) > 0) {
		w.forget(w.order[0])
	}
	w.mu.Unlock()
	close(rec.done)
	w.changed()
}

// forget drops a finished plan's record; w.mu is held.
func (w *Worker) forget(id string) {
	for i, o := range w.order {
		if o == id {
			w.order = append(w.order[:i], w.order[i+1:]...)
			break
		}
	}
	if rec, ok := w.plans[id]; ok && rec.state.Done() {
		delete(w.plans, id)
		w.kept -= rec.size
	}
}
