package study

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
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

// PercentilePruner decides the same on percentileView as on the whole
// curve (Judge gives it the view: the whole curve on every report was
// quadratic over a trial's reports), for random curves with NaNs and
// random histories, in both directions.
func TestPercentileViewDecidesTheSame(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	val := func() float64 {
		if rng.IntN(10) == 0 {
			return math.NaN()
		}
		return float64(rng.IntN(20))
	}
	curveOf := func(n int) []Step {
		var c []Step
		step := int64(0)
		for range n {
			step += int64(1 + rng.IntN(3))
			c = append(c, Step{Step: step, Value: val()})
		}
		return c
	}
	decided := map[bool]int{}
	for i := range 3000 {
		dir := []Direction{Minimize, Maximize}[i%2]
		p := &PercentilePruner{Percentile: float64(1 + rng.IntN(98)), Startup: rng.IntN(3), Warmup: int64(rng.IntN(4)), Interval: int64(1 + rng.IntN(3)), MinTrials: 1 + rng.IntN(2)}
		h := History{Direction: dir}
		for n := range 1 + rng.IntN(5) {
			h.Trials = append(h.Trials, Trial{Number: n + 1, State: StateDone, Curve: curveOf(1 + rng.IntN(12))})
		}
		curve := curveOf(2 + rng.IntN(12))
		best := math.NaN()
		for _, s := range curve[:len(curve)-1] {
			if !math.IsNaN(s.Value) && (math.IsNaN(best) || dir.Better(s.Value, best)) {
				best = s.Value
			}
		}
		want, err1 := p.Prune(0, curve, h)
		got, err2 := p.Prune(0, percentileView(curve, best), h)
		decided[want]++
		if got != want || (err1 == nil) != (err2 == nil) {
			t.Fatalf("case %d: %+v on %v: view says %v (%v), whole curve %v (%v)", i, p, curve, got, err2, want, err1)
		}
	}
	if decided[true] < 100 || decided[false] < 100 {
		t.Errorf("prune decisions %v: the cases test too little", decided)
	}
}

// Regression (issue 13, coalesced reports): Finish wrote the values Add
// took since the last Flush into the curve blob but not into the record,
// so a trial that reported 19 epochs was recorded with the last step of
// its last Flush (examples/digits: "done with last step 1, want 19").
func TestFinishRecordsValuesAddedAfterFlush(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := recStore(t)
	s := recOpen(t, st, "s", recSpec(t, recContinuous, "minimize", "random", "none", 2), 0)
	for _, state := range []State{StateDone, StatePruned} {
		run, err := s.Next(ctx, recWho)
		if err != nil {
			t.Fatal(err)
		}
		if err := run.Add(0, 3); err != nil {
			t.Fatal(err)
		}
		if err := run.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		for i := int64(1); i < 5; i++ {
			if err := run.Add(i, 3-float64(i)/2); err != nil {
				t.Fatal(err)
			}
		}
		score := 0.25
		if state == StatePruned {
			score = math.NaN() // a pruned trial's score is its last value
		}
		if err := run.Finish(ctx, state, score, ""); err != nil {
			t.Fatal(err)
		}
		// Trials reads the records alone (no curve blob): the record
		// itself must say where the curve ended.
		rs, err := recOpen(t, st, "s", nil, 0).Trials(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r, _ := rs.Trial(run.Number()); r.LastStep != 4 || r.Value != 1 {
			t.Errorf("%s trial's record says last step %d value %v, want step 4, value 1", state, r.LastStep, r.Value)
		}
		snap, err := recOpen(t, st, "s", nil, 0).Curves(ctx)
		if err != nil {
			t.Fatal(err)
		}
		r, _ := snap.Trial(run.Number())
		if r.LastStep != 4 || r.Value != 1 || len(r.Curve) != 5 {
			t.Errorf("%s trial recorded last step %d value %v with %d curve entries, want step 4, value 1, 5 entries", state, r.LastStep, r.Value, len(r.Curve))
		}
		if state == StatePruned && r.Score != 1 {
			t.Errorf("pruned trial's score %v, want its last value 1", r.Score)
		}
	}
}
