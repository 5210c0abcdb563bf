package study

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/soma-hpc/soma/fsstore"
)

// The store operations of one trial of a random-sampler study run by one
// process, past its first (which lists the study): each is a fixed set
// of file-server round trips (scripts/bench-trial-ops.sh counts them as
// system calls, beside the floor of a claim and a result), so a change
// that adds one fails here. Issue 13, item 9. Measured before the cuts:
// per trial 2 Puts (the empty curve's blob refreshed at the claim and
// again at the result) and 1 stat (a probe of the number before claiming
// it); before issue 18's, 1 Put (the blob refreshed at every claim, now
// once per BlobReuse: TestEmptyBlobRefreshedAfterReuse).
func TestTrialStoreOps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := fsstore.NewCounter(recStore(t))
	const n = 5
	s := recOpen(t, c, "s", recSpec(t, recContinuous, "minimize", "random", "none", n), 0)
	trial := func() {
		t.Helper()
		run, err := s.Next(ctx, recWho)
		if err != nil {
			t.Fatal(err)
		}
		if err := run.Finish(ctx, StateDone, 1, ""); err != nil {
			t.Fatal(err)
		}
	}
	trial()
	c.Reset()
	for range n - 1 {
		trial()
	}
	for _, tc := range []struct {
		what string
		got  int64
		want int64 // per trial
	}{
		{"Puts (the empty curve's blob: stored at the first claim, reused)", c.Puts.Load(), 0},
		{"Claims", c.Claims.Load(), 1},
		{"Binds (the result, sealed)", c.Binds.Load(), 1},
		{"Resolves (attempt 1 after the result: superseded?)", c.Resolves.Load(), 1},
		{"Stats", c.Stats.Load(), 0},
		{"Scans", c.Scans.Load(), 0},
		{"Lists", c.Lists.Load(), 0},
		{"Touches", c.Touches.Load(), 0},
		{"BlobGets", c.BlobGets.Load(), 0},
	} {
		if tc.got != tc.want*(n-1) {
			t.Errorf("%s: %d in %d trials, want %d per trial", tc.what, tc.got, n-1, tc.want)
		}
	}
}

// A run that reports nothing binds its result to the empty curve's blob
// without Putting it again (Run.write): the claim's record has referred
// to the blob since the claim. So a gc that runs between the claim and
// the result, with a grace far shorter than the trial, must keep the
// blob, and the result must stay readable.
func TestEmptyCurveKeptByClaimAcrossGC(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := recStore(t)
	s := recOpen(t, st, "s", recSpec(t, recContinuous, "minimize", "random", "none", 2), 0)
	run, err := s.Next(ctx, recWho)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // older than the grace below
	rep, err := st.GC(ctx, fsstore.GCOptions{Blobs: true, TempOlderThan: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Blobs != 0 {
		t.Errorf("gc removed %d blobs while the claim referred to them, want 0", rep.Blobs)
	}
	if err := run.Finish(ctx, StateDone, 1, ""); err != nil {
		t.Fatal(err)
	}
	b, err := st.Resolve(ctx, run.Name())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Get(ctx, b.Digest); err != nil {
		t.Errorf("the result's curve blob: %v, want it stored", err)
	}
	snap, err := recOpen(t, st, "s", nil, 0).Trials(ctx)
	if err != nil || len(snap.Trials) != 1 || len(snap.Corrupt) != 0 {
		t.Fatalf("Trials: %d records, %d corrupt, %v; want 1 and none", len(snap.Trials), len(snap.Corrupt), err)
	}
}

// A failed write may have bound another blob (Report's curve) before its
// error: the next write of an empty curve must Put the empty blob again,
// not trust that the record still refers to it (Run.held). It goes
// through blobForEmpty, which stores the blob again once BlobReuse has
// passed since its last Put: here it has (the Study's clock is moved on).
func TestFailedWriteForgetsHeldBlob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := fsstore.NewCounter(recStore(t))
	s := recOpen(t, c, "s", recSpec(t, recContinuous, "minimize", "random", "none", 2), 0)
	run, err := s.Next(ctx, recWho)
	if err != nil {
		t.Fatal(err)
	}
	run.mu.Lock()
	run.held = false // as a failed write leaves it
	run.mu.Unlock()
	s.mu.Lock()
	s.reuse.now = func() time.Time { return time.Now().Add(BlobReuse) }
	s.mu.Unlock()
	c.Reset()
	if err := run.Finish(ctx, StateDone, 1, ""); err != nil {
		t.Fatal(err)
	}
	if got := c.Puts.Load(); got != 1 {
		t.Errorf("Finish after a failed write: %d Puts, want 1 (the empty blob stored again)", got)
	}
}

// A process that has never lost a race claims without looking at the
// number first (TestTrialStoreOps: no stat per trial); once it has lost
// one (others claim too), it looks first, so that a number another
// process has just taken costs a stat, not a temp file written and
// fsynced for a claim that fails.
func TestClaimLooksFirstOnceContended(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := recStore(t)
	spec := recSpec(t, recContinuous, "minimize", "random", "none", 10)
	cb := fsstore.NewCounter(st)
	a, b := recOpen(t, st, "s", spec, 0), recOpen(t, cb, "s", nil, 0)
	runB, err := b.Next(ctx, recWho) // lists the study: nothing taken
	if err != nil {
		t.Fatal(err)
	}
	if runA, err := a.Next(ctx, recWho); err != nil || runA.Number() != runB.Number()+1 {
		t.Fatalf("a.Next = %v, %v; want trial %d", runA, err, runB.Number()+1)
	}
	cb.Reset()
	// b reuses its listing (random sampler): it loses the race for a's
	// number by its claim, then claims another.
	run, err := b.Next(ctx, recWho)
	if err != nil {
		t.Fatal(err)
	}
	if got := cb.Stats.Load(); got != 1 {
		t.Errorf("Next that loses a race: %d stats, want 1 (none before the lost claim, one before the next)", got)
	}
	if got := cb.Claims.Load(); got != 2 {
		t.Errorf("Next that loses a race: %d claims, want 2 (one lost, one won)", got)
	}
	if run.Number() == runB.Number()+1 {
		t.Errorf("b claimed trial %d, which a holds", run.Number())
	}
	cb.Reset()
	if _, err := b.Next(ctx, recWho); err != nil {
		t.Fatal(err)
	}
	if got := cb.Stats.Load(); got < 1 {
		t.Errorf("Next once contended: %d stats, want at least 1 (a look before each claim)", got)
	}
}

// What Next costs at the end of a budget that other processes ran: one
// read of each trial's latest record, and no more. Bug (issue 18, in
// round trips): Next stat'ed each sealed record (fsstore.Probe), then,
// before it said the budget was reached, looked for a later attempt and
// read the record anyway (a record damaged in place keeps its mode): 3
// store operations per trial where 1 will do, about 10 file-server
// operations where 5 will; at P=8 on the slow-filesystem harness, 70 of
// a trial's 126.
func TestEndOfBudgetReadsEachTrialOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const n = 6
	c := fsstore.NewCounter(doneStudy(t, n))
	s := recOpen(t, c, "s", nil, 0)
	c.Reset()
	if _, err := s.Next(ctx, recWho); !errors.Is(err, ErrBudgetReached) {
		t.Fatalf("Next = %v, want ErrBudgetReached", err)
	}
	if got := c.Resolves.Load(); got != n {
		t.Errorf("Resolves = %d, want %d (each trial's latest record once)", got, n)
	}
	// The one stat: the look's for the study's changes (refreshChanges).
	if got := c.Stats.Load(); got != 1 {
		t.Errorf("Stats = %d, want 1 (an ended record needs no look for a later attempt)", got)
	}
	c.Reset()
	if _, err := s.Next(ctx, recWho); !errors.Is(err, ErrBudgetReached) {
		t.Fatalf("Next again = %v, want ErrBudgetReached", err)
	}
	if got := c.Resolves.Load(); got != 0 {
		t.Errorf("Next again: %d reads, want none (ended records are kept)", got)
	}
}

// The empty curve's blob is stored again (its age refreshed, which keeps
// soma gc from removing it) only once BlobReuse has passed since the last
// Put began, by this process's clocks, and a clock that went back counts
// as time passed (issue 18: the Put on every claim cost four file-server
// operations per trial). The blob is made two hours old after the first
// Put, so its time says whether the next use stored it again.
func TestEmptyBlobRefreshedAfterReuse(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		later   time.Duration // the clock at the second use, after the first
		refresh bool
	}{
		{"just after", time.Nanosecond, false},
		{"within the reuse", BlobReuse - time.Nanosecond, false},
		{"at the reuse's end", BlobReuse, true},
		{"long after", time.Hour, true},
		{"clock went back", -time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			st := recStore(t)
			s := recOpen(t, st, "s", recSpec(t, recContinuous, "minimize", "random", "none", 2), 0)
			now := base
			s.reuse.now = func() time.Time { return now }
			d, err := s.blobForEmpty(ctx)
			if err != nil {
				t.Fatal(err)
			}
			h := d.Hex()
			path := filepath.Join(st.Root(), "blobs", "sha256", h[:2], h[2:])
			old := time.Now().Add(-2 * time.Hour)
			if err := os.Chtimes(path, old, old); err != nil {
				t.Fatal(err)
			}
			now = base.Add(tc.later)
			got, err := s.blobForEmpty(ctx)
			if err != nil || got != d {
				t.Fatalf("second use: %v, %v; want %v", got, err, d)
			}
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if refreshed := fi.ModTime().After(old.Add(time.Hour)); refreshed != tc.refresh {
				t.Errorf("blob time %v after a use %v after the last Put: refreshed %v, want %v", fi.ModTime(), tc.later, refreshed, tc.refresh)
			}
		})
	}
}
