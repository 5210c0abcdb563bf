package study

import (
	"math"
	"slices"
	"testing"
)

func quadSpace(t testing.TB) *Space {
	s, err := NewSpace([]Knob{
		{Name: "x", Kind: KnobFloat, Low: -5, High: 5},
		{Name: "lr", Kind: KnobFloat, Low: 1e-4, High: 1, Log: true},
		{Name: "n", Kind: KnobInt, Low: 1, High: 64, Log: true},
		{Name: "k", Kind: KnobInt, Low: 0, High: 10, Step: 2},
		{Name: "d", Kind: KnobFloat, Low: 0, High: 1, Step: 0.125},
		{Name: "opt", Kind: KnobChoice, Choices: []string{"a", "b", "c"}},
		{Name: "e", Kind: KnobFixed, Value: "3"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func quadScore(s *Space, p Point) float64 {
	v := p.v
	sc := v[0]*v[0] + math.Pow(math.Log10(v[1])+2, 2) + math.Abs(math.Log2(v[2])-3) + math.Abs(v[3]-4) + math.Abs(v[4]-0.5)
	if v[5] != 1 {
		sc += 2
	}
	return sc
}

// tpeHistory runs n trials of tpe sequentially on quadScore.
func tpeHistory(t testing.TB, s *Space, seed uint64, n int) History {
	t.Helper()
	tp := NewTPESampler(seed, TPEOptions{})
	h := History{Direction: Minimize}
	for trial := range n {
		p, err := tp.Ask(s, trial, h)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.ParsePoint(s.FormatPoint(p)); err != nil {
			t.Fatalf("trial %d: tpe point %q does not read back: %v", trial, s.FormatPoint(p), err)
		}
		h.Trials = append(h.Trials, Trial{Number: trial, State: StateDone, Point: p, Score: quadScore(s, p), HasScore: true, LastStep: -1})
	}
	return h
}

func TestTPEDeterministic(t *testing.T) {
	s := quadSpace(t)
	h := tpeHistory(t, s, 1, 40)
	// Add pending trials and a shuffled copy of the history.
	pend, _ := NewRandomSampler(3).Ask(s, 40, History{})
	h.Trials = append(h.Trials, Trial{Number: 41, State: StateRunning, Point: pend})
	shuffled := History{Direction: h.Direction, Trials: slices.Clone(h.Trials)}
	slices.Reverse(shuffled.Trials)
	a, err := NewTPESampler(1, TPEOptions{}).Ask(s, 42, h)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewTPESampler(1, TPEOptions{}).Ask(s, 42, shuffled)
	if err != nil {
		t.Fatal(err)
	}
	if !a.Equal(b) {
		t.Errorf("same (seed, trial, history) gave %s and %s", s.FormatPoint(a), s.FormatPoint(b))
	}
	c, _ := NewTPESampler(2, TPEOptions{}).Ask(s, 42, h)
	d, _ := NewTPESampler(1, TPEOptions{}).Ask(s, 43, h)
	if c.Equal(a) || d.Equal(a) {
		t.Errorf("another seed or trial gave the same point %s", s.FormatPoint(a))
	}
}

func TestTPEStartupIsSobol(t *testing.T) {
	s := quadSpace(t)
	tp := NewTPESampler(4, TPEOptions{Startup: 5})
	sb := NewSobolSampler(4)
	h := History{Direction: Maximize}
	for trial := range 5 {
		p, err := tp.Ask(s, trial, h)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := sb.Ask(s, trial, History{})
		if !p.Equal(want) {
			t.Fatalf("startup trial %d = %s, want sobol %s", trial, s.FormatPoint(p), s.FormatPoint(want))
		}
		// Running trials never count towards startup.
		h.Trials = append(h.Trials, Trial{Number: trial, State: StateRunning, Point: p})
	}
	if p, _ := tp.Ask(s, 5, h); !p.Equal(func() Point { q, _ := sb.Ask(s, 5, History{}); return q }()) {
		t.Errorf("with only running trials tpe left startup")
	}
}

// TestTPEIgnoresPrunedScores: a pruned trial's score is never a result,
// so changing it changes nothing; a finished trial's score does.
func TestTPEIgnoresPrunedScores(t *testing.T) {
	s := quadSpace(t)
	base := tpeHistory(t, s, 7, 30)
	pr := NewRandomSampler(11)
	withPruned := func(score float64, state State) History {
		h := History{Direction: Minimize, Trials: slices.Clone(base.Trials)}
		for i := range 10 {
			p, _ := pr.Ask(s, i, History{})
			h.Trials = append(h.Trials, Trial{Number: 30 + i, State: state, Point: p, Score: score, HasScore: true, LastStep: 3})
		}
		return h
	}
	tp := NewTPESampler(7, TPEOptions{})
	good, err := tp.Ask(s, 40, withPruned(-1e9, StatePruned))
	if err != nil {
		t.Fatal(err)
	}
	bad, _ := tp.Ask(s, 40, withPruned(1e9, StatePruned))
	if !good.Equal(bad) {
		t.Errorf("a pruned trial's score changed the proposal: %s vs %s", s.FormatPoint(good), s.FormatPoint(bad))
	}
	asDone, _ := tp.Ask(s, 40, withPruned(-1e9, StateDone))
	if asDone.Equal(good) {
		t.Errorf("finished trials with the same points and scores made no difference (test is not sensitive)")
	}
}

// TestTPEPendingRepels: pending trials change the proposal (constant
// liar), and failed ones do not.
func TestTPEPendingRepels(t *testing.T) {
	s := quadSpace(t)
	h := tpeHistory(t, s, 9, 30)
	tp := NewTPESampler(9, TPEOptions{})
	alone, _ := tp.Ask(s, 31, h)
	withFailed := History{Direction: Minimize, Trials: append(slices.Clone(h.Trials), Trial{Number: 30, State: StateFailed, Point: alone})}
	if p, _ := tp.Ask(s, 31, withFailed); !p.Equal(alone) {
		t.Errorf("a failed trial changed the proposal")
	}
	withPending := History{Direction: Minimize, Trials: append(slices.Clone(h.Trials), Trial{Number: 30, State: StateRunning, Point: alone})}
	p, _ := tp.Ask(s, 31, withPending)
	if p.Equal(alone) {
		t.Errorf("tpe proposed %s, the point another machine is running", s.FormatPoint(p))
	}
	// The asking trial's own running record is not a pending competitor.
	self := History{Direction: Minimize, Trials: append(slices.Clone(h.Trials), Trial{Number: 31, State: StateRunning, Point: alone})}
	if q, _ := tp.Ask(s, 31, self); !q.Equal(alone) {
		t.Errorf("the asking trial's own record changed its proposal")
	}
}

// TestTPEImproves: on a smooth function tpe beats random search by a
// clear margin (a sanity check, not a benchmark).
func TestTPEImproves(t *testing.T) {
	s := quadSpace(t)
	var tpeWins int
	for seed := range uint64(5) {
		h := tpeHistory(t, s, seed, 60)
		bestTPE := math.Inf(1)
		for _, tr := range h.Trials {
			bestTPE = min(bestTPE, tr.Score)
		}
		bestRand := math.Inf(1)
		rs := NewRandomSampler(seed)
		for trial := range 60 {
			p, _ := rs.Ask(s, trial, History{})
			bestRand = min(bestRand, quadScore(s, p))
		}
		if bestTPE < bestRand {
			tpeWins++
		}
	}
	if tpeWins < 4 {
		t.Errorf("tpe beat random in %d of 5 seeds, want at least 4", tpeWins)
	}
}

func TestTPERefuses(t *testing.T) {
	s := quadSpace(t)
	tp := NewTPESampler(1, TPEOptions{})
	if _, err := tp.Ask(s, 0, History{}); err == nil {
		t.Errorf("tpe with no direction: nil error")
	}
	other, _ := NewSpace([]Knob{{Name: "x", Kind: KnobFloat, Low: 0, High: 1}})
	p, _ := NewRandomSampler(1).Ask(other, 0, History{})
	h := History{Direction: Minimize, Trials: []Trial{{Number: 0, State: StateDone, Point: p, HasScore: true}}}
	if _, err := tp.Ask(s, 1, h); err == nil {
		t.Errorf("tpe with a point from another space: nil error")
	}
}

func TestTruncNorm(t *testing.T) {
	tests := []struct{ a, b float64 }{{-1, 1}, {-40, -35}, {35, 40}, {0.5, 3}, {-3, -0.5}, {-30, 0.01}}
	for _, tc := range tests {
		for _, u := range []float64{1e-12, 0.25, 0.5, 0.75, 1 - 1e-12} {
			z := truncNormPPF(tc.a, tc.b, u)
			if !(z >= tc.a && z <= tc.b) || math.IsNaN(z) {
				t.Errorf("truncNormPPF(%v, %v, %v) = %v, outside", tc.a, tc.b, u, z)
			}
		}
		if lz := logPhiDiff(tc.a, tc.b); math.IsNaN(lz) || math.IsInf(lz, 0) || lz > 0 {
			t.Errorf("logPhiDiff(%v, %v) = %v", tc.a, tc.b, lz)
		}
	}
	// Median of the symmetric interval is 0.
	if z := truncNormPPF(-2, 2, 0.5); math.Abs(z) > 1e-12 {
		t.Errorf("truncNormPPF(-2, 2, 0.5) = %v, want 0", z)
	}
	if got, want := logPhiDiff(-1, 1), math.Log(math.Erf(1/math.Sqrt2)); math.Abs(got-want) > 1e-12 {
		t.Errorf("logPhiDiff(-1, 1) = %v, want %v", got, want)
	}
}
