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
		{"infinite high", []Knob{{Name: "x", Kind: KnobFloat, Low: 0, High: math.Inf(1)}}, "give bounds within ±1.7976931348623157e+308"},
		// Levels 1 apart where float64s are 2 apart (past 2^53) round
		// onto each other: the grid cannot be held.
		{"step below float spacing", []Knob{{Name: "x", Kind: KnobFloat, Low: 1 << 53, High: 1<<53 + 1<<40, Step: 1}}, "finer than float64 can tell apart"},
		// 1e-9·n forgave any high on a grid of more than 5e8 levels.
		{"float step off range, many levels", []Knob{{Name: "x", Kind: KnobFloat, Low: 0, High: 2.5e15 + 500, Step: 1000}}, "whole number of steps"},
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

// TestNewSpaceWideRanges: ranges whose width does not fit float64 (or
// not exactly) are valid spaces with the right number of levels. Issue 13
// item 3: (high − low)/step overflowed to +Inf, so a stepped float on
// [-1.7e308, 1.7e308] was refused as "step too small"; and the int check
// Mod(high − low, step) ran on a width of 2^54 − 1 rounded to 2^54, so it
// refused the valid [-2^53, 2^53 − 1] with step 3.
func TestNewSpaceWideRanges(t *testing.T) {
	const p53 = 1 << 53
	tests := []struct {
		name string
		knob Knob
		n    int // levels; 0 for continuous
	}{
		{"float", Knob{Kind: KnobFloat, Low: -1.7e308, High: 1.7e308}, 0},
		{"float widest", Knob{Kind: KnobFloat, Low: -math.MaxFloat64, High: math.MaxFloat64}, 0},
		{"float step", Knob{Kind: KnobFloat, Low: -1.7e308, High: 1.7e308, Step: 1e307}, 35},
		{"float step MaxFloat64", Knob{Kind: KnobFloat, Low: -math.MaxFloat64, High: math.MaxFloat64, Step: math.MaxFloat64}, 3},
		{"log float", Knob{Kind: KnobFloat, Low: 5e-324, High: math.MaxFloat64, Log: true}, 0},
		{"int", Knob{Kind: KnobInt, Low: -p53, High: p53}, 2*p53 + 1},
		{"int step 3", Knob{Kind: KnobInt, Low: -p53, High: p53 - 1, Step: 3}, (2*p53-1)/3 + 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.knob.Name = "x"
			s, err := NewSpace([]Knob{tc.knob})
			if err != nil {
				t.Fatal(err)
			}
			n, _ := s.Size()
			if n != tc.n {
				t.Errorf("Size() = %d, want %d", n, tc.n)
			}
			if tc.n > 0 {
				if lo, hi := s.level(0, 0), s.level(0, tc.n-1); lo != tc.knob.Low || hi != tc.knob.High {
					t.Errorf("levels 0 and %d = %v, %v, want %v, %v", tc.n-1, lo, hi, tc.knob.Low, tc.knob.High)
				}
				for _, j := range []int{0, 1, tc.n / 2, tc.n - 2, tc.n - 1} {
					if got := s.levelIndex(0, s.level(0, j)); got != j {
						t.Errorf("levelIndex(level(%d) = %v) = %d", j, s.level(0, j), got)
					}
				}
			}
		})
	}
}

// TestNegativeZeroBounds: a bound of −0 is 0. An int knob with high −0
// handed out the point −0, whose text "0" read back as +0, a different
// point (found by FuzzSamplers).
func TestNegativeZeroBounds(t *testing.T) {
	negZero := math.Copysign(0, -1)
	s, err := NewSpace([]Knob{{Name: "x", Kind: KnobInt, Low: -4, High: negZero, Step: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if k := s.Knobs()[0]; math.Signbit(k.High) {
		t.Errorf("high = %v with the sign bit set, want 0", k.High)
	}
	p := Point{v: []float64{s.fromUnit(0, 0.99)}}
	back, err := s.ParsePoint(s.FormatPoint(p))
	if err != nil || !back.Equal(p) {
		t.Errorf("point %s reads back as %v, %v", s.FormatPoint(p), back.v, err)
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
