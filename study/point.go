package study

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Point is one configuration of a Space: a value per knob, in knob order;
// in a conditional space, a knob whose condition is false is absent.
// A Point means something only next to the Space that made it (by a
// sampler or ParsePoint); its text, JSON and Values forms come from that
// Space. The zero Point is "no point". Points are immutable values, safe to
// copy and share.
type Point struct {
	// v[i] is knob i's value: the number for int and float knobs (ints are
	// exact below 2^53), the option index for choice, 0 for fixed, and
	// absent (one NaN) for a knob whose condition is false.
	v []float64
}

// IsZero reports whether p is the zero Point.
func (p Point) IsZero() bool { return len(p.v) == 0 }

// Equal reports whether p and q hold the same values bit for bit.
func (p Point) Equal(q Point) bool {
	if len(p.v) != len(q.v) {
		return false
	}
	for i := range p.v {
		if math.Float64bits(p.v[i]) != math.Float64bits(q.v[i]) {
			return false
		}
	}
	return true
}

// KV is one knob's value as text, for {name} substitution in a command's
// arguments and for SOMA_PARAM_<NAME> environment variables.
type KV struct {
	Name string
	Text string
	// Absent is true when the knob's condition is false in this point;
	// Text is then "".
	Absent bool
}

// text returns knob i's value in p as text.
func (s *Space) text(p Point, i int) string {
	k := &s.knobs[i]
	if i >= len(p.v) {
		return ""
	}
	x := p.v[i]
	if isAbsent(x) {
		return ""
	}
	switch k.Kind {
	case KnobInt:
		return strconv.FormatInt(int64(x), 10)
	case KnobFloat:
		// Shortest text that parses back to the same bits.
		return strconv.FormatFloat(x, 'g', -1, 64)
	case KnobChoice:
		j := int(x)
		if j < 0 || j >= len(k.Choices) {
			return ""
		}
		return k.Choices[j]
	}
	return k.Value
}

// Values returns every knob's name and value as text, in knob order, one
// entry per knob: an absent knob (its condition false) has Absent set and
// Text "". The texts are the ones FormatPoint writes.
func (s *Space) Values(p Point) []KV {
	out := make([]KV, len(s.knobs))
	for i := range s.knobs {
		out[i] = KV{Name: s.knobs[i].Name, Text: s.text(p, i), Absent: s.absentIn(p, i)}
	}
	return out
}

func (s *Space) absentIn(p Point, i int) bool { return i < len(p.v) && isAbsent(p.v[i]) }

// FormatPoint returns p's text form, name=value pairs in knob order joined
// by ',': "lr=0.001,batch=64,opt=adam". Floats are written in the shortest
// form that reads back to the same bits, so ParsePoint(FormatPoint(p))
// equals p for every point s can produce. Absent knobs are left out
// ("opt=adam,lr=0.001" where momentum needs opt == 'sgd'). p must come
// from s.
func (s *Space) FormatPoint(p Point) string {
	var b strings.Builder
	for i := range s.knobs {
		if s.absentIn(p, i) {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(s.knobs[i].Name)
		b.WriteByte('=')
		b.WriteString(s.text(p, i))
	}
	return b.String()
}

// PointError says why a point's text could not be read against a space.
// The whole point is refused; nothing of it is returned.
type PointError struct {
	Text   string // the text given
	Reason string
}

func (e *PointError) Error() string {
	t := e.Text
	if len(t) > 200 {
		t = t[:200] + "…"
	}
	return fmt.Sprintf("study: point %q: %s", t, e.Reason)
}

// ParsePoint reads a point's text form against s. Every knob of s must
// appear exactly once, as name=value, in any order, except that a knob
// whose condition is false in the point must not appear; a name s does not
// have, a missing knob, a value of the wrong kind, out of range, off the
// knob's step, an unknown option or a different fixed value refuses the
// whole text with a *PointError (a record written against another space
// is never half read). Whether "64" is a number or the option "64" is
// decided by the knob, not the text. A float on a stepped knob within
// 1e-9 steps of a grid value reads as that grid value.
func (s *Space) ParsePoint(text string) (Point, error) {
	fail := func(format string, args ...any) (Point, error) {
		return Point{}, &PointError{Text: text, Reason: fmt.Sprintf(format, args...)}
	}
	if text == "" {
		return fail("empty (a point names every param: %s)", s.names())
	}
	v := make([]float64, len(s.knobs))
	set := make([]bool, len(s.knobs))
	parts := strings.Split(text, ",")
	for _, part := range parts {
		name, val, ok := strings.Cut(part, "=")
		if !ok {
			return fail("%q is not name=value (written against another space?)", part)
		}
		i := s.index(name)
		if i < 0 {
			return fail("param %q is not in this space (%s); the record was written against another space", name, s.names())
		}
		if set[i] {
			return fail("param %q given twice", name)
		}
		set[i] = true
		x, err := s.parseValue(i, val)
		if err != nil {
			return fail("param %q: %v", name, err)
		}
		v[i] = x
	}
	if s.conds != nil {
		// Present exactly where the condition holds on the given values.
		// Parents come first in s.order, so a tested knob that is
		// absent is already marked absent when its children are judged.
		for _, i := range s.order {
			switch holds := s.condHolds(i, v); {
			case holds && !set[i]:
				return fail("param %q is missing (its condition %s holds)", s.knobs[i].Name, s.knobs[i].When)
			case !holds && set[i]:
				return fail("param %q is given, but its condition %s is false in this point (leave it out)", s.knobs[i].Name, s.knobs[i].When)
			case !holds:
				v[i] = absent
			}
		}
	}
	for i, ok := range set {
		if !ok && !isAbsent(v[i]) {
			return fail("param %q is missing; the record was written against another space", s.knobs[i].Name)
		}
	}
	return Point{v: v}, nil
}

func (s *Space) names() string {
	n := make([]string, len(s.knobs))
	for i, k := range s.knobs {
		n[i] = k.Name
	}
	return "params " + strings.Join(n, ", ")
}

func (s *Space) index(name string) int {
	for i := range s.knobs {
		if s.knobs[i].Name == name {
			return i
		}
	}
	return -1
}

// parseValue reads knob i's value from text, strictly.
func (s *Space) parseValue(i int, t string) (float64, error) {
	k := &s.knobs[i]
	switch k.Kind {
	case KnobInt:
		n, err := strconv.ParseInt(t, 10, 64)
		if err != nil || strconv.FormatInt(n, 10) != t {
			return 0, fmt.Errorf("%q is not a whole number", t)
		}
		// Compare in int64: float64(n) rounds past 2^53, which let
		// 2^53+1 read as 2^53, and x − low rounded the step check.
		lo, hi, st := int64(k.Low), int64(k.High), int64(k.Step)
		if n < lo || n > hi {
			return 0, fmt.Errorf("%d is outside [%v, %v]", n, k.Low, k.High)
		}
		if (n-lo)%st != 0 {
			return 0, fmt.Errorf("%d is not low %v plus a whole number of steps %v", n, k.Low, k.Step)
		}
		return float64(n), nil
	case KnobFloat:
		if t == "" || strings.ContainsAny(t, "xXpPnNiI_") {
			return 0, fmt.Errorf("%q is not a decimal number", t)
		}
		x, err := strconv.ParseFloat(t, 64)
		if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
			return 0, fmt.Errorf("%q is not a finite number", t)
		}
		if k.Step > 0 {
			// levelIndex, not round((x − low)/step): on [-1.7e308,
			// 1.7e308] x − low overflowed and the grid's own top levels
			// did not read back.
			if g := s.level(i, s.levelIndex(i, x)); math.Abs(x-g) <= 1e-9*k.Step {
				return g, nil
			}
			if x < k.Low || x > k.High {
				return 0, fmt.Errorf("%s is outside [%v, %v]", t, k.Low, k.High)
			}
			return 0, fmt.Errorf("%s is not low %v plus a whole number of steps %v", t, k.Low, k.Step)
		}
		if x < k.Low || x > k.High {
			return 0, fmt.Errorf("%s is outside [%v, %v]", t, k.Low, k.High)
		}
		return x, nil
	case KnobChoice:
		for j, c := range k.Choices {
			if c == t {
				return float64(j), nil
			}
		}
		return 0, fmt.Errorf("%q is not one of the options %s", t, strings.Join(k.Choices, ", "))
	case KnobFixed:
		if t != k.Value {
			return 0, fmt.Errorf("%q is not the fixed value %q", t, k.Value)
		}
		return 0, nil
	}
	return 0, fmt.Errorf("knob kind %v", k.Kind)
}

// PointJSON returns p as a JSON object in knob order:
// {"lr":0.001,"batch":64,"opt":"adam"}. Int and float knobs are numbers
// (floats round-trip bit for bit). A choice or fixed knob is written as
// numbers when every one of its options is a JSON number literal, and as
// strings otherwise, so the type is a property of the knob, never of the
// value drawn. Absent knobs are left out. p must come from s.
func (s *Space) PointJSON(p Point) ([]byte, error) {
	if len(p.v) != len(s.knobs) {
		return nil, fmt.Errorf("study: point has %d values, space has %d params (the point is from another space)", len(p.v), len(s.knobs))
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range s.knobs {
		if isAbsent(p.v[i]) {
			continue // absent knobs are not in the object
		}
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		name, _ := json.Marshal(k.Name)
		b.Write(name)
		b.WriteByte(':')
		t := s.text(p, i)
		switch {
		case k.Kind == KnobInt, k.Kind == KnobFloat, s.jsonNum[i]:
			b.WriteString(t)
		default:
			q, err := json.Marshal(t)
			if err != nil {
				return nil, fmt.Errorf("study: param %q: %w", k.Name, err)
			}
			b.Write(q)
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}
