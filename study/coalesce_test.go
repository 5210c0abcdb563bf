package study

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"
)

// Add keeps values in memory only; Flush writes them; Judge answers from
// the curve so far and the other trials' curves (issue 13: Report wrote
// a record and a whole-curve blob for every value).
func TestAddFlushJudge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := recStore(t)
	s := recOpen(t, st, "s", recSpec(t, recContinuous, "minimize", "random", "median:startup=1", 3), 0)
	// A done trial with a curve sets the bar: 1 at every step.
	done, err := s.Next(ctx, recWho)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := done.Add(int64(i), 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := done.Finish(ctx, StateDone, 1, ""); err != nil {
		t.Fatal(err)
	}

	run, err := s.Next(ctx, recWho)
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Add(0, 0.5); err != nil {
		t.Fatal(err)
	}
	if prune, err := run.Judge(ctx, time.Hour); err != nil || prune {
		t.Fatalf("Judge at 0.5 (the bar: 1) = %v, %v, want keep", prune, err)
	}
	if err := run.Add(1, 7); err != nil {
		t.Fatal(err)
	}
	// Its best so far (0.5) still beats the bar.
	if prune, err := run.Judge(ctx, time.Hour); err != nil || prune {
		t.Fatalf("Judge at best 0.5 = %v, %v, want keep", prune, err)
	}
	for _, bad := range []struct {
		step int64
		v    float64
	}{{1, 0.1}, {2, math.NaN()}} {
		if err := run.Add(bad.step, bad.v); err == nil {
			t.Errorf("Add(%d, %v) succeeded", bad.step, bad.v)
		}
	}
	snapBefore, err := recOpen(t, st, "s", nil, 0).Curves(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := snapBefore.Trial(1); len(r.Curve) != 0 {
		t.Errorf("before Flush another process sees %v, want nothing written yet", r.Curve)
	}
	if err := run.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	snap, err := recOpen(t, st, "s", nil, 0).Curves(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := snap.Trial(1); len(r.Curve) != 2 || r.LastStep != 1 || r.Value != 7 || r.State != StateRunning {
		t.Errorf("after Flush another process sees %+v, want both values, running", r)
	}

	// A trial that is worse from the start is pruned.
	worse, err := s.Next(ctx, recWho)
	if err != nil {
		t.Fatal(err)
	}
	if err := worse.Add(0, 3); err != nil {
		t.Fatal(err)
	}
	if prune, err := worse.Judge(ctx, 0); err != nil || !prune {
		t.Errorf("Judge at 3 (the bar: 1) = %v, %v, want prune", prune, err)
	}
	if err := run.Finish(ctx, StateDone, 0.5, ""); err != nil {
		t.Fatal(err)
	}
	if err := run.Add(3, 1); !errors.Is(err, ErrFinished) {
		t.Errorf("Add after Finish = %v, want ErrFinished", err)
	}
}
