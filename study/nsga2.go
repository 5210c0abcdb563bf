package study

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// NSGA2Sampler is NSGA-II (Deb et al., IEEE TEVC 6(2), 2002) for studies
// with several objectives, in the ask-and-tell form Optuna's
// NSGAIISampler uses: trial n belongs to generation n / Population;
// generation 0 is random, and each later one breeds children from the
// parent population, the Population best of the previous parents and the
// previous generation's done trials by non-dominated rank, then crowding
// distance. A child takes each knob from one of two parents picked by
// binary tournaments (uniform crossover, probability 0.9, else a copy of
// the first parent) and redraws each knob at random with probability
// 1/knobs (mutation), as Optuna 3.1's defaults do.
//
// It is stateless: the parent population of a generation is recomputed
// from the history on each ask, with only the trials done by then, so
// workers that ask while a generation is still running breed from what
// has finished (as Optuna does). Ask is deterministic in (seed, trial,
// history). In a conditional space a knob a parent lacks is drawn at
// random, then knobs whose conditions fail are dropped.
type NSGA2Sampler struct {
	seed       uint64
	dirs       []Direction
	population int
}

// nsga2Population is Optuna's default population size.
const nsga2Population = 50

// NewNSGA2Sampler returns an NSGA2Sampler for the given directions (one
// per metric, at least two).
func NewNSGA2Sampler(seed uint64, dirs []Direction) *NSGA2Sampler {
	return &NSGA2Sampler{seed: seed, dirs: slices.Clone(dirs), population: nsga2Population}
}

type nsgaInd struct {
	number int
	v      []float64
	scores []float64
	rank   int
	crowd  float64
}

// Ask returns trial's point.
func (s *NSGA2Sampler) Ask(space *Space, trial int, h History) (Point, error) {
	if trial < 0 {
		return Point{}, fmt.Errorf("study: trial %d: want ≥ 0", trial)
	}
	gen := trial / s.population
	parents := s.parents(space, gen, h)
	if len(parents) == 0 {
		return randomPoint(space, s.seed, trial, "nsga2"), nil
	}
	st := newStream(s.seed, trial, "nsga2/select")
	tournament := func(j int) *nsgaInd {
		a := &parents[int(st.float(2*j)*float64(len(parents)))%len(parents)]
		b := &parents[int(st.float(2*j+1)*float64(len(parents)))%len(parents)]
		if b.rank < a.rank || (b.rank == a.rank && b.crowd > a.crowd) {
			return b
		}
		return a
	}
	p1, p2 := tournament(0), tournament(1)
	cross := st.float(4) < 0.9
	v := make([]float64, len(space.knobs))
	mutation := 1 / float64(len(space.knobs))
	for i, k := range space.knobs {
		ks := newStream(s.seed, trial, "nsga2/"+k.Name)
		x := p1.v[i]
		if cross && ks.float(0) < 0.5 {
			x = p2.v[i]
		}
		if isAbsent(x) || ks.float(1) < mutation {
			x = space.fromUnit(i, ks.float(2))
		}
		v[i] = x
	}
	if space.conds != nil {
		space.mask(v)
	}
	return Point{v: v}, nil
}

// parents returns the parent population of generation gen (empty for
// generation 0, or when nothing is done yet).
func (s *NSGA2Sampler) parents(space *Space, gen int, h History) []nsgaInd {
	byGen := map[int][]nsgaInd{}
	for _, t := range h.Trials {
		if t.State != StateDone || len(t.Scores) != len(s.dirs) || len(t.Point.v) != len(space.knobs) {
			continue
		}
		if g := t.Number / s.population; g < gen {
			byGen[g] = append(byGen[g], nsgaInd{number: t.Number, v: t.Point.v, scores: t.Scores})
		}
	}
	var pop []nsgaInd
	for g := 0; g < gen; g++ {
		cand := append(slices.Clone(pop), byGen[g]...)
		pop = s.selectElite(cand)
	}
	return pop
}

// selectElite returns the best Population of cands by non-dominated rank,
// the last front cut by crowding distance (largest first), ties by trial
// number; each keeps its rank and crowding distance.
func (s *NSGA2Sampler) selectElite(cands []nsgaInd) []nsgaInd {
	slices.SortFunc(cands, func(a, b nsgaInd) int { return cmp.Compare(a.number, b.number) })
	cands = slices.CompactFunc(cands, func(a, b nsgaInd) bool { return a.number == b.number })
	var out []nsgaInd
	rest := cands
	for rank := 0; len(rest) > 0 && len(out) < s.population; rank++ {
		var front, next []nsgaInd
		for i, a := range rest {
			dominated := false
			for j, b := range rest {
				if i != j && dominates(b.scores, a.scores, s.dirs) {
					dominated = true
					break
				}
			}
			if dominated {
				next = append(next, a)
			} else {
				a.rank = rank
				front = append(front, a)
			}
		}
		s.crowding(front)
		if len(out)+len(front) > s.population {
			slices.SortStableFunc(front, func(a, b nsgaInd) int { return cmp.Compare(b.crowd, a.crowd) })
			front = front[:s.population-len(out)]
		}
		out = append(out, front...)
		rest = next
	}
	return out
}

// crowding sets each member's crowding distance within its front: the
// sum over objectives of the normalised gap between its neighbours, with
// the extremes at +Inf.
func (s *NSGA2Sampler) crowding(front []nsgaInd) {
	for i := range front {
		front[i].crowd = 0
	}
	idx := make([]int, len(front))
	for m := range s.dirs {
		for i := range idx {
			idx[i] = i
		}
		slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(front[a].scores[m], front[b].scores[m]) })
		lo, hi := front[idx[0]].scores[m], front[idx[len(idx)-1]].scores[m]
		front[idx[0]].crowd = math.Inf(1)
		front[idx[len(idx)-1]].crowd = math.Inf(1)
		if hi == lo {
			continue
		}
		for r := 1; r+1 < len(idx); r++ {
			front[idx[r]].crowd += (front[idx[r+1]].scores[m] - front[idx[r-1]].scores[m]) / (hi - lo)
		}
	}
}

var _ Sampler = (*NSGA2Sampler)(nil)
