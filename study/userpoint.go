package study

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strings"
)

// ParseUserPoint reads a point typed by a person (soma enqueue --point):
// name=value pairs joined by ',', in any order, with spaces around names
// and values allowed ("lr = 0.01, batch=64"). Every knob must be given
// except fixed ones, which take their value. The values are checked as
// ParsePoint checks a record's, and a refusal is a *PointError that names
// the knob and what it accepts, so the mistake is caught where it was
// typed.
func (s *Space) ParseUserPoint(text string) (Point, error) {
	fail := func(format string, args ...any) (Point, error) {
		return Point{}, &PointError{Text: text, Reason: fmt.Sprintf(format, args...)}
	}
	if strings.TrimSpace(text) == "" {
		return fail("empty (give every param as name=value, e.g. %s)", s.example())
	}
	vals := make([]string, len(s.knobs))
	set := make([]bool, len(s.knobs))
	for _, part := range strings.Split(text, ",") {
		name, val, ok := strings.Cut(part, "=")
		name = strings.TrimSpace(name)
		if !ok {
			return fail("%q is not name=value (e.g. %s)", strings.TrimSpace(part), s.example())
		}
		i := s.index(name)
		if i < 0 {
			all := make([]string, len(s.knobs))
			for j, k := range s.knobs {
				all[j] = k.Name
			}
			return fail("param %q is not in the study's space (%s)%s", name, s.names(), suggest(name, all))
		}
		if set[i] {
			return fail("param %q given twice", name)
		}
		set[i] = true
		// An option may hold spaces: the text as typed first.
		if _, err := s.parseValue(i, val); err != nil {
			if _, err2 := s.parseValue(i, strings.TrimSpace(val)); err2 != nil {
				return fail("param %q: %v (%s)", name, err, s.accepts(i))
			}
			val = strings.TrimSpace(val)
		}
		vals[i] = val
	}
	var b strings.Builder
	for i, k := range s.knobs {
		if !set[i] {
			if k.Kind != KnobFixed {
				return fail("param %q is missing (give every param: %s)", k.Name, s.example())
			}
			vals[i] = k.Value
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k.Name + "=" + vals[i])
	}
	return s.ParsePoint(b.String())
}

// accepts says what knob i accepts, for messages.
func (s *Space) accepts(i int) string {
	k := &s.knobs[i]
	switch k.Kind {
	case KnobInt:
		if k.Step > 1 {
			return fmt.Sprintf("a whole number in [%v, %v], step %v", k.Low, k.High, k.Step)
		}
		return fmt.Sprintf("a whole number in [%v, %v]", k.Low, k.High)
	case KnobFloat:
		if k.Step > 0 {
			return fmt.Sprintf("a number in [%v, %v], step %v", k.Low, k.High, k.Step)
		}
		return fmt.Sprintf("a number in [%v, %v]", k.Low, k.High)
	case KnobChoice:
		return "one of " + strings.Join(k.Choices, ", ")
	case KnobFixed:
		return fmt.Sprintf("fixed at %q", k.Value)
	}
	return k.Kind.String()
}

// example is a point text with every knob's name, for messages.
func (s *Space) example() string {
	parts := make([]string, len(s.knobs))
	for i, k := range s.knobs {
		parts[i] = k.Name + "=…"
	}
	return strings.Join(parts, ",")
}

// ParseCSVPoints reads points from CSV (soma enqueue --from FILE.csv): a
// header row of param names, then one point per row. It returns their
// text forms, each checked with ParseUserPoint; an error names the line
// and the param. Empty rows are skipped.
func (s *Space) ParseCSVPoints(r io.Reader) ([]string, error) {
	cr := csv.NewReader(r)
	cr.TrimLeadingSpace = true
	cr.FieldsPerRecord = -1
	head, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("study: csv: empty (want a header row of param names: %s)", strings.ReplaceAll(s.example(), "=…", ""))
	}
	if err != nil {
		return nil, fmt.Errorf("study: csv: %w", err)
	}
	for i := range head {
		head[i] = strings.TrimSpace(head[i])
		if strings.ContainsAny(head[i], ",=") {
			return nil, fmt.Errorf("study: csv: header column %d %q: want a param name", i+1, head[i])
		}
	}
	var out []string
	for {
		row, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("study: csv: %w", err)
		}
		line, _ := cr.FieldPos(0)
		if len(row) == 1 && strings.TrimSpace(row[0]) == "" {
			continue
		}
		if len(row) != len(head) {
			return nil, fmt.Errorf("study: csv line %d: %d values for %d columns (%s)", line, len(row), len(head), strings.Join(head, ","))
		}
		parts := make([]string, len(row))
		for i, v := range row {
			if strings.ContainsAny(v, ",=") {
				return nil, fmt.Errorf("study: csv line %d: param %q: value %q holds ',' or '=', which no param takes", line, head[i], v)
			}
			parts[i] = head[i] + "=" + v
		}
		text := strings.Join(parts, ",")
		p, err := s.ParseUserPoint(text)
		if err != nil {
			return nil, fmt.Errorf("study: csv line %d: %w", line, err)
		}
		out = append(out, s.FormatPoint(p))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("study: csv: no points after the header")
	}
	return out, nil
}
