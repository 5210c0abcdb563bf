package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
)

// leaseKeeper holds the leases a Placer's placements released, so that
// its next placement of the same requirement takes one instead of
// claiming a new lease and ending the old: no file operation but the
// server-time read that judges the worker alive.
//
// A kept lease stays claimed, renewed by its heartbeat, and counted as
// held by everyone who reads leases/: the worker's slot is this
// process's until the lease ends, so nothing about overbooking changes
// (a slot is still one name claimed by link(2)). What changes is when it
// ends: at most keepFor after the last release (the sweeper), at once
// when a placement of another requirement finds no free slot (drop), at
// Close, and, once window has passed since its claim, at its next
// release. That last bound makes a busy Placer claim each of its slots
// afresh at least once a window, as often as it reads the registry: the
// least loaded worker is chosen again and other placers get their turn at
// the slot, as they would have between two plans.
//
// A kept lease is handed out only for a requirement asking for the same
// GPUs, CPUs and memory (what its record says it holds, which others sum
// up), only if its worker still meets the requirement and is alive by its
// record's time against the server's time of this placement, and never
// once its heartbeat saw it lost.
type leaseKeeper struct {
	keepFor time.Duration    // longest a released lease waits for a placement
	window  time.Duration    // a lease serves placements for this long after its claim
	now     func() time.Time // time.Now; a test seam (elapsed time on this machine only)
	log     *slog.Logger

	mu       sync.Mutex
	idle     []*leaseHold // released, oldest first
	closed   bool
	sweeping bool
	ending   sync.WaitGroup // the sweeper's ends in flight (Close waits for them)
}

// any reports whether a lease is kept; a nil keeper keeps none.
func (k *leaseKeeper) any() bool {
	if k == nil {
		return false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.idle) > 0
}

// put keeps h, which a placement released, or ends it if it may not be
// kept: closed, lost, or claimed a window ago.
func (k *leaseKeeper) put(ctx context.Context, h *leaseHold) error {
	t := k.now()
	k.mu.Lock()
	if k.closed || h.isLost() || t.Sub(h.claimed) >= k.window {
		k.mu.Unlock()
		return h.finish(ctx)
	}
	h.idle = t
	k.idle = append(k.idle, h)
	if !k.sweeping {
		k.sweeping = true
		go k.sweep()
	}
	k.mu.Unlock()
	return nil
}

// take removes and returns the kept lease last released that can serve
// req (see leaseKeeper), with its worker's record as recs has it; now is
// the server's time read for this placement. It also removes the leases
// that may no longer be kept, for the caller to end.
func (k *leaseKeeper) take(req Requirement, now time.Time, timeout time.Duration, recs []registered) (*leaseHold, WorkerRecord, []*leaseHold) {
	t := k.now()
	k.mu.Lock()
	defer k.mu.Unlock()
	expired := k.expiredLocked(t)
	for i := len(k.idle) - 1; i >= 0; i-- {
		h := k.idle[i]
		if h.req.GPUs != req.GPUs || h.req.CPUs != req.CPUs || h.req.Memory != req.Memory {
			continue
		}
		r, ok := findRegistered(recs, h.l.Worker)
		if !ok || now.Sub(r.at) > timeout || len(shortfalls(req, r.rec)) > 0 {
			continue
		}
		k.idle = append(k.idle[:i], k.idle[i+1:]...)
		return h, r.rec, expired
	}
	return nil, WorkerRecord{}, expired
}

// findRegistered finds id in recs, which scanRegistry sorts by id (a
// binary search: a Placer may know a thousand workers).
func findRegistered(recs []registered, id WorkerID) (registered, bool) {
	i, ok := slices.BinarySearchFunc(recs, id.s, func(r registered, s string) int { return strings.Compare(r.rec.ID.s, s) })
	if !ok {
		return registered{}, false
	}
	return recs[i], true
}

// expiredLocked removes from idle the leases that may no longer be kept
// at t and returns them.
func (k *leaseKeeper) expiredLocked(t time.Time) []*leaseHold {
	var out []*leaseHold
	kept := k.idle[:0]
	for _, h := range k.idle {
		if h.isLost() || t.Sub(h.claimed) >= k.window || t.Sub(h.idle) >= k.keepFor {
			out = append(out, h)
			continue
		}
		kept = append(kept, h)
	}
	clear(k.idle[len(kept):])
	k.idle = kept
	return out
}

// drop ends every kept lease, for a placement that found no free slot:
// they may be what holds the slots. It reports whether there were any.
func (k *leaseKeeper) drop(ctx context.Context) bool {
	if k == nil {
		return false
	}
	k.mu.Lock()
	hs := k.idle
	k.idle = nil
	k.mu.Unlock()
	_ = k.end(context.WithoutCancel(ctx), hs)
	return len(hs) > 0
}

// sweep ends the leases kept longer than keepFor, ticking every half of
// it while any is kept. One ticking goroutine per Placer, not a timer per
// lease: a new timer per placement wakes an idle OS thread (issue 14's
// plan socket).
func (k *leaseKeeper) sweep() {
	t := time.NewTicker(max(k.keepFor/2, time.Millisecond))
	defer t.Stop()
	for range t.C {
		k.mu.Lock()
		if k.closed {
			// close ended what was kept and is waiting for ends begun
			// before it: nothing is kept after it.
			k.sweeping = false
			k.mu.Unlock()
			return
		}
		hs := k.expiredLocked(k.now())
		done := len(k.idle) == 0
		if done {
			k.sweeping = false
		}
		k.ending.Add(1)
		k.mu.Unlock()
		_ = k.end(context.Background(), hs)
		k.ending.Done()
		if done {
			return
		}
	}
}

// close ends every kept lease, waits for the sweeper's ends in flight, and
// keeps none from now on.
func (k *leaseKeeper) close(ctx context.Context) error {
	if k == nil {
		return nil
	}
	k.mu.Lock()
	k.closed = true
	hs := k.idle
	k.idle = nil
	k.mu.Unlock()
	err := k.end(ctx, hs)
	k.ending.Wait()
	return err
}

// end ends hs; an end that fails is logged and returned (the lease then
// goes stale and is reclaimed after the timeout).
func (k *leaseKeeper) end(ctx context.Context, hs []*leaseHold) error {
	var errs []error
	for _, h := range hs {
		if err := h.finish(ctx); err != nil {
			k.log.Warn("could not end a kept lease; it is reclaimed once stale", "lease", h.l.Name(), "err", err)
			errs = append(errs, fmt.Errorf("worker: end kept lease %s: %w", h.l.Name(), err))
		}
	}
	return errors.Join(errs...)
}

// reuse hands req a lease st keeps, if one can serve it (leaseKeeper):
// a Placement with that lease and its worker's record as the registry
// view has it, or nil. It ends the kept leases that may no longer be kept.
func (st *placeState) reuse(ctx context.Context, store leaseStore, req Requirement, timeout time.Duration) (*Placement, error) {
	k := st.keeper()
	if !k.any() {
		return nil, nil
	}
	now, err := store.Now(ctx)
	if err != nil {
		return nil, fmt.Errorf("worker: place %s: %w", req, err)
	}
	recs, _, err := st.reg.read(ctx, store, now)
	if err != nil {
		return nil, fmt.Errorf("worker: place %s: %w", req, err)
	}
	h, w, expired := k.take(req, now, timeout, recs)
	// Ended even if this placement is cancelled: a lease left behind
	// holds its slot from every placer until it goes stale.
	_ = k.end(context.WithoutCancel(ctx), expired)
	if h == nil {
		return nil, nil
	}
	return &Placement{Worker: w, Lease: h.l, leaseHold: h, back: k.put}, nil
}
