package study

import (
	"context"
	"fmt"
	"math"
	"testing"

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
