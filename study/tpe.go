package study

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// TPEOptions configures a TPESampler. Zero fields take the defaults.
type TPEOptions struct {
	// Startup is how many trials must be finished or pruned before the
	// model is used; until then trial n gets sobol point n. Default 10.
	Startup int
	// Candidates is how many points are drawn from the good-trials model
	// per ask; the one with the best ratio l/g wins. Default 24.
	Candidates int
	// Directions, when it has two or more entries, makes the sampler
	// multi-objective (MOTPE, motpe.go): trials are ranked by their
	// Scores, one per direction, instead of Score and History.Direction.
	Directions []Direction
}

// TPE settings from Watanabe 2023 (arXiv 2304.11127, its
// settings table), whose comparison code found them best across benchmarks:
// multivariate kernels, a linear split with β = 0.15 capped at 25, EI
// weights for the good group, neighbour bandwidths, and a generalised
// magic clip σ ≥ max(Δ, (k+2)^−α)·range with Δ = 0.03. α is 1.5, between
// Optuna's 1 and the paper's 2: on scripts/bench-samplers.sh (200 seeds)
// α = 2 lost 0.02 on Hartmann6 with 4 workers and α = 1 lost 0.01 on
// Branin and 4–6 on Styblinski-Tang; 1.5 was within noise of the best of
// both everywhere.
const (
	tpeBeta     = 0.15
	tpeMaxBelow = 25
	tpeAlpha    = 1.5
	tpeDelta    = 0.03
)

// TPESampler is a multivariate Tree-structured Parzen Estimator
// (Bergstra et al. 2011; Watanabe 2023). It splits the finished trials
// into a good group (the best ⌈0.15n⌉, at most 25) and the rest, fits a
// mixture of product kernels to each (l and g), draws Candidates points
// from l and returns the one maximising l/g.
//
// What it reads from the History:
//   - StateDone trials are the results; only they are ranked.
//   - StatePruned trials count towards Startup but are never results:
//     they always join the bad group, whatever their last value.
//   - StateRunning, StateStale and StateInterrupted trials other than the
//     asking one are pending: they join the bad group with their points,
//     as narrow kernels (bandwidth at the clip floor), so machines asking
//     at the same moment are pushed off each other's points. This is a
//     local penalty rather than a full constant liar (Optuna's, with the
//     usual neighbour bandwidth), which also marks the region around a
//     pending point bad; on scripts/bench-samplers.sh's functions, 200
//     seeds, the full liar cost 13 on Styblinski-Tang 10-d where the
//     narrow one cost 4.
//   - StateFailed trials are ignored.
//
// Ask is deterministic: the same (seed, trial, history) gives the same
// point, whatever the order of h.Trials, because every random draw comes
// from a counter keyed by (seed, trial, purpose, candidate). A
// *TPESampler is safe for concurrent use.
type TPESampler struct {
	seed  uint64
	opt   TPEOptions
	sobol *SobolSampler
}

// NewTPESampler returns a TPESampler; its startup points come from a
// SobolSampler with the same seed.
func NewTPESampler(seed uint64, opt TPEOptions) *TPESampler {
	if opt.Startup <= 0 {
		opt.Startup = 10
	}
	if opt.Candidates <= 0 {
		opt.Candidates = 24
	}
	opt.Directions = slices.Clone(opt.Directions)
	return &TPESampler{seed: seed, opt: opt, sobol: NewSobolSampler(seed)}
}

// multi reports whether the sampler ranks several objectives.
func (t *TPESampler) multi() bool { return len(t.opt.Directions) >= 2 }

// tpeObs is one observation: a point and, for finished trials, its loss
// (score with the sign that makes smaller better).
type tpeObs struct {
	pending bool
	number  int
	v       []float64
	loss    float64
	// losses holds, with several objectives, each score with the sign
	// that makes smaller better (loss is then unused).
	losses []float64
}

// Ask proposes trial's point from the history. It refuses a history whose
// direction is unknown and a point from another space.
func (t *TPESampler) Ask(space *Space, trial int, h History) (Point, error) {
	if trial < 0 {
		return Point{}, fmt.Errorf("study: trial %d: want ≥ 0", trial)
	}
	done, bad, nResults, err := t.observe(space, trial, h)
	if err != nil {
		return Point{}, err
	}
	if nResults < t.opt.Startup || len(done) == 0 {
		return t.sobol.Ask(space, trial, h)
	}
	// Trial order, so that the split does not depend on the order of
	// h.Trials.
	slices.SortFunc(done, func(a, b tpeObs) int { return cmp.Compare(a.number, b.number) })
	dims := tpeDims(space)
	if len(dims) == 0 {
		return t.sobol.Ask(space, trial, h) // nothing to search
	}
	return Point{v: t.fit(space, trial, dims, done, bad)}, nil
}

// observe reads h into the model's observations: done holds the results
// it learns from (a finite score, or with several objectives one finite
// score per metric), bad the pending trials and those without such a
// result (they count as the worst); nResults counts the trials that
// ended with a result, for the startup. trial itself is left out. It
// refuses a history whose direction is unknown and a point from another
// space.
func (t *TPESampler) observe(space *Space, trial int, h History) (done, bad []tpeObs, nResults int, err error) {
	var sign float64
	switch {
	case t.multi():
	case h.Direction == Minimize:
		sign = 1
	case h.Direction == Maximize:
		sign = -1
	default:
		return nil, nil, 0, fmt.Errorf(`study: sampler tpe: the study has no direction (set direction = "minimize" or "maximize")`)
	}
	for i := range h.Trials {
		tr := &h.Trials[i]
		if tr.Number == trial {
			continue
		}
		var pending bool
		switch tr.State {
		case StateDone, StatePruned:
			nResults++
		case StateRunning, StateStale, StateInterrupted:
			pending = true
		default:
			continue
		}
		if tr.Point.IsZero() {
			continue
		}
		if len(tr.Point.v) != len(space.knobs) {
			return nil, nil, 0, fmt.Errorf("study: sampler tpe: trial %d's point has %d values, the space has %d params (history from another space)",
				tr.Number, len(tr.Point.v), len(space.knobs))
		}
		o := tpeObs{number: tr.Number, v: tr.Point.v, pending: pending}
		if t.multi() {
			if o.losses = t.losses(tr); o.losses != nil {
				done = append(done, o)
			} else {
				bad = append(bad, o)
			}
		} else if tr.State == StateDone && tr.HasScore && !math.IsNaN(tr.Score) && !pending {
			o.loss = sign * tr.Score
			done = append(done, o)
		} else {
			o.loss = math.Inf(1)
			bad = append(bad, o)
		}
	}
	return done, bad, nResults, nil
}

// fit proposes the values of trial's point, knob by knob, from done (in
// trial order) and bad: the model's dims, group by group in a conditional
// space; knobs the model skips take their only value, and the absent
// knobs are masked.
func (t *TPESampler) fit(space *Space, trial int, dims []tpeDim, done, bad []tpeObs) []float64 {
	v := make([]float64, len(space.knobs))
	for i := range space.knobs {
		// Knobs the model skips (fixed, single-valued) take their only value.
		v[i] = space.fromUnit(i, 0)
	}
	// In a conditional space, each group of knobs that are present
	// together gets its own model, fitted on the trials where the group
	// was present (Optuna's group decomposition): a knob that was absent
	// from a trial says nothing about it, and filling it in (as a flat
	// space does for a knob the objective ignores) would teach the model
	// noise. An unconditional space is one group.
	groups := 1
	if space.conds != nil {
		groups = len(space.groupKeys)
	}
	var fallback []float64
	for g := range groups {
		var gd []tpeDim
		for _, dm := range dims {
			if space.conds == nil || space.group[dm.knob] == g {
				gd = append(gd, dm)
			}
		}
		if len(gd) == 0 {
			continue
		}
		gDone, gBad := done, bad
		comp := "tpe/component"
		if space.conds != nil {
			present := func(o tpeObs) bool { return !isAbsent(o.v[gd[0].knob]) }
			gDone = slices.DeleteFunc(slices.Clone(done), func(o tpeObs) bool { return !present(o) })
			gBad = slices.DeleteFunc(slices.Clone(bad), func(o tpeObs) bool { return !present(o) })
			if key := space.groupKeys[g]; key != "" {
				comp += "/" + key
			}
		}
		if len(gDone) == 0 {
			// No result yet where this group was present: its knobs take
			// the startup point's values, as the whole space does before
			// the model has anything to learn from.
			if fallback == nil {
				fallback = t.sobol.values(space, trial)
			}
			for _, dm := range gd {
				v[dm.knob] = fallback[dm.knob]
			}
			continue
		}
		best := t.propose(space, trial, gd, gDone, gBad, comp)
		for d, dm := range gd {
			v[dm.knob] = dm.external(space, best[d])
		}
	}
	if space.conds != nil {
		space.mask(v)
	}
	return v
}

// tpeNBelow is the size of the good group among n results.
func tpeNBelow(n int) int {
	return min(int(math.Ceil(tpeBeta*float64(n))), tpeMaxBelow, n)
}

// split divides the results done (in trial order) into the good group,
// with its kernels' weights and the weight of its prior, and the rest.
func (t *TPESampler) split(done []tpeObs) (below []tpeObs, wBelow []float64, priorBelow float64, rest []tpeObs) {
	if t.multi() {
		return moSplit(done, tpeNBelow(len(done)))
	}
	// Rank the results; ties keep trial order.
	ranked := slices.Clone(done)
	slices.SortStableFunc(ranked, func(a, b tpeObs) int { return cmp.Compare(a.loss, b.loss) })
	nBelow := tpeNBelow(len(ranked))
	below, rest = slices.Clone(ranked[:nBelow]), ranked[nBelow:]
	// Back to trial order: the mixture's component order (and so which
	// candidate a draw picks) must not depend on ties among the scores.
	slices.SortFunc(below, func(a, b tpeObs) int { return cmp.Compare(a.number, b.number) })

	// EI weights for the good group: how far each is below the best of
	// the rest ([W23] "EI"); uniform when no finished trial is above.
	wBelow = make([]float64, len(below))
	threshold := math.Inf(1)
	for _, o := range rest {
		threshold = min(threshold, o.loss)
	}
	priorBelow = 1.0
	if math.IsInf(threshold, 1) {
		for i := range wBelow {
			wBelow[i] = 1
		}
	} else {
		sum := 0.0
		for i, o := range below {
			wBelow[i] = max(1e-12, threshold-o.loss)
			sum += wBelow[i]
		}
		priorBelow = sum / float64(len(below))
	}
	return below, wBelow, priorBelow, rest
}

// propose fits l and g over dims to the results done (in trial order)
// and the rest bad, and returns the candidate, in model units, with the
// best l/g; comp names the stream that picks the candidates' components.
func (t *TPESampler) propose(space *Space, trial int, dims []tpeDim, done, bad []tpeObs, comp string) []float64 {
	below, wBelow, priorBelow, rest := t.split(done)
	above := append(slices.Clone(rest), bad...)
	slices.SortFunc(above, func(a, b tpeObs) int { return cmp.Compare(a.number, b.number) })
	wAbove := make([]float64, len(above))
	for i := range wAbove {
		wAbove[i] = 1
	}

	l := newParzen(space, dims, below, wBelow, priorBelow)
	g := newParzen(space, dims, above, wAbove, 1)

	cs := newStream(t.seed, trial, comp)
	draws := make([]stream, len(dims))
	for d, dm := range dims {
		draws[d] = newStream(t.seed, trial, "tpe/"+space.knobs[dm.knob].Name)
	}
	best, bestScore := []float64(nil), math.Inf(-1)
	x := make([]float64, len(dims))
	for j := 0; j < t.opt.Candidates; j++ {
		k := l.pick(cs.float(j))
		for d := range dims {
			x[d] = l.sample(d, k, draws[d].open(j))
		}
		score := l.logPDF(x) - g.logPDF(x)
		if best == nil || score > bestScore {
			best, bestScore = slices.Clone(x), score
		}
	}
	return best
}

// tpeDim is how the model sees one knob: a continuous or discrete range in
// model units, or a categorical. Model units are normalised so that no
// width overflows whatever the knob's range: [0, 1] on the knob's scale
// (linear, or logarithmic for log knobs) for continuous knobs, and
// grid-level indices for stepped ones. The kernels' rules (neighbour gaps, a clip proportional to
// the width, a prior over the whole domain) are affine-invariant, so this
// is the same model as one fitted in the knob's own units. It was fitted
// in those units until [-1.7e308, 1.7e308] showed why not: its width
// overflowed to +Inf and every proposal was NaN (issue 13 item 3).
type tpeDim struct {
	knob  int
	kind  int     // dimCont, dimDisc or dimCat
	scale int     // how model units map to the knob's values
	low   float64 // domain in model units, padded by ½ level if discrete
	high  float64
	count int // levels (dimDisc and scaleLevel) or choices (dimCat)
	// Knob bounds for the unit scales; for scaleLogInt, low − ½ and
	// high + ½, so each integer gets the share Optuna gives it.
	kLow, kHigh float64
}

const (
	dimCont = iota
	dimDisc
	dimCat
)

const (
	scaleLinear = iota // lerp(kLow, kHigh, t)
	scaleLog           // logLerp(kLow, kHigh, t)
	scaleLogInt        // logLerp, rounded to a whole number
	scaleLevel         // grid level index
)

// maxDiscLevels is the most levels the model treats as discrete. Past it
// a level's ±½ bin is below float64's resolution around its index (at
// 2^53 an index ± ½ rounds to itself, a zero-mass bin), and a kernel at
// least 0.03·count levels wide sees no difference between the bin's mass
// and the density times its width; such knobs are modelled as continuous
// in level units and rounded to a level on the way out.
const maxDiscLevels = 1 << 32

// tpeDims lists the knobs the model searches: all but fixed knobs and
// knobs with a single value.
func tpeDims(space *Space) []tpeDim {
	var dims []tpeDim
	for i, k := range space.knobs {
		d := tpeDim{knob: i}
		switch k.Kind {
		case KnobFixed:
			continue
		case KnobChoice:
			if len(k.Choices) < 2 {
				continue
			}
			d.kind, d.count = dimCat, len(k.Choices)
		case KnobInt, KnobFloat:
			if k.Low == k.High {
				continue
			}
			d.kind, d.low, d.high = dimCont, 0, 1
			switch {
			case k.Log && k.Kind == KnobInt:
				d.scale, d.kLow, d.kHigh = scaleLogInt, k.Low-0.5, k.High+0.5
			case k.Log:
				d.scale, d.kLow, d.kHigh = scaleLog, k.Low, k.High
			case k.Step > 0:
				d.scale, d.count = scaleLevel, space.count[i]
				d.low, d.high = -0.5, float64(d.count)-0.5
				if d.count <= maxDiscLevels {
					d.kind = dimDisc
				}
			default:
				d.scale, d.kLow, d.kHigh = scaleLinear, k.Low, k.High
			}
		}
		dims = append(dims, d)
	}
	return dims
}

// internal maps a point's value of the knob to model units.
func (d *tpeDim) internal(space *Space, x float64) float64 {
	switch {
	case d.kind == dimCat:
		return x
	case d.scale == scaleLevel:
		return float64(space.levelIndex(d.knob, x))
	case d.scale == scaleLog, d.scale == scaleLogInt:
		return logUnit(d.kLow, d.kHigh, x)
	}
	return unit(d.kLow, d.kHigh, x)
}

// external maps a model value back to what a Point holds, on the knob's
// grid and inside its range.
func (d *tpeDim) external(space *Space, x float64) float64 {
	k := &space.knobs[d.knob]
	switch {
	case d.kind == dimCat:
		return x
	case d.scale == scaleLevel:
		return space.level(d.knob, d.level(x))
	case d.scale == scaleLogInt:
		return math.Min(math.Max(math.Round(logLerp(d.kLow, d.kHigh, x)), k.Low), k.High)
	case d.scale == scaleLog:
		return math.Min(math.Max(logLerp(d.kLow, d.kHigh, x), k.Low), k.High)
	}
	return math.Min(math.Max(lerp(d.kLow, d.kHigh, x), k.Low), k.High)
}

// level rounds a model value in level units to a level index.
func (d *tpeDim) level(x float64) int {
	return int(math.Min(math.Max(math.Round(x), 0), float64(d.count-1)))
}

// parzen is a mixture of product kernels: component c has weight w[c] and,
// per dimension d, a truncated normal (mu, sigma) or a categorical row.
// The last component is the prior.
type parzen struct {
	dims  []tpeDim
	logW  []float64
	cum   []float64 // cumulative normalised weights, for pick
	mu    [][]float64
	sigma [][]float64
	logZ  [][]float64   // log(Φ(b)−Φ(a)) per dim and component
	cat   [][][]float64 // cat[d][c] = log probabilities of choices
}

// newParzen fits the estimator to obs with weights w and a prior kernel
// of weight priorW ([O5] parzen_estimator.py with [W23]'s bandwidth
// settings).
func newParzen(space *Space, dims []tpeDim, obs []tpeObs, w []float64, priorW float64) *parzen {
	n := len(obs) + 1
	p := &parzen{dims: dims, logW: make([]float64, n), cum: make([]float64, n),
		mu: make([][]float64, len(dims)), sigma: make([][]float64, len(dims)),
		logZ: make([][]float64, len(dims)), cat: make([][][]float64, len(dims))}
	total := priorW
	for _, x := range w {
		total += x
	}
	acc := 0.0
	for c := range n {
		wc := priorW
		if c < len(obs) {
			wc = w[c]
		}
		p.logW[c] = math.Log(wc / total)
		acc += wc / total
		p.cum[c] = acc
	}
	for d, dm := range dims {
		if dm.kind == dimCat {
			// Optuna's kernel: p(c) ∝ 1/n + [c = observed]; the prior is
			// uniform.
			rows := make([][]float64, n)
			for c := range n {
				row := make([]float64, dm.count)
				for j := range row {
					row[j] = 1 / float64(n)
				}
				sum := 1.0 * float64(dm.count) / float64(n)
				if c < len(obs) {
					row[int(obs[c].v[dm.knob])]++
					sum++
				}
				for j := range row {
					row[j] = math.Log(row[j] / sum)
				}
				rows[c] = row
			}
			p.cat[d] = rows
			continue
		}
		mus := make([]float64, n)
		for c := range obs {
			mus[c] = dm.internal(space, obs[c].v[dm.knob])
		}
		mus[n-1] = (dm.low + dm.high) / 2
		p.mu[d] = mus
		p.sigma[d] = neighbourSigmas(mus, dm.low, dm.high, len(obs))
		for c := range obs {
			if obs[c].pending {
				p.sigma[d][c] = clipFloor(dm.high-dm.low, len(obs))
			}
		}
		p.logZ[d] = make([]float64, n)
		for c := range n {
			s := p.sigma[d][c]
			p.logZ[d][c] = logPhiDiff((dm.low-mus[c])/s, (dm.high-mus[c])/s)
		}
	}
	return p
}

// neighbourSigmas gives each kernel the larger gap to its neighbours among
// the means and the domain's ends (hyperopt's rule, prior mean included,
// endpoints considered, as [HUB] does), clipped to
// [max(Δ, (k+2)^−α)·range, range]; the prior (last) gets the range.
func neighbourSigmas(mus []float64, low, high float64, k int) []float64 {
	n := len(mus)
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(mus[a], mus[b]) })
	rng := high - low
	minS := clipFloor(rng, k)
	sig := make([]float64, n)
	for r, i := range idx {
		left, right := low, high
		if r > 0 {
			left = mus[idx[r-1]]
		}
		if r < n-1 {
			right = mus[idx[r+1]]
		}
		s := max(mus[i]-left, right-mus[i])
		sig[i] = min(max(s, minS), rng)
	}
	sig[n-1] = rng
	return sig
}

// clipFloor is the smallest bandwidth of a kernel among k observations
// over a domain of width rng: max(Δ, (k+2)^−α)·rng ([HUB] _clip_bandwidth,
// the prior counted).
func clipFloor(rng float64, k int) float64 {
	return max(tpeDelta, math.Pow(float64(k+2), -tpeAlpha)) * rng
}

// pick returns the component whose cumulative weight first exceeds u.
func (p *parzen) pick(u float64) int {
	for i, c := range p.cum {
		if u < c {
			return i
		}
	}
	return len(p.cum) - 1
}

// sample draws dimension d from component c with uniform u ∈ (0, 1) by
// inverse CDF: one uniform per draw.
func (p *parzen) sample(d, c int, u float64) float64 {
	dm := &p.dims[d]
	if dm.kind == dimCat {
		row := p.cat[d][c]
		acc := 0.0
		for j, lp := range row {
			acc += math.Exp(lp)
			if u < acc {
				return float64(j)
			}
		}
		return float64(len(row) - 1)
	}
	mu, s := p.mu[d][c], p.sigma[d][c]
	z := truncNormPPF((dm.low-mu)/s, (dm.high-mu)/s, u)
	x := min(max(mu+s*z, dm.low), dm.high)
	if dm.kind == dimDisc {
		x = float64(dm.level(x))
	}
	return x
}

// logPDF is log Σ_c w_c Π_d p_{d,c}(x_d).
func (p *parzen) logPDF(x []float64) float64 {
	n := len(p.logW)
	terms := make([]float64, n)
	for c := range n {
		t := p.logW[c]
		for d := range p.dims {
			t += p.logKernel(d, c, x[d])
		}
		terms[c] = t
	}
	return logSumExp(terms)
}

func (p *parzen) logKernel(d, c int, x float64) float64 {
	dm := &p.dims[d]
	if dm.kind == dimCat {
		return p.cat[d][c][int(x)]
	}
	mu, s := p.mu[d][c], p.sigma[d][c]
	if dm.kind == dimDisc {
		lo := max(x-0.5, dm.low)
		hi := min(x+0.5, dm.high)
		return logPhiDiff((lo-mu)/s, (hi-mu)/s) - p.logZ[d][c]
	}
	z := (x - mu) / s
	return -0.5*z*z - 0.5*math.Log(2*math.Pi) - math.Log(s) - p.logZ[d][c]
}

func logSumExp(xs []float64) float64 {
	m := math.Inf(-1)
	for _, x := range xs {
		m = max(m, x)
	}
	if math.IsInf(m, -1) {
		return m
	}
	s := 0.0
	for _, x := range xs {
		s += math.Exp(x - m)
	}
	return m + math.Log(s)
}

// logPhi is log Φ(x), accurate in the far left tail.
func logPhi(x float64) float64 {
	if x > -37 {
		return math.Log(0.5 * math.Erfc(-x/math.Sqrt2))
	}
	// Asymptotic series of the Mills ratio.
	x2 := x * x
	return -x2/2 - math.Log(-x) - 0.5*math.Log(2*math.Pi) + math.Log1p(-1/x2+3/(x2*x2))
}

// logPhiDiff is log(Φ(b) − Φ(a)) for a ≤ b, computed on the side of 0
// where it does not cancel.
func logPhiDiff(a, b float64) float64 {
	if a >= b {
		return math.Inf(-1)
	}
	if a > 0 {
		a, b = -b, -a
	}
	if b <= 0 {
		lb, la := logPhi(b), logPhi(a)
		return lb + math.Log1p(-math.Exp(la-lb))
	}
	// a ≤ 0 < b: the mass is at least Φ(b) − 1/2 or 1/2 − Φ(a), no cancellation.
	return math.Log(1 - 0.5*math.Erfc(b/math.Sqrt2) - 0.5*math.Erfc(-a/math.Sqrt2))
}

// truncNormPPF is the quantile u of the standard normal truncated to
// [a, b], computed on the left tail (mirrored when a > 0) so that tail
// mass is not lost to rounding.
func truncNormPPF(a, b, u float64) float64 {
	if a > 0 {
		return -truncNormPPF(-b, -a, 1-u)
	}
	pa := 0.5 * math.Erfc(-a/math.Sqrt2)
	pb := 0.5 * math.Erfc(-b/math.Sqrt2)
	p := pa + u*(pb-pa)
	if !(p > 0) || !(p < 1) {
		return min(max((a+b)/2, a), b)
	}
	z := -math.Sqrt2 * math.Erfcinv(2*p)
	return min(max(z, a), b)
}

var _ Sampler = (*TPESampler)(nil)
