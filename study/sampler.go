package study

import (
	"fmt"
	"math"
)

// fromUnit maps u ∈ [0, 1) to knob i's value as a Point holds it
// (as Optuna 3.1's samplers map a unit cube): uniform on the knob's scale, each grid value
// of a discrete knob getting an equal share of [0, 1) — except log-int
// knobs, whose values get ln((v+½)/(v−½)) shares, as Optuna's. No
// intermediate leaves float64, whatever the range (see lerp).
func (s *Space) fromUnit(i int, u float64) float64 {
	k := &s.knobs[i]
	u = math.Min(math.Max(u, 0), math.Nextafter(1, 0))
	switch k.Kind {
	case KnobInt:
		if k.Log {
			return math.Min(math.Max(math.Round(logLerp(k.Low-0.5, k.High+0.5, u)), k.Low), k.High)
		}
		return s.level(i, min(int(u*float64(s.count[i])), s.count[i]-1))
	case KnobFloat:
		if k.Step > 0 {
			return s.level(i, min(int(u*float64(s.count[i])), s.count[i]-1))
		}
		if k.Low == k.High {
			return k.Low
		}
		var x float64
		if k.Log {
			x = logLerp(k.Low, k.High, u)
		} else {
			x = lerp(k.Low, k.High, u)
		}
		return math.Min(math.Max(x, k.Low), math.Nextafter(k.High, math.Inf(-1)))
	case KnobChoice:
		return float64(min(int(u*float64(len(k.Choices))), len(k.Choices)-1))
	}
	return 0
}

// RandomSampler draws every knob uniformly (on its scale) from a
// counter-based stream keyed by (seed, trial, knob name): the point of a
// trial depends on nothing else, so it ignores the history. In a
// conditional space, knobs whose conditions are false are then left out;
// since each knob has its own stream, a present knob's distribution does
// not depend on which others are present.
type RandomSampler struct{ seed uint64 }

// NewRandomSampler returns a RandomSampler with the given seed.
func NewRandomSampler(seed uint64) *RandomSampler { return &RandomSampler{seed: seed} }

// Ask returns trial's point; h is ignored.
func (r *RandomSampler) Ask(space *Space, trial int, _ History) (Point, error) {
	if trial < 0 {
		return Point{}, fmt.Errorf("study: trial %d: want ≥ 0", trial)
	}
	return randomPoint(space, r.seed, trial, "random"), nil
}

// randomPoint draws a point from the streams (seed, trial, salt+knob).
func randomPoint(space *Space, seed uint64, trial int, salt string) Point {
	v := make([]float64, len(space.knobs))
	for i, k := range space.knobs {
		v[i] = space.fromUnit(i, newStream(seed, trial, salt+"/"+k.Name).float(0))
	}
	if space.conds != nil {
		space.mask(v)
	}
	return Point{v: v}
}

// GridSampler maps trial n to cell n of the space's grid, the last knob
// varying fastest (mixed radix over the knobs' levels). Over trials
// 0..Size-1 it visits every cell exactly once; it needs every knob to be
// discrete, and ignores the history. In a conditional space the grid has
// only valid cells: a knob whose condition is false is absent, not
// enumerated (opt=adam is one cell, not one per momentum); cells are
// grouped by the runs of tested knobs' values that decide presence.
type GridSampler struct{}

// NewGridSampler returns a GridSampler.
func NewGridSampler() GridSampler { return GridSampler{} }

// Ask returns cell trial of the grid.
func (GridSampler) Ask(space *Space, trial int, _ History) (Point, error) {
	n, finite := space.Size()
	if !finite {
		return Point{}, fmt.Errorf("study: sampler grid: the space has a continuous param (give every float a step)")
	}
	if trial < 0 || trial >= n {
		return Point{}, fmt.Errorf("study: sampler grid: trial %d is outside the grid's %d cells", trial, n)
	}
	if space.grid != nil {
		return Point{v: space.cell(trial)}, nil
	}
	v := make([]float64, len(space.knobs))
	rest := trial
	for i := len(space.knobs) - 1; i >= 0; i-- {
		c := space.count[i]
		v[i] = space.level(i, rest%c)
		rest /= c
	}
	return Point{v: v}, nil
}

var (
	_ Sampler = (*RandomSampler)(nil)
	_ Sampler = GridSampler{}
)
