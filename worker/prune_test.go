package worker

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/soma-hpc/soma/fsstore"
)

// pruneRoot makes a folder with a worker silent for longer than age
// (with a lease and an end marker of its own, abandoned), a lease of a
// worker with no record at all, and a live worker holding a lease.
func pruneRoot(t *testing.T, timeout, age time.Duration) (*fsstore.Store, *Registration) {
	t.Helper()
	ctx := context.Background()
	s := newRegStore(t)
	announce(t, s, testRecord("gone", 2, 0, 0), timeout) // never heartbeats again
	if _, won, err := claimLease(ctx, s, mustID("gone"), 0, nil, "placer", Requirement{}, timeout); err != nil || !won {
		t.Fatalf("lease on gone: won %v, %v", won, err)
	}
	d, err := s.Put(ctx, leaseBlob)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"leases/gone/1.end.abc.0", "leases/orphan/0"} {
		if _, err := s.Claim(ctx, name, d, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Waiting for the records to age is the behaviour under test.
	time.Sleep(age + 100*time.Millisecond)
	live := announce(t, s, testRecord("live", 2, 0, 0), timeout)
	p, err := Place(ctx, s, Requirement{}, PlaceOptions{Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Release(context.Background()) })
	return s, live
}

func TestPruneWorkers(t *testing.T) {
	ctx := context.Background()
	timeout, age := 50*time.Millisecond, 300*time.Millisecond
	s, live := pruneRoot(t, timeout, age)
	names := func() []string {
		t.Helper()
		var out []string
		for _, p := range []string{"workers", "leases"} {
			l, err := s.List(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, l...)
		}
		return out
	}
	before := names()

	dry, err := PruneWorkers(ctx, s, PruneOptions{OlderThan: age, Timeout: timeout, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(); !slices.Equal(got, before) {
		t.Errorf("a dry run removed names: %v, was %v", got, before)
	}
	rep, err := PruneWorkers(ctx, s, PruneOptions{OlderThan: age, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []PruneReport{dry, rep} {
		if len(r.Workers) != 1 || r.Workers[0].ID != "gone" || r.Workers[0].AgeSeconds < age.Seconds() {
			t.Errorf("dry run %v: pruned workers %+v, want gone, older than %s", r.DryRun, r.Workers, age)
		}
		want := []string{"leases/gone/0", "leases/gone/1.end.abc.0", "leases/orphan/0"}
		if !slices.Equal(r.Leases, want) {
			t.Errorf("dry run %v: pruned leases %v, want %v", r.DryRun, r.Leases, want)
		}
		if r.Kept != 1 {
			t.Errorf("dry run %v: kept %d workers, want 1 (live)", r.DryRun, r.Kept)
		}
	}
	// The live worker's lease is on the slot Place chose (it spreads
	// placers over slots).
	got := names()
	if len(got) != 2 || got[0] != "workers/live" || !strings.HasPrefix(got[1], "leases/live/") {
		t.Errorf("after pruning: %v, want workers/live and its lease", got)
	}
	// The live worker keeps placing and heartbeating.
	if _, err := live.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	infos, _, err := ListWorkers(ctx, s, ListOptions{Timeout: time.Hour})
	if err != nil || len(infos) != 1 || infos[0].Leases != 1 {
		t.Errorf("after pruning, workers %+v (%v), want live with its 1 lease", infos, err)
	}
}

// A worker pruned while it was only paused (a long GC, a stopped job)
// binds its record again at its next heartbeat.
func TestPrunedWorkerComesBack(t *testing.T) {
	ctx := context.Background()
	s := newRegStore(t)
	g := announce(t, s, testRecord("paused", 1, 0, 0), 50*time.Millisecond)
	time.Sleep(150 * time.Millisecond)
	rep, err := PruneWorkers(ctx, s, PruneOptions{OlderThan: 100 * time.Millisecond, Timeout: 50 * time.Millisecond})
	if err != nil || len(rep.Workers) != 1 {
		t.Fatalf("pruned %+v (%v), want the paused worker", rep.Workers, err)
	}
	if _, err := g.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	infos, _, err := ListWorkers(ctx, s, ListOptions{Timeout: time.Hour})
	if err != nil || len(infos) != 1 || infos[0].Record.ID.String() != "paused" {
		t.Errorf("after its heartbeat, workers %+v (%v), want paused back", infos, err)
	}
}

func TestPruneAgeBelowTimeout(t *testing.T) {
	s := newRegStore(t)
	_, err := PruneWorkers(context.Background(), s, PruneOptions{OlderThan: time.Second, Timeout: time.Minute})
	if !errors.Is(err, ErrPruneAge) {
		t.Errorf("got %v, want ErrPruneAge", err)
	}
}
