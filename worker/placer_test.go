package worker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/soma-hpc/soma/fsstore"
)

// TestPlacerReadsTheFolderOnce: a Placer's second placement within its
// window reads neither the registry nor the leases (no scan at all, where
// the first made two), and still never takes a held slot; a requirement
// only a worker registered after its read meets is placed on it (a kept
// view never reports a failure: it reads the folder again first).
func TestPlacerReadsTheFolderOnce(t *testing.T) {
	ctx := context.Background()
	s := newRegStore(t)
	announce(t, s, testRecord("w0", 2, 0, 0), time.Hour)
	c := &countingStore{Counter: fsstore.NewCounter(s)}
	st := newPlaceState(time.Hour, time.Hour)
	rnd := rand.New(rand.NewPCG(1, 2))
	var held []*Placement
	for i, wantScans := range []int64{2, 0} {
		c.Reset()
		w, l, now, err := placeLeaseCached(ctx, c, Requirement{}, time.Hour, "test", rnd, st)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, startPlacement(c, st, w, l, now, time.Hour, nil))
		if got := c.Scans.Load(); got != wantScans {
			t.Errorf("placement %d: %d scans, want %d", i, got, wantScans)
		}
	}
	if held[0].Lease.Name() == held[1].Lease.Name() {
		t.Fatalf("both placements hold %s", held[0].Lease.Name())
	}
	// Both slots held: busy, from the kept view and from a fresh one.
	if _, _, _, err := placeLeaseCached(ctx, c, Requirement{}, time.Hour, "test", rnd, st); !errors.Is(err, ErrNoFreeSlot) {
		t.Errorf("third placement on 2 slots: %v, want ErrNoFreeSlot", err)
	}
	announce(t, s, testRecord("late", 1, 0, 0, "late"), time.Hour)
	w, l, now, err := placeLeaseCached(ctx, c, Requirement{Tags: []string{"late"}}, time.Hour, "test", rnd, st)
	if err != nil || w.ID.String() != "late" {
		t.Fatalf("placement needing a worker registered after the kept read: %v on %v, want late", err, w.ID)
	}
	held = append(held, startPlacement(c, st, w, l, now, time.Hour, nil))
	for _, p := range held {
		if err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// storeOps is what a countingStore counted, by operation.
func storeOps(c *countingStore) map[string]int64 {
	return map[string]int64{"now": c.Nows.Load(), "scan": c.Scans.Load(), "put": c.Puts.Load(), "claim": c.Claims.Load(), "touch": c.Touches.Load(), "resolve": c.Resolves.Load(), "unbind": c.unbinds.Load()}
}

func checkOps(t *testing.T, what string, c *countingStore, want map[string]int64) {
	t.Helper()
	got := storeOps(c)
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%s: %d %s, want %d (all: %v)", what, got[k], k, n, got)
		}
	}
	c.Reset()
	c.unbinds.Store(0)
}

// TestPlacerFileOperations pins the store operations of a Placer's
// placements and releases once it has read the folder: a server-time
// read and the lease's claim, then a Touch that reads the record it
// touched (fsstore's TouchResolve) and an Unbind to release it; no
// listing, no other record read, no Put. Bug (issue 15): every
// placement through a Placer listed leases/ and read each lease record
// (5 system calls a worker's lease folder and 6 a record: 76 a placement
// and its release with 10 workers), and Put the lease's blob again.
func TestPlacerFileOperations(t *testing.T) {
	ctx := context.Background()
	s := newRegStore(t)
	for _, id := range []string{"w0", "w1"} {
		announce(t, s, testRecord(id, 4, 0, 0), time.Hour)
	}
	c := &countingStore{Counter: fsstore.NewCounter(s)}
	st := newPlaceState(time.Hour, time.Hour)
	rnd := rand.New(rand.NewPCG(1, 2))
	place := func() *Placement {
		t.Helper()
		w, l, now, err := placeLeaseCached(ctx, c, Requirement{}, time.Hour, "test", rnd, st)
		if err != nil {
			t.Fatal(err)
		}
		return startPlacement(c, st, w, l, now, time.Hour, nil)
	}
	release := func(p *Placement) {
		t.Helper()
		if err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	c.Reset()
	first := place()
	checkOps(t, "first placement", c, map[string]int64{"now": 1, "scan": 2, "put": 1, "claim": 1, "touch": 0, "resolve": 0, "unbind": 0})
	var held []*Placement
	for i := range 3 {
		held = append(held, place())
		checkOps(t, fmt.Sprintf("placement %d", i+1), c, map[string]int64{"now": 1, "scan": 0, "put": 0, "claim": 1, "touch": 0, "resolve": 0, "unbind": 0})
	}
	for i, p := range append(held, first) {
		release(p)
		checkOps(t, fmt.Sprintf("release %d", i), c, map[string]int64{"now": 0, "scan": 0, "put": 0, "claim": 0, "touch": 1, "resolve": 0, "unbind": 1})
	}
	// The releases freed the slots in the view: 8 more placements fill
	// both workers from it, with no listing and no lost claim.
	for i := range 8 {
		held = append(held, place())
		checkOps(t, fmt.Sprintf("placement %d after the releases", i), c, map[string]int64{"now": 1, "scan": 0, "put": 0, "claim": 1})
	}
	for _, p := range held[3:] {
		release(p)
	}
	if names, _ := s.List(ctx, "leases"); len(names) != 0 {
		t.Errorf("names left under leases/: %v", names)
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

// TestPlacerJudgesStalenessAtTheListing: a lease a Placer's kept view
// found live is never reclaimed later because its record, as listed, has
// since grown older than the timeout: its holder may have renewed it
// since the listing (here it did, every heartbeat). Judged against a
// later server time, the kept record would look stale, and the Placer
// would end a live lease and overbook its slot.
func TestPlacerJudgesStalenessAtTheListing(t *testing.T) {
	ctx := context.Background()
	s := newRegStore(t)
	const timeout = 300 * time.Millisecond
	w := announce(t, s, testRecord("w", 1, 0, 0), time.Hour)
	h, err := Place(ctx, s, Requirement{}, PlaceOptions{Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(ctx)
	st := newPlaceState(time.Hour, timeout)
	rnd := rand.New(rand.NewPCG(1, 2))
	if _, _, _, err := placeLeaseCached(ctx, s, Requirement{}, timeout, "test", rnd, st); !errors.Is(err, ErrNoFreeSlot) {
		t.Fatalf("placement on a held slot: %v, want ErrNoFreeSlot", err)
	}
	// Two timeouts pass; the holder's heartbeat keeps its lease fresh.
	time.Sleep(2 * timeout)
	if _, err := w.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	st.reg.forget() // the worker's record afresh (alive); the leases as listed two timeouts ago
	if _, _, _, err := placeLeaseFrom(ctx, s, Requirement{}, timeout, "test", rnd, st); !errors.Is(err, ErrNoFreeSlot) {
		t.Errorf("placement from a view listed two timeouts ago: %v, want ErrNoFreeSlot (the lease is live)", err)
	}
	select {
	case <-h.Lost():
		t.Errorf("the holder lost its live lease: %v", h.Err())
	default:
	}
	if b, err := s.Resolve(ctx, h.Lease.Name()); err != nil || b.Meta.Value(leaseMetaNonce) != h.Lease.Nonce {
		t.Errorf("the holder's lease after the placement: %v, %v; want its nonce %s", b.Meta, err, h.Lease.Nonce)
	}
}

// TestPlacerLostClaimListsAgain: a slot the kept view shows free but
// another placer took meanwhile is not placed on (the claim decides), and
// the view is dropped: another placer is at work, so the next placement
// lists leases/ again rather than trust it.
func TestPlacerLostClaimListsAgain(t *testing.T) {
	ctx := context.Background()
	s := newRegStore(t)
	announce(t, s, testRecord("w", 2, 0, 0), time.Hour)
	c := &countingStore{Counter: fsstore.NewCounter(s)}
	st := newPlaceState(time.Hour, time.Hour)
	rnd := rand.New(rand.NewPCG(1, 2))
	w, l, now, err := placeLeaseCached(ctx, c, Requirement{}, time.Hour, "test", rnd, st)
	if err != nil {
		t.Fatal(err)
	}
	mine := startPlacement(c, st, w, l, now, time.Hour, nil)
	defer mine.Release(ctx)
	other, err := Place(ctx, s, Requirement{}, PlaceOptions{Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release(ctx)
	c.Reset()
	if _, _, _, err := placeLeaseCached(ctx, c, Requirement{}, time.Hour, "test", rnd, st); !errors.Is(err, ErrNoFreeSlot) {
		t.Fatalf("placement with both slots held: %v, want ErrNoFreeSlot", err)
	}
	if got := c.Claims.Load(); got != 1 {
		t.Errorf("%d claims, want 1 (the slot the view showed free, lost)", got)
	}
	if got := c.Scans.Load(); got < 1 {
		t.Errorf("%d scans after a lost claim, want the leases listed again", got)
	}
	if b, err := s.Resolve(ctx, other.Lease.Name()); err != nil || b.Meta.Value(leaseMetaNonce) != other.Lease.Nonce {
		t.Errorf("the other placer's lease: %v, %v; want its nonce", b.Meta, err)
	}
}

// TestLeaseBlobStoredOncePerReuse: a Placer stores the lease blob for its
// first claim, not for the next ones, and again once LeaseBlobReuse has
// passed, so soma gc (whose least grace is six times as long) never
// removes it under a lease about to be claimed; a clock stepped back
// stores it again too.
func TestLeaseBlobStoredOncePerReuse(t *testing.T) {
	ctx := context.Background()
	s := newRegStore(t)
	c := &countingStore{Counter: fsstore.NewCounter(s)}
	t0 := time.Now()
	clock := t0
	st := newPlaceState(time.Hour, time.Hour)
	st.blob.now = func() time.Time { return clock }
	for _, tc := range []struct {
		name    string
		at      time.Time
		wantPut int64
	}{
		{"first", t0, 1},
		{"within the reuse", t0.Add(LeaseBlobReuse - time.Nanosecond), 0},
		{"at the reuse's end", t0.Add(LeaseBlobReuse), 1},
		{"just after that Put", t0.Add(LeaseBlobReuse + time.Second), 0},
		{"clock stepped back", t0, 1},
	} {
		clock = tc.at
		c.Reset()
		d, err := st.leaseDigest(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		if d != fsstore.Sum(leaseBlob) {
			t.Errorf("%s: digest %s, want the lease blob's", tc.name, d)
		}
		if got := c.Puts.Load(); got != tc.wantPut {
			t.Errorf("%s: %d Puts, want %d", tc.name, got, tc.wantPut)
		}
	}
}

// TestPlacerGoroutinesNeverRaceEachOther: placements through one Placer
// at once never claim the same slot (a slot being claimed is pending, and
// the others skip it), so none loses a claim to another and drops the
// view. Bug (issue 15): 8 senders sharing one Placer picked the same
// free slot from the same view; the losers made a temp file and a link
// for nothing and the next placement listed leases/ again.
func TestPlacerGoroutinesNeverRaceEachOther(t *testing.T) {
	ctx := context.Background()
	s := newRegStore(t)
	for _, id := range []string{"w0", "w1"} {
		announce(t, s, testRecord(id, 4, 0, 0), time.Hour)
	}
	c := &countingStore{Counter: fsstore.NewCounter(s)}
	st := newPlaceState(time.Hour, time.Hour)

	// Deterministic: every slot but one pending; the placement takes
	// that one, with one claim.
	if _, _, _, err := listWorkersCached(ctx, c, ListOptions{Timeout: time.Hour}, st); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if !st.leases.reserve(mustID("w0"), i, Requirement{}) {
			t.Fatalf("reserve w0/%d: false on a free slot", i)
		}
	}
	for i := range 3 {
		st.leases.reserve(mustID("w1"), i, Requirement{})
	}
	if st.leases.reserve(mustID("w0"), 0, Requirement{}) {
		t.Errorf("reserve of a pending slot: true, want false")
	}
	c.Reset()
	rnd := rand.New(rand.NewPCG(1, 2))
	w, l, now, err := placeLeaseCached(ctx, c, Requirement{}, time.Hour, "test", rnd, st)
	if err != nil {
		t.Fatal(err)
	}
	if l.Name() != "leases/w1/3" || c.Claims.Load() != 1 {
		t.Errorf("placement with all but leases/w1/3 pending: %s after %d claims, want leases/w1/3 after 1", l.Name(), c.Claims.Load())
	}
	startPlacement(c, st, w, l, now, time.Hour, nil).Release(ctx)
	for i := range 4 {
		st.leases.unreserve(mustID("w0"), i)
	}
	for i := range 3 {
		st.leases.unreserve(mustID("w1"), i)
	}

	// 8 goroutines, 25 placements each on 8 slots: one claim each.
	c.Reset()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
			for range 25 {
				w, l, now, err := placeLeaseCached(ctx, c, Requirement{}, time.Hour, "test", rnd, st)
				if err != nil {
					errs <- err
					return
				}
				if err := startPlacement(c, st, w, l, now, time.Hour, nil).Release(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := c.Claims.Load(); got != 200 {
		t.Errorf("%d claims for 200 placements through one Placer, want 200 (none lost to itself)", got)
	}
}

// TestPlacerReclaimsAStaleLease: a lease a Placer's kept view found live
// does not keep its slot from it once the lease has gone stale (its
// holder died): the view says busy, so the Placer lists again before it
// gives up, finds the lease stale and reclaims it, and the dead holder's
// late release leaves the new lease bound.
func TestPlacerReclaimsAStaleLease(t *testing.T) {
	ctx := context.Background()
	s := newRegStore(t)
	const timeout = 300 * time.Millisecond
	w := announce(t, s, testRecord("w", 1, 0, 0), time.Hour)
	old, err := Place(ctx, s, Requirement{}, PlaceOptions{Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	p := NewPlacer(s, PlaceOptions{Timeout: timeout}, time.Hour)
	if _, err := p.Place(ctx, Requirement{}); !errors.Is(err, ErrNoFreeSlot) {
		t.Fatalf("Placer while the lease is live = %v, want ErrNoFreeSlot", err)
	}
	// The holder "dies": its heartbeat stops, nothing is released.
	old.stop()
	<-old.done
	time.Sleep(timeout + 50*time.Millisecond)
	if _, err := w.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	pl, err := p.Place(ctx, Requirement{})
	if err != nil {
		t.Fatalf("Placer over a stale lease its view holds as live: %v", err)
	}
	defer pl.Release(ctx)
	if pl.Lease.Name() != old.Lease.Name() || pl.Lease.Nonce == old.Lease.Nonce {
		t.Fatalf("new lease %+v, old %+v: want the same slot, a new nonce", pl.Lease, old.Lease)
	}
	if err := ReleaseLease(ctx, s, old.Lease, timeout); err != nil {
		t.Fatal(err)
	}
	if b, err := s.Resolve(ctx, pl.Lease.Name()); err != nil || b.Meta.Value(leaseMetaNonce) != pl.Lease.Nonce {
		t.Errorf("after the old holder's release: %v, %v; want the new lease bound", b.Meta, err)
	}
}
