package study

import (
	"fmt"
	"math"
	"slices"
)

// NonePruner never prunes.
type NonePruner struct{}

// Prune returns false.
func (NonePruner) Prune(int, []Step, History) (bool, error) { return false, nil }

// PercentilePruner prunes a trial whose best value so far is worse than a
// percentile of the finished trials' values at the same step (Optuna's
// PercentilePruner and MedianPruner, whose rules these are). It prunes at
// a report iff all hold:
//
//  1. at least max(1, Startup) other trials are StateDone;
//  2. the report's step ≥ Warmup;
//  3. it is the trial's first report in its interval: its previous largest
//     step < ⌊(step−Warmup)/Interval⌋·Interval + Warmup;
//  4. the trial's best value over its whole curve (NaNs ignored) is worse
//     than the Percentile-th percentile (linear interpolation, NaNs
//     ignored; 100−Percentile when maximising) of the finished trials'
//     values at exactly this step, and at least MinTrials of them reported
//     this step. A tie survives. A curve of only NaNs is pruned.
//
// Only StateDone trials are compared against: pruned, running and failed
// ones never set the bar.
type PercentilePruner struct {
	Percentile float64 // in (0, 100); 50 is the median
	Startup    int
	Warmup     int64
	Interval   int64 // ≥ 1; 0 means 1
	MinTrials  int   // ≥ 1; 0 means 1
}

// NewMedianPruner returns the median pruner with Optuna's defaults:
// startup 5, warmup 0, interval 1, min trials 1.
func NewMedianPruner() *PercentilePruner {
	return &PercentilePruner{Percentile: 50, Startup: 5, Interval: 1, MinTrials: 1}
}

// Prune decides on the last entry of curve; trial's own entry in h, if
// any, is ignored.
func (p *PercentilePruner) Prune(trial int, curve []Step, h History) (bool, error) {
	if h.Direction != Minimize && h.Direction != Maximize {
		return false, fmt.Errorf(`study: pruner percentile: the study has no direction (set direction = "minimize" or "maximize")`)
	}
	if !(p.Percentile > 0 && p.Percentile < 100) {
		return false, fmt.Errorf("study: pruner percentile: percentile %v outside (0, 100)", p.Percentile)
	}
	if len(curve) == 0 {
		return false, nil
	}
	var done []*Trial
	for i := range h.Trials {
		t := &h.Trials[i]
		if t.Number != trial && t.State == StateDone {
			done = append(done, t)
		}
	}
	if len(done) == 0 || len(done) < p.Startup {
		return false, nil
	}
	step := curve[len(curve)-1].Step
	if step < p.Warmup {
		return false, nil
	}
	interval := max(p.Interval, 1)
	base := (step-p.Warmup)/interval*interval + p.Warmup
	prev := int64(-1)
	for _, s := range curve[:len(curve)-1] {
		if s.Step != step {
			prev = max(prev, s.Step)
		}
	}
	if prev >= base {
		return false, nil
	}
	best := math.NaN()
	for _, s := range curve {
		if math.IsNaN(s.Value) {
			continue
		}
		if math.IsNaN(best) || h.Direction.Better(s.Value, best) {
			best = s.Value
		}
	}
	if math.IsNaN(best) {
		return true, nil
	}
	var vals []float64
	n := 0
	for _, t := range done {
		if v, ok := valueAt(t.Curve, step); ok {
			n++
			if !math.IsNaN(v) {
				vals = append(vals, v)
			}
		}
	}
	if n == 0 || n < max(p.MinTrials, 1) || len(vals) == 0 {
		return false, nil
	}
	q := p.Percentile
	if h.Direction == Maximize {
		q = 100 - q
	}
	bar := percentile(vals, q)
	if h.Direction == Minimize {
		return best > bar, nil
	}
	return best < bar, nil
}

// valueAt returns the value reported at exactly step in a step-ordered
// curve.
func valueAt(curve []Step, step int64) (float64, bool) {
	i, ok := slices.BinarySearchFunc(curve, step, func(s Step, t int64) int {
		switch {
		case s.Step < t:
			return -1
		case s.Step > t:
			return 1
		}
		return 0
	})
	if !ok {
		return 0, false
	}
	return curve[i].Value, true
}

// percentile is numpy's percentile with linear interpolation, q in
// [0, 100], over a non-empty vals (which it sorts).
func percentile(vals []float64, q float64) float64 {
	slices.Sort(vals)
	pos := q / 100 * float64(len(vals)-1)
	lo := int(math.Floor(pos))
	if lo >= len(vals)-1 {
		return vals[len(vals)-1]
	}
	frac := pos - float64(lo)
	return vals[lo] + frac*(vals[lo+1]-vals[lo])
}

// ASHAPruner is asynchronous successive halving as Optuna's
// SuccessiveHalvingPruner does it (Li et al., MLSys 2020): rung k sits at
// step r·Eta^(MinEarlyStoppingRate+k), and a trial reaching a rung is kept
// only if its value there is within the best 1/Eta of every value recorded
// at that rung (the first Eta−1 arrivals must be the best so far). It is
// decided on arrival; nothing is paused.
//
// Optuna stores each trial's rung values as it passes them; here they are
// derived from the curves in the history: a trial's value at rung k is the
// value of its first report at or past the rung's step. A pruned trial
// records only the rungs its earlier reports passed and the first rung its
// last report reached (where it was cut). Every state counts.
type ASHAPruner struct {
	// MinResource is r; 0 means automatic: max(⌊L/100⌋, 1) where L is the
	// last step of the finished trial that finished first. Until a trial
	// has finished, automatic ASHA prunes nothing.
	MinResource          int64
	Eta                  int // ≥ 2
	MinEarlyStoppingRate int // s ≥ 0
}

// Prune decides on the last entry of curve; trial's own entry in h, if
// any, is ignored.
func (p *ASHAPruner) Prune(trial int, curve []Step, h History) (bool, error) {
	if h.Direction != Minimize && h.Direction != Maximize {
		return false, fmt.Errorf(`study: pruner asha: the study has no direction (set direction = "minimize" or "maximize")`)
	}
	if p.Eta < 2 || p.MinEarlyStoppingRate < 0 || p.MinResource < 0 {
		return false, fmt.Errorf("study: pruner asha: eta %d must be ≥ 2, min_early_stopping_rate %d and min_resource %d ≥ 0",
			p.Eta, p.MinEarlyStoppingRate, p.MinResource)
	}
	if len(curve) == 0 {
		return false, nil
	}
	r := p.MinResource
	if r == 0 {
		var first *Trial
		for i := range h.Trials {
			t := &h.Trials[i]
			if t.Number == trial || t.State != StateDone {
				continue
			}
			if first == nil || t.Time.Before(first.Time) || (t.Time.Equal(first.Time) && t.Number < first.Number) {
				first = t
			}
		}
		if first == nil {
			return false, nil
		}
		last := first.LastStep
		if n := len(first.Curve); n > 0 {
			last = max(last, first.Curve[n-1].Step)
		}
		r = max(last/100, 1)
	}
	rungStep := func(k int) int64 {
		x := float64(r) * math.Pow(float64(p.Eta), float64(p.MinEarlyStoppingRate+k))
		if x >= math.MaxInt64/2 {
			return math.MaxInt64
		}
		return int64(x)
	}
	last := curve[len(curve)-1]
	// The rungs the trial already passed with earlier reports.
	rung := 0
	if len(curve) > 1 {
		prev := curve[len(curve)-2].Step
		for prev >= rungStep(rung) {
			rung++
		}
	}
	for {
		if last.Step < rungStep(rung) {
			return false, nil
		}
		v := last.Value
		if math.IsNaN(v) {
			return true, nil
		}
		competing := []float64{v}
		for i := range h.Trials {
			t := &h.Trials[i]
			if t.Number == trial {
				continue
			}
			if x, ok := rungValue(t, rung, rungStep); ok {
				competing = append(competing, x)
			}
		}
		idx := max(len(competing)/p.Eta-1, 0)
		slices.SortFunc(competing, cmpNaNLast)
		var keep bool
		if h.Direction == Minimize {
			keep = v <= competing[idx]
		} else {
			keep = v >= competing[len(competing)-1-idx]
		}
		if !keep {
			return true, nil
		}
		rung++
	}
}

// cmpNaNLast orders floats ascending with NaN last, as numpy's sort.
func cmpNaNLast(a, b float64) int {
	switch {
	case math.IsNaN(a) && math.IsNaN(b):
		return 0
	case math.IsNaN(a):
		return 1
	case math.IsNaN(b):
		return -1
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// rungValue is the value trial t recorded at rung k, derived from its
// curve (see ASHAPruner).
func rungValue(t *Trial, k int, rungStep func(int) int64) (float64, bool) {
	c := t.Curve
	if len(c) == 0 {
		return 0, false
	}
	at := rungStep(k)
	i, _ := slices.BinarySearchFunc(c, at, func(s Step, x int64) int {
		switch {
		case s.Step < x:
			return -1
		case s.Step > x:
			return 1
		}
		return 0
	})
	if i == len(c) {
		return 0, false
	}
	if t.State == StatePruned && i == len(c)-1 && k > 0 {
		// Cut by its last report: it recorded only the first rung that
		// report reached.
		if len(c) == 1 || c[len(c)-2].Step < rungStep(k-1) {
			if c[i].Step >= rungStep(k-1) {
				return 0, false
			}
		}
	}
	return c[i].Value, true
}

var (
	_ Pruner = NonePruner{}
	_ Pruner = (*PercentilePruner)(nil)
	_ Pruner = (*ASHAPruner)(nil)
)
