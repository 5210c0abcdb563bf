package study

import (
	"context"
	"fmt"
	"math"
	"time"
)

// Reports that come faster than records can be written: Add, Flush and
// Judge split Report's three jobs, so that a runner can take every value
// an objective reports at once and write the record only every so often.
// Report did all three for every value: an fsync'd curve blob holding the
// whole curve so far (quadratic in the curve's length), a rebind, a look
// for a newer attempt and, with a pruner, a scan of the study. Issue 13
// measured 1.5-3 ms of soma-trial per report: 2000 reports that an
// objective wrote in 0.07 s took its trial 5.7 s, 20000 took 75 s.

// Add appends an intermediate value at step to the run's curve in memory
// and writes nothing: Flush (or Finish) writes it. It checks what Report
// checks: a finite value, and steps that increase from 0. It returns
// ErrFinished after Finish and ErrSuperseded once a write has found a
// newer attempt.
func (r *Run) Add(step int64, value float64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.checkStep(step, value); err != nil {
		return err
	}
	if len(r.curve) == cap(r.curve) && len(r.curve) >= 1024 {
		// Doubled, not append's 1.25x for large slices: a 100k-step
		// curve was copied into ~14 fresh, page-faulted allocations.
		r.curve = append(make([]Step, 0, 2*len(r.curve)), r.curve...)
	}
	r.curve = append(r.curve, Step{Step: step, Value: value})
	r.pending = true
	return nil
}

// Flush renews the attempt's lease as Heartbeat does and, if values were
// added since the last write, writes them too: the record's last step and
// value, and a curve blob with the whole curve. It returns ErrSuperseded
// when another process has retried the attempt, and ErrFinished after
// Finish.
func (r *Run) Flush(ctx context.Context) error { return r.beat(ctx, true) }

// beat is Heartbeat (pending false) and Flush (pending true): the lease
// renewed, the counter advanced, and with pending the values Add took
// since the last write.
func (r *Run) beat(ctx context.Context, pending bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.check(); err != nil {
		return err
	}
	if _, found, err := r.isSuperseded(ctx); err != nil {
		return err
	} else if found {
		r.superseded = true
		return r.supersededErr()
	}
	f := r.f
	f.beat++
	var curve []Step
	pending = pending && r.pending
	if pending {
		// r.curve itself, not a copy capped at its length: write only
		// encodes it, under r.mu. (A capped view made the next Add copy
		// the whole curve after every flush: 150 ms of soma-trial's CPU
		// for 300k reports.)
		curve = r.curve
		last := curve[len(curve)-1]
		f.step, f.value, f.hasValue = last.Step, last.Value, true
	}
	if _, err := r.write(ctx, f, curve, ""); err != nil {
		return err
	}
	if pending {
		r.pending = false
	}
	return nil
}

// Judge asks the study's pruner whether to stop at the last value added,
// comparing with the other trials' curves as read at most maxAge ago
// (the first call reads them; curve blobs are immutable and cached by
// the study, so a refresh fetches only what changed). With the none
// pruner it returns false at once.
func (r *Run) Judge(ctx context.Context, maxAge time.Duration) (bool, error) {
	if _, none := r.s.pruner.(NonePruner); none {
		return false, nil
	}
	r.mu.Lock()
	curve := r.curve[:len(r.curve):len(r.curve)]
	h, at := r.history, r.historyAt
	r.mu.Unlock()
	if len(curve) == 0 {
		return false, nil
	}
	if h == nil || time.Since(at) > maxAge {
		snap, err := r.s.Curves(ctx)
		if err != nil {
			return false, err
		}
		all := snap.History()
		// The metric the pruner judges, with several objectives (as
		// Report does); the study's own direction is unknown then.
		all.Direction = r.s.spec.pruneDirection()
		others := all.Trials[:0:0]
		for _, t := range all.Trials {
			if t.Number != r.number {
				others = append(others, t)
			}
		}
		all.Trials = others
		h = &all
		r.mu.Lock()
		r.history, r.historyAt = h, time.Now()
		r.mu.Unlock()
	}
	if _, ok := r.s.pruner.(*PercentilePruner); ok && len(curve) > 1 {
		// It reads the whole curve (its best value so far) on every
		// report: over 100k reports, 5e9 looks. The best value of all but
		// the last entry is kept as values come, and the pruner is given
		// the two entries that decide the same (percentileView).
		r.mu.Lock()
		for ; r.bestN < len(curve)-1; r.bestN++ {
			if r.bestN == 0 {
				r.best = math.NaN()
			}
			if v := curve[r.bestN].Value; !math.IsNaN(v) && (math.IsNaN(r.best) || h.Direction.Better(v, r.best)) {
				r.best = v
			}
		}
		curve = percentileView(curve, r.best)
		r.mu.Unlock()
	}
	r.s.askMu.Lock()
	prune, err := r.s.pruner.Prune(r.number, curve, *h)
	r.s.askMu.Unlock()
	if err != nil {
		return false, fmt.Errorf("study %s: trial %d: pruner: %w", r.s.name, r.number, err)
	}
	return prune, nil
}

// percentileView is a step-ordered curve of two or more entries as
// PercentilePruner sees it: the step before the last, the best value
// before the last (NaN: none), and the last entry. Its decision depends
// on nothing else: the last entry, the largest earlier step, and the best
// value over the whole curve (NaNs ignored).
func percentileView(curve []Step, bestBefore float64) []Step {
	n := len(curve)
	return []Step{{Step: curve[n-2].Step, Value: bestBefore}, curve[n-1]}
}
