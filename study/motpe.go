package study

import (
	"cmp"
	"math"
	"slices"
)

// Multi-objective TPE (MOTPE: Ozaki et al., GECCO 2020, and JAIR 75,
// 2022), the TPESampler's behaviour when TPEOptions.Directions has two or
// more entries. Only the split into a good and a bad group and the good
// group's weights change; the Parzen estimators, the candidates, the
// startup, pending trials and the group decomposition of conditional
// spaces are the single-objective sampler's. The rules are Optuna 3.1's
// (samplers/_tpe/sampler.py, _split_observation_pairs and
// _calculate_weights_below_for_multi_objective), except the reference
// point (moRef):
//
//   - The good group has the single-objective size, ⌈0.15n⌉ capped at
//     25, and is filled with whole non-dominated fronts in order; the
//     first front that does not fit is cut to the remaining count by
//     greedy hypervolume subset selection (moHSSP), ties to the lower
//     trial number.
//   - Each good trial's kernel weighs its exclusive hypervolume
//     contribution within the good group divided by the largest (at
//     least 1e-12, so that a dominated member keeps a positive weight);
//     the prior weighs their mean, as the single-objective EI weights'
//     prior does (Optuna's weighs 1).
//   - A done trial without one finite score per direction is not a
//     result: it joins the bad group, as a failed comparison would.

// losses returns tr's scores with the signs that make smaller better, or
// nil when tr is not a result (not done, or a score missing, NaN or
// infinite: an infinite score has no finite hypervolume to weigh).
func (t *TPESampler) losses(tr *Trial) []float64 {
	dirs := t.opt.Directions
	if tr.State != StateDone || len(tr.Scores) != len(dirs) {
		return nil
	}
	out := make([]float64, len(dirs))
	for i, d := range dirs {
		x := tr.Scores[i]
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil
		}
		if d == Maximize {
			x = -x
		}
		out[i] = x
	}
	return out
}

// moSplit returns the good group of nBelow results of done (trial order)
// with their weights and the prior's, and the rest, both in trial order.
func moSplit(done []tpeObs, nBelow int) (below []tpeObs, w []float64, prior float64, rest []tpeObs) {
	left := slices.Clone(done)
	sortLex(left)
	byNumber := func(a, b tpeObs) int { return cmp.Compare(a.number, b.number) }
	for len(below) < nBelow && len(left) > 0 {
		front, next := paretoPeel(left)
		if len(below)+len(front) > nBelow {
			slices.SortFunc(front, byNumber) // moHSSP's ties go to the lower number
			front = moHSSP(front, nBelow-len(below))
		}
		below = append(below, front...)
		left = next
	}
	in := map[int]bool{}
	for _, o := range below {
		in[o.number] = true
	}
	for _, o := range done {
		if !in[o.number] {
			rest = append(rest, o)
		}
	}
	slices.SortFunc(below, byNumber)
	w = moWeights(below)
	sum := 0.0
	for _, x := range w {
		sum += x
	}
	prior = 1
	if len(w) > 0 {
		prior = sum / float64(len(w))
	}
	return below, w, prior, rest
}

// sortLex sorts obs by their losses lexicographically, ties by number.
func sortLex(obs []tpeObs) {
	slices.SortFunc(obs, func(a, b tpeObs) int {
		if c := slices.Compare(a.losses, b.losses); c != 0 {
			return c
		}
		return cmp.Compare(a.number, b.number)
	})
}

// paretoPeel splits obs, sorted by sortLex, into its non-dominated
// members and the others, both still sorted. In that order a member can
// only be dominated by one before it, and then by a non-dominated one
// before it (domination is transitive), so each is compared with the
// front found so far: O(n·|front|) rather than O(n²), and the fronts
// after the first need no new sort.
func paretoPeel(obs []tpeObs) (front, rest []tpeObs) {
	for _, o := range obs {
		dominated := false
		for _, f := range front {
			if lossDominates(f.losses, o.losses) {
				dominated = true
				break
			}
		}
		if dominated {
			rest = append(rest, o)
		} else {
			front = append(front, o)
		}
	}
	return front, rest
}

// lossDominates reports whether losses a dominate b (all minimised).
func lossDominates(a, b []float64) bool {
	better := false
	for i := range a {
		if a[i] > b[i] {
			return false
		}
		if a[i] < b[i] {
			better = true
		}
	}
	return better
}

// moRef is the reference point for the hypervolumes of obs: per
// objective, the worst loss plus a tenth of the losses' range (1 when
// they are all equal: every box then has the same extent in that
// objective, so any positive pad gives the same ratios). Optuna uses
// max(1.1·worst, 0.9·worst), which depends on where zero is: a latency of
// 1000 ± 1 ms would put the reference ~100 ms away and give the extreme
// members all the weight. The range is the same in any units and offset.
func moRef(obs []tpeObs) []float64 {
	m := len(obs[0].losses)
	ref := make([]float64, m)
	for i := range m {
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, o := range obs {
			lo, hi = min(lo, o.losses[i]), max(hi, o.losses[i])
		}
		pad := 0.1 * (hi - lo)
		if !(pad > 0) || math.IsInf(pad, 0) {
			pad = max(1, math.Abs(hi)*1e-9)
		}
		ref[i] = hi + pad
		if !(ref[i] > hi) {
			ref[i] = math.Nextafter(hi, math.Inf(1))
		}
	}
	return ref
}

func lossPoints(obs []tpeObs) [][]float64 {
	ps := make([][]float64, len(obs))
	for i, o := range obs {
		ps[i] = o.losses
	}
	return ps
}

// moHSSP picks k of front (k < len(front)) greedily by hypervolume: each
// step adds the member that adds the most to the hypervolume of those
// picked, the lower trial number on ties (Guerreiro et al., "Greedy
// hypervolume subset selection in low dimensions", 2016; Optuna's
// _solve_hssp). The greedy choice is within 1 − 1/e of the best subset.
func moHSSP(front []tpeObs, k int) []tpeObs {
	ref := moRef(front)
	var picked []tpeObs
	var pts [][]float64
	used := make([]bool, len(front))
	base := 0.0
	for len(picked) < k {
		best, bestGain := -1, math.Inf(-1)
		for i, o := range front {
			if used[i] {
				continue
			}
			gain := hso(append(slices.Clone(pts), o.losses), ref) - base
			if gain > bestGain { // front is in trial order: ties keep the lower
				best, bestGain = i, gain
			}
		}
		used[best] = true
		picked = append(picked, front[best])
		pts = append(pts, front[best].losses)
		base = hso(pts, ref)
	}
	return picked
}

// moWeights returns each member's exclusive hypervolume contribution
// within obs divided by the largest, at least 1e-12 (all 1 when no
// member contributes alone). Optuna adds 1e-12 before dividing, in the
// objectives' units, so that floor is large where the losses are small.
func moWeights(obs []tpeObs) []float64 {
	w := make([]float64, len(obs))
	switch len(obs) {
	case 0:
		return w
	case 1:
		w[0] = 1
		return w
	}
	ref := moRef(obs)
	pts := lossPoints(obs)
	total := hso(pts, ref)
	top := 0.0
	for i := range obs {
		others := append(slices.Clone(pts[:i]), pts[i+1:]...)
		w[i] = max(0, total-hso(others, ref))
		top = max(top, w[i])
	}
	for i := range w {
		if top > 0 {
			w[i] = max(w[i]/top, 1e-12)
		} else {
			w[i] = 1 // equal points: none contributes alone
		}
	}
	return w
}
