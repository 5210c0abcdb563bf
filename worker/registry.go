package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/soma-hpc/soma/fsstore"
)

// DefaultHeartbeatTimeout is how long a worker record or a placement
// lease may go without a heartbeat before it counts as dead (a worker) or
// stale and reclaimable (a lease). It is the one default for this
// timeout: the worker's heartbeat interval, placement, the coordinator and
// `soma workers` all derive theirs from it, so they cannot disagree (the
// Rust coordinator had two defaults, one in its CLI flag and one in its
// registry struct; seed 000, "Debt").
//
// 30 s is three heartbeats at DefaultHeartbeatInterval: one lost or late
// Touch (an NFS server's hiccup, a GC pause) does not kill a worker, and
// a worker killed with SIGKILL leaves placement within half a minute.
const DefaultHeartbeatTimeout = 30 * time.Second

// HeartbeatInterval returns how often a record with the given timeout is
// touched: a third of it, so two heartbeats may be lost before it goes
// stale. A timeout of zero means DefaultHeartbeatTimeout.
func HeartbeatInterval(timeout time.Duration) time.Duration {
	if timeout <= 0 {
		timeout = DefaultHeartbeatTimeout
	}
	return timeout / 3
}

// WorkerRecordVersion is the version of the worker record format this soma
// writes and the newest it reads. A record of a newer version is reported
// as a Problem and never placed on: its fields may mean things this soma
// does not know.
const WorkerRecordVersion = 1

// Names in the store. Like every name, they are part of the on-disk
// format: running workers and studies depend on them, so they change
// only with a new format version.
const (
	workersPrefix = "workers"
	leasesPrefix  = "leases"
)

// Meta keys of a worker record. The whole record is in the meta, as JSON,
// so that placement reads each worker with one open and no blob fetch
// (the record's Scan gives the record and its heartbeat, the mtime, in the
// same read). The record's digest points at a blob of the same JSON
// bytes: fsstore's GC then keeps it, and equal digests tell Update that
// nothing changed without comparing fields.
const (
	metaVersion = "v"
	metaRecord  = "worker"
)

// WorkerID names a worker: 1 to 64 ASCII letters, digits and "-_.",
// not starting with '.' or '-'. It is one segment of the worker's
// names in the store (workers/<id>, leases/<id>/<slot>). The zero value
// is not a valid id.
type WorkerID struct{ s string }

// ParseWorkerID validates s as a worker id.
func ParseWorkerID(s string) (WorkerID, error) {
	if s == "" || len(s) > 64 {
		return WorkerID{}, fmt.Errorf("worker: id %q: want 1 to 64 characters", s)
	}
	if s[0] == '.' || s[0] == '-' {
		return WorkerID{}, fmt.Errorf("worker: id %q: must not start with %q", s, s[0])
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
		if !ok {
			return WorkerID{}, fmt.Errorf("worker: id %q: character %q is not allowed (letters, digits, '-', '_', '.')", s, c)
		}
	}
	return WorkerID{s}, nil
}

// DefaultWorkerID derives an id from a host (or Slurm node) name and a
// port, for a worker started without --id: "node12-7070". Characters an
// id does not allow become '_'.
func DefaultWorkerID(host string, port int) WorkerID {
	b := []byte(host)
	for i, c := range b {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
		if !ok {
			b[i] = '_'
		}
	}
	h := strings.TrimLeft(string(b), ".-")
	if h == "" {
		h = "worker"
	}
	s := h + "-" + strconv.Itoa(port)
	if len(s) > 64 {
		s = s[len(s)-64:]
		s = strings.TrimLeft(s, ".-")
	}
	return WorkerID{s}
}

// String returns the id as text ("" for the zero value).
func (id WorkerID) String() string { return id.s }

// IsZero reports whether id is the zero value.
func (id WorkerID) IsZero() bool { return id.s == "" }

// MarshalText implements encoding.TextMarshaler. The zero id marshals as
// "", which UnmarshalText refuses.
func (id WorkerID) MarshalText() ([]byte, error) { return []byte(id.s), nil }

// UnmarshalText implements encoding.TextUnmarshaler, validating.
func (id *WorkerID) UnmarshalText(b []byte) error {
	v, err := ParseWorkerID(string(b))
	if err != nil {
		return err
	}
	*id = v
	return nil
}

// RecordCapabilities is what a worker offers, as its record carries it: the
// JSON form of Resources.
type RecordCapabilities struct {
	CPUs        int         `json:"cpus"`
	MemoryBytes uint64      `json:"memory_bytes"`
	GPUs        []RecordGPU `json:"gpus"`
}

// RecordGPU is one GPU in a worker record.
type RecordGPU struct {
	Index       int    `json:"index"`
	UUID        string `json:"uuid"`
	Name        string `json:"name"`
	MemoryBytes uint64 `json:"memory_bytes"` // total
}

// RecordCapabilitiesOf returns r as a record carries it.
func RecordCapabilitiesOf(r Resources) RecordCapabilities {
	c := RecordCapabilities{CPUs: r.CPUs, MemoryBytes: r.MemoryBytes, GPUs: []RecordGPU{}}
	for _, g := range r.GPUs {
		c.GPUs = append(c.GPUs, RecordGPU{Index: g.Index, UUID: g.UUID, Name: g.Name, MemoryBytes: g.MemoryTotal})
	}
	return c
}

// WorkerRecord is what a worker announces in the store, at workers/<id>.
// Within a WorkerRecordVersion fields are only added; a reader ignores fields it
// does not know (a newer minor addition), and refuses a newer Version.
type WorkerRecord struct {
	Version      int                `json:"version"`
	ID           WorkerID           `json:"id"`
	Address      string             `json:"address"` // base URL plans are sent to: "http://node12:7070"
	Capabilities RecordCapabilities `json:"capabilities"`
	Tags         []string           `json:"tags"`
	// Slots is how many plans the worker runs at once: the number of
	// leases placement hands out for it (leases/<id>/0 .. Slots-1).
	Slots int `json:"slots"`
	// Load and ActivePlans are the worker's own view of what it runs,
	// for people (soma workers). Placement counts leases instead: they
	// are exact across placers, this is only as fresh as the last Update.
	Load        int      `json:"load"`
	ActivePlans []string `json:"active_plans"`
	SomaVersion string   `json:"soma_version"`
	Host        string   `json:"host"`
	PID         int      `json:"pid"`
	// SlurmJob and SlurmNode say which Slurm job step the worker runs in
	// (slurm.Job's Ref and Node; cmd/soma-worker fills them from
	// slurm.Self, since package worker does not import slurm). Empty
	// outside Slurm.
	SlurmJob  string `json:"slurm_job,omitempty"`
	SlurmNode string `json:"slurm_node,omitempty"`
}

// HasTag reports whether the worker carries tag.
func (r *WorkerRecord) HasTag(tag string) bool { return slices.Contains(r.Tags, tag) }

// check validates a record before it is written or after it is read.
func (r *WorkerRecord) check() error {
	switch {
	case r.ID.IsZero():
		return errors.New("no worker id")
	case r.Address == "":
		return errors.New("no address (the URL plans are sent to)")
	case r.Slots < 1:
		return fmt.Errorf("slots %d: a worker runs at least one plan at a time", r.Slots)
	case r.Capabilities.CPUs < 0:
		return fmt.Errorf("cpus %d: negative", r.Capabilities.CPUs)
	}
	for _, t := range r.Tags {
		if t == "" || strings.ContainsAny(t, " \t\n,") {
			return fmt.Errorf("tag %q: want a non-empty word without spaces or commas", t)
		}
	}
	return nil
}

// encode returns the record's JSON with Version set to WorkerRecordVersion.
func (r WorkerRecord) encode() ([]byte, error) {
	r.Version = WorkerRecordVersion
	if r.Tags == nil {
		r.Tags = []string{}
	}
	if r.ActivePlans == nil {
		r.ActivePlans = []string{}
	}
	if r.Capabilities.GPUs == nil {
		r.Capabilities.GPUs = []RecordGPU{}
	}
	return json.Marshal(r)
}

// ErrNewerRecord is the reason a record written by a newer soma is not
// used.
var ErrNewerRecord = errors.New("worker: record written by a newer soma")

// decodeWorker reads a worker record out of a bound name.
func decodeWorker(b fsstore.Bound) (WorkerRecord, error) {
	v, ok := b.Meta.Get(metaVersion)
	if !ok {
		return WorkerRecord{}, errors.New("no record version: not a worker record")
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return WorkerRecord{}, fmt.Errorf("record version %q: not a positive number", v)
	}
	if n > WorkerRecordVersion {
		return WorkerRecord{}, fmt.Errorf("%w: record version %d, this soma reads up to %d (upgrade soma here)", ErrNewerRecord, n, WorkerRecordVersion)
	}
	raw, ok := b.Meta.Get(metaRecord)
	if !ok {
		return WorkerRecord{}, errors.New("no record in the meta")
	}
	var r WorkerRecord
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		return WorkerRecord{}, fmt.Errorf("record: %w", err)
	}
	if r.Version != n {
		return WorkerRecord{}, fmt.Errorf("record version %d in the JSON, %d in the meta", r.Version, n)
	}
	if err := r.check(); err != nil {
		return WorkerRecord{}, err
	}
	if want := workersPrefix + "/" + r.ID.String(); b.Name != want {
		return WorkerRecord{}, fmt.Errorf("record of worker %s bound under %s (want %s)", r.ID, b.Name, want)
	}
	return r, nil
}

func workerName(id WorkerID) string { return workersPrefix + "/" + id.String() }

// RegistryOptions configure Announce.
type RegistryOptions struct {
	// Timeout is how long the record may go without a heartbeat before
	// readers count the worker dead; zero means DefaultHeartbeatTimeout.
	// Run touches it every HeartbeatInterval(Timeout).
	Timeout time.Duration
	// Logger gets the heartbeat errors Run retries; nil discards them.
	Logger *slog.Logger
}

// ErrWorkerIDInUse is returned by Announce when a live worker already has
// the id.
var ErrWorkerIDInUse = errors.New("worker: id in use by a live worker")

// Registration is a worker's record in the store, kept alive by
// heartbeats. Its methods are safe for concurrent use.
type Registration struct {
	store   *fsstore.Store
	name    string
	timeout time.Duration
	log     *slog.Logger

	mu     sync.Mutex
	rec    WorkerRecord
	digest fsstore.Digest
	closed bool
}

// Announce binds rec at workers/<rec.ID> and returns the Registration
// that keeps it alive. It refuses (ErrWorkerIDInUse) when a live worker
// already has the id — two daemons started with the same --id — and takes
// the name over when its record is stale (the earlier worker died). The
// first bind is a Claim, so two workers announcing one new id at once
// cannot both succeed; the takeover of a stale record is a Bind and is a
// look, not a decision (two workers reviving one dead id within the same
// heartbeat both win; give workers distinct ids).
func Announce(ctx context.Context, store *fsstore.Store, rec WorkerRecord, opts RegistryOptions) (*Registration, error) {
	if err := rec.check(); err != nil {
		return nil, fmt.Errorf("worker: announce %s: %w", rec.ID, err)
	}
	g := &Registration{store: store, name: workerName(rec.ID), timeout: opts.Timeout, log: opts.Logger}
	if g.timeout <= 0 {
		g.timeout = DefaultHeartbeatTimeout
	}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	b, d, err := putRecord(ctx, store, rec)
	if err != nil {
		return nil, fmt.Errorf("worker: announce %s: %w", rec.ID, err)
	}
	meta := recordMeta(b)
	won, err := store.Claim(ctx, g.name, d, meta)
	if err != nil {
		return nil, fmt.Errorf("worker: announce %s: %w", rec.ID, err)
	}
	if !won {
		now, err := store.Now(ctx)
		if err != nil {
			return nil, fmt.Errorf("worker: announce %s: %w", rec.ID, err)
		}
		old, err := store.Resolve(ctx, g.name)
		switch {
		case err == nil && now.Sub(old.Time) <= g.timeout:
			who := ""
			if r, derr := decodeWorker(old); derr == nil {
				who = fmt.Sprintf(" (%s, pid %d on %s)", r.Address, r.PID, r.Host)
			}
			return nil, fmt.Errorf("%w: %s%s heartbeat %s ago; give this worker another --id, or stop that one", ErrWorkerIDInUse, rec.ID, who, now.Sub(old.Time).Round(time.Second))
		case err != nil && !errors.Is(err, fsstore.ErrNotFound) && !isCorrupt(err):
			return nil, fmt.Errorf("worker: announce %s: %w", rec.ID, err)
		}
		if _, err := store.Bind(ctx, g.name, d, meta); err != nil {
			return nil, fmt.Errorf("worker: announce %s: %w", rec.ID, err)
		}
	}
	rec.Version = WorkerRecordVersion
	g.rec, g.digest = rec, d
	return g, nil
}

func isCorrupt(err error) bool {
	var ce *fsstore.CorruptError
	return errors.As(err, &ce)
}

func putRecord(ctx context.Context, store *fsstore.Store, rec WorkerRecord) ([]byte, fsstore.Digest, error) {
	b, err := rec.encode()
	if err != nil {
		return nil, fsstore.Digest{}, err
	}
	d, err := store.Put(ctx, b)
	return b, d, err
}

func recordMeta(b []byte) fsstore.Meta {
	return fsstore.Meta{}.Set(metaVersion, strconv.Itoa(WorkerRecordVersion)).Set(metaRecord, string(b))
}

// ID returns the worker's id.
func (g *Registration) ID() WorkerID {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.rec.ID
}

// Record returns the record as last written.
func (g *Registration) Record() WorkerRecord {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.rec
}

// ErrRegistrationClosed is returned by a Registration's methods after Close.
var ErrRegistrationClosed = errors.New("worker: registration closed")

// Heartbeat refreshes the record's time to the file server's now (a
// Touch: no rewrite) and returns it. If the record has disappeared
// (removed by hand, or unbound by a `soma` cleanup that judged the worker
// dead during a long pause) it is bound again.
func (g *Registration) Heartbeat(ctx context.Context) (time.Time, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return time.Time{}, ErrRegistrationClosed
	}
	t, err := g.store.Touch(ctx, g.name)
	if errors.Is(err, fsstore.ErrNotFound) {
		b, d, perr := putRecord(ctx, g.store, g.rec)
		if perr != nil {
			return time.Time{}, fmt.Errorf("worker: heartbeat %s: %w", g.rec.ID, perr)
		}
		bd, berr := g.store.Bind(ctx, g.name, d, recordMeta(b))
		if berr != nil {
			return time.Time{}, fmt.Errorf("worker: heartbeat %s: %w", g.rec.ID, berr)
		}
		return bd.Time, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("worker: heartbeat %s: %w", g.rec.ID, err)
	}
	return t, nil
}

// Update rebinds the record when rec differs from the one written (a
// rebind also counts as a heartbeat); an equal record costs nothing. rec's
// ID must stay the same.
func (g *Registration) Update(ctx context.Context, rec WorkerRecord) error {
	if err := rec.check(); err != nil {
		return fmt.Errorf("worker: update %s: %w", rec.ID, err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return ErrRegistrationClosed
	}
	if rec.ID != g.rec.ID {
		return fmt.Errorf("worker: update %s: the id cannot change (was %s); Close and Announce again", rec.ID, g.rec.ID)
	}
	b, err := rec.encode()
	if err != nil {
		return fmt.Errorf("worker: update %s: %w", rec.ID, err)
	}
	if fsstore.Sum(b) == g.digest {
		return nil
	}
	d, err := g.store.Put(ctx, b)
	if err != nil {
		return fmt.Errorf("worker: update %s: %w", rec.ID, err)
	}
	if _, err := g.store.Bind(ctx, g.name, d, recordMeta(b)); err != nil {
		return fmt.Errorf("worker: update %s: %w", rec.ID, err)
	}
	rec.Version = WorkerRecordVersion
	g.rec, g.digest = rec, d
	return nil
}

// Close unbinds the record, on a clean shutdown: the worker leaves
// placement at once instead of after the timeout. Closing twice is
// harmless. A worker that dies without Close is dropped by readers once
// its heartbeat is older than the timeout.
func (g *Registration) Close(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil
	}
	g.closed = true
	if err := g.store.Unbind(ctx, g.name); err != nil && !errors.Is(err, fsstore.ErrNotFound) {
		return fmt.Errorf("worker: close %s: %w", g.rec.ID, err)
	}
	return nil
}

// Run sends a heartbeat every HeartbeatInterval of the registration's
// timeout until ctx is done, then returns nil. A failed heartbeat is
// logged and tried again at the next tick (a file server that hiccups
// must not kill the worker); after Close, Run returns ErrRegistrationClosed. Run
// starts no goroutine: the caller runs it in one it owns and waits for.
func (g *Registration) Run(ctx context.Context) error {
	t := time.NewTicker(HeartbeatInterval(g.timeout))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if _, err := g.Heartbeat(ctx); err != nil {
			if errors.Is(err, ErrRegistrationClosed) {
				return err
			}
			if ctx.Err() != nil {
				return nil
			}
			g.log.Warn("heartbeat failed; trying again", "worker", g.ID().String(), "err", err)
		}
	}
}

// WorkerInfo is one worker as read from the store.
type WorkerInfo struct {
	Record WorkerRecord
	// LastHeartbeat is the record's server mtime; Age is the server's now
	// minus it, and Alive is Age <= the timeout.
	LastHeartbeat time.Time
	Age           time.Duration
	Alive         bool
	// Leases is how many of the worker's slots are held by live leases
	// (stale ones are free to reclaim and not counted).
	Leases int
	// Used sums what the live leases asked for (their requirements are
	// in their records), so placement does not hand a worker's last GPU
	// to two plans.
	Used Requirement
	// free lists the slots placement may take: unbound, or held by a
	// stale lease (its record is in stale).
	free  []int
	stale map[int]fsstore.Bound
}

// LoadFraction is the share of the worker's slots held by live leases.
func (w WorkerInfo) LoadFraction() float64 {
	if w.Record.Slots <= 0 {
		return 1
	}
	return float64(w.Leases) / float64(w.Record.Slots)
}

// Problem is a record that ListWorkers could not use: it is reported by
// name with the reason, never placed on.
type Problem struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
	Err    error  `json:"-"`
}

func (p Problem) String() string { return p.Name + ": " + p.Reason }

// ListOptions configure ListWorkers.
type ListOptions struct {
	// Timeout: a worker whose heartbeat is older is not alive, and a
	// lease whose heartbeat is older is stale. Zero means
	// DefaultHeartbeatTimeout.
	Timeout time.Duration
	// Now, if set, reads the time ages are judged against instead of
	// store.Now: soma status and soma workers pass their view's clock,
	// which falls back to this machine's, and says so, on a root they
	// cannot write. (Bug: on a read-only root with workers registered,
	// both failed as a whole with "server time: ... read-only file
	// system", issue 16.)
	Now func(context.Context) (time.Time, error)
}

// ListWorkers returns every worker in the store, alive or not, sorted by
// id, with its last heartbeat and the leases held on it. Records that are
// corrupt, of a newer version, or not worker records come back as
// problems, never as workers. Liveness compares the record's server mtime
// with the server's now (store.Now, read before the records, so that a
// heartbeat that lands during the scan can only make a worker look
// younger), never with this machine's clock.
//
// It costs one Now, one scan of workers/ (one open per worker, no blob)
// and one scan of leases/.
func ListWorkers(ctx context.Context, store *fsstore.Store, opts ListOptions) ([]WorkerInfo, []Problem, error) {
	infos, probs, _, err := listWorkers(ctx, store, opts)
	return infos, probs, err
}

// listWorkers is ListWorkers, also returning the server's now it judged
// ages against.
func listWorkers(ctx context.Context, store leaseStore, opts ListOptions) ([]WorkerInfo, []Problem, time.Time, error) {
	return listWorkersCached(ctx, store, opts, nil)
}

// listWorkersCached is listWorkers taking the workers' records and the
// leases from what st keeps (a Placer's or a coordinator's placeState)
// when it holds a recent enough read; nil reads them.
func listWorkersCached(ctx context.Context, store leaseStore, opts ListOptions, st *placeState) ([]WorkerInfo, []Problem, time.Time, error) {
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultHeartbeatTimeout
	}
	clock := store.Now
	if opts.Now != nil {
		clock = opts.Now
	}
	now, err := clock(ctx)
	if err != nil {
		return nil, nil, time.Time{}, fmt.Errorf("worker: list workers: %w", err)
	}
	recs, rprobs, err := st.registry().read(ctx, store, now)
	if err != nil {
		return nil, nil, time.Time{}, fmt.Errorf("worker: list workers: %w", err)
	}
	problems := slices.Clone(rprobs)
	infos := make([]WorkerInfo, 0, len(recs))
	for _, r := range recs {
		age := now.Sub(r.at)
		infos = append(infos, WorkerInfo{Record: r.rec, LastHeartbeat: r.at, Age: age, Alive: age <= timeout})
	}
	lprobs, err := st.leaseView().fill(ctx, store, now, timeout, infos)
	if err != nil {
		return nil, nil, time.Time{}, fmt.Errorf("worker: list workers: %w", err)
	}
	problems = append(problems, lprobs...)
	return infos, problems, now, nil
}

// registered is a worker record as decoded from workers/, with its time.
type registered struct {
	rec WorkerRecord
	at  time.Time // the record's server mtime: its last heartbeat
}

// scanRegistry reads workers/ and decodes every record, sorted by id;
// records that cannot be used come back as problems.
func scanRegistry(ctx context.Context, store leaseStore) ([]registered, []Problem, error) {
	bound, corrupt, err := store.Scan(ctx, workersPrefix)
	if err != nil {
		return nil, nil, err
	}
	var problems []Problem
	for _, c := range corrupt {
		problems = append(problems, Problem{Name: c.Name, Reason: "corrupt record: " + c.Err.Error(), Err: c})
	}
	recs := make([]registered, 0, len(bound))
	for _, b := range bound {
		r, err := decodeWorker(b)
		if err != nil {
			problems = append(problems, Problem{Name: b.Name, Reason: err.Error(), Err: err})
			continue
		}
		recs = append(recs, registered{rec: r, at: b.Time})
	}
	slices.SortFunc(recs, func(a, b registered) int { return strings.Compare(a.rec.ID.s, b.rec.ID.s) })
	return recs, problems, nil
}

// leaseSeen is a lease as a listing found it: its record, and whether it
// was stale then (its heartbeat older than the timeout against the
// server's now read before the listing).
type leaseSeen struct {
	b     fsstore.Bound
	stale bool
}

// scanLeases reads leases/ and judges each lease's staleness against now
// (the server's time, read before the scan: a heartbeat that lands during
// the scan can only make a lease look younger). Corrupt lease records are
// problems; their names still hold their slots (Claim fails on them)
// until they go stale.
func scanLeases(ctx context.Context, store leaseStore, now time.Time, timeout time.Duration) (map[WorkerID]map[int]leaseSeen, []Problem, error) {
	leases, lcorrupt, err := store.Scan(ctx, leasesPrefix)
	if err != nil {
		return nil, nil, err
	}
	var problems []Problem
	for _, c := range lcorrupt {
		problems = append(problems, Problem{Name: c.Name, Reason: "corrupt lease: " + c.Err.Error(), Err: c})
	}
	held := make(map[WorkerID]map[int]leaseSeen)
	for _, b := range leases {
		id, slot, ok := parseLeaseName(b.Name)
		if !ok {
			continue // an end marker (lease.go) or a stray name
		}
		if held[id] == nil {
			held[id] = make(map[int]leaseSeen)
		}
		held[id][slot] = leaseSeen{b: b, stale: now.Sub(b.Time) > timeout}
	}
	return held, problems, nil
}

// fillSlots sets each worker's free slots, stale leases, live leases and
// the resources they hold, from held; a slot in pending (being claimed by
// this placer) counts as held by a live lease.
func fillSlots(infos []WorkerInfo, held, pending map[WorkerID]map[int]leaseSeen) {
	for i := range infos {
		w := &infos[i]
		hw, pw := held[w.Record.ID], pending[w.Record.ID]
		for slot := range w.Record.Slots {
			ls, ok := pw[slot]
			if !ok {
				ls, ok = hw[slot]
			}
			switch {
			case !ok:
				w.free = append(w.free, slot)
			case ls.stale:
				w.free = append(w.free, slot)
				if w.stale == nil {
					w.stale = make(map[int]fsstore.Bound)
				}
				w.stale[slot] = ls.b
			default:
				w.Leases++
				w.Used.GPUs += metaInt(ls.b.Meta, leaseMetaGPUs)
				w.Used.CPUs += metaInt(ls.b.Meta, leaseMetaCPUs)
				if m, err := strconv.ParseUint(ls.b.Meta.Value(leaseMetaMemory), 10, 64); err == nil {
					w.Used.Memory += m
				}
			}
		}
	}
}

func metaInt(m fsstore.Meta, k string) int {
	n, err := strconv.Atoi(m.Value(k))
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// WorkerView is one worker as `soma workers --json` and the coordinator's
// GET /workers show it. Within a WorkerRecordVersion fields are only
// added.
type WorkerView struct {
	ID            WorkerID    `json:"id"`
	Address       string      `json:"address"`
	Alive         bool        `json:"alive"`
	LastHeartbeat time.Time   `json:"last_heartbeat"` // the file server's time
	AgeSeconds    float64     `json:"age_s"`          // server now minus last_heartbeat
	Slots         int         `json:"slots"`
	Leases        int         `json:"leases"` // slots held by live leases
	Load          float64     `json:"load"`   // leases / slots
	GPUsUsed      int         `json:"gpus_used"`
	Tags          []string    `json:"tags"`
	CPUs          int         `json:"cpus"`
	MemoryBytes   uint64      `json:"memory_bytes"`
	GPUs          []RecordGPU `json:"gpus"`
	ActivePlans   []string    `json:"active_plans"`
	SomaVersion   string      `json:"soma_version"`
	Host          string      `json:"host"`
	PID           int         `json:"pid"`
	SlurmJob      string      `json:"slurm_job,omitempty"`
	SlurmNode     string      `json:"slurm_node,omitempty"`
}

// View returns w as WorkerView.
func (w WorkerInfo) View() WorkerView {
	r := w.Record
	v := WorkerView{
		ID: r.ID, Address: r.Address, Alive: w.Alive, LastHeartbeat: w.LastHeartbeat.UTC(),
		AgeSeconds: w.Age.Seconds(), Slots: r.Slots, Leases: w.Leases, Load: w.LoadFraction(),
		GPUsUsed: w.Used.GPUs, Tags: r.Tags, CPUs: r.Capabilities.CPUs,
		MemoryBytes: r.Capabilities.MemoryBytes, GPUs: r.Capabilities.GPUs,
		ActivePlans: r.ActivePlans, SomaVersion: r.SomaVersion, Host: r.Host, PID: r.PID,
		SlurmJob: r.SlurmJob, SlurmNode: r.SlurmNode,
	}
	if v.Tags == nil {
		v.Tags = []string{}
	}
	if v.GPUs == nil {
		v.GPUs = []RecordGPU{}
	}
	if v.ActivePlans == nil {
		v.ActivePlans = []string{}
	}
	return v
}

// WorkersReport is the registry as read at one moment: what `soma workers
// --json` prints and the coordinator's GET /workers answers.
type WorkersReport struct {
	ServerTime     time.Time    `json:"server_time"` // the file server's now when read
	TimeoutSeconds float64      `json:"timeout_s"`   // heartbeat timeout used for alive
	Workers        []WorkerView `json:"workers"`
	Problems       []Problem    `json:"problems"`
}

// RegistrySummary counts the registry: GET /summary.
type RegistrySummary struct {
	Workers  int `json:"workers"`
	Alive    int `json:"alive"`
	Dead     int `json:"dead"`
	Slots    int `json:"slots"`  // of live workers
	Leases   int `json:"leases"` // held on live workers
	GPUs     int `json:"gpus"`   // of live workers
	GPUsUsed int `json:"gpus_used"`
	Problems int `json:"problems"`
}

// ReadWorkers reads the registry for people and tools: ListWorkers, as
// views, with the server time it was judged against.
func ReadWorkers(ctx context.Context, store *fsstore.Store, opts ListOptions) (WorkersReport, error) {
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultHeartbeatTimeout
	}
	opts.Timeout = timeout
	infos, probs, now, err := listWorkers(ctx, store, opts)
	if err != nil {
		return WorkersReport{}, err
	}
	rep := WorkersReport{ServerTime: now.UTC(), TimeoutSeconds: timeout.Seconds(), Workers: []WorkerView{}, Problems: probs}
	if rep.Problems == nil {
		rep.Problems = []Problem{}
	}
	for _, w := range infos {
		rep.Workers = append(rep.Workers, w.View())
	}
	return rep, nil
}

// Summary counts r.
func (r WorkersReport) Summary() RegistrySummary {
	s := RegistrySummary{Workers: len(r.Workers), Problems: len(r.Problems)}
	for _, w := range r.Workers {
		if !w.Alive {
			s.Dead++
			continue
		}
		s.Alive++
		s.Slots += w.Slots
		s.Leases += w.Leases
		s.GPUs += len(w.GPUs)
		s.GPUsUsed += w.GPUsUsed
	}
	return s
}
