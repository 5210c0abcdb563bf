package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
// With PlaceOptions.KeepFor it also keeps the leases its placements
// release, for its next placement of the same requirement (leaseKeeper
// says when they end); such a Placer must be closed.
//
// A Placer is safe for concurrent use.
type Placer struct {
	store leaseStore // *fsstore.Store; a counting wrapper in tests
	opts  PlaceOptions
	st    *placeState
}

// DefaultLeaseKeep is a good PlaceOptions.KeepFor: how long a Placer
// keeps a released lease for its next placement of the same requirement.
//
// Why keep a lease at all: claiming one is a file created, written,
// linked and unlinked, and ending it a Touch, a read and an unlink. On
// this project's 2-core test VM every system call is a trip through the
// hypervisor (1.3 µs for getppid), and on ext4 without a journal every
// create scans the inodes deleted in the last minute (the kernel's
// recently_deleted(), 15% of the machine's CPU during a placing run by
// perf); a process placing plan after plan paid that for every plan
// (issue 15: placed no-op plans at 0.32x to 0.60x of the same plans sent
// straight to known workers). Ray's task submitter does the same: a worker lease serves
// the next task of the same scheduling key, for at most
// worker_lease_timeout_milliseconds (500 ms by default, ray_config_def.h)
// before it goes back to the raylet; here the window is the Placer's
// view's, a second. 50 ms is far below what a placer that finds every
// slot busy waits before it looks again (PlaceOptions.WaitInterval, a
// second by default), so other processes hardly see the difference.
const DefaultLeaseKeep = 50 * time.Millisecond

// DefaultRegistryCache is how long a Placer keeps the registry and the
// leases it read: a second, or a tenth of the heartbeat timeout if that
// is shorter.
const DefaultRegistryCache = time.Second

// NewPlacer returns a Placer placing with opts (as Place takes them).
// cacheFor is how long, in file-server time, it keeps the registry and
// the leases it read; zero means DefaultRegistryCache (at most a tenth of
// the timeout) and a negative value reads them for every placement, as
// Place does.
//
// With opts.KeepFor positive (and cacheFor not negative), a released
// lease is kept for the Placer's next placement of the same requirement
// (see leaseKeeper): call Close when done placing, so that the leases
// kept are ended at once. A process that exits without it leaves them to
// go stale: their slots are lost to every placer for the heartbeat
// timeout. That is why keeping is not the default.
func NewPlacer(store *fsstore.Store, opts PlaceOptions, cacheFor time.Duration) *Placer {
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultHeartbeatTimeout
	}
	st := newPlaceState(cacheFor, timeout)
	if st != nil && opts.KeepFor > 0 {
		keep := opts.KeepFor
		log := opts.Logger
		if log == nil {
			log = slog.New(slog.DiscardHandler)
		}
		st.keep = &leaseKeeper{keepFor: keep, window: st.reg.window, now: time.Now, log: log}
	}
	return &Placer{store: store, opts: opts, st: st}
}

// Place places a plan needing req, as the package's Place does, or hands
// it a lease the Placer keeps (PlaceOptions.KeepFor).
func (p *Placer) Place(ctx context.Context, req Requirement) (*Placement, error) {
	return place(ctx, p.store, req, p.opts, p.st)
}

// Close ends the leases the Placer keeps and keeps none from now on: a
// placement released later ends its lease at once. It returns the errors
// of the leases it could not end (they go stale and are reclaimed after
// the timeout).
func (p *Placer) Close(ctx context.Context) error {
	return p.st.keeper().close(ctx)
}

// placeState is what a long-lived placer (Placer, the coordinator) keeps
// between placements. A nil *placeState keeps nothing: every placement
// reads the folder (Place).
type placeState struct {
	reg    *registryCache
	leases *leaseView
	blob   *leaseBlobReuse
	keep   *leaseKeeper // a Placer's released leases; nil: none kept (a coordinator)
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

func (st *placeState) keeper() *leaseKeeper {
	if st == nil {
		return nil
	}
	return st.keep
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
func place(ctx context.Context, store leaseStore, req Requirement, opts PlaceOptions, st *placeState) (*Placement, error) {
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
	k := st.keeper()
	for {
		if pl, err := st.reuse(ctx, store, req, timeout); pl != nil || err != nil {
			return pl, err
		}
		var claimStart time.Time
		if k != nil {
			claimStart = k.now()
		}
		w, l, now, err := placeLeaseCached(ctx, store, req, timeout, holder, rnd, st)
		if err == nil {
			pl := startPlacement(store, st, w, l, now, timeout, opts.Logger)
			if k != nil {
				pl.req, pl.claimed, pl.back = req, claimStart, k.put
			}
			return pl, nil
		}
		if errors.Is(err, ErrNoFreeSlot) && k.drop(ctx) {
			continue // the slots were held by this Placer's own kept leases
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
