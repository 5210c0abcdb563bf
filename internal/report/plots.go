package report

import (
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/soma-hpc/soma/study"
)

// plot is one drawn plot.
type plot struct {
	name    string
	title   string
	caption string
	svg     string
	marks   int
}

// scoreDomain returns the y domain for values, padded, and whether a log
// scale suits them. On the side where scores are bad (high when
// minimizing) a few outliers would squash the rest into a line: when the
// extreme lies far beyond the 90th percentile, the domain stops short of
// it, and the points beyond are drawn on the edge (clipped).
func scoreDomain(vals []float64, dir study.Direction) (lo, hi float64, log bool) {
	v := make([]float64, 0, len(vals))
	for _, x := range vals {
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return 0, 1, false
	}
	slices.Sort(v)
	lo, hi = v[0], v[len(v)-1]
	q := func(p float64) float64 { return v[int(p*float64(len(v)-1))] }
	if len(v) >= 10 {
		switch dir {
		case study.Minimize:
			if s := q(0.9) - lo; s > 0 && hi-lo > 5*s {
				hi = q(0.9) + s/2
			}
		case study.Maximize:
			if s := hi - q(0.1); s > 0 && hi-lo > 5*s {
				lo = q(0.1) - s/2
			}
		}
	}
	if lo > 0 && hi/lo > 1000 {
		return lo / 1.5, hi * 1.5, true
	}
	if hi == lo {
		pad := math.Max(math.Abs(lo)*0.1, 1)
		return lo - pad, hi + pad, false
	}
	pad := (hi - lo) * 0.05
	return lo - pad, hi + pad, false
}

// shown picks at most max trial indices to draw from idx: the best done
// trials first (idx is best first), then an even sample of the rest.
func shown(idx []int, max int) []int {
	if len(idx) <= max {
		return idx
	}
	out := append([]int(nil), idx[:max/2]...)
	rest := idx[max/2:]
	step := float64(len(rest)) / float64(max-max/2)
	for k := 0.0; int(k) < len(rest) && len(out) < max; k += step {
		out = append(out, rest[int(k)])
	}
	return out
}

// history draws each trial's score by trial number, and the best so far.
func (d *data) history() plot {
	p := plot{name: "history", title: "Optimisation history",
		caption: "Each done trial's " + d.metric + " by trial number; the line is the best so far. Pruned trials sit at their last intermediate value (grey rings: measured early, not comparable); failed trials are marked × on the axis."}
	const W, H = 960.0, 380.0
	c := newCanvas(p.name, W, H, p.title)
	fr := frame{x0: 74, y0: 16, x1: W - 20, y1: H - 48}
	var vals []float64
	for _, i := range d.done {
		vals = append(vals, d.trials[i].score)
	}
	if len(vals) == 0 {
		for _, t := range d.trials {
			if t.hasValue {
				vals = append(vals, t.value)
			}
		}
	}
	lo, hi, log := scoreDomain(vals, d.dir)
	minN, maxN := 0, 1
	if len(d.trials) > 0 {
		minN, maxN = d.trials[0].n, max(d.trials[len(d.trials)-1].n, d.trials[0].n+1)
	}
	xs := scale{d0: float64(minN) - 0.5, d1: float64(maxN) + 0.5, r0: fr.x0, r1: fr.x1}
	ys := scale{d0: lo, d1: hi, r0: fr.y1, r1: fr.y0, log: log}
	ylabel := d.metric
	if log {
		ylabel += " (log scale)"
	}
	c.axes(fr, xs, ys, "trial", ylabel, intTicks(xs, 10))

	// Pruned and failed first, done on top.
	budget := d.o.MaxMarks
	for i := range d.trials {
		t := &d.trials[i]
		switch {
		case t.state == study.StatePruned && (t.hasScore || t.hasValue) && budget > 0:
			v := t.value
			if t.hasScore {
				v = t.score
			}
			c.mark("circle", t.n, "pruned", fmt.Sprintf(`cx="%s" cy="%s" r="3"`, f(xs.at(float64(t.n))), f(ys.at(v))), d.label(t))
			p.marks++
			budget--
		case t.state == study.StateFailed && budget > 0:
			x, y := xs.at(float64(t.n)), fr.y1-6
			c.mark("path", t.n, "failed", fmt.Sprintf(`d="M%s %sl6 6m0 -6l-6 6"`, f(x-3), f(y-3)), d.label(t))
			p.marks++
			budget--
		}
	}
	draw := shown(d.done, max(budget, 1))
	slices.Reverse(draw) // worst first, the best on top
	for _, i := range draw {
		t := &d.trials[i]
		x, y := xs.at(float64(t.n)), ys.at(t.score)
		if ys.clipped(t.score) {
			dy := -7.0
			if y > (fr.y0+fr.y1)/2 {
				dy = 7
			}
			c.mark("path", t.n, "done clipped", fmt.Sprintf(`d="M%s %sl-4 %sh8z" fill="%s"`, f(x), f(y), f(-dy), t.colour()), d.label(t)+" (off the scale)")
		} else {
			c.mark("circle", t.n, "done", fmt.Sprintf(`cx="%s" cy="%s" r="4" fill="%s"`, f(x), f(y), t.colour()), d.label(t))
		}
		p.marks++
	}
	// Best so far, in trial order, as a step line.
	var path []byte
	best := math.NaN()
	for i := range d.trials {
		t := &d.trials[i]
		if !t.done {
			continue
		}
		x := xs.at(float64(t.n))
		if math.IsNaN(best) {
			best = t.score
			path = fmt.Appendf(path, "M%s %s", f(x), f(ys.at(best)))
			continue
		}
		if d.dir.Better(t.score, best) {
			best = t.score
			path = fmt.Appendf(path, "H%s V%s", f(x), f(ys.at(best)))
		}
	}
	if len(path) > 0 && d.dir != study.DirectionUnknown {
		path = fmt.Appendf(path, "H%s", f(fr.x1))
		c.raw(`<path class="best" d="` + string(path) + `"><title>best so far</title></path>`)
	}
	c.raw(legend(fr.x1-250, fr.y0+4, []legendItem{
		{`<circle cx="6" cy="-4" r="4" fill="` + viridis(0) + `"/>`, "done (colour: rank)"},
		{`<circle class="pruned" cx="6" cy="-4" r="3"/>`, "pruned, last value"},
		{`<path class="failed" d="M3 -7l6 6m0 -6l-6 6"/>`, "failed"},
		{`<path class="best" d="M0 -4h12"/>`, "best so far"},
	}))
	if n := len(d.done); n > len(draw) {
		p.caption += fmt.Sprintf(" Showing %d of %d done trials: the best half, and an even sample of the rest.", len(draw), n)
	}
	p.svg = c.String()
	return p
}

type legendItem struct{ swatch, text string }

func legend(x, y float64, items []legendItem) string {
	s := fmt.Sprintf(`<g class="legend" transform="translate(%s %s)"><rect x="-8" y="-4" width="250" height="%d" rx="4"/>`, f(x), f(y), 20*len(items)+6)
	for i, it := range items {
		s += fmt.Sprintf(`<g transform="translate(0 %d)">%s<text x="20" y="0">%s</text></g>`, 20*i+16, it.swatch, esc(it.text))
	}
	return s + "</g>"
}

// intTicks returns integer ticks for a scale over trial numbers or steps.
func intTicks(s scale, n int) []tick {
	var out []tick
	for _, t := range s.ticks(n) {
		if t.v == math.Trunc(t.v) {
			out = append(out, tick{t.v, strconv.FormatFloat(t.v, 'f', 0, 64)})
		}
	}
	return out
}

// curves draws every trial's intermediate values by step.
func (d *data) curves() plot {
	p := plot{name: "curves", title: "Intermediate values",
		caption: "Each trial's reported values by step. Done trials are coloured by rank (the best is thickest), pruned trials are grey and end with a red × where the pruner stopped them, running ones are dashed."}
	const W, H = 960.0, 400.0
	c := newCanvas(p.name, W, H, p.title)
	fr := frame{x0: 74, y0: 16, x1: W - 20, y1: H - 48}
	var withCurve []int
	total := 0
	for i := range d.trials {
		if len(d.trials[i].curve) > 0 {
			total++
		}
	}
	// Choose: the best done, then pruned (latest first), then the rest.
	for _, i := range d.done {
		if len(d.trials[i].curve) > 0 && len(withCurve) < d.o.MaxCurves/2 {
			withCurve = append(withCurve, i)
		}
	}
	for i := len(d.trials) - 1; i >= 0 && len(withCurve) < d.o.MaxCurves; i-- {
		t := &d.trials[i]
		if len(t.curve) > 0 && !slices.Contains(withCurve, i) {
			withCurve = append(withCurve, i)
		}
	}
	var vals []float64
	minS, maxS := int64(math.MaxInt64), int64(math.MinInt64)
	for _, i := range withCurve {
		for _, s := range d.trials[i].curve {
			vals = append(vals, s.Value)
			minS, maxS = min(minS, s.Step), max(maxS, s.Step)
		}
	}
	if len(withCurve) == 0 {
		minS, maxS = 0, 1
	}
	if maxS == minS {
		maxS++
	}
	lo, hi, log := scoreDomain(vals, d.dir)
	xs := scale{d0: float64(minS), d1: float64(maxS), r0: fr.x0, r1: fr.x1}
	ys := scale{d0: lo, d1: hi, r0: fr.y1, r1: fr.y0, log: log}
	ylabel := "intermediate value"
	if log {
		ylabel += " (log scale)"
	}
	c.axes(fr, xs, ys, "step", ylabel, intTicks(xs, 10))
	if len(withCurve) == 0 {
		c.text((fr.x0+fr.x1)/2, (fr.y0+fr.y1)/2, "middle", "empty", "no trial reported intermediate values")
	}
	// Grey first, then done worst to best.
	slices.SortStableFunc(withCurve, func(a, b int) int {
		ta, tb := &d.trials[a], &d.trials[b]
		if ta.done != tb.done {
			if ta.done {
				return 1
			}
			return -1
		}
		switch {
		case ta.rank > tb.rank:
			return -1
		case ta.rank < tb.rank:
			return 1
		}
		return 0
	})
	var stops []string
	for _, i := range withCurve {
		t := &d.trials[i]
		xp := make([]float64, len(t.curve))
		yp := make([]float64, len(t.curve))
		for k, s := range t.curve {
			xp[k], yp[k] = xs.at(float64(s.Step)), ys.at(s.Value)
		}
		class := "curve " + string(t.state)
		width := 1.2
		if t.done && t.rank == 0 {
			class += " top"
			width = 3
		}
		style := fmt.Sprintf(`stroke="%s" stroke-width="%g"`, t.colour(), width)
		if t.state == study.StateRunning {
			style += ` stroke-dasharray="4 3"`
		}
		c.mark("polyline", t.n, class, `points="`+points(xp, yp)+`" `+style, d.label(t))
		p.marks++
		if t.state == study.StatePruned {
			x, y := xp[len(xp)-1], yp[len(yp)-1]
			stops = append(stops, fmt.Sprintf(`<path class="mark stop" data-t="%d" d="M%s %sl8 8m0 -8l-8 8"><title>%s</title></path>`,
				t.n, f(x-4), f(y-4), esc(fmt.Sprintf("trial %d pruned at step %d (value %s)", t.n, t.curve[len(t.curve)-1].Step, num(t.curve[len(t.curve)-1].Value)))))
		}
	}
	for _, s := range stops {
		c.raw(s)
		p.marks++
	}
	c.raw(legend(fr.x1-250, fr.y0+4, []legendItem{
		{`<path d="M0 -4h12" stroke="` + viridis(0) + `" stroke-width="3"/>`, "done (the best is thickest)"},
		{`<path d="M0 -4h12" stroke="#9a9a9a"/>`, "pruned"},
		{`<path class="stop" d="M2 -8l8 8m0 -8l-8 8"/>`, "where the pruner stopped it"},
		{`<path d="M0 -4h12" stroke="#9a9a9a" stroke-dasharray="4 3"/>`, "running"},
	}))
	if total > len(withCurve) {
		p.caption += fmt.Sprintf(" Showing %d of %d curves: the best done trials, then the latest.", len(withCurve), total)
	}
	p.svg = c.String()
	return p
}

// axisFor returns the scale of knob k over [r0, r1] and its ticks.
func axisFor(k study.Knob, r0, r1 float64, n int) (scale, []tick) {
	switch k.Kind {
	case study.KnobChoice:
		s := scale{d0: -0.5, d1: float64(len(k.Choices)) - 0.5, r0: r0, r1: r1}
		var ts []tick
		for i, ch := range k.Choices {
			if len(ch) > 12 {
				ch = ch[:11] + "…"
			}
			ts = append(ts, tick{float64(i), ch})
		}
		return s, ts
	case study.KnobFixed:
		return scale{d0: -0.5, d1: 0.5, r0: r0, r1: r1}, []tick{{0, k.Value}}
	}
	lo, hi := k.Low, k.High
	if hi == lo {
		lo, hi = lo-1, hi+1
	}
	s := scale{d0: lo, d1: hi, r0: r0, r1: r1, log: k.Log && lo > 0}
	ts := s.ticks(n)
	if k.Kind == study.KnobInt {
		ts = intTicks(s, n)
	}
	return s, ts
}

// jitter spreads trials of one choice sideways, the same way every time.
func jitter(n int) float64 {
	h := uint32(n)*2654435761 + 0x9e3779b9
	h ^= h >> 15
	return (float64(h%1000)/999 - 0.5) * 0.5
}

// params draws each knob against the score, one panel per knob.
func (d *data) params() plot {
	p := plot{name: "params", title: "Each knob against the " + d.metric,
		caption: "One panel per knob: each done trial's " + d.metric + " against the knob's value (choices spread sideways). Colour: rank."}
	var knobs []int
	for j, k := range d.knobs {
		if k.Kind != study.KnobFixed {
			knobs = append(knobs, j)
		}
	}
	cols := min(3, max(1, len(knobs)))
	rows := (len(knobs) + cols - 1) / cols
	const W, PH = 960.0, 250.0
	pw := W / float64(cols)
	c := newCanvas(p.name, W, PH*float64(max(rows, 1)), p.title)
	var vals []float64
	for _, i := range d.done {
		vals = append(vals, d.trials[i].score)
	}
	lo, hi, log := scoreDomain(vals, d.dir)
	draw := shown(d.done, max(1, d.o.MaxMarks/max(1, len(knobs))))
	slices.Reverse(draw)
	for pi, j := range knobs {
		k := d.knobs[j]
		ox, oy := float64(pi%cols)*pw, float64(pi/cols)*PH
		fr := frame{x0: ox + 62, y0: oy + 26, x1: ox + pw - 14, y1: oy + PH - 44}
		xs, xt := axisFor(k, fr.x0, fr.x1, 5)
		ys := scale{d0: lo, d1: hi, r0: fr.y1, r1: fr.y0, log: log}
		name := k.Name
		if k.Log {
			name += " (log)"
		}
		c.text(fr.x0, oy+16, "start", "panel-title", name)
		c.axes(fr, xs, ys, "", d.metric, xt)
		for _, i := range draw {
			t := &d.trials[i]
			xv := t.x[j]
			if math.IsNaN(xv) {
				continue
			}
			if k.Kind == study.KnobChoice {
				xv += jitter(t.n)
			}
			c.mark("circle", t.n, "done", fmt.Sprintf(`cx="%s" cy="%s" r="3" fill="%s"`, f(xs.at(xv)), f(ys.at(t.score)), t.colour()), d.label(t))
			p.marks++
		}
	}
	if len(knobs) == 0 {
		c.text(W/2, PH/2, "middle", "empty", "every knob is fixed")
	}
	p.svg = c.String()
	return p
}

// parallel draws parallel coordinates: one axis per knob and one for the
// score (best at the top), one line per done trial.
func (d *data) parallel() plot {
	p := plot{name: "parallel", title: "Parallel coordinates",
		caption: "One line per done trial through its value on each knob's axis and its " + d.metric + " (last axis, best at the top). The best trials are drawn darkest and on top."}
	var knobs []int
	for j, k := range d.knobs {
		if k.Kind != study.KnobFixed {
			knobs = append(knobs, j)
		}
	}
	const W, H = 960.0, 400.0
	c := newCanvas(p.name, W, H, p.title)
	top, bottom := 48.0, H-36
	nAxes := len(knobs) + 1
	ax := func(i int) float64 {
		if nAxes == 1 {
			return W / 2
		}
		return 90 + float64(i)*(W-190)/float64(nAxes-1)
	}
	scales := make([]scale, nAxes)
	ticks := make([][]tick, nAxes)
	for a, j := range knobs {
		scales[a], ticks[a] = axisFor(d.knobs[j], bottom, top, 5)
	}
	var vals []float64
	for _, i := range d.done {
		vals = append(vals, d.trials[i].score)
	}
	lo, hi, log := scoreDomain(vals, d.dir)
	ss := scale{d0: lo, d1: hi, r0: bottom, r1: top, log: log}
	if d.dir == study.Minimize {
		ss.r0, ss.r1 = top, bottom // best (lowest) at the top
	}
	scales[nAxes-1], ticks[nAxes-1] = ss, ss.ticks(5)
	draw := shown(d.done, max(1, min(d.o.MaxMarks, 3000)))
	slices.Reverse(draw)
	for _, i := range draw {
		t := &d.trials[i]
		xp := make([]float64, 0, nAxes)
		yp := make([]float64, 0, nAxes)
		ok := true
		for a, j := range knobs {
			if math.IsNaN(t.x[j]) {
				ok = false
				break
			}
			xp = append(xp, ax(a))
			yp = append(yp, scales[a].at(t.x[j]))
		}
		if !ok {
			continue
		}
		xp = append(xp, ax(nAxes-1))
		yp = append(yp, ss.at(t.score))
		op := 0.85 - 0.6*t.rank
		if t.rank > 0.1 && len(draw) > 400 {
			// Thousands of lines: let the worse ones fade, so that the
			// best stand out instead of a solid block of colour.
			op *= max(0.15, 400/float64(len(draw)))
		}
		c.mark("polyline", t.n, "line", fmt.Sprintf(`points="%s" stroke="%s" stroke-opacity="%.2f"`, points(xp, yp), t.colour(), op), d.label(t))
		p.marks++
	}
	c.raw(`<g class="axis">`)
	for a := range nAxes {
		x := ax(a)
		c.line(x, top, x, bottom, "domain")
		name := d.metric
		if a < len(knobs) {
			name = d.knobs[knobs[a]].Name
		}
		c.text(x, top-18, "middle", "label", name)
		for _, t := range ticks[a] {
			y := scales[a].at(t.v)
			c.line(x-3, y, x+3, y, "tickmark")
			c.text(x-6, y+4, "end", "tick", t.label)
		}
	}
	c.raw(`</g>`)
	if n := len(d.done); n > len(draw) {
		p.caption += fmt.Sprintf(" Showing %d of %d done trials.", len(draw), n)
	}
	if len(d.done) == 0 {
		c.text(W/2, H/2, "middle", "empty", "no trial done yet")
	}
	p.svg = c.String()
	return p
}
