package worker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/soma-hpc/soma/fsstore"
)

// Placer places plans through the folder as Place does, for a process
// that places many (a long-lived client, a service): it keeps what it
// read of the folder for a short while, in file-server time, and places
// from it without reading it again. What it keeps:
//
//   - the registry's records (workers/), decoded;
//   - the leases (leases/): what its last listing found, and since then
//     what its own placements did (a slot it claimed is held, a slot it
//     released is free);
//   - that the lease record's blob is stored (Put again once
//     LeaseBlobReuse has passed).
//
// So a placement within the window costs a server-time read, the claim of
// the lease and, at the end, its release: no listing, no record read.
// Bug (issue 15): a Placer listed leases/ and read every lease record, and
// stored the lease's blob again, for every placement: 76 system calls a
// placement and its release with 10 workers (5 a worker's lease folder, 6
// a lease record), 30 of them with this view, and placed no-op plans ran
// at 0.31x to 0.41x of the same plans sent straight to known workers.
//
// Why that cannot overbook a worker: a slot is taken only by claiming its
// lease, leases/<worker>/<slot>, by link(2), and the claim decides,
// whatever the view says. A view some moments old can only pick a worse
// worker, try a slot another placer took meanwhile (the claim fails; the
// view is then dropped and the next placement lists leases/ again, since
// another placer is at work), or miss a slot freed meanwhile.
//
// Liveness and staleness are judged so that an old view errs only on the
// safe side. A worker is alive if its cached record's time is within the
// timeout of the server's time read for this placement: a cached record
// only looks older than it is, so a worker is never kept alive by the
// cache. A lease is stale only if it was older than the timeout against
// the server's time read before the listing that found it (never against
// a later time: its holder may have renewed it since the listing). Ending
// a stale lease later than that listing is as exact as ending it at once
// (lease.go: the reclaimer's server time is read before the record, and
// the holder's next renewal, whenever it lands, shows it the gap).
//
// A cached view is only used to succeed: before a placement reports that
// nobody meets the requirement or that everyone is busy, it reads the
// registry and the leases again, so a worker registered or a slot freed
// meanwhile is found.
//
// What it can do, within the window: send a plan to a worker that shut
// down or was restarted elsewhere moments ago (the send fails, as it does
// when that happens between a fresh read and the send), or to a worker
// restarted with fewer slots (the worker refuses a plan beyond its
// --max-plans with 503). Keep the window short against the heartbeat
// timeout.
//
// A Placer is safe for concurrent use.
type Placer struct {
	store *fsstore.Store
	opts  PlaceOptions
	st    *placeState
}

// DefaultRegistryCache is how long a Placer keeps the registry and the
// leases it read: a second, or a tenth of the heartbeat timeout if that
// is shorter.
const DefaultRegistryCache = time.Second

// NewPlacer returns a Placer placing with opts (as Place takes them).
// cacheFor is how long, in file-server time, it keeps the registry and
// the leases it read; zero means DefaultRegistryCache (at most a tenth of
// the timeout) and a negative value reads them for every placement, as
// Place does.
func NewPlacer(store *fsstore.Store, opts PlaceOptions, cacheFor time.Duration) *Placer {
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultHeartbeatTimeout
	}
	return &Placer{store: store, opts: opts, st: newPlaceState(cacheFor, timeout)}
}

// Place places a plan needing req, as the package's Place does.
func (p *Placer) Place(ctx context.Context, req Requirement) (*Placement, error) {
	return place(ctx, p.store, req, p.opts, p.st)
}

// placeState is what a long-lived placer (Placer, the coordinator) keeps
// between placements. A nil *placeState keeps nothing: every placement
// reads the folder (Place).
type placeState struct {
	reg    *registryCache
	leases *leaseView
	blob   *leaseBlobReuse
}

// newPlaceState keeps reads for cacheFor (zero: DefaultRegistryCache, at
// most a tenth of timeout); a negative cacheFor keeps nothing.
func newPlaceState(cacheFor, timeout time.Duration) *placeState {
	if cacheFor == 0 {
		cacheFor = min(DefaultRegistryCache, timeout/10)
	}
	if cacheFor < 0 {
		return nil
	}
	return &placeState{
		reg:    &registryCache{window: cacheFor},
		leases: &leaseView{window: cacheFor},
		blob:   &leaseBlobReuse{every: LeaseBlobReuse, now: time.Now},
	}
}

func (st *placeState) registry() *registryCache {
	if st == nil {
		return nil
	}
	return st.reg
}

func (st *placeState) leaseView() *leaseView {
	if st == nil {
		return nil
	}
	return st.leases
}

// forget drops what is kept, so that the next placement reads the folder.
func (st *placeState) forget() {
	if st == nil {
		return
	}
	st.reg.forget()
	st.leases.forget()
}

// leaseDigest returns the digest of leaseBlob, stored: by a Put for every
// lease without a placeState, else once per LeaseBlobReuse.
func (st *placeState) leaseDigest(ctx context.Context, store leaseStore) (fsstore.Digest, error) {
	if st == nil {
		return store.Put(ctx, leaseBlob)
	}
	return st.blob.digest(ctx, store)
}

// registryCache holds the workers' records of one read, decoded, and the
// server time read before it. A nil *registryCache caches nothing.
type registryCache struct {
	window time.Duration

	mu       sync.Mutex
	at       time.Time // server time read before the scan; zero: nothing held
	recs     []registered
	problems []Problem
}

// read returns the workers' records: those held, if they were read no
// more than the window before now (server time, read before calling),
// else a new scan, which it then holds. The slices returned are shared:
// callers do not modify them.
func (c *registryCache) read(ctx context.Context, store leaseStore, now time.Time) ([]registered, []Problem, error) {
	if c != nil {
		c.mu.Lock()
		at, recs, problems := c.at, c.recs, c.problems
		c.mu.Unlock()
		// Not before the read either: a server clock stepped back says
		// nothing about the records' age.
		if age := now.Sub(at); !at.IsZero() && age >= 0 && age <= c.window {
			return recs, problems, nil
		}
	}
	recs, problems, err := scanRegistry(ctx, store)
	if err != nil || c == nil {
		return recs, problems, err
	}
	c.mu.Lock()
	if now.After(c.at) {
		c.at, c.recs, c.problems = now, recs, problems
	}
	c.mu.Unlock()
	return recs, problems, nil
}

// forget drops what is held, so that the next read scans.
func (c *registryCache) forget() {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.at, c.recs, c.problems = time.Time{}, nil, nil
	c.mu.Unlock()
}

// leaseView is what a placer knows of leases/: what its last listing
// found, updated since by its own claims and releases. A nil *leaseView
// lists leases/ for every placement.
//
// The lock is held across a listing, and every update is made after the
// claim or the release it records has landed: an update made before a
// listing began is in what the listing found, and one made after it
// ended is applied on top of it; none falls in between. So the view is
// never behind this placer's own doings, except for a release that
// landed while another goroutine listed (the view then holds the slot
// until the next listing: a free slot missed, nothing worse).
//
// Slots this placer's goroutines are claiming right now are pending: the
// others skip them, so placements through one placer never race each
// other for a slot (a lost claim would drop the view: issue 15, 8 senders
// sharing one Placer picked the same free slot from the same view).
type leaseView struct {
	window time.Duration

	mu       sync.Mutex
	at       time.Time // server time read before the listing; zero: none held
	held     map[WorkerID]map[int]leaseSeen
	problems []Problem
	pending  map[WorkerID]map[int]leaseSeen // being claimed by this placer; kept by forget
}

// fill sets infos' slots (fillSlots) from the view if it was listed no
// more than the window before now (server time, read before calling), else
// from a new listing, which it then keeps. It returns the corrupt lease
// records of that listing as problems.
func (v *leaseView) fill(ctx context.Context, store leaseStore, now time.Time, timeout time.Duration, infos []WorkerInfo) ([]Problem, error) {
	if v == nil {
		held, problems, err := scanLeases(ctx, store, now, timeout)
		if err != nil {
			return nil, err
		}
		fillSlots(infos, held, nil)
		return problems, nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	// A listing made after now (by a placement that read the server's
	// time after this one) is as good: staleness in it was judged against
	// its own time. A server clock stepped by more than the window either
	// way says nothing about the view's age: list again.
	if age := now.Sub(v.at); v.at.IsZero() || age < -v.window || age > v.window {
		held, problems, err := scanLeases(ctx, store, now, timeout)
		if err != nil {
			return nil, err
		}
		v.at, v.held, v.problems = now, held, problems
	}
	fillSlots(infos, v.held, v.pending)
	return v.problems, nil
}

// forget drops the view, so that the next placement lists leases/.
func (v *leaseView) forget() {
	if v == nil {
		return
	}
	v.mu.Lock()
	v.at, v.held, v.problems = time.Time{}, nil, nil
	v.mu.Unlock()
}

// reserve marks slot of w pending, for a claim by this placer asking for
// req, unless another of its placements is claiming it or has won it
// since the caller's view was filled: then it reports false, and the
// caller tries another slot. A nil view reserves everything.
func (v *leaseView) reserve(w WorkerID, slot int, req Requirement) bool {
	if v == nil {
		return true
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.pending[w][slot]; ok {
		return false
	}
	if ls, ok := v.held[w][slot]; ok && !ls.stale {
		return false
	}
	if v.pending == nil {
		v.pending = make(map[WorkerID]map[int]leaseSeen)
	}
	if v.pending[w] == nil {
		v.pending[w] = make(map[int]leaseSeen)
	}
	v.pending[w][slot] = leaseSeen{b: fsstore.Bound{Name: leaseName(w, slot), Meta: leaseUse(req)}}
	return true
}

// unreserve ends a claim of slot of w that was not won.
func (v *leaseView) unreserve(w WorkerID, slot int) {
	if v == nil {
		return
	}
	v.mu.Lock()
	delete(v.pending[w], slot)
	v.mu.Unlock()
}

// claimed records a lease this placer won: its slot is held, by a live
// lease asking for what meta says, and no longer pending.
func (v *leaseView) claimed(l Lease, meta fsstore.Meta) {
	if v == nil {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.pending[l.Worker], l.Slot)
	if v.held == nil {
		return // nothing listed to update: the next placement lists
	}
	if v.held[l.Worker] == nil {
		v.held[l.Worker] = make(map[int]leaseSeen)
	}
	v.held[l.Worker][l.Slot] = leaseSeen{b: fsstore.Bound{Name: l.Name(), Meta: meta}}
}

// released records that this placer ended its lease l: the slot is free,
// unless the release failed or the lease had been lost (another placer
// may hold the slot now), and then the view is dropped.
func (v *leaseView) released(l Lease, lost bool, err error) {
	if v == nil {
		return
	}
	if lost || err != nil {
		v.forget()
		return
	}
	v.mu.Lock()
	delete(v.held[l.Worker], l.Slot)
	v.mu.Unlock()
}

// leaseBlobReuse says when a placer last stored leaseBlob, which every
// lease record refers to.
//
// A Put of bytes already stored refreshes the blob's time, which is what
// keeps soma gc from removing it before a record that refers to it is
// bound (fsstore's GC, rule W: a writer binds within the grace G of its
// Put). A lease is claimed at most LeaseBlobReuse, plus the claim's own
// round trips, after the last Put began; soma gc refuses a G below
// study.MinGCAge, six times study.BlobReuse, which is no shorter than
// LeaseBlobReuse (cmd/soma's TestGCGraceCoversLeaseBlobReuse pins it).
// This is study's argument for the empty curve's blob (study.BlobReuse),
// measured the same way: elapsed time on this machine's clocks, monotonic
// and wall both, never compared with another machine's.
type leaseBlobReuse struct {
	every time.Duration    // LeaseBlobReuse; a test seam
	now   func() time.Time // time.Now; a test seam

	mu sync.Mutex
	d  fsstore.Digest
	at time.Time // now() before the last Put that succeeded; zero: none
}

// LeaseBlobReuse is how long a Placer (and a coordinator) claims leases
// referring to the lease blob after it last stored it, before storing it
// again. It must not exceed study.BlobReuse, which soma gc's least grace
// is computed from.
const LeaseBlobReuse = 10 * time.Second

func (b *leaseBlobReuse) digest(ctx context.Context, store leaseStore) (fsstore.Digest, error) {
	start := b.now()
	b.mu.Lock()
	if !b.d.IsZero() && !b.at.IsZero() {
		mono, wall := start.Sub(b.at), start.Round(0).Sub(b.at.Round(0))
		if mono >= 0 && mono < b.every && wall >= 0 && wall < b.every {
			d := b.d
			b.mu.Unlock()
			return d, nil
		}
	}
	b.mu.Unlock()
	d, err := store.Put(ctx, leaseBlob)
	if err != nil {
		return d, err
	}
	b.mu.Lock()
	if start.After(b.at) {
		b.d, b.at = d, start
	}
	b.mu.Unlock()
	return d, nil
}

// place is Place, with what st keeps (nil: read the folder every time).
func place(ctx context.Context, store *fsstore.Store, req Requirement, opts PlaceOptions, st *placeState) (*Placement, error) {
	if err := req.check(); err != nil {
		return nil, err
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultHeartbeatTimeout
	}
	rnd := opts.rand
	if rnd == nil {
		rnd = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	wait := opts.WaitInterval
	if wait <= 0 {
		wait = time.Second
	}
	holder := opts.Holder
	if holder == "" {
		holder = "unknown"
	}
	for {
		w, l, now, err := placeLeaseCached(ctx, store, req, timeout, holder, rnd, st)
		if err == nil {
			return startPlacement(store, st, w, l, now, timeout, opts.Logger), nil
		}
		if !errors.Is(err, ErrNoFreeSlot) || !opts.Wait {
			return nil, err
		}
		// Jittered, so waiting placers do not all look at once.
		d := wait/2 + time.Duration(rnd.Int64N(int64(wait)))
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("worker: place %s: %w (waited for a free slot)", req, ctx.Err())
		case <-time.After(d):
		}
	}
}

// placeLeaseCached is placeLease with what st keeps; a failure from a
// kept view is never reported: the folder is read afresh and the
// placement tried again first.
func placeLeaseCached(ctx context.Context, store leaseStore, req Requirement, timeout time.Duration, holder string, rnd *rand.Rand, st *placeState) (WorkerRecord, Lease, time.Time, error) {
	w, l, now, err := placeLeaseFrom(ctx, store, req, timeout, holder, rnd, st)
	if err != nil && st != nil && (errors.Is(err, ErrNoMatch) || errors.Is(err, ErrNoFreeSlot)) {
		st.forget()
		return placeLeaseFrom(ctx, store, req, timeout, holder, rnd, st)
	}
	return w, l, now, err
}
