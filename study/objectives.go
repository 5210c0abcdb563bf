package study

import (
	"fmt"
	"slices"
	"strings"
)

// Several objectives (issue 21): a study may minimise or maximise several
// scores at once, direction = ["minimize", "minimize"] with metrics =
// ["error", "latency_ms"]. Each done trial then has one score per metric
// (Record.Scores), and no single score is best: the answer is the Pareto
// front (ParetoFront). Samplers that never compare scores (random, sobol,
// grid) work unchanged, nsga2 (NSGA2Sampler) is made for them, tpe
// becomes multi-objective TPE (motpe.go), and a pruner must be told
// which metric's intermediate values it judges (pruner.metric).

// Objectives returns how many objectives the study has: len(Directions)
// for a study with several, else 1.
func (s *Spec) Objectives() int {
	if len(s.Directions) > 0 {
		return len(s.Directions)
	}
	return 1
}

// validateObjectives checks the several-objectives fields of s.
func (s *Spec) validateObjectives() error {
	if len(s.Directions) == 0 {
		if s.Sampler.Name == "nsga2" {
			return fmt.Errorf(`study: sampler nsga2 is for several objectives (direction = ["minimize", "maximize"] with metrics); use tpe for one`)
		}
		if len(s.Metrics) > 0 {
			return fmt.Errorf(`study: metrics %q needs a direction per metric (direction = ["minimize", "maximize"]); one objective takes metric = "name"`, s.Metrics)
		}
		if s.Pruner.Metric != "" {
			return fmt.Errorf("study: pruner.metric %q is for studies with several objectives (drop it)", s.Pruner.Metric)
		}
		return nil
	}
	if len(s.Directions) < 2 {
		return fmt.Errorf(`study: direction has one entry (write direction = %q for one objective)`, s.Directions[0].String())
	}
	if s.Direction != DirectionUnknown || s.Metric != "" {
		return fmt.Errorf("study: several objectives take direction and metrics lists, not Direction or Metric")
	}
	for i, d := range s.Directions {
		if d != Minimize && d != Maximize {
			return fmt.Errorf(`study: direction[%d]: want "minimize" or "maximize"`, i)
		}
	}
	if len(s.Metrics) != len(s.Directions) {
		return fmt.Errorf(`study: %d directions but %d metrics (name each objective: metrics = ["error", "latency_ms"])`, len(s.Directions), len(s.Metrics))
	}
	for i, m := range s.Metrics {
		if m == "" {
			return fmt.Errorf("study: metrics[%d] is empty (name each objective)", i)
		}
		if err := checkMetric(m); err != nil {
			return err
		}
		if strings.ContainsAny(m, " \t") {
			return fmt.Errorf("study: metrics[%d] %q: a metric of several has no spaces (the scores are one line)", i, m)
		}
		if slices.Index(s.Metrics, m) != i {
			return fmt.Errorf("study: metric %q listed twice (name each objective once)", m)
		}
	}
	if s.Pruner.Name != "none" && !slices.Contains(s.Metrics, s.Pruner.Metric) {
		if s.Pruner.Metric == "" {
			return fmt.Errorf("study: pruner %s with several objectives: name the metric it judges (pruner.metric = %q, one of %s); the objective's reports are that metric's values", s.Pruner.Name, s.Metrics[0], strings.Join(s.Metrics, ", "))
		}
		return fmt.Errorf("study: pruner.metric %q is not one of the metrics %s%s", s.Pruner.Metric, strings.Join(s.Metrics, ", "), suggest(s.Pruner.Metric, s.Metrics))
	}
	return nil
}

// pruneDirection is the direction a pruner compares values in: the
// study's, or with several objectives that of the metric it judges.
func (s *Spec) pruneDirection() Direction {
	if i := slices.Index(s.Metrics, s.Pruner.Metric); i >= 0 && i < len(s.Directions) {
		return s.Directions[i]
	}
	return s.Direction
}

// parseDirections reads direction = ["minimize", "maximize"].
func parseDirections(v []any) ([]Direction, error) {
	out := make([]Direction, len(v))
	for i, e := range v {
		t, ok := e.(string)
		d, err := ParseDirection(t)
		if !ok || err != nil || d == DirectionUnknown {
			return nil, fmt.Errorf(`study: direction[%d] %v: want "minimize" or "maximize"`, i, describe(e))
		}
		out[i] = d
	}
	return out, nil
}

// dominates reports whether scores a Pareto-dominate b under dirs: no
// worse in every objective and better in one.
func dominates(a, b []float64, dirs []Direction) bool {
	better := false
	for i, d := range dirs {
		if d.Better(b[i], a[i]) {
			return false
		}
		if d.Better(a[i], b[i]) {
			better = true
		}
	}
	return better
}

// ParetoFront returns the done records of recs with one score per
// direction that no other such record dominates, in trial order. Records
// with equal scores are all on the front.
func ParetoFront(recs []Record, dirs []Direction) []Record {
	var cand []Record
	for _, r := range recs {
		if r.State == StateDone && len(r.Scores) == len(dirs) {
			cand = append(cand, r)
		}
	}
	var front []Record
	for i, r := range cand {
		dominated := false
		for j, o := range cand {
			if i != j && dominates(o.Scores, r.Scores, dirs) {
				dominated = true
				break
			}
		}
		if !dominated {
			front = append(front, r)
		}
	}
	slices.SortStableFunc(front, func(a, b Record) int { return a.Number - b.Number })
	return front
}

// Hypervolume returns the volume of objective space that the points
// (one score per direction each) dominate, bounded by ref: the union of
// the boxes between each point and ref, with maximised objectives negated
// so that every box runs from the point up to ref. A point not strictly
// better than ref in every objective adds nothing. It slices along the
// last objective and recurses (HSO, While et al. 2006): exact, and
// O(n^d) for n points in d objectives, which is fine for the fronts a
// study lists (hundreds of points, a few objectives).
func Hypervolume(points [][]float64, dirs []Direction, ref []float64) float64 {
	flip := func(i int, x float64) float64 {
		if dirs[i] == Maximize {
			return -x
		}
		return x
	}
	r := make([]float64, len(ref))
	for i := range ref {
		r[i] = flip(i, ref[i])
	}
	var ps [][]float64
	for _, p := range points {
		q := make([]float64, len(p))
		inside := true
		for i := range p {
			q[i] = flip(i, p[i])
			if q[i] >= r[i] {
				inside = false
			}
		}
		if inside {
			ps = append(ps, q)
		}
	}
	return hso(ps, r)
}

func hso(ps [][]float64, ref []float64) float64 {
	if len(ps) == 0 {
		return 0
	}
	d := len(ref) - 1
	if d == 0 {
		best := ref[0]
		for _, p := range ps {
			best = min(best, p[0])
		}
		return ref[0] - best
	}
	ps = slices.Clone(ps)
	slices.SortFunc(ps, func(a, b []float64) int { return cmpFloat(a[d], b[d]) })
	vol := 0.0
	for i := range ps {
		hi := ref[d]
		if i+1 < len(ps) {
			hi = ps[i+1][d]
		}
		if hi <= ps[i][d] {
			continue
		}
		vol += hso(ps[:i+1], ref[:d]) * (hi - ps[i][d])
	}
	return vol
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
