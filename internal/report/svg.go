package report

import (
	"fmt"
	"html"
	"math"
	"strconv"
	"strings"
)

// canvas builds one SVG element as text. Coordinates are user units of
// its viewBox; the page scales it to its width.
type canvas struct {
	b    strings.Builder
	w, h float64
}

func newCanvas(name string, w, h float64, label string) *canvas {
	c := &canvas{w: w, h: h}
	fmt.Fprintf(&c.b, `<svg class="plot" data-plot="%s" viewBox="0 0 %g %g" role="img" aria-label="%s">`, name, w, h, esc(label))
	return c
}

func (c *canvas) String() string { return c.b.String() + "</svg>" }

func esc(s string) string { return html.EscapeString(s) }

// f formats a coordinate compactly.
func f(x float64) string { return strconv.FormatFloat(math.Round(x*10)/10, 'f', -1, 64) }

func (c *canvas) raw(s string) { c.b.WriteString(s) }

func (c *canvas) line(x1, y1, x2, y2 float64, class string) {
	fmt.Fprintf(&c.b, `<line class="%s" x1="%s" y1="%s" x2="%s" y2="%s"/>`, class, f(x1), f(y1), f(x2), f(y2))
}

func (c *canvas) text(x, y float64, anchor, class, s string) {
	fmt.Fprintf(&c.b, `<text class="%s" x="%s" y="%s" text-anchor="%s">%s</text>`, class, f(x), f(y), anchor, esc(s))
}

// mark opens an element that stands for trial t; title is its tooltip.
// attrs is the rest of the element's attributes.
func (c *canvas) mark(tag string, t int, class, attrs, title string) {
	fmt.Fprintf(&c.b, `<%s class="mark %s" data-t="%d" %s><title>%s</title></%s>`, tag, class, t, attrs, esc(title), tag)
}

// polyline returns the points attribute of a polyline.
func points(xs, ys []float64) string {
	var b strings.Builder
	for i := range xs {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(f(xs[i]))
		b.WriteByte(',')
		b.WriteString(f(ys[i]))
	}
	return b.String()
}

// scale maps a data domain onto a pixel range, linearly or by log10.
type scale struct {
	d0, d1 float64 // domain
	r0, r1 float64 // range
	log    bool
}

func (s scale) tr(x float64) float64 {
	if s.log {
		return math.Log10(x)
	}
	return x
}

// at maps x, clamped to the domain.
func (s scale) at(x float64) float64 {
	a, b := s.tr(s.d0), s.tr(s.d1)
	if b == a {
		return (s.r0 + s.r1) / 2
	}
	v := s.tr(x)
	if s.log && x <= 0 {
		v = a
	}
	t := (v - a) / (b - a)
	t = math.Max(0, math.Min(1, t))
	return s.r0 + t*(s.r1-s.r0)
}

// clipped reports whether x lies outside the domain.
func (s scale) clipped(x float64) bool {
	lo, hi := math.Min(s.d0, s.d1), math.Max(s.d0, s.d1)
	return x < lo || x > hi
}

type tick struct {
	v     float64
	label string
}

// ticks returns about n round ticks within the domain.
func (s scale) ticks(n int) []tick {
	lo, hi := math.Min(s.d0, s.d1), math.Max(s.d0, s.d1)
	if s.log && lo > 0 {
		var out []tick
		e0, e1 := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
		steps := []float64{1}
		if e1-e0 <= 2 {
			steps = []float64{1, 2, 5}
		}
		for e := e0; e <= e1; e++ {
			for _, m := range steps {
				v := m * math.Pow(10, e)
				if v >= lo*(1-1e-9) && v <= hi*(1+1e-9) {
					out = append(out, tick{v, num(v)})
				}
			}
		}
		if len(out) >= 2 {
			return out
		}
	}
	if hi == lo {
		return []tick{{lo, num(lo)}}
	}
	step := niceStep((hi - lo) / float64(n))
	var out []tick
	for v := math.Ceil(lo/step) * step; v <= hi+step*1e-9; v += step {
		if math.Abs(v) < step*1e-9 {
			v = 0
		}
		out = append(out, tick{v, num(v)})
	}
	return out
}

// niceStep rounds a raw step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 || math.IsNaN(raw) || math.IsInf(raw, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	switch m := raw / p; {
	case m <= 1:
		return p
	case m <= 2:
		return 2 * p
	case m <= 5:
		return 5 * p
	}
	return 10 * p
}

// num formats a tick or tooltip number briefly.
func num(x float64) string {
	a := math.Abs(x)
	switch {
	case x == 0:
		return "0"
	case a >= 1e5 || a < 1e-3:
		return strconv.FormatFloat(x, 'g', 3, 64)
	}
	s := strconv.FormatFloat(x, 'g', 4, 64)
	if strings.ContainsRune(s, 'e') {
		s = strconv.FormatFloat(math.Round(x), 'f', 0, 64)
	}
	return s
}

// frame is a plot area inside a canvas, with margins for the axes.
type frame struct {
	x0, y0, x1, y1 float64 // plot area: left, top, right, bottom
}

// axes draws the x axis (bottom) and y axis (left) with ticks, grid
// lines and labels.
func (c *canvas) axes(fr frame, xs, ys scale, xlabel, ylabel string, xticks []tick) {
	if xticks == nil {
		xticks = xs.ticks(8)
	}
	c.raw(`<g class="axis">`)
	for _, t := range ys.ticks(5) {
		y := ys.at(t.v)
		c.line(fr.x0, y, fr.x1, y, "grid")
		c.text(fr.x0-6, y+4, "end", "tick", t.label)
	}
	for _, t := range xticks {
		x := xs.at(t.v)
		c.line(x, fr.y1, x, fr.y1+4, "tickmark")
		c.text(x, fr.y1+16, "middle", "tick", t.label)
	}
	c.line(fr.x0, fr.y1, fr.x1, fr.y1, "domain")
	c.line(fr.x0, fr.y0, fr.x0, fr.y1, "domain")
	c.text((fr.x0+fr.x1)/2, fr.y1+32, "middle", "label", xlabel)
	fmt.Fprintf(&c.b, `<text class="label" transform="translate(%s %s) rotate(-90)" text-anchor="middle">%s</text>`,
		f(fr.x0-46), f((fr.y0+fr.y1)/2), esc(ylabel))
	c.raw(`</g>`)
}

// viridis returns the colour at t in [0, 1] of the viridis map: 0 is dark
// purple, 1 yellow.
func viridis(t float64) string {
	stops := [...][3]float64{
		{68, 1, 84}, {72, 40, 120}, {62, 74, 137}, {49, 104, 142}, {38, 130, 142},
		{31, 158, 137}, {53, 183, 121}, {110, 206, 88}, {181, 222, 43}, {253, 231, 37},
	}
	t = math.Max(0, math.Min(1, t))
	x := t * float64(len(stops)-1)
	i := int(x)
	if i >= len(stops)-1 {
		i = len(stops) - 2
	}
	u := x - float64(i)
	var rgb [3]int
	for k := range 3 {
		rgb[k] = int(math.Round(stops[i][k] + u*(stops[i+1][k]-stops[i][k])))
	}
	return fmt.Sprintf("#%02x%02x%02x", rgb[0], rgb[1], rgb[2])
}
