// Package report writes soma report: one self-contained HTML file that
// shows a study the way a dashboard server would, with nothing to serve.
// The plots are inline SVG drawn here (no JavaScript is needed to see
// them); a small inline script only highlights a trial across the plots
// on hover and records, for tests, any error the page met. The page
// loads nothing from the network: its Content-Security-Policy forbids
// it.
//
// Plots:
//
//   - history: each trial's score by trial number, with the best so far;
//     pruned trials at their last value (not comparable), failed ones
//     marked on the axis;
//   - curves: every trial's intermediate values by step, pruned trials
//     marked where they stopped;
//   - params: each knob against the score, one panel per knob;
//   - parallel: parallel coordinates of the knobs and the score.
//
// Colours rank the done trials: dark purple is the best, yellow the
// worst.
package report

import (
	"context"
	"io"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/soma-hpc/soma/internal/status"
	"github.com/soma-hpc/soma/study"
)

// Options configure Write.
type Options struct {
	// Title of the page (default "soma report: STUDY").
	Title string
	// Source names where the study was read from (shown in the footer).
	Source string
	// MaxMarks caps the markers drawn per plot (0: 20000); the best
	// trials are always among them and the page says how many are shown.
	MaxMarks int
	// MaxCurves caps the curves drawn (0: 400).
	MaxCurves int
}

// Info says what a report holds.
type Info struct {
	Trials int
	// Plots names the plots drawn with at least one mark, of history,
	// curves, params and parallel.
	Plots  []string
	Curves int // curves drawn
	Bytes  int
}

// trial is one trial's latest attempt, as the plots need it.
type trial struct {
	n, attempt int
	state      study.State
	score      float64
	hasScore   bool
	value      float64
	hasValue   bool
	lastStep   int64
	x          []float64 // knob values: the number, or a choice's index
	text       []string  // knob values as text
	curve      []study.Step
	scores     []float64 // several objectives: one per metric (done)
	rank       float64   // 0 best … 1 worst among done trials with a score
	done       bool      // done with a score
}

// data is everything the page shows.
type data struct {
	view   *status.View
	knobs  []study.Knob
	dir    study.Direction
	metric string
	// Several objectives: their names and directions (nil otherwise).
	metrics []string
	dirs    []study.Direction
	trials  []trial // by number
	done    []int   // indices of done trials, best first
	o       Options
	now     time.Time
}

// Write reads st once with its curves (study.Study.Curves: one blob read
// per trial whose curve this Study has not read before) and writes the
// report to w.
func Write(ctx context.Context, w io.Writer, st *study.Study, o Options) (Info, error) {
	snap, err := st.Curves(ctx)
	if err != nil {
		return Info{}, err
	}
	d := build(st, snap, o)
	page, info := d.render()
	info.Bytes = len(page)
	_, err = io.WriteString(w, page)
	return info, err
}

func build(st *study.Study, snap *study.Snapshot, o Options) *data {
	if o.MaxMarks <= 0 {
		o.MaxMarks = 20000
	}
	if o.MaxCurves <= 0 {
		o.MaxCurves = 400
	}
	if o.Title == "" {
		o.Title = "soma report: " + st.Name()
	}
	d := &data{
		view:    status.FromSnapshot(st, snap, status.Options{Top: 15}),
		knobs:   st.Space().Knobs(),
		dir:     st.Direction(),
		metric:  st.Spec().Metric,
		metrics: st.Spec().Metrics,
		dirs:    st.Spec().Directions,
		o:       o,
		now:     snap.Now,
	}
	if d.metric == "" {
		d.metric = "score"
	}
	sp := st.Space()
	for i := range snap.Trials {
		r := &snap.Trials[i]
		t := trial{
			n: r.Number, attempt: r.Attempt, state: r.State,
			score: r.Score, hasScore: r.HasScore, value: r.Value, hasValue: r.HasValue,
			lastStep: r.LastStep, curve: r.Curve, scores: r.Scores,
		}
		t.done = r.State == study.StateDone && r.HasScore
		for j, kv := range sp.Values(r.Point) {
			t.text = append(t.text, kv.Text)
			t.x = append(t.x, knobValue(d.knobs[j], kv.Text))
		}
		d.trials = append(d.trials, t)
		if t.done {
			d.done = append(d.done, len(d.trials)-1)
		}
	}
	slices.SortStableFunc(d.done, func(a, b int) int {
		x, y := d.trials[a].score, d.trials[b].score
		switch {
		case d.dir.Better(x, y):
			return -1
		case d.dir.Better(y, x):
			return 1
		}
		return d.trials[a].n - d.trials[b].n
	})
	for k, i := range d.done {
		switch {
		case d.dir == study.DirectionUnknown:
			d.trials[i].rank = 0.5 // no score is better than another
		case len(d.done) > 1:
			d.trials[i].rank = float64(k) / float64(len(d.done)-1)
		}
	}
	return d
}

// knobValue returns a knob's value as a number: the value of an int or
// float knob, the index of a choice, 0 for a fixed knob.
func knobValue(k study.Knob, text string) float64 {
	switch k.Kind {
	case study.KnobInt, study.KnobFloat:
		x, err := strconv.ParseFloat(text, 64)
		if err != nil {
			return math.NaN()
		}
		return x
	case study.KnobChoice:
		if i := slices.Index(k.Choices, text); i >= 0 {
			return float64(i)
		}
		return math.NaN()
	}
	return 0
}

// colour returns the colour of a trial: its rank among the done trials,
// grey for the others.
func (t *trial) colour() string {
	if !t.done {
		return "#9a9a9a"
	}
	return viridis(t.rank * 0.92) // stop short of the palest yellow
}

// label is a trial's tooltip.
func (d *data) label(t *trial) string {
	s := "trial " + strconv.Itoa(t.n)
	if t.attempt > 0 {
		s += " (attempt " + strconv.Itoa(t.attempt) + ")"
	}
	s += " · " + string(t.state)
	switch {
	case t.done:
		s += " · " + d.metric + " " + num(t.score)
	case t.state == study.StatePruned && t.hasValue:
		s += " at step " + strconv.FormatInt(t.lastStep, 10) + " (value " + num(t.value) + ")"
	}
	for j, k := range d.knobs {
		s += " · " + k.Name + "=" + shortText(k, t.text[j])
	}
	return s
}

func shortText(k study.Knob, text string) string {
	if k.Kind == study.KnobFloat {
		if x, err := strconv.ParseFloat(text, 64); err == nil {
			return num(x)
		}
	}
	return text
}
