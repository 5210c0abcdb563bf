package worker

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/soma-hpc/soma/fsstore"
)

// TestPlacerReadsTheRegistryOnce: a Placer's second placement within its
// window reads the leases but not the registry (one scan, not two), and
// still never takes a held slot; a requirement only a worker registered
// after its read meets is placed on it (a cached view never reports a
// failure: it reads the registry again first).
func TestPlacerReadsTheRegistryOnce(t *testing.T) {
	ctx := context.Background()
	s := newRegStore(t)
	announce(t, s, testRecord("w0", 2, 0, 0), time.Hour)
	c := &countingStore{Counter: fsstore.NewCounter(s)}
	cache := &registryCache{window: time.Hour}
	rnd := rand.New(rand.NewPCG(1, 2))
	var held []*Placement
	for i, wantScans := range []int64{2, 1} {
		c.Reset()
		w, l, now, err := placeLeaseCached(ctx, c, Requirement{}, time.Hour, "test", rnd, cache)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, startPlacement(c, w, l, now, time.Hour, nil))
		if got := c.Scans.Load(); got != wantScans {
			t.Errorf("placement %d: %d scans, want %d", i, got, wantScans)
		}
	}
	if held[0].Lease.Name() == held[1].Lease.Name() {
		t.Fatalf("both placements hold %s", held[0].Lease.Name())
	}
	// Both slots held: busy, from the cached view and from a fresh one.
	if _, _, _, err := placeLeaseCached(ctx, c, Requirement{}, time.Hour, "test", rnd, cache); !errors.Is(err, ErrNoFreeSlot) {
		t.Errorf("third placement on 2 slots: %v, want ErrNoFreeSlot", err)
	}
	announce(t, s, testRecord("late", 1, 0, 0, "late"), time.Hour)
	w, l, now, err := placeLeaseCached(ctx, c, Requirement{Tags: []string{"late"}}, time.Hour, "test", rnd, cache)
	if err != nil || w.ID.String() != "late" {
		t.Fatalf("placement needing a worker registered after the cached read: %v on %v, want late", err, w.ID)
	}
	held = append(held, startPlacement(c, w, l, now, time.Hour, nil))
	for _, p := range held {
		if err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPlacerKeepsNoDeadWorkerAlive: a worker that stops heartbeating is
// judged dead by a Placer as soon as by Place, though the Placer still
// holds the record it read while the worker was alive: ages are the
// held record's time against the server's time of each placement (here
// the live worker looks dead in the held view too, and the Placer reads
// the registry again rather than fail).
func TestPlacerKeepsNoDeadWorkerAlive(t *testing.T) {
	ctx := context.Background()
	s := newRegStore(t)
	const timeout = 300 * time.Millisecond
	announce(t, s, testRecord("dying", 4, 0, 0), timeout)
	live := announce(t, s, testRecord("live", 4, 0, 0), timeout)
	p := NewPlacer(s, PlaceOptions{Timeout: timeout}, time.Hour)
	first, err := p.Place(ctx, Requirement{})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Release(ctx)
	// Only live heartbeats from now on; dying's record goes stale.
	deadline := time.Now().Add(timeout + 100*time.Millisecond)
	for time.Now().Before(deadline) {
		if _, err := live.Heartbeat(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(timeout / 10)
	}
	for i := range 3 {
		if _, err := live.Heartbeat(ctx); err != nil {
			t.Fatal(err)
		}
		pl, err := p.Place(ctx, Requirement{})
		if err != nil {
			t.Fatal(err)
		}
		defer pl.Release(ctx)
		if got := pl.Worker.ID.String(); got != "live" {
			t.Errorf("placement %d after dying stopped heartbeating: on %s, want live", i, got)
		}
	}
}
