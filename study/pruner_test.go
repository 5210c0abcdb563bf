package study

import (
	"math"
	"testing"
	"time"
)

// curve builds a curve with steps 0, 1, 2, ... or the given steps.
func curve(vals ...float64) []Step {
	c := make([]Step, len(vals))
	for i, v := range vals {
		c[i] = Step{Step: int64(i), Value: v}
	}
	return c
}

func stepsCurve(steps []int64, vals ...float64) []Step {
	c := make([]Step, len(vals))
	for i, v := range vals {
		c[i] = Step{Step: steps[i], Value: v}
	}
	return c
}

func trialWith(n int, st State, c []Step) Trial {
	tr := Trial{Number: n, State: st, Curve: c, LastStep: -1}
	if len(c) > 0 {
		tr.LastStep = c[len(c)-1].Step
		tr.Score, tr.HasScore = c[len(c)-1].Value, true
	}
	return tr
}

func TestPercentilePruner(t *testing.T) {
	// Finished trials at step 2 have 3, 5, 7: the median is 5.
	done := []Trial{
		trialWith(0, StateDone, curve(9, 6, 3, 1)),
		trialWith(1, StateDone, curve(9, 7, 5, 4)),
		trialWith(2, StateDone, curve(9, 8, 7, 6)),
	}
	others := append(append([]Trial{}, done...),
		// These never set the bar: a pruned trial and a running one with
		// great values at step 2.
		trialWith(3, StatePruned, curve(0, 0, 0)),
		trialWith(4, StateRunning, curve(0, 0, 0)),
	)
	med := &PercentilePruner{Percentile: 50, Startup: 3, Interval: 1, MinTrials: 1}
	tests := []struct {
		name  string
		p     *PercentilePruner
		dir   Direction
		trial []Trial
		c     []Step
		want  bool
	}{
		{"worse than median", med, Minimize, others, curve(9, 8, 6), true},
		{"tie survives", med, Minimize, others, curve(9, 8, 5), false},
		{"better survives", med, Minimize, others, curve(9, 8, 4), false},
		{"best so far counts", med, Minimize, others, curve(9, 4.5, 6), false},
		{"startup", &PercentilePruner{Percentile: 50, Startup: 4, Interval: 1, MinTrials: 1}, Minimize, others, curve(9, 8, 100), false},
		{"startup counts only finished", &PercentilePruner{Percentile: 50, Startup: 4, Interval: 1, MinTrials: 1}, Minimize,
			append(others, trialWith(5, StatePruned, curve(1, 1, 1))), curve(9, 8, 100), false},
		{"warmup", &PercentilePruner{Percentile: 50, Warmup: 3, Interval: 1, MinTrials: 1}, Minimize, others, curve(9, 8, 100), false},
		{"at warmup", &PercentilePruner{Percentile: 50, Warmup: 2, Interval: 1, MinTrials: 1}, Minimize, others, curve(9, 8, 100), true},
		// Interval 2 from warmup 0: steps 0, 2, 4 are judged; 3 is not.
		{"interval judged", &PercentilePruner{Percentile: 50, Interval: 2, MinTrials: 1}, Minimize, others, curve(9, 8, 100), true},
		{"interval skipped", &PercentilePruner{Percentile: 50, Interval: 2, MinTrials: 1}, Minimize, others, curve(9, 8, 100, 100), false},
		// First report in the interval [2, 4) even though not at 2.
		{"interval first report", &PercentilePruner{Percentile: 50, Interval: 2, MinTrials: 1}, Minimize, others,
			stepsCurve([]int64{0, 3}, 9, 100), true},
		{"min trials", &PercentilePruner{Percentile: 50, Interval: 1, MinTrials: 4}, Minimize, others, curve(9, 8, 100), false},
		{"no value at this step", med, Minimize, others, curve(9, 8, 100, 100, 100, 100), false},
		{"nan curve", med, Minimize, others, curve(math.NaN(), math.NaN(), math.NaN()), true},
		{"nan ignored", med, Minimize, others, curve(math.NaN(), 4, math.NaN()), false},
		{"25th percentile", &PercentilePruner{Percentile: 25, Interval: 1, MinTrials: 1}, Minimize, others, curve(9, 8, 4.5), true},
		{"25th percentile keeps", &PercentilePruner{Percentile: 25, Interval: 1, MinTrials: 1}, Minimize, others, curve(9, 8, 4), false},
		// Maximising, percentile 25 keeps the top quarter: bar is the 75th
		// percentile, 6.
		{"maximize pruned", &PercentilePruner{Percentile: 25, Interval: 1, MinTrials: 1}, Maximize, others, curve(1, 1, 5.9), true},
		{"maximize tie", &PercentilePruner{Percentile: 25, Interval: 1, MinTrials: 1}, Maximize, others, curve(1, 1, 6), false},
		{"maximize median", med, Maximize, others, curve(1, 1, 4.9), true},
		{"own record ignored", med, Minimize, append(others, trialWith(9, StateDone, curve(100, 100, 100))), curve(9, 8, 6), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.p.Prune(9, tc.c, History{Direction: tc.dir, Trials: tc.trial})
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("Prune(%v) = %v, want %v", tc.c, got, tc.want)
			}
		})
	}
	if _, err := med.Prune(9, curve(1), History{Trials: done}); err == nil {
		t.Errorf("Prune without a direction: nil error")
	}
}

func TestMedianDefaults(t *testing.T) {
	p := NewMedianPruner()
	if *p != (PercentilePruner{Percentile: 50, Startup: 5, Interval: 1, MinTrials: 1}) {
		t.Errorf("NewMedianPruner = %+v", p)
	}
}

func TestASHAPruner(t *testing.T) {
	// r = 1, η = 2: rungs at steps 1, 2, 4, 8.
	asha := &ASHAPruner{MinResource: 1, Eta: 2}
	steps := []int64{1, 2, 4, 8}
	// Values at rung 0 (step 1): 1, 2, 3; at rung 1 (step 2): 1, 2.
	others := []Trial{
		trialWith(0, StateDone, stepsCurve(steps, 1, 1, 1, 1)),
		trialWith(1, StateRunning, stepsCurve(steps, 2, 2)),
		trialWith(2, StatePruned, stepsCurve(steps, 3)),
	}
	tests := []struct {
		name   string
		p      *ASHAPruner
		dir    Direction
		trials []Trial
		c      []Step
		want   bool
	}{
		// competing [1 2 3 v]: idx = 4/2−1 = 1, keep iff v ≤ second best.
		{"rung 0 pruned", asha, Minimize, others, stepsCurve(steps, 2.5), true},
		{"rung 0 tie kept", asha, Minimize, others, stepsCurve(steps, 2), false},
		{"below first rung", asha, Minimize, others, stepsCurve([]int64{0}, 100), false},
		{"between rungs", asha, Minimize, others, stepsCurve([]int64{1, 2, 3}, 1, 1, 100), false},
		// Rung 1: competing [1 2 v]: idx = 3/2−1 = 0, must be best.
		{"rung 1 must be best", asha, Minimize, others, stepsCurve(steps, 1, 1.5), true},
		{"rung 1 best", asha, Minimize, others, stepsCurve(steps, 1, 0.5), false},
		// One report at step 4 passes rungs 0 and 1 with 0.5 and reaches
		// rung 2 (only trial 0 there, value 1): kept.
		{"several rungs at once", asha, Minimize, others, stepsCurve([]int64{4}, 0.5), false},
		{"several rungs, cut at rung 1", asha, Minimize, others, stepsCurve([]int64{4}, 1.5), true},
		{"first arrival kept", asha, Minimize, nil, stepsCurve(steps, 100), false},
		{"nan pruned", asha, Minimize, others, stepsCurve(steps, math.NaN()), true},
		{"maximize", asha, Maximize, others, stepsCurve(steps, 1.5), true},
		{"maximize kept", asha, Maximize, others, stepsCurve(steps, 2), false},
		{"min early stopping rate", &ASHAPruner{MinResource: 1, Eta: 2, MinEarlyStoppingRate: 1}, Minimize, others,
			stepsCurve(steps, 100), false},
		{"auto waits for a finished trial", &ASHAPruner{Eta: 2}, Minimize, others[1:], stepsCurve(steps, 100), false},
		{"auto uses finished trial", &ASHAPruner{Eta: 2}, Minimize, others, stepsCurve(steps, 100), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.p.Prune(9, tc.c, History{Direction: tc.dir, Trials: tc.trials})
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("Prune(%v) = %v, want %v", tc.c, got, tc.want)
			}
		})
	}
}

// TestASHAPrunedRecordsOneRung: a trial cut by a report that reached
// several rungs recorded only the first of them, as Optuna stores it.
func TestASHAPrunedRecordsOneRung(t *testing.T) {
	asha := &ASHAPruner{MinResource: 1, Eta: 2}
	cut := trialWith(0, StatePruned, stepsCurve([]int64{4}, 5))
	others := []Trial{cut, trialWith(1, StateDone, stepsCurve([]int64{1, 2, 4}, 1, 1, 9))}
	// At rung 2 (step 4) only trial 1 (value 9) competes: 5 is best.
	got, err := asha.Prune(9, stepsCurve([]int64{1, 2, 4}, 1, 1, 6), History{Direction: Minimize, Trials: others})
	if err != nil {
		t.Fatal(err)
	}
	if got {
		t.Errorf("trial 0's cut value at rung 0 was counted at rung 2")
	}
	// Auto min resource comes from the first trial to finish.
	done := []Trial{
		trialWith(0, StateDone, stepsCurve([]int64{400}, 1)),
		trialWith(1, StateDone, stepsCurve([]int64{100}, 1)),
	}
	done[0].Time, done[1].Time = time.Unix(20, 0), time.Unix(10, 0)
	// Trial 1 finished first: r = 100/100 = 1, so a report at step 1 is
	// judged (and 5 is worse than both finished trials' first values).
	if got, _ := (&ASHAPruner{Eta: 2}).Prune(9, stepsCurve([]int64{1}, 5), History{Direction: Minimize, Trials: done}); !got {
		t.Errorf("auto min resource: step 1 was not judged with r = 1")
	}
	// Trial 0 finished first: r = 400/100 = 4, so step 1 is below rung 0.
	done[0].Time, done[1].Time = time.Unix(10, 0), time.Unix(20, 0)
	if got, _ := (&ASHAPruner{Eta: 2}).Prune(9, stepsCurve([]int64{1}, 5), History{Direction: Minimize, Trials: done}); got {
		t.Errorf("auto min resource: step 1 was judged with r = 4")
	}
}
