package study

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/soma-hpc/soma/fsstore"
)

// fillStudy runs n trials of a study named name through Next, Report and
// Finish: every third is pruned, the rest done with distinct curves.
func fillStudy(t testing.TB, st Store, name string, n int) *Study {
	t.Helper()
	ctx := context.Background()
	s := recOpen(t, st, name, recSpec(t, recContinuous, "minimize", "random", "none", n), 0)
	for i := range n {
		run, err := s.Next(ctx, recWho)
		if err != nil {
			t.Fatal(err)
		}
		for step := range int64(2) {
			if _, err := run.Report(ctx, step, float64(i)+float64(step)/10); err != nil {
				t.Fatal(err)
			}
		}
		state := StateDone
		if i%3 == 1 {
			state = StatePruned
		}
		if err := run.Finish(ctx, state, float64(i), ""); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// The cost model, measured with the counting store.
func TestQueryCost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := recStore(t)
	const n = 12
	fillStudy(t, st, "s", n)
	c := fsstore.NewCounter(st)
	fresh := func() *Study { return recOpen(t, c, "s", nil, 0) }

	t.Run("finished makes zero blob fetches", func(t *testing.T) {
		s := fresh()
		c.Reset()
		h, err := s.History(ctx)
		if err != nil {
			t.Fatal(err)
		}
		fin, err := s.Finished(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.BlobGets.Load(); got != 0 {
			t.Errorf("History+Finished fetched %d blobs, want 0", got)
		}
		if len(h.Trials) != n || len(fin) != n-n/3 {
			t.Errorf("History %d trials, Finished %d; want %d and %d", len(h.Trials), len(fin), n, n-n/3)
		}
		for _, tr := range h.Trials {
			if tr.Point.IsZero() || (tr.State == StateDone && !tr.HasScore) || tr.Curve != nil {
				t.Errorf("trial %+v: want point and score, no curve", tr)
			}
		}
	})
	t.Run("a process that ran nothing rebuilds the whole history", func(t *testing.T) {
		s := fresh()
		c.Reset()
		snap, err := s.Trials(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Resolves.Load(); got != n {
			t.Errorf("cold Trials resolved %d records, want %d (one per trial)", got, n)
		}
		for i, r := range snap.Trials {
			wantState := StateDone
			if i%3 == 1 {
				wantState = StatePruned
			}
			if r.Number != i || r.State != wantState || r.Score != float64(i) || r.LastStep != 1 || r.Who != recWho {
				t.Errorf("trial %d = %+v", i, r)
			}
		}
		// Ended trials are cached: a second look opens no record.
		c.Reset()
		if _, err := s.Trials(ctx); err != nil {
			t.Fatal(err)
		}
		if got := c.Resolves.Load(); got != 0 {
			t.Errorf("warm Trials resolved %d records, want 0", got)
		}
	})
	t.Run("curves make one fetch per trial", func(t *testing.T) {
		s := fresh()
		c.Reset()
		snap, err := s.Curves(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.BlobGets.Load(); got != n {
			t.Errorf("Curves fetched %d blobs, want %d", got, n)
		}
		for i, r := range snap.Trials {
			want := []Step{{0, float64(i)}, {1, float64(i) + 0.1}}
			if fmt.Sprint(r.Curve) != fmt.Sprint(want) {
				t.Errorf("trial %d curve %v, want %v", i, r.Curve, want)
			}
		}
		c.Reset()
		if _, err := s.Curves(ctx); err != nil {
			t.Fatal(err)
		}
		if got := c.BlobGets.Load(); got != 0 {
			t.Errorf("second Curves fetched %d blobs, want 0 (ended curves are immutable)", got)
		}
	})
}

// Best follows the study's direction.
func TestBestDirection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		dir  string
		want float64
	}{{"minimize", -2}, {"maximize", 3}} {
		st := recStore(t)
		s := recOpen(t, st, "s", recSpec(t, recContinuous, tc.dir, "random", "none", 4), 0)
		for _, score := range []float64{1, -2, 3, math.NaN()} {
			run, err := s.Next(ctx, recWho)
			if err != nil {
				t.Fatal(err)
			}
			state := StateDone
			if math.IsNaN(score) {
				state = StateFailed
			}
			if err := run.Finish(ctx, state, score, ""); err != nil {
				t.Fatal(err)
			}
		}
		best, err := s.Best(ctx)
		if err != nil || best.Score != tc.want {
			t.Errorf("%s: Best = %v, %v; want %v", tc.dir, best.Score, err, tc.want)
		}
		snap, _ := s.Trials(ctx)
		if c := snap.Counts(); c[StateDone] != 3 || c[StateFailed] != 1 {
			t.Errorf("Counts = %v", c)
		}
	}
}

// Next must not list the trial folder for every trial it hands out: a
// budget of n trials used to cost n listings of up to n entries each.
func TestNextReusesListing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := recStore(t)
	c := fsstore.NewCounter(st)
	const n = 60
	s := recOpen(t, c, "s", recSpec(t, recContinuous, "minimize", "random", "none", n), 0)
	c.Reset()
	runInOrder(t, s, n)
	// Each listing is a fresh look (at most one per relistAfter); the
	// trials this process ran itself are never read back.
	if got := c.Lists.Load(); got > 10 {
		t.Errorf("%d trials made %d listings, want a few (the last listing is reused)", n, got)
	}
	if got := c.Resolves.Load(); got > 2*n {
		t.Errorf("%d trials resolved %d names, want at most 2 per trial", n, got)
	}
	// The end is decided on a fresh listing.
	c.Reset()
	if _, err := s.Next(ctx, recWho); !errors.Is(err, ErrBudgetReached) {
		t.Fatalf("Next after the budget = %v, want ErrBudgetReached", err)
	}
	if c.Lists.Load() == 0 {
		t.Error("Next concluded the budget was reached without listing the trial folder")
	}
}

// A trial that another process claimed after this one's last listing, and
// left interrupted, is still retried: found when claiming its number, or
// at the latest by the fresh listing Next makes before it concludes.
func TestNextFindsRetriesPastItsListing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := recStore(t)
	const n = 8
	spec := recSpec(t, recContinuous, "minimize", "random", "none", n)
	a := recOpen(t, st, "s", spec, 0)
	b := recOpen(t, st, "s", nil, 0)
	other := Who{Host: "otherhost", PID: 2}

	first, err := a.Next(ctx, recWho) // a lists: trial 0
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Finish(ctx, StateDone, 0, ""); err != nil {
		t.Fatal(err)
	}
	// b takes trial 1 (a will try it next) and trial 6 (far ahead), and
	// both are interrupted.
	for _, k := range []int{1, 6} {
		run, err := b.Take(ctx, k, other)
		if err != nil {
			t.Fatal(err)
		}
		if err := run.Finish(ctx, StateInterrupted, math.NaN(), "SIGUSR1"); err != nil {
			t.Fatal(err)
		}
	}
	ran := map[int]int{0: 1}
	for {
		run, err := a.Next(ctx, recWho)
		if errors.Is(err, ErrBudgetReached) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		ran[run.Number()]++
		if err := run.Finish(ctx, StateDone, float64(run.Number()), ""); err != nil {
			t.Fatal(err)
		}
	}
	for k := range n {
		if ran[k] != 1 {
			t.Errorf("trial %d ran %d times in a, want once (every trial, interrupted ones retried): %v", k, ran[k], ran)
		}
	}
	snap, err := b.Trials(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range snap.Trials {
		wantAttempt := 0
		if r.Number == 1 || r.Number == 6 {
			wantAttempt = 1
		}
		if r.State != StateDone || r.Attempt != wantAttempt {
			t.Errorf("trial %d: %s attempt %d, want done attempt %d", r.Number, r.State, r.Attempt, wantAttempt)
		}
	}
}

func TestMergeInts(t *testing.T) {
	for _, tc := range []struct{ a, b, want []int }{
		{nil, nil, []int{}},
		{[]int{1, 3, 5}, nil, []int{1, 3, 5}},
		{nil, []int{2}, []int{2}},
		{[]int{1, 3, 5}, []int{2, 3, 6}, []int{1, 2, 3, 5, 6}},
		{[]int{4}, []int{1, 2, 3}, []int{1, 2, 3, 4}},
	} {
		if got := mergeInts(tc.a, tc.b); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("mergeInts(%v, %v) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

// Past foldLearned claims since its last look, Next folds what it
// learned into the look's listing; it goes on handing out each trial
// once, in order.
func TestNextFoldsLearnedNumbers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := recStore(t)
	n := foldLearned + 40
	s := recOpen(t, st, "s", recSpec(t, recContinuous, "minimize", "random", "none", n), 0)
	runInOrder(t, s, n)
	s.mu.Lock()
	learned := s.idx.learnedCount()
	s.mu.Unlock()
	if learned > foldLearned {
		t.Errorf("%d numbers learned and not folded, want at most %d", learned, foldLearned)
	}
	if _, err := s.Next(ctx, recWho); !errors.Is(err, ErrBudgetReached) {
		t.Fatalf("Next after the budget = %v, want ErrBudgetReached", err)
	}
}

// runInOrder runs n trials through Next and Finish in one process: Next
// must hand out 0, 1, ... n-1.
func runInOrder(t *testing.T, s *Study, n int) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		run, err := s.Next(ctx, recWho)
		if err != nil {
			t.Fatal(err)
		}
		if run.Number() != i {
			t.Fatalf("Next #%d gave trial %d", i, run.Number())
		}
		if err := run.Finish(ctx, StateDone, float64(i), ""); err != nil {
			t.Fatal(err)
		}
	}
}

func brief(recs []Record) [][2]int {
	out := make([][2]int, len(recs))
	for i, r := range recs {
		out[i] = [2]int{r.Number, r.Attempt}
	}
	return out
}

// TestLastLookReusable: a quick look reuses the last full one for
// relistAfter, or longer after a slow listing (relistShare times its
// duration), never before there was one, nor when the clock went back.
func TestLastLookReusable(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		listed []int
		took   time.Duration
		after  time.Duration
		want   bool
	}{
		{"no look yet", nil, 0, time.Second, false},
		{"fresh", []int{}, time.Millisecond, time.Second, true},
		{"past relistAfter", []int{}, time.Millisecond, relistAfter, false},
		{"slow listing kept longer", []int{}, time.Second, relistAfter, true},
		{"slow listing past its share", []int{}, time.Second, relistShare * time.Second, false},
		{"clock went back", []int{}, time.Millisecond, -time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := lastLook{listed: tc.listed, at: at, took: tc.took}
			if got := l.reusable(at.Add(tc.after)); got != tc.want {
				t.Errorf("reusable %v after = %v, want %v", tc.after, got, tc.want)
			}
		})
	}
	l := lastLook{at: at}
	if !l.begunSince(at) || l.begunSince(at.Add(time.Nanosecond)) || !l.begunSince(at.Add(-time.Second)) {
		t.Error("begunSince: want true for the look's start and before, false after")
	}
}
