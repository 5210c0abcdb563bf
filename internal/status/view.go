package status

import (
	"cmp"
	"context"
	"encoding/json"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/soma-hpc/soma/study"
)

// Options configure Load.
type Options struct {
	// Top is how many of the best done trials View.Top holds (0: none).
	Top int
	// All fills View.Trials with every trial's latest attempt.
	All bool
}

// View is what soma status shows of one study, read out of the folder at
// one moment. Its JSON form is the "studies[]" element of JSONShape.
type View struct {
	Name      string `json:"name"`
	Direction string `json:"direction"`
	Metric    string `json:"metric"`
	Sampler   string `json:"sampler"`
	Pruner    string `json:"pruner"`
	Seed      uint64 `json:"seed"`
	Budget    int    `json:"budget"`
	// Changes are the budget's changes (soma extend), oldest first.
	Changes    []Change `json:"changes"`
	MaxRetries int      `json:"max_retries"`
	LeaseS     float64  `json:"lease_s"`
	Params     []Param  `json:"params"`
	// Now is the file-server time the view was read at.
	Now    time.Time `json:"now"`
	Counts Counts    `json:"counts"`
	Best   *Row      `json:"best"`
	// Front summarises the Pareto front of a study with several
	// objectives (nil otherwise, and before any trial is done).
	Front    *FrontSummary `json:"front,omitempty"`
	Pace     Pace          `json:"pace"`
	Machines []Machine     `json:"machines"`
	Top      []Row         `json:"top"`
	Running  []Row         `json:"running"`
	// Trials is every trial's latest attempt, by number (Options.All).
	Trials []Row `json:"trials,omitempty"`
	// Problems has one line per record that could not be read.
	Problems []string `json:"problems"`
	// Foreign has one line per name in the study's trial and pack
	// folders that is not one of its records (study.ForeignError): never
	// run, retried or counted.
	Foreign []string `json:"foreign"`
	// Packs is the number of packs that hold ended trials.
	Packs int `json:"packs"`
	// LastActivity is the newest record time (nil: no trial yet).
	LastActivity *time.Time `json:"last_activity"`

	objectives int      // the spec's number of objectives
	goals      []string // with several: "minimize error", one per metric
}

// FrontSummary is the size and hypervolume of a study's Pareto front.
type FrontSummary struct {
	Metrics []string `json:"metrics"`
	Size    int      `json:"size"`
	// Hypervolume is the volume the front dominates up to Reference:
	// per metric, the worst done score pushed a tenth of the metric's
	// range (of done scores) further, so that no front trial adds nothing.
	Hypervolume float64   `json:"hypervolume"`
	Reference   []float64 `json:"reference"`
}

// frontSummary computes the FrontSummary of the done trials of snap.
func frontSummary(spec *study.Spec, snap *study.Snapshot) *FrontSummary {
	dirs := spec.Directions
	front := study.ParetoFront(snap.Trials, dirs)
	if len(front) == 0 {
		return nil
	}
	ref := make([]float64, len(dirs))
	for i, d := range dirs {
		worst, best := math.NaN(), math.NaN()
		for _, r := range snap.Trials {
			if r.State != study.StateDone || len(r.Scores) != len(dirs) {
				continue
			}
			x := r.Scores[i]
			if math.IsNaN(worst) || d.Better(worst, x) {
				worst = x
			}
			if math.IsNaN(best) || d.Better(x, best) {
				best = x
			}
		}
		margin := math.Abs(worst-best) / 10
		if margin == 0 {
			margin = max(math.Abs(worst)/10, 1)
		}
		if d == study.Maximize {
			margin = -margin
		}
		ref[i] = worst + margin
	}
	pts := make([][]float64, len(front))
	for i, r := range front {
		pts[i] = r.Scores
	}
	return &FrontSummary{Metrics: spec.Metrics, Size: len(front), Hypervolume: study.Hypervolume(pts, dirs, ref), Reference: ref}
}

// Change is one change of a study's budget: a newer version of its spec.
type Change struct {
	Version int       `json:"version"`
	From    int       `json:"from"`
	Budget  int       `json:"budget"`
	Time    time.Time `json:"time"`
	By      string    `json:"by"`
}

// changes lists st's budget changes.
func changes(st *study.Study) []Change {
	out := []Change{}
	from := st.Spec().Budget
	vs := st.Versions()
	if len(vs) > 0 {
		// The budget as created: the spec before its first version.
		from = st.CreatedBudget()
	}
	for _, v := range vs {
		out = append(out, Change{Version: v.Number, From: from, Budget: v.Budget, Time: v.Time, By: v.Who.String()})
		from = v.Budget
	}
	return out
}

// Param is one knob of the study's space.
type Param struct {
	Name    string   `json:"name"`
	Kind    string   `json:"kind"` // int, float, choice, fixed
	Low     float64  `json:"low"`
	High    float64  `json:"high"`
	Log     bool     `json:"log"`
	Choices []string `json:"choices"`
}

// Counts counts trials by the state of their latest attempt.
type Counts struct {
	Total       int `json:"total"`
	Done        int `json:"done"`
	Running     int `json:"running"`
	Pruned      int `json:"pruned"`
	Failed      int `json:"failed"`
	Interrupted int `json:"interrupted"`
	Stale       int `json:"stale"`
	// Ended counts the trials that will never run again: done, pruned,
	// and failed with no retry left.
	Ended int `json:"ended"`
	// Corrupt counts records that could not be read (never results);
	// Foreign counts the names in the trial and pack folders that are not
	// the study's records (View.Foreign lists them).
	Corrupt int `json:"corrupt"`
	Foreign int `json:"foreign"`
}

// Pace is how fast the study ends trials and when it will reach its
// budget.
//
// Rate is the number of trials ended in the last hour (or since the first
// trial started, when that is less than an hour ago), per hour. When no
// trial ended in that window it is the average over the study's whole
// life. ETA is Remaining divided by Rate, from Now; it is null when the
// rate is unknown, or when nothing runs and nothing ended in the window
// (the study is idle: no runner is working on it).
type Pace struct {
	TrialsPerHour *float64   `json:"trials_per_hour"`
	Basis         string     `json:"basis"` // "last hour", "since start", "all time", "finished", "no trial ended yet"
	Remaining     int        `json:"remaining"`
	ETASeconds    *float64   `json:"eta_s"`
	ETA           *time.Time `json:"eta"`
	Idle          bool       `json:"idle"`
}

// Machine is one host that ran trials of the study.
type Machine struct {
	Host     string    `json:"host"`
	Running  int       `json:"running"`
	Stale    int       `json:"stale"`
	Trials   int       `json:"trials"`
	Jobs     []string  `json:"jobs"` // Slurm jobs of its running attempts
	LastSeen time.Time `json:"last_seen"`
	AgoS     float64   `json:"ago_s"`
}

// Who is the process that ran an attempt.
type Who struct {
	Host string `json:"host"`
	PID  int    `json:"pid"`
	Job  string `json:"job"`
}

// Row is one trial attempt.
type Row struct {
	Trial    int      `json:"trial"`
	Attempt  int      `json:"attempt"`
	State    string   `json:"state"`
	Score    *float64 `json:"score"`
	Value    *float64 `json:"value"`
	LastStep int64    `json:"last_step"`
	// Point is the knob values as a JSON object, numbers for int and
	// float knobs and strings for choices (numbers when every option is
	// one).
	Point     json.RawMessage `json:"point"`
	PointText string          `json:"point_text"`
	Who       Who             `json:"who"`
	Start     *time.Time      `json:"start"`
	Time      time.Time       `json:"time"`
	// DurationS is Time−Start for an ended attempt, Now−Start otherwise.
	DurationS float64 `json:"duration_s"`
	// AgeS is Now−Time: how long ago the attempt last wrote (heartbeat).
	AgeS     float64 `json:"age_s"`
	Failures int     `json:"failures"`
	Beat     int64   `json:"beat"`
}

// Load reads one study and computes its view: one snapshot of the study
// (study.Study.Trials), plus one listing of its packs. It reads no blob
// beyond the spec.
func Load(ctx context.Context, s *Store, st *study.Study, o Options) (*View, error) {
	snap, err := st.Trials(ctx)
	if err != nil {
		return nil, err
	}
	packs, err := s.Children(ctx, "study/"+st.Name()+"/pack")
	if err != nil {
		return nil, err
	}
	v := FromSnapshot(st, snap, o)
	v.Packs = len(packs)
	return v, nil
}

// FromSnapshot computes the view of st from a snapshot of it (Packs is
// left zero).
func FromSnapshot(st *study.Study, snap *study.Snapshot, o Options) *View {
	spec := st.Spec()
	now := snap.Now
	v := &View{
		Name:       st.Name(),
		Direction:  st.Direction().String(),
		Metric:     spec.Metric,
		Sampler:    spec.Sampler.Name,
		Pruner:     spec.Pruner.Name,
		Seed:       spec.Seed,
		Budget:     st.Limit(),
		Changes:    changes(st),
		MaxRetries: spec.MaxRetries,
		LeaseS:     st.Grace().Seconds(),
		Params:     params(st.Space()),
		Now:        now,
		Machines:   []Machine{},
		Top:        []Row{},
		Running:    []Row{},
		Problems:   []string{},
		Foreign:    []string{},
	}
	c := &v.Counts
	c.Total = len(snap.Trials)
	c.Corrupt = len(snap.Corrupt)
	c.Foreign = len(snap.Foreign)
	for _, e := range snap.Corrupt {
		v.Problems = append(v.Problems, oneLine(e.Error()))
	}
	for _, e := range snap.Foreign {
		v.Foreign = append(v.Foreign, oneLine(e.Error()))
	}
	rows := make(map[int]Row) // rows made so far, by trial
	row := func(r *study.Record) Row {
		if x, ok := rows[r.Number]; ok {
			return x
		}
		x := makeRow(st.Space(), r, now, spec.MaxRetries)
		rows[r.Number] = x
		return x
	}
	running, done := v.count(snap, spec.MaxRetries)
	v.Machines = machines(snap.Trials, now)

	v.objectives = spec.Objectives()
	for i, d := range spec.Directions {
		v.goals = append(v.goals, d.String()+" "+spec.Metrics[i])
	}
	if v.objectives > 1 {
		v.Front = frontSummary(spec, snap)
	}
	dir := st.Direction()
	if dir != study.DirectionUnknown && len(done) > 0 {
		// Best first; the lower trial number among equals, as
		// study.Snapshot.Best does.
		better := func(a, b int) int {
			x, y := snap.Trials[a].Score, snap.Trials[b].Score
			switch {
			case dir.Better(x, y):
				return -1
			case dir.Better(y, x):
				return 1
			}
			return cmp.Compare(snap.Trials[a].Number, snap.Trials[b].Number)
		}
		best := bestN(done, max(1, o.Top), better)
		b := row(&snap.Trials[best[0]])
		v.Best = &b
		for _, i := range best[:min(o.Top, len(best))] {
			v.Top = append(v.Top, row(&snap.Trials[i]))
		}
	}
	for _, i := range running {
		v.Running = append(v.Running, row(&snap.Trials[i]))
	}
	if o.All {
		v.Trials = make([]Row, 0, len(snap.Trials))
		for i := range snap.Trials {
			v.Trials = append(v.Trials, row(&snap.Trials[i]))
		}
	}
	v.Pace = pace(snap, spec.MaxRetries, v.Budget, c.Ended, c.Running)
	return v
}

// count fills v's counts and last activity from snap, and returns the
// indices into snap.Trials of the running (and stale) trials and of the
// done ones with a score.
func (v *View) count(snap *study.Snapshot, maxRetries int) (running, done []int) {
	c := &v.Counts
	var last time.Time
	for i := range snap.Trials {
		r := &snap.Trials[i]
		switch r.State {
		case study.StateDone:
			c.Done++
			if r.HasScore {
				done = append(done, i)
			}
		case study.StateRunning:
			c.Running++
			running = append(running, i)
		case study.StatePruned:
			c.Pruned++
		case study.StateFailed:
			c.Failed++
		case study.StateInterrupted:
			c.Interrupted++
		case study.StateStale:
			c.Stale++
			running = append(running, i)
		}
		if r.Final(maxRetries) {
			c.Ended++
		}
		if r.Time.After(last) {
			last = r.Time
		}
	}
	if !last.IsZero() {
		v.LastActivity = &last
	}
	return running, done
}

// machines groups trials by the host that ran them, most recently seen
// first.
func machines(trials []study.Record, now time.Time) []Machine {
	hosts := make(map[string]*Machine)
	for i := range trials {
		r := &trials[i]
		h := r.Who.Host
		if h == "" {
			h = "?"
		}
		m := hosts[h]
		if m == nil {
			m = &Machine{Host: h, Jobs: []string{}}
			hosts[h] = m
		}
		m.Trials++
		if r.Time.After(m.LastSeen) {
			m.LastSeen = r.Time
		}
		switch r.State {
		case study.StateRunning:
			m.Running++
		case study.StateStale:
			m.Stale++
		}
		if r.State == study.StateRunning && r.Who.Job != "" && !slices.Contains(m.Jobs, r.Who.Job) {
			m.Jobs = append(m.Jobs, r.Who.Job)
		}
	}
	out := []Machine{}
	for _, m := range hosts {
		m.AgoS = seconds(now.Sub(m.LastSeen))
		slices.Sort(m.Jobs)
		out = append(out, *m)
	}
	slices.SortFunc(out, func(a, b Machine) int {
		if c := b.LastSeen.Compare(a.LastSeen); c != 0 {
			return c
		}
		return strings.Compare(a.Host, b.Host)
	})
	return out
}

// bestN returns the n first of idx in the order of cmp, sorted. It
// sorts everything only when n is a large share of idx; otherwise it
// keeps the n best seen so far (a study of 100k trials, top 10).
func bestN(idx []int, n int, cmp func(a, b int) int) []int {
	if n*16 >= len(idx) {
		out := slices.Clone(idx)
		slices.SortFunc(out, cmp)
		return out[:min(n, len(out))]
	}
	top := make([]int, 0, n+1)
	for _, i := range idx {
		if len(top) == n && cmp(i, top[n-1]) >= 0 {
			continue
		}
		at, _ := slices.BinarySearchFunc(top, i, cmp)
		top = slices.Insert(top, at, i)
		if len(top) > n {
			top = top[:n]
		}
	}
	return top
}

// pace computes Pace (see its doc for the rule).
func pace(snap *study.Snapshot, maxRetries, budget, ended, running int) Pace {
	now := snap.Now
	p := Pace{Remaining: max(0, budget-ended)}
	var first, lastEnd time.Time
	recent := 0
	for i := range snap.Trials {
		r := &snap.Trials[i]
		st := r.Start
		if st.IsZero() {
			st = r.Time
		}
		if first.IsZero() || st.Before(first) {
			first = st
		}
		if !r.Final(maxRetries) {
			continue
		}
		if r.Time.After(lastEnd) {
			lastEnd = r.Time
		}
		if now.Sub(r.Time) <= time.Hour {
			recent++
		}
	}
	perHour := func(n int, d time.Duration) *float64 {
		if n == 0 || d <= 0 {
			return nil
		}
		x := float64(n) / d.Hours()
		return &x
	}
	switch {
	case ended == 0:
		p.Basis = "no trial ended yet"
		p.Idle = running == 0
		return p
	case p.Remaining == 0:
		p.Basis = "finished"
		p.TrialsPerHour = perHour(ended, lastEnd.Sub(first))
		zero := 0.0
		p.ETASeconds = &zero
		return p
	case recent > 0 && now.Sub(first) < time.Hour:
		p.Basis = "since start"
		p.TrialsPerHour = perHour(recent, now.Sub(first))
	case recent > 0:
		p.Basis = "last hour"
		p.TrialsPerHour = perHour(recent, time.Hour)
	default:
		p.Basis = "all time"
		p.TrialsPerHour = perHour(ended, lastEnd.Sub(first))
		p.Idle = running == 0
	}
	if p.TrialsPerHour != nil && !p.Idle {
		s := float64(p.Remaining) / *p.TrialsPerHour * 3600
		eta := now.Add(time.Duration(s * float64(time.Second)))
		p.ETASeconds, p.ETA = &s, &eta
	}
	return p
}

// makeRow converts a record.
func makeRow(sp *study.Space, r *study.Record, now time.Time, maxRetries int) Row {
	x := Row{
		Trial:     r.Number,
		Attempt:   r.Attempt,
		State:     string(r.State),
		LastStep:  r.LastStep,
		PointText: r.PointText,
		Who:       Who{Host: r.Who.Host, PID: r.Who.PID, Job: r.Who.Job},
		Time:      r.Time,
		AgeS:      seconds(now.Sub(r.Time)),
		Failures:  r.Failures,
		Beat:      r.Beat,
	}
	if r.HasScore {
		s := r.Score
		x.Score = &s
	}
	if r.HasValue {
		val := r.Value
		x.Value = &val
	}
	if b, err := sp.PointJSON(r.Point); err == nil {
		x.Point = b
	} else {
		x.Point = json.RawMessage("{}")
	}
	if !r.Start.IsZero() {
		s := r.Start
		x.Start = &s
		end := now
		if r.Final(maxRetries) || r.State == study.StateInterrupted || r.State == study.StateFailed || r.State == study.StateStale {
			end = r.Time
		}
		x.DurationS = seconds(end.Sub(r.Start))
	}
	return x
}

// params describes a space's knobs.
func params(sp *study.Space) []Param {
	var out []Param
	for _, k := range sp.Knobs() {
		p := Param{Name: k.Name, Kind: k.Kind.String(), Low: k.Low, High: k.High, Log: k.Log, Choices: k.Choices}
		if p.Choices == nil {
			p.Choices = []string{}
		}
		if k.Kind == study.KnobFixed {
			p.Choices = []string{k.Value}
		}
		out = append(out, p)
	}
	return out
}

// seconds returns d in seconds, never negative (clocks of two file
// servers, or a record written after the snapshot's probe).
func seconds(d time.Duration) float64 { return max(0, d.Seconds()) }

// oneLine folds an error message onto one line.
func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	return strings.Join(strings.Fields(s), " ")
}
