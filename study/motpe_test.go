package study

import (
	"math"
	"slices"
	"strings"
	"testing"
)

// moObs builds results numbered by position with two losses each.
func moObs(losses ...[2]float64) []tpeObs {
	out := make([]tpeObs, len(losses))
	for i, l := range losses {
		out[i] = tpeObs{number: i, losses: []float64{l[0], l[1]}}
	}
	return out
}

func obsNumbers(obs []tpeObs) []int {
	var out []int
	for _, o := range obs {
		out = append(out, o.number)
	}
	return out
}

func TestParetoPeel(t *testing.T) {
	// Front 0: 0 (1,4), 1 (2,2), 2 (4,1); 3 (2,2) equals 1, so it is on
	// the front too; 4 (2,5) and 5 (3,3) are dominated.
	obs := moObs([2]float64{1, 4}, [2]float64{2, 2}, [2]float64{4, 1}, [2]float64{2, 2}, [2]float64{2, 5}, [2]float64{3, 3})
	sortLex(obs)
	front, rest := paretoPeel(obs)
	if got := obsNumbers(front); !slices.Equal(got, []int{0, 1, 3, 2}) {
		t.Errorf("front %v, want [0 1 3 2] (lexicographic order of the losses)", got)
	}
	if got := obsNumbers(rest); !slices.Equal(got, []int{4, 5}) {
		t.Errorf("rest %v, want [4 5]", got)
	}
}

func TestMOSplit(t *testing.T) {
	// Front 0: 0 (1,4), 1 (2,2), 2 (4,1). Front 1: 3 (1.5,6), 4 (6,1.5),
	// 5 (3,3) — 5 is in the middle of its front, with the most
	// hypervolume of it alone. Front 2: 6 (3.5,3.5).
	obs := moObs([2]float64{1, 4}, [2]float64{2, 2}, [2]float64{4, 1},
		[2]float64{1.5, 6}, [2]float64{6, 1.5}, [2]float64{3, 3}, [2]float64{3.5, 3.5})
	tests := []struct {
		name   string
		nBelow int
		want   []int
	}{
		// Reference (4.3, 4.3): 1's box is 2.3², the others' 3.3·0.3;
		// after 1, 0 and 2 each add 0.3: the tie goes to the lower number.
		{"cut first front, tie to the lower number", 2, []int{0, 1}},
		{"first front exactly", 3, []int{0, 1, 2}},
		// Front 1 cut to one: 5 has the largest box (3.45²) though it
		// has the highest number.
		{"cut second front by hypervolume", 4, []int{0, 1, 2, 5}},
		{"two fronts", 6, []int{0, 1, 2, 3, 4, 5}},
		{"all", 7, []int{0, 1, 2, 3, 4, 5, 6}},
		{"none", 0, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			below, w, prior, rest := moSplit(obs, tc.nBelow)
			if got := obsNumbers(below); !slices.Equal(got, tc.want) {
				t.Fatalf("below %v, want %v", got, tc.want)
			}
			if len(below)+len(rest) != len(obs) {
				t.Fatalf("below %d + rest %d ≠ %d results", len(below), len(rest), len(obs))
			}
			for _, o := range rest {
				if slices.Contains(tc.want, o.number) {
					t.Fatalf("trial %d in both groups", o.number)
				}
			}
			if len(w) != len(below) || (len(w) > 0 && (slices.Max(w) != 1 || slices.Min(w) <= 0)) {
				t.Fatalf("weights %v: want one per good trial, the largest 1, all > 0", w)
			}
			if !(prior > 0 && prior <= 1) {
				t.Fatalf("prior weight %v, want (0, 1]", prior)
			}
		})
	}
	// Weights of the good group 0, 1, 2, 5 (reference (4.3, 4.3)): 5 is
	// dominated by 1 and adds nothing alone, so it gets the floor; 1 adds
	// [2,4]² less 5's [3,4]², 3, the most; 0 and 2 are mirror images and
	// add 1·0.3 each: 0.1 of 1's.
	below, w, _, _ := moSplit(obs, 4)
	if got := obsNumbers(below); !slices.Equal(got, []int{0, 1, 2, 5}) {
		t.Fatalf("below %v", got)
	}
	if w[1] != 1 || w[3] != 1e-12 || w[0] != w[2] || math.Abs(w[0]-0.1) > 1e-9 {
		t.Errorf("weights %v, want [0.1 1 0.1 1e-12]", w)
	}
}

func TestMOWeightsScaleFree(t *testing.T) {
	// The same front in other units and offsets (ms → s plus 1000, a
	// score ×1e-9) gets the same weights: the reference point follows the
	// range, not zero (Optuna's 1.1·worst would not).
	a := moObs([2]float64{1, 4}, [2]float64{2, 2}, [2]float64{3, 1.5}, [2]float64{4, 1})
	b := moObs([2]float64{1000.001, 4e-9}, [2]float64{1000.002, 2e-9}, [2]float64{1000.003, 1.5e-9}, [2]float64{1000.004, 1e-9})
	wa, wb := moWeights(a), moWeights(b)
	for i := range wa {
		if math.Abs(wa[i]-wb[i]) > 1e-6 {
			t.Errorf("weights %v and %v differ at %d", wa, wb, i)
		}
	}
	// Equal points contribute nothing alone: all weigh 1, not NaN.
	if w := moWeights(moObs([2]float64{1, 1}, [2]float64{1, 1})); w[0] != 1 || w[1] != 1 {
		t.Errorf("weights of equal points %v, want [1 1]", w)
	}
}

// moHistory is n done trials on space from sampler-independent points
// with two scores each from f.
func moHistory(t *testing.T, space *Space, n int, f func([]float64) []float64) History {
	t.Helper()
	h := History{}
	for i := range n {
		p := randomPoint(space, 99, i, "hist")
		sc := f(p.v)
		h.Trials = append(h.Trials, Trial{Number: i, State: StateDone, Point: p, Score: sc[0], HasScore: true, Scores: sc, LastStep: -1})
	}
	return h
}

func TestMOTPEDeterministicAndSigned(t *testing.T) {
	space := mustSpace(t, []Knob{
		{Name: "x", Kind: KnobFloat, Low: 0, High: 1},
		{Name: "y", Kind: KnobFloat, Low: 1e-3, High: 1, Log: true},
		{Name: "n", Kind: KnobInt, Low: 1, High: 9},
		{Name: "c", Kind: KnobChoice, Choices: []string{"a", "b", "c"}},
	})
	f := func(v []float64) []float64 { return []float64{v[0] + v[3], 1 - v[0] + v[1]*v[2]} }
	h := moHistory(t, space, 30, f)
	dirs := []Direction{Minimize, Minimize}
	a, err := NewTPESampler(1, TPEOptions{Directions: dirs}).Ask(space, 30, h)
	if err != nil {
		t.Fatal(err)
	}
	shuffled := h
	shuffled.Trials = slices.Clone(h.Trials)
	slices.Reverse(shuffled.Trials)
	b, _ := NewTPESampler(1, TPEOptions{Directions: dirs}).Ask(space, 30, shuffled)
	if !a.Equal(b) {
		t.Errorf("reversed history: %s, want %s", space.FormatPoint(b), space.FormatPoint(a))
	}
	c, _ := NewTPESampler(2, TPEOptions{Directions: dirs}).Ask(space, 30, h)
	if c.Equal(a) {
		t.Errorf("seeds 1 and 2 gave the same point %s", space.FormatPoint(a))
	}
	// Maximising the negated scores is the same search.
	neg := h
	neg.Trials = slices.Clone(h.Trials)
	for i := range neg.Trials {
		tr := &neg.Trials[i]
		tr.Scores = []float64{-tr.Scores[0], tr.Scores[1]}
	}
	d, _ := NewTPESampler(1, TPEOptions{Directions: []Direction{Maximize, Minimize}}).Ask(space, 30, neg)
	if !d.Equal(a) {
		t.Errorf("maximising −f1: %s, want %s", space.FormatPoint(d), space.FormatPoint(a))
	}
	// The single-objective sampler on the same history ranks by Score
	// alone and proposes something else: the objectives are used.
	e, _ := NewTPESampler(1, TPEOptions{}).Ask(space, 30, History{Direction: Minimize, Trials: h.Trials})
	if e.Equal(a) {
		t.Errorf("one objective and two gave the same point %s", space.FormatPoint(a))
	}
}

func TestMOTPEResults(t *testing.T) {
	tp := NewTPESampler(1, TPEOptions{Directions: []Direction{Minimize, Maximize}})
	tests := []struct {
		name string
		tr   Trial
		want []float64
	}{
		{"done", Trial{State: StateDone, Scores: []float64{1, 2}}, []float64{1, -2}},
		{"one score", Trial{State: StateDone, Scores: []float64{1}}, nil},
		{"NaN", Trial{State: StateDone, Scores: []float64{1, math.NaN()}}, nil},
		{"Inf", Trial{State: StateDone, Scores: []float64{math.Inf(-1), 2}}, nil},
		{"pruned", Trial{State: StatePruned, Scores: []float64{1, 2}}, nil},
		{"running", Trial{State: StateRunning}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tp.losses(&tc.tr); !slices.Equal(got, tc.want) {
				t.Errorf("losses = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestMOTPEBeatsRandomOnZDT1: 200 trials on a 6-variable ZDT1 dominate
// more than random's 200 do, for every seed tried, and every point stays
// inside the bounds.
func TestMOTPEBeatsRandomOnZDT1(t *testing.T) {
	var knobs []Knob
	for i := range 6 {
		knobs = append(knobs, Knob{Name: "x" + string(rune('0'+i)), Kind: KnobFloat, Low: 0, High: 1})
	}
	space := mustSpace(t, knobs)
	for seed := range uint64(3) {
		m := runMO(t, NewTPESampler(seed, TPEOptions{Directions: []Direction{Minimize, Minimize}}), space, 200)
		r := runMO(t, NewRandomSampler(seed), space, 200)
		if m <= r {
			t.Errorf("seed %d: motpe hypervolume %v ≤ random's %v", seed, m, r)
		}
	}
}

// TestMOTPEConditional: with two objectives, momentum's model is still
// fitted only on the trials where it was present (the group
// decomposition): sgd trials with momentum near 0.1 are on the front,
// adam trials (no momentum) are dominated, and proposals under sgd crowd
// near 0.1.
func TestMOTPEConditional(t *testing.T) {
	s := mustSpace(t, []Knob{
		{Name: "opt", Kind: KnobChoice, Choices: []string{"adam", "sgd"}},
		{Name: "momentum", Kind: KnobFloat, Low: 0, High: 1, When: "opt == sgd"},
	})
	tp := NewTPESampler(1, TPEOptions{Directions: []Direction{Minimize, Maximize}})
	h := History{}
	n := 0
	for _, m := range []float64{0.1, 0.12, 0.9, 0.5, 0.7, 0.3, 0.95, 0.08, 0.6, 0.4, 0.85, 0.2} {
		sc := []float64{math.Abs(m - 0.1), 1 - math.Abs(m-0.1)}
		h.Trials = append(h.Trials, Trial{Number: n, State: StateDone, Point: Point{v: []float64{1, m}}, Score: sc[0], HasScore: true, Scores: sc})
		n++
	}
	for range 12 {
		h.Trials = append(h.Trials, Trial{Number: n, State: StateDone, Point: Point{v: []float64{0, absent}}, Score: 0.3, HasScore: true, Scores: []float64{0.3, 0.5}})
		n++
	}
	near, sgd := 0, 0
	for trial := n; trial < n+40; trial++ {
		p, err := tp.Ask(s, trial, h)
		if err != nil {
			t.Fatal(err)
		}
		checkConditional(t, s, p)
		if p.v[0] == 1 {
			sgd++
			if math.Abs(p.v[1]-0.1) < 0.15 {
				near++
			}
		}
	}
	if sgd < 20 || near < sgd*3/4 {
		t.Errorf("40 proposals: %d with sgd, %d of them with momentum within 0.15 of 0.1; want most sgd, most near", sgd, near)
	}
}

func TestSpecMOTPE(t *testing.T) {
	text := strings.Replace(moSpec, `sampler = "random"`, `sampler = "tpe"`, 1)
	spec, err := ParseSpec([]byte(text))
	if err != nil {
		t.Fatalf("ParseSpec(tpe with two directions): %v", err)
	}
	sm, err := spec.NewSampler()
	if err != nil {
		t.Fatal(err)
	}
	tp, ok := sm.(*TPESampler)
	if !ok || !tp.multi() || !slices.Equal(tp.opt.Directions, spec.Directions) {
		t.Errorf("NewSampler = %#v, want a multi-objective TPESampler with directions %v", sm, spec.Directions)
	}
}

// BenchmarkMOTPEAsk is one ask after 1000 done trials of 5 knobs, with 2
// and 3 objectives (the 3-objective front is large, and the subset
// selection's hypervolumes grow with the objectives).
func BenchmarkMOTPEAsk(b *testing.B) {
	var knobs []Knob
	for i := range 5 {
		knobs = append(knobs, Knob{Name: "x" + string(rune('0'+i)), Kind: KnobFloat, Low: 0, High: 1})
	}
	space, err := NewSpace(knobs)
	if err != nil {
		b.Fatal(err)
	}
	for _, m := range []int{2, 3} {
		b.Run(string(rune('0'+m))+"obj", func(b *testing.B) {
			dirs := slices.Repeat([]Direction{Minimize}, m)
			h := History{}
			for i := range 1000 {
				p := randomPoint(space, 5, i, "bench")
				sc := make([]float64, m)
				for j := range sc {
					sc[j] = p.v[j] + 0.3*p.v[(j+1)%m]
				}
				h.Trials = append(h.Trials, Trial{Number: i, State: StateDone, Point: p, Scores: sc, LastStep: -1})
			}
			tp := NewTPESampler(1, TPEOptions{Directions: dirs})
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := tp.Ask(space, 1000, h); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
