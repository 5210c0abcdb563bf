package study

import (
	"math"
	"slices"
	"testing"
)

func TestNSGA2SelectElite(t *testing.T) {
	s := &NSGA2Sampler{dirs: []Direction{Minimize, Minimize}, population: 3}
	ind := func(n int, a, b float64) nsgaInd { return nsgaInd{number: n, scores: []float64{a, b}} }
	// Front 0: 0 (1,4), 1 (2,2), 2 (4,1); front 1: 3 (3,3), 4 (2,5).
	got := s.selectElite([]nsgaInd{ind(3, 3, 3), ind(0, 1, 4), ind(4, 2, 5), ind(2, 4, 1), ind(1, 2, 2)})
	var nums []int
	for _, g := range got {
		nums = append(nums, g.number)
		if g.rank != 0 {
			t.Errorf("trial %d: rank %d, want 0", g.number, g.rank)
		}
	}
	slices.Sort(nums)
	if !slices.Equal(nums, []int{0, 1, 2}) {
		t.Errorf("elite %v, want the first front [0 1 2]", nums)
	}
	// Population 4 takes one of front 1: both have infinite crowding (the
	// extremes of a two-member front), so the lower number, 3... by stable
	// order of trial numbers.
	s.population = 4
	got = s.selectElite([]nsgaInd{ind(3, 3, 3), ind(0, 1, 4), ind(4, 2, 5), ind(2, 4, 1), ind(1, 2, 2)})
	if len(got) != 4 || got[3].number != 3 || got[3].rank != 1 {
		t.Errorf("elite of 4 = %+v, want front 0 then trial 3 of rank 1", got)
	}
	// Crowding: the middle of three gets the normalised gaps, 1 + 1.
	front := []nsgaInd{ind(0, 0, 2), ind(1, 1, 1), ind(2, 2, 0)}
	s.crowding(front)
	if !math.IsInf(front[0].crowd, 1) || front[1].crowd != 2 || !math.IsInf(front[2].crowd, 1) {
		t.Errorf("crowding = %v %v %v, want +Inf 2 +Inf", front[0].crowd, front[1].crowd, front[2].crowd)
	}
}

// zdt1 is Zitzler-Deb-Thiele's ZDT1 (both minimised) on [0, 1]^n.
func zdt1(x []float64) []float64 {
	g := 0.0
	for _, v := range x[1:] {
		g += v
	}
	g = 1 + 9*g/float64(len(x)-1)
	return []float64{x[0], g * (1 - math.Sqrt(x[0]/g))}
}

// runMO minimises f with sampler over n float knobs and returns the
// hypervolume of everything done, up to (1.1, 11).
func runMO(t *testing.T, sampler Sampler, space *Space, trials int) float64 {
	t.Helper()
	dirs := []Direction{Minimize, Minimize}
	h := History{}
	var pts [][]float64
	for trial := range trials {
		p, err := sampler.Ask(space, trial, h)
		if err != nil {
			t.Fatal(err)
		}
		checkConditional(t, space, p)
		sc := zdt1(p.v)
		pts = append(pts, sc)
		h.Trials = append(h.Trials, Trial{Number: trial, State: StateDone, Point: p, Score: sc[0], HasScore: true, Scores: sc})
	}
	return Hypervolume(pts, dirs, []float64{1.1, 11})
}

// TestNSGA2BeatsRandomOnZDT1: 8 generations of 50 on a 6-variable ZDT1
// dominate more than 400 random points do, for every seed tried.
func TestNSGA2BeatsRandomOnZDT1(t *testing.T) {
	var knobs []Knob
	for i := range 6 {
		knobs = append(knobs, Knob{Name: "x" + string(rune('0'+i)), Kind: KnobFloat, Low: 0, High: 1})
	}
	space := mustSpace(t, knobs)
	for seed := range uint64(3) {
		n := runMO(t, NewNSGA2Sampler(seed, []Direction{Minimize, Minimize}), space, 400)
		r := runMO(t, NewRandomSampler(seed), space, 400)
		if n <= r {
			t.Errorf("seed %d: nsga2 hypervolume %v ≤ random's %v", seed, n, r)
		}
	}
}

func TestNSGA2ConditionalAndDeterministic(t *testing.T) {
	space := mustSpace(t, []Knob{
		{Name: "x0", Kind: KnobFloat, Low: 0, High: 1},
		{Name: "x1", Kind: KnobFloat, Low: 0, High: 1},
		{Name: "opt", Kind: KnobChoice, Choices: []string{"a", "b"}},
		{Name: "m", Kind: KnobInt, Low: 0, High: 9, When: "opt == b"},
	})
	s := NewNSGA2Sampler(7, []Direction{Minimize, Minimize})
	h := History{}
	for trial := range 160 {
		p, err := s.Ask(space, trial, h)
		if err != nil {
			t.Fatal(err)
		}
		checkConditional(t, space, p)
		again, _ := s.Ask(space, trial, h)
		if !again.Equal(p) {
			t.Fatalf("trial %d: two asks differ", trial)
		}
		sc := []float64{p.v[0], 1 - p.v[0] + p.v[1]}
		h.Trials = append(h.Trials, Trial{Number: trial, State: StateDone, Point: p, Score: sc[0], HasScore: true, Scores: sc})
	}
}
