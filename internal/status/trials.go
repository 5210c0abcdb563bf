package status

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/soma-hpc/soma/study"
)

// Trial export formats.
const (
	FormatCSV   = "csv"
	FormatJSON  = "json"
	FormatJSONL = "jsonl"
)

// TrialsOptions configure WriteTrials.
type TrialsOptions struct {
	// Format is FormatCSV, FormatJSON (one array) or FormatJSONL (one
	// object per line).
	Format string
	// Curves adds each attempt's reason and intermediate curve, at the
	// cost of one blob read per attempt.
	Curves bool
}

// TrialColumns documents the columns of soma trials, in order; every
// format has them all (JSON writes null where CSV leaves a cell empty).
// "params_<name>" is one column per knob, in knob order, after point;
// "score_<metric>" one per metric, for studies with several objectives.
const TrialColumns = `study          the study
trial          trial number
attempt        attempt number (a retry of a stale, interrupted or failed attempt counts up)
state          running, done, pruned, failed, interrupted or stale (a superseded running attempt reads stale)
score          final score (done) or last value (pruned); empty otherwise
value          last intermediate value; empty if none
last_step      last intermediate step; -1 if none
duration_s     seconds from start to the last write
start          when the attempt was taken (RFC 3339, file-server time)
time           its last write (heartbeat, report or end)
host           the machine that ran it
pid            its process id
job            its Slurm job ("123_4"), empty outside Slurm
failures       failed attempts of this trial before this one
beat           heartbeat counter
adopted_from   the attempt whose finished outcome this one copied; -1 if none
point          the point as name=value,...
params_<name>  one column per knob: a number for int and float knobs, text for choices; empty (JSON null) where a conditional knob is absent
score_<metric> with several objectives, one column per metric: that final score (done); empty otherwise
reason         (with --curves) why it stopped: the objective's error for a failed attempt
curve          (with --curves) the intermediate values, as JSON [[step, value], ...]`

// WriteTrials writes every attempt of st (superseded ones too), sorted by
// trial and attempt, in o.Format. Records that cannot be read are not
// written; they are returned, one error each, for the caller to report.
func WriteTrials(ctx context.Context, st *study.Study, w io.Writer, o TrialsOptions) ([]error, error) {
	switch o.Format {
	case FormatCSV, FormatJSON, FormatJSONL:
	default:
		return nil, fmt.Errorf("format %q: want csv, json or jsonl", o.Format)
	}
	recs, problems, err := st.Attempts(ctx, o.Curves)
	if err != nil {
		return nil, err
	}
	sp := st.Space()
	knobs := sp.Knobs()
	var metrics []string // several objectives only
	if st.Spec().Objectives() > 1 {
		metrics = st.Spec().Metrics
	}
	numeric := make([]bool, len(knobs))
	for i, k := range knobs {
		switch k.Kind {
		case study.KnobInt, study.KnobFloat:
			numeric[i] = true
		case study.KnobChoice:
			numeric[i] = allNumbers(k.Choices)
		case study.KnobFixed:
			numeric[i] = allNumbers([]string{k.Value})
		}
	}
	bw := bufio.NewWriterSize(w, 1<<16)
	if o.Format == FormatCSV {
		err = writeCSV(bw, st.Name(), sp, knobs, metrics, recs, o.Curves)
	} else {
		err = writeJSON(bw, st.Name(), sp, knobs, metrics, numeric, recs, o)
	}
	if err != nil {
		return problems, err
	}
	return problems, bw.Flush()
}

func header(knobs []study.Knob, metrics []string, curves bool) []string {
	h := []string{"study", "trial", "attempt", "state", "score", "value", "last_step", "duration_s", "start", "time",
		"host", "pid", "job", "failures", "beat", "adopted_from", "point"}
	for _, k := range knobs {
		h = append(h, "params_"+k.Name)
	}
	for _, m := range metrics {
		h = append(h, "score_"+m)
	}
	if curves {
		h = append(h, "reason", "curve")
	}
	return h
}

func durationS(r *study.Record) (float64, bool) {
	if r.Start.IsZero() {
		return 0, false
	}
	return max(0, r.Time.Sub(r.Start).Seconds()), true
}

func ftoa(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }

func writeCSV(w *bufio.Writer, name string, sp *study.Space, knobs []study.Knob, metrics []string, recs []study.Record, curves bool) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(header(knobs, metrics, curves)); err != nil {
		return err
	}
	row := make([]string, 0, 20+len(knobs))
	for i := range recs {
		r := &recs[i]
		row = row[:0]
		opt := func(x float64, ok bool) string {
			if !ok {
				return ""
			}
			return ftoa(x)
		}
		d, hasD := durationS(r)
		start := ""
		if !r.Start.IsZero() {
			start = r.Start.UTC().Format(time.RFC3339Nano)
		}
		row = append(row, name, strconv.Itoa(r.Number), strconv.Itoa(r.Attempt), string(r.State),
			opt(r.Score, r.HasScore), opt(r.Value, r.HasValue), strconv.FormatInt(r.LastStep, 10), opt(d, hasD),
			start, r.Time.UTC().Format(time.RFC3339Nano), r.Who.Host, strconv.Itoa(r.Who.PID), r.Who.Job,
			strconv.Itoa(r.Failures), strconv.FormatInt(r.Beat, 10), strconv.Itoa(r.AdoptedFrom), r.PointText)
		for _, kv := range sp.Values(r.Point) {
			row = append(row, kv.Text)
		}
		for j := range metrics {
			row = append(row, opt(scoreOf(r, j, len(metrics))))
		}
		if curves {
			row = append(row, r.Reason, string(curveJSON(nil, r.Curve)))
		}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// scoreOf returns score j of r's several (n) scores, if it has them.
func scoreOf(r *study.Record, j, n int) (float64, bool) {
	if len(r.Scores) != n {
		return 0, false
	}
	return r.Scores[j], true
}

func writeJSON(w *bufio.Writer, name string, sp *study.Space, knobs []study.Knob, metrics []string, numeric []bool, recs []study.Record, o TrialsOptions) error {
	keys := header(knobs, metrics, o.Curves)
	qkeys := make([][]byte, len(keys))
	for i, k := range keys {
		qkeys[i] = appendString(nil, k)
	}
	qname := appendString(nil, name)
	if o.Format == FormatJSON {
		w.WriteString("[")
	}
	buf := make([]byte, 0, 1024)
	for i := range recs {
		r := &recs[i]
		b := buf[:0]
		if o.Format == FormatJSON {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '\n')
		}
		col := 0
		key := func() {
			if col > 0 {
				b = append(b, ',')
			}
			b = append(b, qkeys[col]...)
			b = append(b, ':')
			col++
		}
		num := func(x float64, ok bool) {
			key()
			if !ok {
				b = append(b, "null"...)
				return
			}
			b = strconv.AppendFloat(b, x, 'g', -1, 64)
		}
		integer := func(n int64) {
			key()
			b = strconv.AppendInt(b, n, 10)
		}
		str := func(s string) {
			key()
			b = appendString(b, s)
		}
		b = append(b, '{')
		key()
		b = append(b, qname...)
		integer(int64(r.Number))
		integer(int64(r.Attempt))
		str(string(r.State))
		num(r.Score, r.HasScore)
		num(r.Value, r.HasValue)
		integer(r.LastStep)
		num(durationS(r))
		key()
		if r.Start.IsZero() {
			b = append(b, "null"...)
		} else {
			b = append(b, '"')
			b = r.Start.UTC().AppendFormat(b, time.RFC3339Nano)
			b = append(b, '"')
		}
		key()
		b = append(b, '"')
		b = r.Time.UTC().AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
		str(r.Who.Host)
		integer(int64(r.Who.PID))
		str(r.Who.Job)
		integer(int64(r.Failures))
		integer(r.Beat)
		integer(int64(r.AdoptedFrom))
		str(r.PointText)
		for j, kv := range sp.Values(r.Point) {
			key()
			switch {
			case kv.Absent:
				b = append(b, "null"...)
			case numeric[j] && kv.Text != "":
				b = append(b, kv.Text...)
			default:
				b = appendString(b, kv.Text)
			}
		}
		for j := range metrics {
			num(scoreOf(r, j, len(metrics)))
		}
		if o.Curves {
			str(r.Reason)
			key()
			b = curveJSON(b, r.Curve)
		}
		b = append(b, '}')
		if o.Format == FormatJSONL {
			b = append(b, '\n')
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
		buf = b
	}
	if o.Format == FormatJSON {
		if len(recs) > 0 {
			w.WriteString("\n")
		}
		w.WriteString("]\n")
	}
	return nil
}

// curveJSON appends a curve as [[step, value], ...].
func curveJSON(b []byte, c []study.Step) []byte {
	b = append(b, '[')
	for i, s := range c {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		b = strconv.AppendInt(b, s.Step, 10)
		b = append(b, ',')
		if math.IsNaN(s.Value) || math.IsInf(s.Value, 0) {
			b = append(b, "null"...)
		} else {
			b = strconv.AppendFloat(b, s.Value, 'g', -1, 64)
		}
		b = append(b, ']')
	}
	return append(b, ']')
}

// appendString appends s as a JSON string.
func appendString(b []byte, s string) []byte {
	plain := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf || c == '<' || c == '>' || c == '&' {
			plain = false
			break
		}
	}
	if plain {
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"')
	}
	q, _ := json.Marshal(s)
	return append(b, q...)
}

// allNumbers reports whether every text is a JSON number.
func allNumbers(texts []string) bool {
	for _, t := range texts {
		if !json.Valid([]byte(t)) {
			return false
		}
		if _, err := strconv.ParseFloat(t, 64); err != nil {
			return false
		}
	}
	return len(texts) > 0
}
