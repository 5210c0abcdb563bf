package worker

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/soma-hpc/soma/fsstore"
)

// countingStore counts what placement asks of a real store (fsstore's
// Counter, which leaves unbinds uncounted, plus UnbindEphemeral).
type countingStore struct {
	*fsstore.Counter
	unbinds atomic.Int64
}

func (c *countingStore) UnbindEphemeral(ctx context.Context, name string) error {
	c.unbinds.Add(1)
	return c.Counter.UnbindEphemeral(ctx, name)
}

// TestPlacementFileOperations pins the store operations of one placement
// and its release with a free slot and no other placer: one server-time
// read, the two listings, one Put and one Claim (the lease), then a Touch
// that reads the record it touched (TouchResolve) and an Unbind to
// release it (a Touch and a Resolve, two opens, until issue 15's second
// pass). None of them fsyncs: the claim
// and the unbind are ephemeral (fsstore.ClaimEphemeral; until then they
// made 3 fsyncs, and placed no-op plans ran at 0.23x of the same plans
// sent straight). Bug (issue 15): a placement and its
// release cost two Puts, two Claims (the lease and its end marker), two
// Unbinds and a Touch at the start, 7 fsyncs in all, and placed no-op
// plans ran at 0.34x of the same plans sent straight to the workers.
func TestPlacementFileOperations(t *testing.T) {
	ctx := context.Background()
	s := newRegStore(t)
	for _, id := range []string{"w0", "w1"} {
		announce(t, s, testRecord(id, 4, 0, 0), time.Hour)
	}
	c := &countingStore{Counter: fsstore.NewCounter(s)}
	rnd := rand.New(rand.NewPCG(1, 2))
	// Three placements held at once, then released: each costs the same.
	var held []*Placement
	for i := range 3 {
		c.Reset()
		c.unbinds.Store(0)
		w, l, now, err := placeLease(ctx, c, Requirement{}, time.Hour, "test", rnd)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, startPlacement(c, nil, w, l, now, time.Hour, nil))
		got := map[string]int64{"now": c.Nows.Load(), "scan": c.Scans.Load(), "put": c.Puts.Load(), "claim": c.Claims.Load(), "touch": c.Touches.Load(), "resolve": c.Resolves.Load(), "unbind": c.unbinds.Load()}
		want := map[string]int64{"now": 1, "scan": 2, "put": 1, "claim": 1, "touch": 0, "resolve": 0, "unbind": 0}
		for k, n := range want {
			if got[k] != n {
				t.Errorf("placement %d: %d %s, want %d (all: %v)", i, got[k], k, n, got)
			}
		}
	}
	for i, p := range held {
		c.Reset()
		c.unbinds.Store(0)
		if err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
		got := map[string]int64{"now": c.Nows.Load(), "scan": c.Scans.Load(), "put": c.Puts.Load(), "claim": c.Claims.Load(), "touch": c.Touches.Load(), "resolve": c.Resolves.Load(), "unbind": c.unbinds.Load()}
		want := map[string]int64{"now": 0, "scan": 0, "put": 0, "claim": 0, "touch": 1, "resolve": 0, "unbind": 1}
		for k, n := range want {
			if got[k] != n {
				t.Errorf("release %d: %d %s, want %d (all: %v)", i, got[k], k, n, got)
			}
		}
	}
	// Released for real: every slot free, no name left under leases/.
	infos, _, err := ListWorkers(ctx, s, ListOptions{Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range infos {
		if w.Leases != 0 || len(w.free) != 4 {
			t.Errorf("%s after release: %d leases, free %v; want 0 and 4 free", w.Record.ID, w.Leases, w.free)
		}
	}
	if names, _ := s.List(ctx, "leases"); len(names) != 0 {
		t.Errorf("names left under leases/: %v", names)
	}
}

// TestReleaseAfterAGapUsesTheMarker: a holder whose heartbeats stopped
// for longer than the timeout (paused; its lease reclaimed meanwhile)
// does not take the short release: its Release goes through the end
// marker and leaves the new holder's lease bound.
func TestReleaseAfterAGapUsesTheMarker(t *testing.T) {
	ctx := context.Background()
	s := newRegStore(t)
	const timeout = 300 * time.Millisecond
	w := announce(t, s, testRecord("w", 1, 0, 0), time.Hour)
	old, err := Place(ctx, s, Requirement{}, PlaceOptions{Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	// Paused: its heartbeat stops, and the lease goes stale.
	old.stop()
	<-old.done
	time.Sleep(timeout + 50*time.Millisecond)
	if _, err := w.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := Place(ctx, s, Requirement{}, PlaceOptions{Timeout: timeout})
	if err != nil {
		t.Fatalf("reclaim: %v", err)
	}
	defer p.Release(ctx)
	c := &countingStore{Counter: fsstore.NewCounter(s)}
	old.mu.Lock()
	last := old.last
	old.mu.Unlock()
	if err := releaseHeld(ctx, c, old.Lease, timeout, last, false); err != nil {
		t.Fatal(err)
	}
	if c.Claims.Load() != 1 {
		t.Errorf("release after a gap made %d claims, want 1 (the end marker)", c.Claims.Load())
	}
	got, err := s.Resolve(ctx, p.Lease.Name())
	if err != nil || got.Meta.Value(leaseMetaNonce) != p.Lease.Nonce {
		t.Errorf("the new holder's lease after the old one's release: %v, %v", got.Meta, err)
	}
}
