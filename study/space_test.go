package study

import (
	"errors"
	"math"
	"strings"
	"testing"
)

// testSpace has one knob of every kind and scale.
func testSpace(t testing.TB) *Space {
	t.Helper()
	s, err := NewSpace([]Knob{
		{Name: "lr", Kind: KnobFloat, Low: 1e-5, High: 1e-1, Log: true},
		{Name: "mom", Kind: KnobFloat, Low: 0, High: 0.99},
		{Name: "drop", Kind: KnobFloat, Low: 0, High: 0.5, Step: 0.1},
		{Name: "batch", Kind: KnobInt, Low: 16, High: 256, Log: true},
		{Name: "layers", Kind: KnobInt, Low: 2, High: 8, Step: 2},
		{Name: "depth", Kind: KnobInt, Low: -3, High: 3},
		{Name: "opt", Kind: KnobChoice, Choices: []string{"adam", "sgd", "rms prop"}},
		{Name: "width", Kind: KnobChoice, Choices: []string{"64", "128"}},
		{Name: "epochs", Kind: KnobFixed, Value: "10"},
		{Name: "tag", Kind: KnobFixed, Value: "run:α/β"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestNewSpaceRefuses(t *testing.T) {
	tests := []struct {
		name  string
		knobs []Knob
		want  string // a fragment of the error
	}{
		{"no knobs", nil, "no knobs"},
		{"empty name", []Knob{{Kind: KnobFixed, Value: "1"}}, "empty name"},
		{"comma in name", []Knob{{Name: "a,b", Kind: KnobFixed, Value: "1"}}, "letters, digits"},
		{"equals in name", []Knob{{Name: "a=b", Kind: KnobFixed, Value: "1"}}, "letters, digits"},
		{"space in name", []Knob{{Name: "a b", Kind: KnobFixed, Value: "1"}}, "letters, digits"},
		{"leading digit", []Knob{{Name: "1a", Kind: KnobFixed, Value: "1"}}, "must not start with a digit"},
		{"duplicate name", []Knob{{Name: "a", Kind: KnobFixed, Value: "1"}, {Name: "a", Kind: KnobFixed, Value: "2"}}, "defined twice"},
		{"case duplicate", []Knob{{Name: "lr", Kind: KnobFixed, Value: "1"}, {Name: "LR", Kind: KnobFixed, Value: "2"}}, "SOMA_PARAM_LR"},
		{"comma in option", []Knob{{Name: "o", Kind: KnobChoice, Choices: []string{"a,b"}}}, `contains ','`},
		{"equals in option", []Knob{{Name: "o", Kind: KnobChoice, Choices: []string{"a=b"}}}, `contains '='`},
		{"comma in fixed", []Knob{{Name: "o", Kind: KnobFixed, Value: "1,2"}}, `contains ','`},
		{"newline in option", []Knob{{Name: "o", Kind: KnobChoice, Choices: []string{"a\nb"}}}, "control character"},
		{"empty option", []Knob{{Name: "o", Kind: KnobChoice, Choices: []string{""}}}, "empty"},
		{"padded option", []Knob{{Name: "o", Kind: KnobChoice, Choices: []string{" a"}}}, "leading or trailing space"},
		{"duplicate option", []Knob{{Name: "o", Kind: KnobChoice, Choices: []string{"a", "a"}}}, "listed twice"},
		{"no options", []Knob{{Name: "o", Kind: KnobChoice}}, "no options"},
		{"bad utf8", []Knob{{Name: "o", Kind: KnobFixed, Value: "\xff"}}, "UTF-8"},
		{"low > high", []Knob{{Name: "lr", Kind: KnobFloat, Low: 0.1, High: 0.01}}, "low 0.1 > high 0.01 (swap them)"},
		{"nan", []Knob{{Name: "x", Kind: KnobFloat, Low: math.NaN(), High: 1}}, "finite"},
		{"log zero", []Knob{{Name: "x", Kind: KnobFloat, Low: 0, High: 1, Log: true}}, "low > 0"},
		{"log int zero", []Knob{{Name: "x", Kind: KnobInt, Low: 0, High: 10, Log: true}}, "low ≥ 1"},
		{"log with step", []Knob{{Name: "x", Kind: KnobFloat, Low: 1, High: 2, Step: 0.5, Log: true}}, "do not mix"},
		{"fractional int", []Knob{{Name: "x", Kind: KnobInt, Low: 0.5, High: 2}}, "not a whole number"},
		{"step off range", []Knob{{Name: "x", Kind: KnobInt, Low: 0, High: 10, Step: 3}}, "set high to 9"},
		{"float step off range", []Knob{{Name: "x", Kind: KnobFloat, Low: 0, High: 1, Step: 0.3}}, "whole number of steps"},
		{"negative step", []Knob{{Name: "x", Kind: KnobFloat, Low: 0, High: 1, Step: -1}}, "positive"},
		{"huge int", []Knob{{Name: "x", Kind: KnobInt, Low: 0, High: 1 << 60}}, "2^53"},
		{"choice with range", []Knob{{Name: "x", Kind: KnobChoice, Choices: []string{"a"}, High: 1}}, "only choices"},
		{"int with choices", []Knob{{Name: "x", Kind: KnobInt, High: 1, Choices: []string{"a"}}}, "not choices"},
		{"no kind", []Knob{{Name: "x"}}, "set a type"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := NewSpace(tc.knobs)
			if err == nil {
				t.Fatalf("NewSpace = %v, nil; want an error containing %q", s, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "study: ") {
				t.Errorf("NewSpace error = %q, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestSpaceSize(t *testing.T) {
	tests := []struct {
		name       string
		knobs      []Knob
		n          int
		wantFinite bool
	}{
		{"continuous", []Knob{{Name: "x", Kind: KnobFloat, Low: 0, High: 1}}, 0, false},
		{"grid", []Knob{
			{Name: "a", Kind: KnobInt, Low: 1, High: 3},
			{Name: "b", Kind: KnobFloat, Low: 0, High: 1, Step: 0.25},
			{Name: "c", Kind: KnobChoice, Choices: []string{"x", "y"}},
			{Name: "d", Kind: KnobFixed, Value: "z"},
		}, 3 * 5 * 2, true},
		{"log int", []Knob{{Name: "a", Kind: KnobInt, Low: 1, High: 100, Log: true}}, 100, true},
		{"saturates", []Knob{
			{Name: "a", Kind: KnobInt, Low: 0, High: 1 << 40},
			{Name: "b", Kind: KnobInt, Low: 0, High: 1 << 40},
		}, math.MaxInt, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := NewSpace(tc.knobs)
			if err != nil {
				t.Fatal(err)
			}
			n, finite := s.Size()
			if n != tc.n || finite != tc.wantFinite {
				t.Errorf("Size() = %d, %v, want %d, %v", n, finite, tc.n, tc.wantFinite)
			}
		})
	}
}

func TestKnobsIsACopy(t *testing.T) {
	s := testSpace(t)
	k := s.Knobs()
	k[6].Choices[0] = "changed"
	k[0].Name = "changed"
	if got := s.Knobs(); got[6].Choices[0] != "adam" || got[0].Name != "lr" {
		t.Errorf("Knobs() shares memory with the space: %v", got)
	}
}

func TestParseKnobKindSuggests(t *testing.T) {
	_, err := ParseKnobKind("flaot")
	if err == nil || !strings.Contains(err.Error(), `did you mean "float"`) {
		t.Errorf("ParseKnobKind(flaot) error = %v, want a suggestion of float", err)
	}
	var pe *PointError
	if errors.As(err, &pe) {
		t.Errorf("ParseKnobKind error is a PointError")
	}
}
