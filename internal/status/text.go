package status

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// TextOptions configure WriteText.
type TextOptions struct {
	// Verbose lists every problem and the files the view opened (Opened).
	Verbose bool
	Opened  *Opens
	// Clock, when not "server", is printed as a warning (Store.Clock).
	ClockNote string
	// MaxMachines caps the machines listed (0: 10).
	MaxMachines int
}

// WriteText writes the human view of one study: a header (settings,
// counts, best, pace, machines), then the best trials and the running
// ones as aligned tables, or every trial when the view holds them.
func WriteText(w io.Writer, v *View, o TextOptions) error {
	var b bytes.Buffer
	metric := v.Metric
	if metric == "" {
		metric = "score"
	}
	goal := v.Direction + " " + metric
	switch {
	case len(v.goals) > 1:
		goal = strings.Join(v.goals, ", ")
	case v.Direction == "unknown":
		goal = "no direction (" + metric + ")"
	}
	fmt.Fprintf(&b, "study    %s · %s · %s sampler · %s pruner · seed %d · budget %d · retries %d\n",
		v.Name, goal, v.Sampler, v.Pruner, v.Seed, v.Budget, v.MaxRetries)
	for _, ch := range v.Changes {
		fmt.Fprintf(&b, "budget   %d → %d at %s by %s (soma extend; spec version %d)\n",
			ch.From, ch.Budget, ch.Time.UTC().Format("2006-01-02 15:04:05Z"), ch.By, ch.Version)
	}
	c := v.Counts
	fmt.Fprintf(&b, "trials   %d of %d ended · %d done · %d pruned · %d failed · %d interrupted · %d running · %d stale",
		c.Ended, v.Budget, c.Done, c.Pruned, c.Failed, c.Interrupted, c.Running, c.Stale)
	if c.Corrupt > 0 {
		fmt.Fprintf(&b, " · %d corrupt", c.Corrupt)
	}
	b.WriteByte('\n')
	switch {
	case v.Front != nil:
		fmt.Fprintf(&b, "front    %d trials on the Pareto front of %s (soma best lists them) · hypervolume %s up to %s\n",
			v.Front.Size, strings.Join(v.Front.Metrics, ", "), fnum(v.Front.Hypervolume, 6), fnums(v.Front.Reference))
	case v.Best != nil:
		fmt.Fprintf(&b, "best     %s %s (trial %s)  %s\n", metric, fnum(*v.Best.Score, 6), bestLabel(*v.Best), shortPoint(v, *v.Best))
	case v.Direction == "unknown" && v.objectives > 1:
		b.WriteString("front    - (no trial done yet)\n")
	case v.Direction == "unknown":
		b.WriteString("best     - (the study has no direction, so no score is best)\n")
	default:
		b.WriteString("best     - (no trial done yet)\n")
	}
	b.WriteString("pace     " + paceText(v) + "\n")
	writeMachines(&b, v, o)
	if c.Corrupt > 0 || c.Foreign > 0 {
		writeProblems(&b, v, o.Verbose)
	}
	if o.ClockNote != "" {
		fmt.Fprintf(&b, "warning  %s\n", o.ClockNote)
	}
	if v.Trials != nil {
		fmt.Fprintf(&b, "\nall %d trials\n", len(v.Trials))
		writeRows(&b, v, v.Trials, metric)
	} else {
		if len(v.Top) > 0 {
			fmt.Fprintf(&b, "\nbest %d of %d done\n", len(v.Top), c.Done)
			writeRows(&b, v, v.Top, metric)
		}
		if len(v.Running) > 0 {
			fmt.Fprintf(&b, "\nrunning %d", c.Running)
			if c.Stale > 0 {
				fmt.Fprintf(&b, ", stale %d (no heartbeat for %s: the process died or lost the folder; the trial will be retried)", c.Stale, dur(v.LeaseS))
			}
			b.WriteByte('\n')
			writeRows(&b, v, v.Running, metric)
		}
	}
	if o.Verbose {
		fmt.Fprintf(&b, "\npacks    %d", v.Packs)
		if v.Packs == 0 && c.Ended >= 256 {
			b.WriteString(" (soma gc packs ended trials, so that status reads a few files instead of one per trial)")
		}
		b.WriteByte('\n')
		if o.Opened != nil {
			fmt.Fprintf(&b, "read     %s\n", o.Opened)
		}
	}
	_, err := w.Write(b.Bytes())
	return err
}

func paceText(v *View) string {
	p := v.Pace
	switch {
	case p.Basis == "finished":
		s := "finished"
		if p.TrialsPerHour != nil {
			s += fmt.Sprintf(" (%s trials/h on average)", fnum(*p.TrialsPerHour, 3))
		}
		return s
	case p.TrialsPerHour == nil:
		if p.Idle {
			return "idle: no trial running or ended yet"
		}
		return "no trial ended yet; no rate or ETA"
	}
	s := fmt.Sprintf("%s trials/h (%s)", fnum(*p.TrialsPerHour, 3), p.Basis)
	switch {
	case p.Idle:
		s += fmt.Sprintf(" · idle: nothing running, %d trials left (start soma-trial to go on)", p.Remaining)
	case p.ETASeconds != nil:
		s += fmt.Sprintf(" · %d left · ETA %s (%s)", p.Remaining, dur(*p.ETASeconds), p.ETA.UTC().Format("2006-01-02 15:04 UTC"))
	}
	return s
}

func writeMachines(b *bytes.Buffer, v *View, o TextOptions) {
	if len(v.Machines) == 0 {
		b.WriteString("machines none yet\n")
		return
	}
	limit := o.MaxMachines
	if limit <= 0 {
		limit = 10
	}
	working := 0
	for _, m := range v.Machines {
		if m.Running > 0 {
			working++
		}
	}
	fmt.Fprintf(b, "machines %d seen, %d working now\n", len(v.Machines), working)
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  HOST\tRUNNING\tSTALE\tTRIALS\tJOBS\tLAST SEEN")
	for i, m := range v.Machines {
		if i == limit && !o.Verbose {
			fmt.Fprintf(tw, "  … %d more (--verbose or --json lists them)\t\t\t\t\t\n", len(v.Machines)-limit)
			break
		}
		jobs := strings.Join(m.Jobs, ",")
		if jobs == "" {
			jobs = "-"
		} else if len(jobs) > 40 {
			jobs = jobs[:37] + "…"
		}
		fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%s\t%s ago\n", m.Host, m.Running, m.Stale, m.Trials, jobs, dur(m.AgoS))
	}
	tw.Flush()
}

func writeProblems(b *bytes.Buffer, v *View, verbose bool) {
	c := v.Counts
	var parts []string
	if c.Corrupt > 0 {
		parts = append(parts, fmt.Sprintf("%d corrupt records (counted, never results)", c.Corrupt))
	}
	if c.Foreign > 0 {
		parts = append(parts, fmt.Sprintf("%d foreign names among the records (never run or counted)", c.Foreign))
	}
	fmt.Fprintf(b, "problems %s\n", strings.Join(parts, " · "))
	all := append(slices.Clip(v.Problems), v.Foreign...)
	show := all
	if !verbose && len(show) > 3 {
		show = show[:3]
	}
	for _, p := range show {
		fmt.Fprintf(b, "  %s\n", p)
	}
	if len(show) < len(all) {
		fmt.Fprintf(b, "  … %d more (--verbose lists them)\n", len(all)-len(show))
	}
}

// writeRows writes trials as an aligned table, one column per knob.
func writeRows(b *bytes.Buffer, v *View, rows []Row, metric string) {
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	head := []string{"  TRIAL", "STATE", strings.ToUpper(metric), "STEP", "TIME", "LAST BEAT", "WHO"}
	for _, p := range v.Params {
		head = append(head, p.Name)
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, r := range rows {
		score := "-"
		switch {
		case r.Score != nil:
			score = fnum(*r.Score, 6)
		case r.Value != nil:
			score = "(" + fnum(*r.Value, 6) + ")"
		}
		step := "-"
		if r.LastStep >= 0 {
			step = strconv.FormatInt(r.LastStep, 10)
		}
		beat := "-"
		if r.State == "running" || r.State == "stale" {
			beat = dur(r.AgeS) + " ago"
		}
		who := r.Who.Host
		if r.Who.Job != "" {
			who += " job " + r.Who.Job
		}
		if who == "" {
			who = "?"
		}
		cols := []string{"  " + trialLabel(r), r.State, score, step, dur(r.DurationS), beat, who}
		cols = append(cols, pointCells(v, r)...)
		fmt.Fprintln(tw, strings.Join(cols, "\t"))
	}
	tw.Flush()
}

// pointCells returns the knob values of r, in knob order, shortened.
func pointCells(v *View, r Row) []string {
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(r.Point))
	dec.UseNumber()
	_ = dec.Decode(&m)
	out := make([]string, len(v.Params))
	for i, p := range v.Params {
		switch x := m[p.Name].(type) {
		case json.Number:
			f, err := x.Float64()
			if err != nil || p.Kind == "int" {
				out[i] = x.String()
			} else {
				out[i] = fnum(f, 4)
			}
		case string:
			out[i] = x
		default:
			out[i] = "?"
		}
	}
	return out
}

// trialLabel is "3", or "3 (attempt 1)" for a retry, as soma-trial's
// lines say it. (It was "3.1", which reads as a decimal; issue 16.)
func trialLabel(r Row) string {
	if r.Attempt == 0 {
		return strconv.Itoa(r.Trial)
	}
	return fmt.Sprintf("%d (attempt %d)", r.Trial, r.Attempt)
}

// bestLabel is trialLabel inside the best line's parentheses: "3, attempt 1".
func bestLabel(r Row) string {
	if r.Attempt == 0 {
		return strconv.Itoa(r.Trial)
	}
	return fmt.Sprintf("%d, attempt %d", r.Trial, r.Attempt)
}

// shortPoint returns r's point as "a=1.5 b=adam", numbers shortened.
func shortPoint(v *View, r Row) string {
	cells := pointCells(v, r)
	parts := make([]string, len(cells))
	for i, c := range cells {
		parts[i] = v.Params[i].Name + "=" + c
	}
	return strings.Join(parts, " ")
}

// fnum formats x with at most digits significant digits; numbers of
// more integer digits than that are rounded to an integer, and an
// exponent is used only below 1e-4 and from 1e9.
// fnums writes xs as "(a, b)" with fnum's 6 digits.
func fnums(xs []float64) string {
	t := make([]string, len(xs))
	for i, x := range xs {
		t[i] = fnum(x, 6)
	}
	return "(" + strings.Join(t, ", ") + ")"
}

func fnum(x float64, digits int) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return strconv.FormatFloat(x, 'g', -1, 64)
	}
	a := math.Abs(x)
	if a != 0 && (a < 1e-4 || a >= 1e9) {
		return strconv.FormatFloat(x, 'g', digits, 64)
	}
	s := strconv.FormatFloat(x, 'g', digits, 64)
	if strings.ContainsRune(s, 'e') {
		s = strconv.FormatFloat(math.Round(x), 'f', 0, 64)
	}
	return s
}

// dur formats seconds for people: 850ms, 42s, 3m12s, 2h05m, 3d4h.
func dur(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < time.Minute:
		return fmt.Sprintf("%.0fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
}

// WriteSummaries writes one line per study, for a root with several.
func WriteSummaries(w io.Writer, root string, views []*View) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%d studies in %s\n", len(views), root)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STUDY\tDIRECTION\tENDED\tDONE\tPRUNED\tFAILED\tRUNNING\tSTALE\tBEST\tPACE\tLAST ACTIVITY")
	for _, v := range views {
		c := v.Counts
		best := "-"
		if v.Best != nil {
			best = fnum(*v.Best.Score, 6) + " (#" + strconv.Itoa(v.Best.Trial) + ")"
		}
		pace := "-"
		switch {
		case v.Pace.Basis == "finished":
			pace = "finished"
		case v.Pace.Idle:
			pace = "idle"
		case v.Pace.ETASeconds != nil:
			pace = "ETA " + dur(*v.Pace.ETASeconds)
		}
		last := "-"
		if v.LastActivity != nil {
			last = dur(seconds(v.Now.Sub(*v.LastActivity))) + " ago"
		}
		extra := ""
		if c.Corrupt > 0 {
			extra = fmt.Sprintf(" (%d corrupt)", c.Corrupt)
		}
		if c.Foreign > 0 {
			extra += fmt.Sprintf(" (%d foreign)", c.Foreign)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s%s\n", v.Name, v.Direction, c.Ended, v.Budget,
			c.Done, c.Pruned, c.Failed, c.Running, c.Stale, best, pace, last, extra)
	}
	tw.Flush()
	b.WriteString("(soma status ROOT --study NAME shows one study in full)\n")
	_, err := w.Write(b.Bytes())
	return err
}
