package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/soma-hpc/soma/fsstore"
)

// Requirement is what a plan needs of the worker it runs on.
type Requirement struct {
	GPUs      int      `json:"gpus,omitempty"`
	GPUMemory uint64   `json:"gpu_memory,omitempty"` // bytes, per GPU
	CPUs      int      `json:"cpus,omitempty"`
	Memory    uint64   `json:"memory,omitempty"` // bytes
	Tags      []string `json:"tags,omitempty"`   // the worker must carry every one
}

// check refuses a requirement that is nonsense rather than unmet.
func (r Requirement) check() error {
	if r.GPUs < 0 || r.CPUs < 0 {
		return fmt.Errorf("worker: requirement: gpus %d, cpus %d: cannot be negative", r.GPUs, r.CPUs)
	}
	if r.GPUMemory > 0 && r.GPUs == 0 {
		return fmt.Errorf("worker: requirement: GPU memory %s with no GPUs (ask for gpus = 1 or more)", bytesText(r.GPUMemory))
	}
	return nil
}

func (r Requirement) String() string {
	var parts []string
	if r.GPUs > 0 {
		s := plural(r.GPUs, "GPU")
		if r.GPUMemory > 0 {
			s += " with " + bytesText(r.GPUMemory) + " each"
		}
		parts = append(parts, s)
	}
	if r.CPUs > 0 {
		parts = append(parts, plural(r.CPUs, "CPU"))
	}
	if r.Memory > 0 {
		parts = append(parts, bytesText(r.Memory)+" of memory")
	}
	if len(r.Tags) > 0 {
		parts = append(parts, "tags "+strings.Join(r.Tags, ","))
	}
	if len(parts) == 0 {
		return "nothing in particular"
	}
	return strings.Join(parts, ", ")
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

// bytesText writes n in GiB (or MiB below one GiB), as people size GPUs.
func bytesText(n uint64) string {
	const gib, mib = 1 << 30, 1 << 20
	if n >= gib {
		return strconv.FormatFloat(float64(n)/gib, 'f', -1, 64) + " GiB"
	}
	return strconv.FormatFloat(float64(n)/mib, 'f', -1, 64) + " MiB"
}

// shortfalls lists what w's capabilities lack for r, in words ("has 1 GPU
// with 80 GiB"); empty means w can run r when it has room.
func shortfalls(r Requirement, w WorkerRecord) []string {
	var out []string
	c := w.Capabilities
	if r.GPUs > 0 {
		fit := 0
		for _, g := range c.GPUs {
			if g.MemoryBytes >= r.GPUMemory {
				fit++
			}
		}
		if fit < r.GPUs {
			s := "has " + plural(len(c.GPUs), "GPU")
			if len(c.GPUs) > 0 {
				s += " with " + bytesText(maxGPUMemory(c.GPUs))
				if r.GPUMemory > 0 && fit != len(c.GPUs) {
					s += fmt.Sprintf(" (%d with %s or more)", fit, bytesText(r.GPUMemory))
				}
			}
			out = append(out, s)
		}
	}
	if r.CPUs > c.CPUs {
		out = append(out, "has "+plural(c.CPUs, "CPU"))
	}
	if r.Memory > c.MemoryBytes {
		out = append(out, "has "+bytesText(c.MemoryBytes)+" of memory")
	}
	for _, t := range r.Tags {
		if !w.HasTag(t) {
			out = append(out, "lacks tag "+t)
		}
	}
	return out
}

func maxGPUMemory(gs []RecordGPU) uint64 {
	var m uint64
	for _, g := range gs {
		m = max(m, g.MemoryBytes)
	}
	return m
}

// NoMatchError is returned by Place when no live worker meets a
// requirement at all (busy workers that would meet it are ErrNoFreeSlot
// instead). It names what is missing and the workers that came closest.
type NoMatchError struct {
	Requirement Requirement
	Alive, Dead int       // live and dead workers in the registry
	Closest     []Nearest // the live workers with the fewest shortfalls, at most 3
}

// Nearest is a worker that does not meet a requirement, and why.
type Nearest struct {
	Worker  WorkerID
	Lacking []string
	gpus    int
}

func (e *NoMatchError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "worker: no live worker meets the requirement: needs %s", e.Requirement)
	if e.Alive == 0 {
		fmt.Fprintf(&b, "; no live worker is registered (%d dead; start soma-worker with --root pointing at this folder)", e.Dead)
		return b.String()
	}
	for i, n := range e.Closest {
		sep := "; "
		if i == 0 {
			sep = "; closest: "
		}
		fmt.Fprintf(&b, "%s%s %s", sep, n.Worker, strings.Join(n.Lacking, ", "))
	}
	return b.String()
}

// ErrNoMatch is what a *NoMatchError is (errors.Is), and what a
// coordinator's 422 answer becomes in CoordinatorClient.
var ErrNoMatch = errors.New("worker: no live worker meets the requirement")

// Is makes errors.Is(err, ErrNoMatch) true.
func (e *NoMatchError) Is(target error) bool { return target == ErrNoMatch }

// ErrNoFreeSlot is returned by Place (unless PlaceOptions.Wait) when live
// workers meet the requirement but all their slots are held.
var ErrNoFreeSlot = errors.New("worker: every worker that meets the requirement is busy")

// PlaceOptions configure Place.
type PlaceOptions struct {
	// Timeout is the heartbeat timeout for worker records and leases;
	// zero means DefaultHeartbeatTimeout. The lease is touched every
	// HeartbeatInterval(Timeout).
	Timeout time.Duration
	// Holder says who holds the lease, for people reading the folder
	// ("node7 pid 1234"; a Slurm process's slurm.Me.Who()).
	Holder string
	// Wait: when every matching worker is busy, look again every
	// WaitInterval (default a second) until a slot frees or ctx ends,
	// rather than return ErrNoFreeSlot.
	Wait         bool
	WaitInterval time.Duration
	// Logger gets lease heartbeat errors, and a Placer's failures to end
	// the leases it kept; nil discards them.
	Logger *slog.Logger
	// KeepFor, if positive, is how long a Placer keeps a released lease
	// for its next placement of the same requirement before it ends it
	// (DefaultLeaseKeep is a good value; Placer says what it costs). Zero
	// ends every lease at its release, as Place (with no Placer) always
	// does. A Placer that keeps leases must be closed (Placer.Close).
	KeepFor time.Duration

	// rand breaks ties; tests set it to make choices repeatable. nil
	// means a new source per call.
	rand *rand.Rand
}

// Placement is a plan's place: the worker to send it to and the lease on
// one of its slots. A goroutine touches the lease every heartbeat interval
// until the lease ends: at Release, or, through a Placer that keeps
// leases, when the Placer ends it (Placer says when).
type Placement struct {
	Worker WorkerRecord
	Lease  Lease

	// The lease and its heartbeat: this placement's alone, or, through a
	// Placer, shared in turn by the placements it serves one after another.
	*leaseHold

	relMu    sync.Mutex
	released bool
	// back hands the lease to the Placer that keeps it at Release; nil
	// ends it.
	back func(ctx context.Context, h *leaseHold) error
}

// leaseHold is a claimed lease and the goroutine that renews it. A
// Placement owns one; a Placer that keeps leases passes one from a
// released Placement to the next placement it serves (leaseKeeper).
type leaseHold struct {
	l       Lease
	timeout time.Duration
	log     *slog.Logger
	// beat renews the lease and returns the file server's time of the
	// renewal (an error wrapping ErrLeaseLost if it is gone); end ends
	// it, given the server time of the last renewal that landed and
	// whether the heartbeat saw the lease lost. Through the folder they
	// are Touch and releaseHeld; through a coordinator, POST /renew and
	// POST /complete.
	beat func(ctx context.Context) (time.Time, error)
	end  func(ctx context.Context, last time.Time, lost bool) error
	stop context.CancelFunc
	done chan struct{}
	lost chan struct{}

	// What a Placer's leaseKeeper matches and ages it by: the
	// requirement it was claimed for, this machine's clock when the claim
	// began, and when it was last handed back (idle since).
	req     Requirement
	claimed time.Time
	idle    time.Time

	mu      sync.Mutex
	lostErr error
	last    time.Time // server time of the last renewal that landed (or earlier)
}

// Lost is closed when the lease may have been lost (a heartbeat failed to
// land within the timeout, so a placer may have reclaimed it): the plan
// should be cancelled.
func (p *Placement) Lost() <-chan struct{} { return p.lost }

// Err returns why the lease was lost, or nil.
func (p *Placement) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lostErr
}

// Release ends the placement. Without a Placer that keeps leases it
// stops the lease's heartbeat, waits for its goroutine to exit and ends
// the lease, so the slot is free at once; through one, the Placer keeps
// the lease (and its heartbeat) for its next placement of the same
// requirement, and ends it within PlaceOptions.KeepFor if none comes.
// Calling it more than once is harmless. It returns an error only if the
// lease could not be ended (it then goes stale and is reclaimed after the
// timeout).
func (p *Placement) Release(ctx context.Context) error {
	p.relMu.Lock()
	if p.released {
		p.relMu.Unlock()
		return nil
	}
	p.released = true
	p.relMu.Unlock()
	if p.back != nil {
		return p.back(ctx, p.leaseHold)
	}
	return p.finish(ctx)
}

// finish stops the heartbeat, waits for its goroutine and ends the lease.
func (h *leaseHold) finish(ctx context.Context) error {
	h.stop()
	<-h.done
	h.mu.Lock()
	last, lost := h.last, h.lostErr != nil
	h.mu.Unlock()
	return h.end(ctx, last, lost)
}

// isLost reports whether the heartbeat saw the lease lost.
func (h *leaseHold) isLost() bool {
	select {
	case <-h.lost:
		return true
	default:
		return false
	}
}

// heartbeat touches the lease until ctx ends. A gap of more than the
// timeout between two touches that landed means another placer may have
// reclaimed the lease (see lease.go): it then closes lost and stops.
func (h *leaseHold) heartbeat(ctx context.Context) {
	defer close(h.done)
	h.mu.Lock()
	last := h.last
	h.mu.Unlock()
	t := time.NewTicker(HeartbeatInterval(h.timeout))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now, err := h.beat(ctx)
		if ctx.Err() != nil {
			return
		}
		switch {
		case errors.Is(err, ErrLeaseLost):
			h.markLost(err)
			return
		case err != nil:
			h.log.Warn("lease heartbeat failed; trying again", "lease", h.l.Name(), "err", err)
			continue
		case now.Sub(last) > h.timeout:
			h.markLost(fmt.Errorf("worker: lease %s: %w (heartbeats %s apart, more than the timeout %s)", h.l.Name(), ErrLeaseLost, now.Sub(last).Round(time.Millisecond), h.timeout))
			return
		}
		last = now
		h.mu.Lock()
		h.last = now
		h.mu.Unlock()
	}
}

func (h *leaseHold) markLost(err error) {
	h.mu.Lock()
	h.lostErr = err
	h.mu.Unlock()
	close(h.lost)
}

// Place finds a live worker that meets req and has a free slot, claims a
// lease on the slot and returns the Placement; the caller sends the plan
// to Placement.Worker.Address and calls Release when it is over.
//
// Of the workers that fit, the least loaded (leases held over slots)
// wins; ties are broken at random, so placers that read the folder at the
// same moment spread over equal workers instead of racing for one slot.
// A slot held by a stale lease is reclaimed (lease.go says how that stays
// exact). A lost race for a slot moves on to the next slot and worker,
// then reads the folder again. No worker is overbooked, whatever the
// number of placers and machines: every slot is one name claimed by
// link(2). Listings only guide the search (on NFS a listing can miss a
// name made in the last 30 to 60 s): a lease the listing missed
// makes the Claim fail and the next slot is tried; a worker registered
// moments ago may be missed until the next call.
//
// Errors: *NoMatchError when no live worker could ever run req;
// ErrNoFreeSlot when those that could are busy (unless opts.Wait).
func Place(ctx context.Context, store *fsstore.Store, req Requirement, opts PlaceOptions) (*Placement, error) {
	return place(ctx, store, req, opts, nil)
}

// placeLease reads the folder up to a few times and tries the free slots
// it sees; it returns the worker and the lease it claimed, with no
// heartbeat running, and the server's time read before the claim (so no
// later than the lease's first mtime).
func placeLease(ctx context.Context, store leaseStore, req Requirement, timeout time.Duration, holder string, rnd *rand.Rand) (WorkerRecord, Lease, time.Time, error) {
	return placeLeaseFrom(ctx, store, req, timeout, holder, rnd, nil)
}

// placeLeaseFrom is placeLease with the workers' records and the leases
// from what st keeps (nil reads them), which it tells of its claims.
func placeLeaseFrom(ctx context.Context, store leaseStore, req Requirement, timeout time.Duration, holder string, rnd *rand.Rand, st *placeState) (WorkerRecord, Lease, time.Time, error) {
	const rounds = 3
	for range rounds {
		infos, _, now, err := listWorkersCached(ctx, store, ListOptions{Timeout: timeout}, st)
		if err != nil {
			return WorkerRecord{}, Lease{}, time.Time{}, err
		}
		cands, nm := candidates(infos, req)
		if nm != nil {
			return WorkerRecord{}, Lease{}, time.Time{}, nm
		}
		if len(cands) == 0 {
			return WorkerRecord{}, Lease{}, time.Time{}, fmt.Errorf("%w: needs %s", ErrNoFreeSlot, req)
		}
		// Shuffle, then a stable sort by load: equal loads stay in random
		// order.
		rnd.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
		slices.SortStableFunc(cands, func(a, b WorkerInfo) int {
			la, lb := a.LoadFraction(), b.LoadFraction()
			switch {
			case la < lb:
				return -1
			case la > lb:
				return 1
			}
			return 0
		})
		for _, w := range cands {
			free := slices.Clone(w.free)
			rnd.Shuffle(len(free), func(i, j int) { free[i], free[j] = free[j], free[i] })
			for _, slot := range free {
				var stale *fsstore.Bound
				if b, ok := w.stale[slot]; ok {
					stale = &b
				}
				if !st.leaseView().reserve(w.Record.ID, slot, req) {
					continue // another placement through st is claiming it, or won it
				}
				l, meta, won, err := claimLeaseState(ctx, store, st, w.Record.ID, slot, stale, holder, req, timeout)
				if err != nil {
					st.leaseView().unreserve(w.Record.ID, slot)
					return WorkerRecord{}, Lease{}, time.Time{}, err
				}
				if !won {
					// Another placer is at work: what st keeps of the
					// leases is behind; the next placement lists them.
					st.leaseView().unreserve(w.Record.ID, slot)
					st.leaseView().forget()
					continue
				}
				st.leaseView().claimed(l, meta)
				return w.Record, l, now, nil
			}
		}
	}
	return WorkerRecord{}, Lease{}, time.Time{}, fmt.Errorf("%w: needs %s (every free slot seen was taken by another placer first)", ErrNoFreeSlot, req)
}

// startPlacement starts the heartbeat of a lease claimed after the
// server time first. It used to Touch the lease first to learn the time
// its heartbeat counts from: a round trip per placement (issue 15). A
// server time read before the claim does as well: the heartbeat only
// checks that no two renewals that landed are more than the timeout
// apart (lease.go), and an earlier start can only make that check stricter,
// never let a reclaimed lease pass.
//
// The release tells st (nil: nothing kept) that the slot is free.
func startPlacement(store leaseStore, st *placeState, w WorkerRecord, l Lease, first time.Time, timeout time.Duration, log *slog.Logger) *Placement {
	beat := func(ctx context.Context) (time.Time, error) {
		t, err := store.Touch(ctx, l.Name())
		if errors.Is(err, fsstore.ErrNotFound) {
			return t, fmt.Errorf("worker: lease %s: %w (unbound by someone else)", l.Name(), ErrLeaseLost)
		}
		return t, err
	}
	end := func(ctx context.Context, last time.Time, lost bool) error {
		err := releaseHeld(ctx, store, l, timeout, last, lost)
		st.leaseView().released(l, lost, err)
		return err
	}
	return newPlacement(w, l, timeout, first, beat, end, log)
}

// newPlacement starts the heartbeat goroutine of a lease renewed last at
// first (server time), or later.
func newPlacement(w WorkerRecord, l Lease, timeout time.Duration, first time.Time, beat func(context.Context) (time.Time, error), end func(context.Context, time.Time, bool) error, log *slog.Logger) *Placement {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &leaseHold{
		l: l, timeout: timeout, beat: beat, end: end,
		stop: cancel, done: make(chan struct{}), lost: make(chan struct{}),
		log: log, last: first,
	}
	go h.heartbeat(ctx)
	return &Placement{Worker: w, Lease: l, leaseHold: h}
}

// candidates returns the live workers that meet req and have a free slot
// and enough free resources beside the live leases; or, when no live
// worker meets req even when idle, a *NoMatchError.
func candidates(infos []WorkerInfo, req Requirement) ([]WorkerInfo, *NoMatchError) {
	var out []WorkerInfo
	var near []Nearest
	alive, dead, fits := 0, 0, 0
	for _, w := range infos {
		if !w.Alive {
			dead++
			continue
		}
		alive++
		if lack := shortfalls(req, w.Record); len(lack) > 0 {
			near = append(near, Nearest{Worker: w.Record.ID, Lacking: lack, gpus: len(w.Record.Capabilities.GPUs)})
			continue
		}
		fits++
		if len(w.free) > 0 && w.hasRoom(req) {
			out = append(out, w)
		}
	}
	if fits == 0 {
		// Fewest shortfalls first; among equals, the one with more GPUs
		// (a GPU plan's nearest miss is the biggest GPU node).
		slices.SortStableFunc(near, func(a, b Nearest) int {
			if d := len(a.Lacking) - len(b.Lacking); d != 0 {
				return d
			}
			return b.gpus - a.gpus
		})
		if len(near) > 3 {
			near = near[:3]
		}
		return nil, &NoMatchError{Requirement: req, Alive: alive, Dead: dead, Closest: near}
	}
	return out, nil
}

// hasRoom reports whether the GPUs, CPUs and memory that w's live leases
// asked for leave enough for req. Which GPU a plan gets is the worker's
// choice (GPUSet), so GPU memory is checked against the worker's GPUs and
// the count against those not taken.
func (w WorkerInfo) hasRoom(req Requirement) bool {
	c := w.Record.Capabilities
	fitGPUs := 0
	for _, g := range c.GPUs {
		if g.MemoryBytes >= req.GPUMemory {
			fitGPUs++
		}
	}
	return (req.GPUs == 0 || req.GPUs <= fitGPUs-w.Used.GPUs) &&
		(req.CPUs == 0 || req.CPUs <= c.CPUs-w.Used.CPUs) &&
		(req.Memory == 0 || req.Memory <= c.MemoryBytes-min(c.MemoryBytes, w.Used.Memory))
}

// Requirement returns what the plan asks of the worker it is placed on:
// its [resources] and its tags.
func (p *Plan) Requirement() Requirement {
	a := p.Resources
	return Requirement{GPUs: a.GPUs, CPUs: a.CPUs, Memory: a.Memory, Tags: a.Tags}
}
