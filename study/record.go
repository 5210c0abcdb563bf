package study

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/soma-hpc/soma/fsstore"
)

// RecordVersion is the version of the trial and study records this soma
// writes (the "v" meta key). A record with a higher version is refused
// with ErrNewerFormat, never half read.
const RecordVersion = 1

// Meta keys of a trial attempt record. The record's digest is the blob
// holding the curve and the reason it stopped (see curveBlob).
const (
	keyKind    = "kind"   // "trial"
	keyVersion = "v"      // RecordVersion
	keyState   = "state"  // running, done, pruned, failed, interrupted
	keyPoint   = "point"  // the point's text form (Space.FormatPoint)
	keyDir     = "dir"    // the study's direction when written
	keyScore   = "score"  // final score (done) or last value (pruned)
	keyScores  = "scores" // several objectives: every final score, space-separated
	keyValue   = "value"  // last intermediate value, if any
	keyStep    = "step"   // last intermediate step, -1 if none
	keyBeat    = "beat"   // heartbeat counter: progress visible in content
	keyFails   = "fails"  // failed attempts of this trial before this one
	keyHost    = "host"
	keyPID     = "pid"
	keyJob     = "job"
	keyStart   = "start" // file-server time the attempt was taken
	keyFrom    = "from"  // attempt whose final outcome this one adopted
)

const kindTrial = "trial"

// Who says which process ran an attempt: host, process id, and the Slurm
// job as the caller knows it ("123_4" for an array task), if any.
type Who struct {
	Host string `json:"host"`
	PID  int    `json:"pid"`
	Job  string `json:"job,omitempty"`
}

// Me returns this process's Who, with job as given (say, from
// SLURM_ARRAY_JOB_ID and SLURM_ARRAY_TASK_ID; "" outside Slurm).
func Me(job string) Who {
	host, _ := os.Hostname()
	return Who{Host: host, PID: os.Getpid(), Job: job}
}

// String returns "host:pid", followed by " job J" when a job is known.
func (w Who) String() string {
	if w.Host == "" && w.PID == 0 && w.Job == "" {
		return ""
	}
	s := w.Host + ":" + strconv.Itoa(w.PID)
	if w.Job != "" {
		s += " job " + w.Job
	}
	return s
}

// Record is one trial attempt as read from the store.
type Record struct {
	Study   string `json:"study"`
	Number  int    `json:"trial"`
	Attempt int    `json:"attempt"`
	// State is the recorded state, except that a running attempt whose
	// heartbeat is older than the grace period reads as StateStale.
	State     State     `json:"state"`
	Point     Point     `json:"-"`
	PointText string    `json:"point"`
	Direction Direction `json:"-"`
	// Score is the final score of a done attempt, or the last value of a
	// pruned one; HasScore says whether there is one.
	Score    float64 `json:"score"`
	HasScore bool    `json:"has_score"`
	// Scores, for a done trial of a study with several objectives, holds
	// one score per metric (Spec.Metrics); Score is then Scores[0].
	Scores []float64 `json:"scores,omitempty"`
	// Value is the last intermediate value reported (HasValue), at
	// LastStep (-1 when nothing was reported).
	Value    float64 `json:"value"`
	HasValue bool    `json:"has_value"`
	LastStep int64   `json:"last_step"`
	// Beat counts heartbeats and reports: progress visible in the
	// content, for filesystems that report other nodes' mtimes late.
	Beat int64 `json:"beat"`
	// Failures counts the failed attempts of this trial before this one.
	Failures int `json:"failures"`
	Who      Who `json:"who"`
	// Start is the file-server time the attempt was taken; Time the
	// file-server time of its last write (heartbeat, report or finish).
	Start time.Time `json:"start"`
	Time  time.Time `json:"time"`
	// AdoptedFrom is the attempt whose finished outcome this attempt
	// copied (-1 if none): it was taken as a retry of an attempt that
	// finished at the same moment.
	AdoptedFrom int `json:"adopted_from"`
	// Curve and Reason come from the record's blob: filled only by the
	// readers that fetch it (Curves, Attempts with curves, Run).
	Curve  []Step `json:"curve,omitempty"`
	Reason string `json:"reason,omitempty"`

	blob fsstore.Digest
}

// Final reports whether r ends its trial: done, pruned, or failed with no
// retry left under maxRetries. A final trial is never handed out again.
func (r *Record) Final(maxRetries int) bool {
	switch r.State {
	case StateDone, StatePruned:
		return true
	case StateFailed:
		return r.Failures >= maxRetries
	}
	return false
}

// Trial returns the sampler's and pruner's view of r.
func (r *Record) Trial() Trial {
	return Trial{
		Number:   r.Number,
		Attempt:  r.Attempt,
		State:    r.State,
		Point:    r.Point,
		Score:    r.Score,
		HasScore: r.HasScore,
		Scores:   r.Scores,
		Curve:    r.Curve,
		LastStep: r.LastStep,
		Who:      r.Who.String(),
		Time:     r.Time,
	}
}

// RecordError is a record under a study that exists but cannot be used:
// unreadable meta, a point that does not belong to the study's space, or
// a newer format. Queries count and return it beside their results; it is
// never a result.
type RecordError struct {
	Name string
	Err  error
}

func (e *RecordError) Error() string { return fmt.Sprintf("study: record %s: %v", e.Name, e.Err) }
func (e *RecordError) Unwrap() error { return e.Err }

// ForeignError is a name under a study's trial or pack folder that is not
// one of its records: a trial name that is not a trial number ("abc",
// "007", "-3"), a trial number outside the budget, an attempt name that is
// not a number, a stray file among the packs. soma never writes such a
// name, so something else put it there (a hand edit, a copy of another
// study, a tool). It is reported by name and otherwise left alone: never
// run, retried, counted, or a result.
type ForeignError struct {
	Name string // the name in the store ("study/s/trial/46")
	Why  string // what makes it foreign
}

func (e *ForeignError) Error() string {
	return fmt.Sprintf("study: %s: %s: not a record of this study, never run or counted (move it out of the study's folder)", e.Name, e.Why)
}

// names of one study in the store.
type names struct{ study string }

func (n names) base() string       { return "study/" + n.study }
func (n names) spec() string       { return n.base() + "/spec" }
func (n names) trials() string     { return n.base() + "/trial" }
func (n names) trial(t int) string { return n.trials() + "/" + strconv.Itoa(t) }

// attempt is built in one buffer: Next names a few attempts per trial it
// hands out, and more at the end of a budget (readLatest's probes), where
// the concatenations above allocated four strings each time.
func (n names) attempt(t, a int) string {
	var b strings.Builder
	b.Grow(len("study/") + len(n.study) + len("/trial/") + 24)
	b.WriteString("study/")
	b.WriteString(n.study)
	b.WriteString("/trial/")
	var num [20]byte
	b.Write(strconv.AppendInt(num[:0], int64(t), 10))
	b.WriteByte('/')
	b.Write(strconv.AppendInt(num[:0], int64(a), 10))
	return b.String()
}
func (n names) points() string                { return n.base() + "/point" }
func (n names) point(d fsstore.Digest) string { return n.points() + "/" + d.Hex() }
func (n names) packs() string                 { return n.base() + "/pack" }
func (n names) pack(id string) string         { return n.packs() + "/" + id }

// parseNumber reads a trial or attempt number segment: decimal, no sign,
// no leading zero, below 10^9. Anything else is a foreign name.
func parseNumber(s string) (int, bool) {
	if s == "" || len(s) > 9 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// ValidateName checks a study name: 1 to 128 bytes of ASCII letters,
// digits, '-', '_' and '.', not starting with '.' or '-'.
func ValidateName(name string) error {
	if name == "" {
		return errors.New("study: study name is empty (give --study a name)")
	}
	if len(name) > 128 {
		return fmt.Errorf("study: study name %.40q...: %d bytes, the limit is 128", name, len(name))
	}
	if name[0] == '.' || name[0] == '-' {
		return fmt.Errorf("study: study name %q starts with %q (start with a letter or digit)", name, name[0])
	}
	for i, c := range name {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			// The character, not its first byte: "ünï" said "byte 'Ã'"
			// (issue 16).
			if c == utf8.RuneError {
				return fmt.Errorf("study: study name %q: byte %#x (at byte %d) is not UTF-8 (use ASCII letters, digits, '-', '_' and '.')", name, name[i], i)
			}
			return fmt.Errorf("study: study name %q: character %q (at byte %d) is not allowed (use ASCII letters, digits, '-', '_' and '.')", name, c, i)
		}
	}
	return nil
}

// fields is what a writer puts in an attempt's meta.
type fields struct {
	state     State
	pointText string
	dir       Direction
	score     float64
	hasScore  bool
	scores    []float64
	value     float64
	hasValue  bool
	step      int64
	beat      int64
	fails     int
	who       Who
	start     time.Time
	from      int
}

func formatFloat(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }

func (f *fields) meta() fsstore.Meta {
	m := make(fsstore.Meta, 0, 16)
	add := func(k, v string) { m = append(m, fsstore.Pair{Key: k, Value: v}) }
	add(keyKind, kindTrial)
	add(keyVersion, strconv.Itoa(RecordVersion))
	add(keyState, string(f.state))
	add(keyPoint, f.pointText)
	add(keyDir, f.dir.String())
	if f.hasScore {
		add(keyScore, formatFloat(f.score))
	}
	if len(f.scores) > 0 {
		t := make([]string, len(f.scores))
		for i, x := range f.scores {
			t[i] = formatFloat(x)
		}
		add(keyScores, strings.Join(t, " "))
	}
	if f.hasValue {
		add(keyValue, formatFloat(f.value))
	}
	add(keyStep, strconv.FormatInt(f.step, 10))
	add(keyBeat, strconv.FormatInt(f.beat, 10))
	add(keyFails, strconv.Itoa(f.fails))
	add(keyHost, f.who.Host)
	add(keyPID, strconv.Itoa(f.who.PID))
	if f.who.Job != "" {
		add(keyJob, f.who.Job)
	}
	if !f.start.IsZero() {
		add(keyStart, f.start.UTC().Format(time.RFC3339Nano))
	}
	if f.from >= 0 {
		add(keyFrom, strconv.Itoa(f.from))
	}
	return m
}

// fieldsOf returns the fields of a decoded record, for rewriting it.
func fieldsOf(r *Record) fields {
	return fields{
		state: r.State, pointText: r.PointText, dir: r.Direction,
		score: r.Score, hasScore: r.HasScore, scores: r.Scores, value: r.Value, hasValue: r.HasValue,
		step: r.LastStep, beat: r.Beat, fails: r.Failures, who: r.Who,
		start: r.Start, from: r.AdoptedFrom,
	}
}

// decodeRecord reads an attempt record of trial t, attempt a. The point is
// read through sp; a point that sp refuses refuses the whole record.
func decodeRecord(study string, sp *Space, t, a int, b fsstore.Bound) (Record, error) {
	var r Record
	if err := decodeRecordInto(&r, study, sp, t, a, b.Name, b.Digest, b.Meta, b.Time); err != nil {
		return Record{}, err
	}
	return r, nil
}

// decodeRecordInto is decodeRecord writing into *r, which it overwrites
// whole. It neither keeps m nor lets r escape, so a caller decoding many
// records (a pack) reuses one Meta and writes straight into its result
// slice instead of copying a Record per call. Every error is a
// *RecordError named name.
func decodeRecordInto(r *Record, study string, sp *Space, t, a int, name string, d fsstore.Digest, m fsstore.Meta, tm time.Time) error {
	fail := func(format string, args ...any) error {
		*r = Record{}
		return &RecordError{Name: name, Err: fmt.Errorf(format, args...)}
	}
	if k := m.Value(keyKind); k != kindTrial {
		return fail("kind %q is not a trial record", k)
	}
	v, err := strconv.Atoi(m.Value(keyVersion))
	if err != nil || v < 1 {
		return fail("record version %q is not a number", m.Value(keyVersion))
	}
	if v > RecordVersion {
		*r = Record{}
		return &RecordError{Name: name, Err: fmt.Errorf("%w: record version %d, this soma reads up to %d (upgrade soma on this machine)", ErrNewerFormat, v, RecordVersion)}
	}
	*r = Record{Study: study, Number: t, Attempt: a, Time: tm, blob: d, AdoptedFrom: -1, LastStep: -1}
	st, err := ParseState(m.Value(keyState))
	if err != nil || st == StateStale {
		return fail("state %q is not a recorded state", m.Value(keyState))
	}
	r.State = st
	if r.Direction, err = ParseDirection(m.Value(keyDir)); err != nil {
		return fail("%v", err)
	}
	r.PointText = m.Value(keyPoint)
	if r.Point, err = sp.ParsePoint(r.PointText); err != nil {
		return fail("%w", err)
	}
	num := func(key string, dst *float64, has *bool) error {
		s, ok := m.Get(key)
		if !ok {
			return nil
		}
		x, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
			return fmt.Errorf("%s %q is not a finite number", key, s)
		}
		*dst, *has = x, true
		return nil
	}
	if err := num(keyScore, &r.Score, &r.HasScore); err != nil {
		return fail("%v", err)
	}
	if err := num(keyValue, &r.Value, &r.HasValue); err != nil {
		return fail("%v", err)
	}
	if s, ok := m.Get(keyScores); ok {
		for _, t := range strings.Fields(s) {
			x, err := strconv.ParseFloat(t, 64)
			if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
				return fail("%s %q: %q is not a finite number", keyScores, s, t)
			}
			r.Scores = append(r.Scores, x)
		}
		if len(r.Scores) < 2 || r.Scores[0] != r.Score {
			return fail("%s %q does not hold several scores starting with score %v", keyScores, s, r.Score)
		}
	}
	// Spelled out rather than looped over a table of (key, *field): the
	// table made r escape, one heap Record per decoded record.
	if s, ok := m.Get(keyStep); ok {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fail("%s %q is not a whole number", keyStep, s)
		}
		r.LastStep = n
	}
	if s, ok := m.Get(keyBeat); ok {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fail("%s %q is not a whole number", keyBeat, s)
		}
		r.Beat = n
	}
	small := func(key string) (int, bool, error) {
		s, ok := m.Get(key)
		if !ok {
			return 0, false, nil
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return 0, false, fmt.Errorf("%s %q is not a whole number", key, s)
		}
		return n, true, nil
	}
	if n, ok, err := small(keyFails); err != nil {
		return fail("%v", err)
	} else if ok {
		r.Failures = n
	}
	if n, ok, err := small(keyPID); err != nil {
		return fail("%v", err)
	} else if ok {
		r.Who.PID = n
	}
	if n, ok, err := small(keyFrom); err != nil {
		return fail("%v", err)
	} else if ok {
		r.AdoptedFrom = n
	}
	r.Who.Host = m.Value(keyHost)
	r.Who.Job = m.Value(keyJob)
	if s, ok := m.Get(keyStart); ok {
		if r.Start, err = time.Parse(time.RFC3339Nano, s); err != nil {
			return fail("start %q is not a time", s)
		}
	}
	if r.State == StateDone && !r.HasScore {
		return fail("state done without a score")
	}
	return nil
}

// curveBlob is the blob an attempt record points at: its curve and why it
// stopped. Blobs are immutable, so a reader may cache them by digest.
type curveBlob struct {
	Version int    `json:"v"`
	Curve   []Step `json:"curve"`
	Reason  string `json:"reason,omitempty"`
}

// encodeCurve is json.Marshal of the curveBlob, byte for byte (a test
// compares them), written by hand: Marshal's reflection and buffer growth
// took 100-170 ms of soma-trial's CPU for a curve of 100k steps, at every
// flush of the record and at Finish (issue 13, item 8). A value that is
// not finite gets Marshal's own error.
func encodeCurve(curve []Step, reason string) ([]byte, error) {
	// 48 bytes a step: {"step":123456,"value":0.0000033333333333333335}
	// is 47; 40 made every long curve's buffer grow (copied) once more.
	b := make([]byte, 0, 32+len(reason)+len(curve)*48)
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, RecordVersion, 10)
	b = append(b, `,"curve":[`...)
	for i, st := range curve {
		if math.IsNaN(st.Value) || math.IsInf(st.Value, 0) {
			return json.Marshal(curveBlob{Version: RecordVersion, Curve: curve, Reason: reason})
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"step":`...)
		b = strconv.AppendInt(b, st.Step, 10)
		b = append(b, `,"value":`...)
		b = appendJSONFloat(b, st.Value)
		b = append(b, '}')
	}
	b = append(b, ']')
	if reason != "" {
		r, err := json.Marshal(reason)
		if err != nil {
			return nil, err
		}
		b = append(b, `,"reason":`...)
		b = append(b, r...)
	}
	return append(b, '}'), nil
}

// appendJSONFloat appends a finite float64 as encoding/json writes it:
// the shortest 'f' form, or 'e' form below 1e-6 and from 1e21, with a
// one-digit negative exponent unpadded (1e-07 -> 1e-7).
func appendJSONFloat(b []byte, f float64) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

func decodeCurve(b []byte) (curveBlob, error) {
	var c curveBlob
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("curve blob: %w", err)
	}
	if c.Version < 1 || c.Version > RecordVersion {
		return c, fmt.Errorf("curve blob version %d, this soma reads up to %d", c.Version, RecordVersion)
	}
	return c, nil
}
