package worker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/soma-hpc/soma/fsstore"
)

// keepingPlacer returns a Placer over s that keeps released leases for
// keep, placing through a counting wrapper of s, closed at the test's end.
func keepingPlacer(t *testing.T, s *fsstore.Store, opts PlaceOptions, keep time.Duration) (*Placer, *countingStore) {
	t.Helper()
	if opts.Timeout == 0 {
		opts.Timeout = time.Hour
	}
	opts.KeepFor = keep
	p := NewPlacer(s, opts, time.Hour)
	c := &countingStore{Counter: fsstore.NewCounter(s)}
	p.store = c
	t.Cleanup(func() {
		if err := p.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return p, c
}

func mustPlace(t *testing.T, p *Placer, req Requirement) *Placement {
	t.Helper()
	pl, err := p.Place(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return pl
}

func mustRelease(t *testing.T, pl *Placement) {
	t.Helper()
	if err := pl.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// leaseNonce returns the nonce bound at l's name, or "" if none is.
func leaseNonce(t *testing.T, s *fsstore.Store, l Lease) string {
	t.Helper()
	b, err := s.Resolve(context.Background(), l.Name())
	if errors.Is(err, fsstore.ErrNotFound) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	n, _ := b.Meta.Get(leaseMetaNonce)
	return n
}

// TestPlacerKeepsReleasedLease: a Placer with KeepFor keeps a released
// lease, claimed and renewed, and hands it to its next placement of the
// same requirement with no file operation but the server-time read that
// judges the worker alive; a second Release of the first placement does
// not end the lease the second one uses; Close ends what is kept, and
// after it every release ends its lease at once.
func TestPlacerKeepsReleasedLease(t *testing.T) {
	ctx := context.Background()
	s := newRegStore(t)
	announce(t, s, testRecord("w0", 2, 0, 0), time.Hour)
	p, c := keepingPlacer(t, s, PlaceOptions{}, time.Hour)

	first := mustPlace(t, p, Requirement{})
	checkOps(t, "first placement", c, map[string]int64{"claim": 1})
	mustRelease(t, first)
	checkOps(t, "first release", c, map[string]int64{"claim": 0, "touch": 0, "resolve": 0, "unbind": 0})
	if got := leaseNonce(t, s, first.Lease); got != first.Lease.Nonce {
		t.Fatalf("kept lease %s carries nonce %q, want %q (still claimed)", first.Lease, got, first.Lease.Nonce)
	}

	second := mustPlace(t, p, Requirement{})
	checkOps(t, "placement from the kept lease", c, map[string]int64{"now": 1, "scan": 0, "put": 0, "claim": 0, "touch": 0, "resolve": 0, "unbind": 0})
	if second.Lease != first.Lease {
		t.Fatalf("second placement got lease %+v, want the kept %+v", second.Lease, first.Lease)
	}
	// The first placement is over: releasing it again must not end the
	// lease the second one now uses.
	mustRelease(t, first)
	checkOps(t, "second release of the first placement", c, map[string]int64{"touch": 0, "unbind": 0})
	if got := leaseNonce(t, s, second.Lease); got != second.Lease.Nonce {
		t.Fatalf("lease in use by the second placement carries %q after the first was released twice, want %q", got, second.Lease.Nonce)
	}
	// The kept lease is in use: the next placement claims the other slot.
	third := mustPlace(t, p, Requirement{})
	checkOps(t, "placement while the kept lease is in use", c, map[string]int64{"claim": 1})
	if third.Lease.Slot == second.Lease.Slot {
		t.Fatalf("third placement on slot %d, which the second holds", third.Lease.Slot)
	}
	mustRelease(t, second)
	mustRelease(t, third)
	checkOps(t, "releases while kept", c, map[string]int64{"touch": 0, "unbind": 0})

	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	checkOps(t, "Close", c, map[string]int64{"touch": 2, "unbind": 2})
	if names, _ := s.List(ctx, "leases"); len(names) != 0 {
		t.Fatalf("names left under leases/ after Close: %v", names)
	}
	after := mustPlace(t, p, Requirement{})
	mustRelease(t, after)
	checkOps(t, "placement and release after Close", c, map[string]int64{"claim": 1, "touch": 1, "unbind": 1})
}

// TestPlacerEndsKeptLeaseAfterKeepFor: a kept lease that no placement
// takes is ended by the Placer on its own once KeepFor has passed, with
// no call from its user: other placers get the slot back.
func TestPlacerEndsKeptLeaseAfterKeepFor(t *testing.T) {
	ctx := context.Background()
	s := newRegStore(t)
	announce(t, s, testRecord("w0", 1, 0, 0), time.Hour)
	p, _ := keepingPlacer(t, s, PlaceOptions{}, 20*time.Millisecond)
	mustRelease(t, mustPlace(t, p, Requirement{}))
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		names, err := s.List(ctx, "leases")
		if err != nil {
			t.Fatal(err)
		}
		if len(names) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kept lease still bound 20 s after its release with KeepFor 20ms: %v", names)
		}
	}
	// Another placer can claim the slot now.
	other, err := Place(ctx, s, Requirement{}, PlaceOptions{Timeout: time.Hour})
	if err != nil {
		t.Fatalf("Place after the kept lease ended: %v", err)
	}
	mustRelease(t, other)
}

// TestPlacerKeptLeaseOnlyForItsRequirement: a kept lease is handed only to
// a placement asking for the same GPUs, CPUs and memory (what its record
// says it holds, which other placers sum up). A placement of another
// requirement that finds the only slot held by the Placer's own kept
// lease ends it and claims the slot, rather than report every worker busy.
func TestPlacerKeptLeaseOnlyForItsRequirement(t *testing.T) {
	s := newRegStore(t)
	announce(t, s, testRecord("w0", 1, 0, 0), time.Hour)
	p, c := keepingPlacer(t, s, PlaceOptions{}, time.Hour)
	kept := mustPlace(t, p, Requirement{})
	mustRelease(t, kept)
	c.Reset()
	c.unbinds.Store(0)

	pl, err := p.Place(context.Background(), Requirement{CPUs: 1})
	if err != nil {
		t.Fatalf("placement of another requirement with the only slot kept idle: %v, want the kept lease ended and the slot claimed", err)
	}
	defer mustRelease(t, pl)
	if pl.Lease.Nonce == kept.Lease.Nonce {
		t.Fatalf("placement asking for 1 CPU got the lease kept for %q", kept.req)
	}
	if got := leaseNonce(t, s, pl.Lease); got != pl.Lease.Nonce {
		t.Fatalf("slot carries nonce %q, want the new lease's %q", got, pl.Lease.Nonce)
	}
	checkOps(t, "placement of another requirement", c, map[string]int64{"claim": 1, "unbind": 1})
}

// TestPlacerKeepsNoLeaseOnDeadWorker: a kept lease on a worker whose
// record has grown older than the timeout is not handed out: the
// placement goes to a live worker, as it would without keeping.
func TestPlacerKeepsNoLeaseOnDeadWorker(t *testing.T) {
	ctx := context.Background()
	s := newRegStore(t)
	const timeout = 300 * time.Millisecond
	announce(t, s, testRecord("dying", 1, 0, 0), timeout)
	p, _ := keepingPlacer(t, s, PlaceOptions{Timeout: timeout}, time.Hour)
	kept := mustPlace(t, p, Requirement{})
	mustRelease(t, kept)
	live := announce(t, s, testRecord("live", 1, 0, 0), timeout)
	for deadline := time.Now().Add(timeout + 100*time.Millisecond); time.Now().Before(deadline); time.Sleep(timeout / 10) {
		if _, err := live.Heartbeat(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := live.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	pl := mustPlace(t, p, Requirement{})
	defer mustRelease(t, pl)
	if got := pl.Worker.ID.String(); got != "live" || pl.Lease == kept.Lease {
		t.Fatalf("placement after dying stopped heartbeating: %s on %s, want a new lease on live", pl.Lease, got)
	}
}

// TestPlacerKeepsNoLostLease: a kept lease whose heartbeat found it gone
// (here unbound by hand) is never handed out again: the next placement
// claims the slot afresh.
func TestPlacerKeepsNoLostLease(t *testing.T) {
	ctx := context.Background()
	s := newRegStore(t)
	const timeout = 300 * time.Millisecond
	reg := announce(t, s, testRecord("w0", 1, 0, 0), time.Hour)
	p, c := keepingPlacer(t, s, PlaceOptions{Timeout: timeout}, time.Hour)
	kept := mustPlace(t, p, Requirement{})
	mustRelease(t, kept)
	if err := s.Unbind(ctx, kept.Lease.Name()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-kept.Lost():
	case <-time.After(20 * time.Second):
		t.Fatalf("kept lease unbound by hand not seen lost by its heartbeat in 20 s (every %s)", HeartbeatInterval(timeout))
	}
	if _, err := reg.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	c.Reset()
	pl := mustPlace(t, p, Requirement{})
	defer mustRelease(t, pl)
	if pl.Lease.Nonce == kept.Lease.Nonce {
		t.Fatalf("placement got the lost lease %s back", kept.Lease)
	}
	if got := leaseNonce(t, s, pl.Lease); got != pl.Lease.Nonce {
		t.Fatalf("slot carries nonce %q, want the new lease's %q", got, pl.Lease.Nonce)
	}
}

// TestPlacerClaimsKeptSlotAfreshEachWindow: a Placer kept busy hands its
// kept lease from placement to placement only within its window (the
// registry view's) after the claim; then it ends that lease at a release
// and claims the slot afresh, so the least loaded worker is chosen again
// and other placers get their turn at the slot.
func TestPlacerClaimsKeptSlotAfreshEachWindow(t *testing.T) {
	ctx := context.Background()
	s := newRegStore(t)
	announce(t, s, testRecord("w0", 1, 0, 0), time.Hour)
	const window = 30 * time.Millisecond
	p := NewPlacer(s, PlaceOptions{Timeout: time.Hour, KeepFor: time.Hour}, window)
	defer p.Close(ctx)
	first := mustPlace(t, p, Requirement{})
	mustRelease(t, first)
	for deadline := time.Now().Add(20 * time.Second); ; {
		pl := mustPlace(t, p, Requirement{})
		mustRelease(t, pl)
		if pl.Lease.Nonce != first.Lease.Nonce {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lease claimed first still served placements 20 s later, with a window of %s", window)
		}
	}
	if got := leaseNonce(t, s, first.Lease); got == first.Lease.Nonce {
		t.Fatalf("the first lease is still bound after a new one was claimed for its slot")
	}
}

// TestFindRegistered: the kept lease's worker is found by id among the
// registry's records as scanRegistry sorts them, first, last and between,
// and an id no record has is not found.
func TestFindRegistered(t *testing.T) {
	var recs []registered
	for _, id := range []string{"a1", "b2", "c3", "node10", "node9"} {
		recs = append(recs, registered{rec: WorkerRecord{ID: mustID(id)}})
	}
	for _, id := range []string{"a1", "c3", "node10", "node9"} {
		if r, ok := findRegistered(recs, mustID(id)); !ok || r.rec.ID.String() != id {
			t.Errorf("findRegistered(%s) = %v, %v", id, r.rec.ID, ok)
		}
	}
	for _, id := range []string{"a0", "c", "node11", "z"} {
		if r, ok := findRegistered(recs, mustID(id)); ok {
			t.Errorf("findRegistered(%s) found %v, want none", id, r.rec.ID)
		}
	}
}
