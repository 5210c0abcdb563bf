package study

import (
	"fmt"
	"testing"
)

// historyVariants are unrelated histories; index-determined samplers must
// not notice them.
func historyVariants(s *Space) []History {
	p, _ := NewRandomSampler(99).Ask(s, 0, History{})
	return []History{
		{},
		{Direction: Minimize, Trials: []Trial{{Number: 0, State: StateDone, Point: p, Score: 1, HasScore: true}}},
		{Direction: Maximize, Trials: []Trial{{Number: 3, State: StateRunning, Point: p}, {Number: 5, State: StatePruned, Point: p}}},
	}
}

// TestIndexSamplersDependOnlyOnSeedAndTrial: random and sobol points are a
// function of (seed, trial) alone — no replay of earlier trials, no
// history — and different seeds or trials give different points.
func TestIndexSamplersDependOnlyOnSeedAndTrial(t *testing.T) {
	s := testSpace(t)
	for _, tc := range []struct {
		name string
		new  func(seed uint64) Sampler
	}{
		{"random", func(seed uint64) Sampler { return NewRandomSampler(seed) }},
		{"sobol", func(seed uint64) Sampler { return NewSobolSampler(seed) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := tc.new(5), tc.new(5)
			seen := map[string]int{}
			// Ask b in reverse order: no state carries from one ask to the next.
			for trial := 63; trial >= 0; trial-- {
				want, err := a.Ask(s, trial, History{})
				if err != nil {
					t.Fatal(err)
				}
				for i, h := range historyVariants(s) {
					got, err := b.Ask(s, trial, h)
					if err != nil {
						t.Fatal(err)
					}
					if !got.Equal(want) {
						t.Fatalf("Ask(trial %d, history %d) = %s, want %s", trial, i, s.FormatPoint(got), s.FormatPoint(want))
					}
				}
				seen[s.FormatPoint(want)]++
				other, _ := tc.new(6).Ask(s, trial, History{})
				if other.Equal(want) {
					t.Errorf("seeds 5 and 6 give the same point for trial %d", trial)
				}
			}
			if len(seen) < 60 {
				t.Errorf("64 trials gave only %d distinct points", len(seen))
			}
		})
	}
}

// TestSobolUnscrambled checks the direction numbers against scipy's
// first 8 points of the 2-d sequence (scipy.stats.qmc.Sobol, scramble=False).
func TestSobolUnscrambled(t *testing.T) {
	want := [][2]float64{{0, 0}, {.5, .5}, {.75, .25}, {.25, .75}, {.375, .375}, {.875, .875}, {.625, .125}, {.125, .625}}
	d0 := sobolDim{v: sobolV(0)}
	d1 := sobolDim{v: sobolV(1)}
	for i, w := range want {
		got := [2]float64{d0.at(uint64(i)), d1.at(uint64(i))}
		if got != w {
			t.Errorf("point %d = %v, want %v", i, got, w)
		}
	}
}

// TestSobolStratified: every block of 2^m scrambled points puts exactly
// one point in each of the 2^m equal intervals of every dimension (the
// net property survives linear scrambling and the digital shift).
func TestSobolStratified(t *testing.T) {
	const m = 5
	for _, seed := range []uint64{0, 1, 12345} {
		sb := NewSobolSampler(seed)
		for d := range sobolMaxDim {
			for block := range 2 {
				var hit [1 << m]int
				for i := block << m; i < (block+1)<<m; i++ {
					u := sb.dims[d].at(uint64(i))
					if u < 0 || u >= 1 {
						t.Fatalf("seed %d dim %d point %d = %v, outside [0,1)", seed, d, i, u)
					}
					hit[int(u*(1<<m))]++
				}
				for j, n := range hit {
					if n != 1 {
						t.Fatalf("seed %d dim %d block %d: interval %d has %d points, want 1", seed, d, block, j, n)
					}
				}
			}
		}
	}
}

// TestGridCoversEachCellOnce: over its budget, grid visits every cell of
// the space exactly once, and refuses trials outside it.
func TestGridCoversEachCellOnce(t *testing.T) {
	s, err := NewSpace([]Knob{
		{Name: "a", Kind: KnobInt, Low: 1, High: 3},
		{Name: "b", Kind: KnobFloat, Low: 0, High: 0.5, Step: 0.25},
		{Name: "c", Kind: KnobChoice, Choices: []string{"x", "y"}},
		{Name: "d", Kind: KnobFixed, Value: "z"},
		{Name: "e", Kind: KnobInt, Low: 10, High: 1000, Log: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	n, finite := s.Size()
	if !finite || n != 3*3*2*991 {
		t.Fatalf("Size = %d, %v", n, finite)
	}
	seen := make(map[string]int, n)
	g := NewGridSampler()
	for trial := range n {
		p, err := g.Ask(s, trial, History{})
		if err != nil {
			t.Fatal(err)
		}
		text := s.FormatPoint(p)
		if prev, dup := seen[text]; dup {
			t.Fatalf("trials %d and %d both got %s", prev, trial, text)
		}
		seen[text] = trial
		if _, err := s.ParsePoint(text); err != nil {
			t.Fatalf("grid point %q does not read back: %v", text, err)
		}
	}
	if len(seen) != n {
		t.Errorf("grid visited %d cells, want %d", len(seen), n)
	}
	for _, trial := range []int{-1, n} {
		if _, err := g.Ask(s, trial, History{}); err == nil {
			t.Errorf("Ask(trial %d) = nil error, want outside the grid", trial)
		}
	}
	cont, _ := NewSpace([]Knob{{Name: "x", Kind: KnobFloat, Low: 0, High: 1}})
	if _, err := g.Ask(cont, 0, History{}); err == nil {
		t.Errorf("grid on a continuous space: nil error")
	}
}

// TestFromUnitInRange: every sampler output lies in range and on grid,
// which ParsePoint checks.
func TestFromUnitInRange(t *testing.T) {
	s := testSpace(t)
	for _, u := range []float64{0, 1e-300, 0.25, 0.5, 0.999999, 1 - 1e-16, 1, -1, 2} {
		t.Run(fmt.Sprint(u), func(t *testing.T) {
			v := make([]float64, s.Len())
			for i := range v {
				v[i] = s.fromUnit(i, u)
			}
			if _, err := s.ParsePoint(s.FormatPoint(Point{v: v})); err != nil {
				t.Errorf("fromUnit(%v) gives an unreadable point: %v", u, err)
			}
		})
	}
}
