package report

import (
	"fmt"
	"slices"

	"github.com/soma-hpc/soma/study"
)

// front draws, for a study with several objectives, each done trial's
// first two scores against each other, the Pareto front highlighted and
// joined by its staircase (issue 21). Other studies get no front plot.
func (d *data) front() plot {
	p := plot{name: "front", title: "Pareto front"}
	if len(d.metrics) < 2 {
		return p
	}
	p.caption = fmt.Sprintf("Each done trial's %s (%s) against its %s (%s); the trials of the Pareto front (no other trial at least as good in every metric and better in one) are ringed and joined.",
		d.metrics[0], d.dirs[0], d.metrics[1], d.dirs[1])
	var recs []study.Record
	var xs, ys []float64
	for _, t := range d.trials {
		if t.state == study.StateDone && len(t.scores) == len(d.metrics) {
			recs = append(recs, study.Record{Number: t.n, State: t.state, Scores: t.scores})
			xs = append(xs, t.scores[0])
			ys = append(ys, t.scores[1])
		}
	}
	onFront := map[int]bool{}
	var front []study.Record
	for _, r := range study.ParetoFront(recs, d.dirs) {
		onFront[r.Number] = true
		front = append(front, r)
	}
	const W, H = 960.0, 420.0
	c := newCanvas(p.name, W, H, p.title)
	fr := frame{x0: 70, y0: 20, x1: W - 20, y1: H - 50}
	xlo, xhi, xlog := scoreDomain(xs, d.dirs[0])
	ylo, yhi, ylog := scoreDomain(ys, d.dirs[1])
	xsc := scale{d0: xlo, d1: xhi, r0: fr.x0, r1: fr.x1, log: xlog}
	ysc := scale{d0: ylo, d1: yhi, r0: fr.y1, r1: fr.y0, log: ylog}
	c.axes(fr, xsc, ysc, d.metrics[0]+" ("+d.dirs[0].String()+")", d.metrics[1]+" ("+d.dirs[1].String()+")", nil)
	if len(front) > 1 {
		slices.SortFunc(front, func(a, b study.Record) int { return cmpF(a.Scores[0], b.Scores[0]) })
		var px, py []float64
		for _, r := range front {
			px = append(px, xsc.at(r.Scores[0]))
			py = append(py, ysc.at(r.Scores[1]))
		}
		c.raw(`<polyline class="front" fill="none" stroke="#d62728" stroke-width="1.5" points="` + points(px, py) + `"/>`)
	}
	for i := range d.trials {
		t := &d.trials[i]
		if t.state != study.StateDone || len(t.scores) != len(d.metrics) {
			continue
		}
		attrs := fmt.Sprintf(`cx="%s" cy="%s" r="3" fill="%s"`, f(xsc.at(t.scores[0])), f(ysc.at(t.scores[1])), t.colour())
		class := "done"
		if onFront[t.n] {
			class = "front"
			attrs = fmt.Sprintf(`cx="%s" cy="%s" r="5" fill="%s" stroke="#d62728" stroke-width="2"`, f(xsc.at(t.scores[0])), f(ysc.at(t.scores[1])), t.colour())
		}
		c.mark("circle", t.n, class, attrs, d.label(t))
		p.marks++
	}
	p.svg = c.String()
	return p
}

func cmpF(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
