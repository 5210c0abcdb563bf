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
// that places many (a long-lived client, a service): it keeps the
// registry's records (workers/) it read for a short while, in file-server
// time, and places from them without reading them again.
//
// Why that cannot overbook a worker: the registry only says which
// workers exist, where, with how many slots; a slot is taken by claiming
// its lease, leases/<worker>/<slot>, by link(2), and the leases are read
// afresh for every placement. A view of the registry some moments old
// can pick a worse worker, never a slot someone holds. Liveness is still
// judged against the server's time read for this placement, so a cached
// record only looks older than it is: a worker is never kept alive by the
// cache. A cached view is only used to succeed: before a placement
// reports that nobody meets the requirement or that everyone is busy, it
// reads the registry again, so a worker registered meanwhile is found.
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
	cache *registryCache
}

// DefaultRegistryCache is how long a Placer keeps the registry it read:
// a second, or a tenth of the heartbeat timeout if that is shorter.
const DefaultRegistryCache = time.Second

// NewPlacer returns a Placer placing with opts (as Place takes them).
// cacheFor is how long, in file-server time, it keeps the registry it
// read; zero means DefaultRegistryCache (at most a tenth of the timeout)
// and a negative value reads it for every placement, as Place does.
func NewPlacer(store *fsstore.Store, opts PlaceOptions, cacheFor time.Duration) *Placer {
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultHeartbeatTimeout
	}
	if cacheFor == 0 {
		cacheFor = min(DefaultRegistryCache, timeout/10)
	}
	p := &Placer{store: store, opts: opts}
	if cacheFor > 0 {
		p.cache = &registryCache{window: cacheFor}
	}
	return p
}

// Place places a plan needing req, as the package's Place does.
func (p *Placer) Place(ctx context.Context, req Requirement) (*Placement, error) {
	return place(ctx, p.store, req, p.opts, p.cache)
}

// registryCache holds the workers' records of one read and the server
// time read before it. A nil *registryCache caches nothing.
type registryCache struct {
	window time.Duration

	mu      sync.Mutex
	at      time.Time // server time read before the scan; zero: nothing held
	bound   []fsstore.Bound
	corrupt []*fsstore.CorruptError
}

// read returns the workers' records: those held, if they were read no
// more than the window before now (server time, read before calling),
// else a new scan, which it then holds.
func (c *registryCache) read(ctx context.Context, store leaseStore, now time.Time) ([]fsstore.Bound, []*fsstore.CorruptError, error) {
	if c != nil {
		c.mu.Lock()
		at, bound, corrupt := c.at, c.bound, c.corrupt
		c.mu.Unlock()
		// Not before the read either: a server clock stepped back says
		// nothing about the records' age.
		if age := now.Sub(at); !at.IsZero() && age >= 0 && age <= c.window {
			return bound, corrupt, nil
		}
	}
	bound, corrupt, err := store.Scan(ctx, workersPrefix)
	if err != nil || c == nil {
		return bound, corrupt, err
	}
	c.mu.Lock()
	if now.After(c.at) {
		c.at, c.bound, c.corrupt = now, bound, corrupt
	}
	c.mu.Unlock()
	return bound, corrupt, nil
}

// forget drops what is held, so that the next read scans.
func (c *registryCache) forget() {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.at, c.bound, c.corrupt = time.Time{}, nil, nil
	c.mu.Unlock()
}

// place is Place, with the registry's records from cache (nil: read
// every time).
func place(ctx context.Context, store *fsstore.Store, req Requirement, opts PlaceOptions, cache *registryCache) (*Placement, error) {
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
		w, l, now, err := placeLeaseCached(ctx, store, req, timeout, holder, rnd, cache)
		if err == nil {
			return startPlacement(store, w, l, now, timeout, opts.Logger), nil
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

// placeLeaseCached is placeLease with the registry from cache; a failure
// from a cached view is never reported: the registry is read afresh and
// the placement tried again first.
func placeLeaseCached(ctx context.Context, store leaseStore, req Requirement, timeout time.Duration, holder string, rnd *rand.Rand, cache *registryCache) (WorkerRecord, Lease, time.Time, error) {
	w, l, now, err := placeLeaseFrom(ctx, store, req, timeout, holder, rnd, cache)
	if err != nil && cache != nil && (errors.Is(err, ErrNoMatch) || errors.Is(err, ErrNoFreeSlot)) {
		cache.forget()
		return placeLeaseFrom(ctx, store, req, timeout, holder, rnd, cache)
	}
	return w, l, now, err
}
