package study

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestParseCond(t *testing.T) {
	tests := []struct {
		in, want string // want: the normalised text before resolution
	}{
		{"opt == 'sgd'", "opt == 'sgd'"},
		{`opt=="sgd"`, "opt == 'sgd'"},
		{"opt=sgd", "opt == 'sgd'"},
		{"opt != adam", "opt != 'adam'"},
		{"opt in ['sgd', adam,]", "opt in ['sgd', 'adam']"},
		{"opt not  in [sgd]", "opt not in ['sgd']"},
		{"layers >= 3 and opt == sgd", "layers >= 3 and opt == 'sgd'"},
		{"layers<3", "layers < 3"},
		{"layers <= -2", "layers <= -2"},
		{"layers > 0", "layers > 0"},
		{`tag == "it's"`, `tag == "it's"`},
		{"\tx\t==\t1 ", "x == 1"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			atoms, err := parseCond(tc.in)
			if err != nil {
				t.Fatalf("parseCond(%q): %v", tc.in, err)
			}
			if got := condString(atoms); got != tc.want {
				t.Errorf("parseCond(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestParseCondRefuses(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "want a param name"},
		{"opt", `after "opt" want`},
		{"opt ==", "want a value, got the end"},
		{"opt == 'sgd", "unterminated"},
		{"opt == ''", "empty value"},
		{"opt in []", "empty list"},
		{"opt in [a b]", "want ',' or ']'"},
		{"opt in a", "want '['"},
		{"opt not sgd", `want "in" after "not"`},
		{"opt == a or opt == b", `want "and" or the end`},
		{"(opt == a)", "want a param name"},
		{"opt == a and", "want a param name"},
		{"1x == 2", "want a param name"},
		{"opt === a", "want a value"},
		{strings.Repeat("a == 1 and ", 65) + "a == 1", "more than 64 comparisons"},
		{strings.Repeat(" ", 5000), "longer than"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			_, err := parseCond(tc.in)
			var ce *CondError
			if !errors.As(err, &ce) {
				t.Fatalf("parseCond(%q) = %v, want a *CondError", tc.in, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("parseCond(%q) = %v, want it to say %q", tc.in, err, tc.want)
			}
		})
	}
}

// FuzzParseCond checks that the condition parser never panics and that
// what it accepts reads back the same from its normalised text. The seeds
// run as a regular test.
func FuzzParseCond(f *testing.F) {
	for _, s := range []string{
		"opt == 'sgd'", "opt in ['a', \"b\"]", "n >= 3 and n < 10 and opt != x",
		"opt not in [a,b,]", "x = 1", `t == "it's"`, "a==b==c", "a in [", "and", "",
		"é == 1", "x == '\x00'", "x in ['a' 'b']",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		atoms, err := parseCond(in)
		if err != nil {
			return
		}
		text := condString(atoms)
		again, err := parseCond(text)
		if err != nil {
			t.Fatalf("parseCond(%q) ok, but its text %q does not read back: %v", in, text, err)
		}
		if got := condString(again); got != text {
			t.Fatalf("parseCond(%q): text %q reads back as %q", in, text, got)
		}
	})
}

// condKnobs is a space with a choice that switches knobs on, a knob nested
// under an int, and a knob under two conditions.
func condKnobs() []Knob {
	return []Knob{
		{Name: "opt", Kind: KnobChoice, Choices: []string{"adam", "sgd", "rms"}},
		{Name: "lr", Kind: KnobFloat, Low: 1e-4, High: 1, Log: true},
		{Name: "momentum", Kind: KnobFloat, Low: 0, High: 0.99, When: "opt == sgd"},
		{Name: "nesterov", Kind: KnobChoice, Choices: []string{"yes", "no"}, When: "opt in [sgd]"},
		{Name: "layers", Kind: KnobInt, Low: 1, High: 4},
		{Name: "width_3", Kind: KnobInt, Low: 8, High: 64, Step: 8, When: "layers >= 3"},
		{Name: "beta2", Kind: KnobFloat, Low: 0.9, High: 0.999, When: "opt != 'sgd' and layers < 4"},
		{Name: "damp", Kind: KnobFloat, Low: 0, High: 1, When: "nesterov == no"},
	}
}

func mustSpace(t *testing.T, knobs []Knob) *Space {
	t.Helper()
	s, err := NewSpace(knobs)
	if err != nil {
		t.Fatalf("NewSpace: %v", err)
	}
	return s
}

func TestNewSpaceNormalisesConditions(t *testing.T) {
	s := mustSpace(t, condKnobs())
	got := map[string]string{}
	for _, k := range s.Knobs() {
		got[k.Name] = k.When
	}
	want := map[string]string{"opt": "", "lr": "", "momentum": "opt == 'sgd'", "nesterov": "opt in ['sgd']",
		"layers": "", "width_3": "layers >= 3", "beta2": "opt != 'sgd' and layers < 4", "damp": "nesterov == 'no'"}
	for n, w := range want {
		if got[n] != w {
			t.Errorf("knob %s: When = %q, want %q", n, got[n], w)
		}
	}
	if w, ok := s.Conditional("damp"); !ok || w != "nesterov == 'no'" {
		t.Errorf("Conditional(damp) = %q, %v", w, ok)
	}
	if _, ok := s.Conditional("lr"); ok {
		t.Errorf("Conditional(lr) = true, want false")
	}
}

func TestNewSpaceRefusesConditions(t *testing.T) {
	base := func(extra ...Knob) []Knob {
		return append([]Knob{
			{Name: "opt", Kind: KnobChoice, Choices: []string{"adam", "sgd"}},
			{Name: "layers", Kind: KnobInt, Low: 2, High: 8, Step: 2},
			{Name: "lr", Kind: KnobFloat, Low: 0, High: 1},
			{Name: "epochs", Kind: KnobFixed, Value: "10"},
		}, extra...)
	}
	tests := []struct {
		name  string
		knobs []Knob
		want  string
	}{
		{"unknown knob", base(Knob{Name: "m", Kind: KnobFloat, High: 1, When: "otp == sgd"}),
			`condition names "otp", which is not a param`},
		{"unknown knob suggestion", base(Knob{Name: "m", Kind: KnobFloat, High: 1, When: "otp == sgd"}), `did you mean "opt"?`},
		{"unknown option", base(Knob{Name: "m", Kind: KnobFloat, High: 1, When: "opt == sdg"}), `"sdg" is not one of its options (adam, sgd) (did you mean "sgd"?)`},
		{"self cycle", base(Knob{Name: "m", Kind: KnobInt, High: 3, When: "m > 1"}), "cycle (m needs m)"},
		{"cycle", base(
			Knob{Name: "a", Kind: KnobInt, High: 3, When: "b > 1"},
			Knob{Name: "b", Kind: KnobInt, High: 3, When: "c > 1"},
			Knob{Name: "c", Kind: KnobInt, High: 3, When: "a > 1"}), "cycle (a needs b needs c needs a)"},
		{"never: int range", base(Knob{Name: "m", Kind: KnobFloat, High: 1, When: "layers > 8"}),
			`condition "layers > 8" can never hold: no value of layers passes "layers > 8"`},
		{"never: off the step", base(Knob{Name: "m", Kind: KnobFloat, High: 1, When: "layers == 3"}), "can never hold"},
		{"never: in off the grid", base(Knob{Name: "m", Kind: KnobFloat, High: 1, When: "layers in [1, 3, 9]"}), "can never hold"},
		{"never: contradiction", base(Knob{Name: "m", Kind: KnobFloat, High: 1, When: "opt == sgd and opt == adam"}), "can never hold"},
		{"never: int window", base(Knob{Name: "m", Kind: KnobFloat, High: 1, When: "layers > 4 and layers < 6"}), "can never hold"},
		{"never: nested", base(
			Knob{Name: "mom", Kind: KnobChoice, Choices: []string{"x", "y"}, When: "opt == sgd"},
			Knob{Name: "m", Kind: KnobFloat, High: 1, When: "mom == x and opt == adam"}), `no value of opt passes "opt == 'adam' and opt == 'sgd'"`},
		{"float tested", base(Knob{Name: "m", Kind: KnobFloat, High: 1, When: "lr > 0"}), `"lr" is a float param; conditions test choice and int params`},
		{"fixed tested", base(Knob{Name: "m", Kind: KnobFloat, High: 1, When: "epochs == 10"}), "is a fixed param"},
		{"order on choice", base(Knob{Name: "m", Kind: KnobFloat, High: 1, When: "opt < sgd"}), "order comparisons are for int params"},
		{"not whole", base(Knob{Name: "m", Kind: KnobFloat, High: 1, When: "layers > 2.5"}), `"2.5" is not a whole number`},
		{"several values", base(Knob{Name: "m", Kind: KnobFloat, High: 1, When: "layers > 2"}), ""},
		{"syntax", base(Knob{Name: "m", Kind: KnobFloat, High: 1, When: "opt == sgd or opt == adam"}), `param "m": condition "opt == sgd or opt == adam": at byte 11`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewSpace(tc.knobs)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("NewSpace: %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewSpace = %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// checkConditional fails unless p is a valid point of s: every knob is
// present exactly where its condition holds, and its text reads back to
// the same point.
func checkConditional(t *testing.T, s *Space, p Point) {
	t.Helper()
	v := slices.Clone(p.v)
	s.mask(v)
	for i := range v {
		if isAbsent(v[i]) != isAbsent(p.v[i]) {
			t.Fatalf("point %s: knob %s absent=%v, but its condition says absent=%v", s.FormatPoint(p), s.knobs[i].Name, isAbsent(p.v[i]), isAbsent(v[i]))
		}
	}
	text := s.FormatPoint(p)
	q, err := s.ParsePoint(text)
	if err != nil {
		t.Fatalf("ParsePoint(%q): %v", text, err)
	}
	if !q.Equal(p) {
		t.Fatalf("ParsePoint(FormatPoint(p)) = %v, want %v", q.v, p.v)
	}
}

func TestConditionalPointForms(t *testing.T) {
	s := mustSpace(t, condKnobs())
	p, err := s.ParsePoint("opt=adam,lr=0.01,layers=3,width_3=16,beta2=0.95")
	if err != nil {
		t.Fatal(err)
	}
	checkConditional(t, s, p)
	if got, want := s.FormatPoint(p), "opt=adam,lr=0.01,layers=3,width_3=16,beta2=0.95"; got != want {
		t.Errorf("FormatPoint = %q, want %q", got, want)
	}
	b, err := s.PointJSON(p)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `{"opt":"adam","lr":0.01,"layers":3,"width_3":16,"beta2":0.95}`; got != want {
		t.Errorf("PointJSON = %s, want %s", got, want)
	}
	vals := s.Values(p)
	if len(vals) != 8 {
		t.Fatalf("Values has %d entries, want one per knob (8)", len(vals))
	}
	if vals[2] != (KV{Name: "momentum", Absent: true}) || vals[0] != (KV{Name: "opt", Text: "adam"}) {
		t.Errorf("Values = %v", vals)
	}

	q, err := s.ParsePoint("damp=0.5,nesterov=no,momentum=0.9,opt=sgd,lr=1,layers=4,width_3=64")
	if err != nil {
		t.Fatal(err)
	}
	checkConditional(t, s, q)
	if got, want := s.FormatPoint(q), "opt=sgd,lr=1,momentum=0.9,nesterov=no,layers=4,width_3=64,damp=0.5"; got != want {
		t.Errorf("FormatPoint = %q, want %q", got, want)
	}
}

func TestParsePointConditionalRefuses(t *testing.T) {
	s := mustSpace(t, condKnobs())
	tests := []struct{ in, want string }{
		{"opt=adam,lr=0.01,layers=3,width_3=16,beta2=0.95,momentum=0.5", `param "momentum" is given, but its condition opt == 'sgd' is false in this point (leave it out)`},
		{"opt=sgd,lr=0.01,layers=3,width_3=16,nesterov=yes", `param "momentum" is missing (its condition opt == 'sgd' holds)`},
		{"opt=adam,lr=0.01,layers=3,beta2=0.95", `param "width_3" is missing (its condition layers >= 3 holds)`},
		{"opt=sgd,lr=0.01,layers=1,momentum=0,nesterov=yes,damp=1", `param "damp" is given, but its condition nesterov == 'no' is false`},
		{"lr=0.01,layers=1", `param "opt" is missing`},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			_, err := s.ParsePoint(tc.in)
			var pe *PointError
			if !errors.As(err, &pe) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ParsePoint(%q) = %v, want a *PointError saying %q", tc.in, err, tc.want)
			}
		})
	}
}

func TestSamplersConditional(t *testing.T) {
	s := mustSpace(t, condKnobs())
	samplers := map[string]Sampler{
		"random": NewRandomSampler(3),
		"sobol":  NewSobolSampler(3),
		"tpe":    NewTPESampler(3, TPEOptions{Startup: 8}),
	}
	for name, sm := range samplers {
		t.Run(name, func(t *testing.T) {
			h := History{Direction: Minimize}
			sgd, absentMom := 0, 0
			for trial := range 80 {
				p, err := sm.Ask(s, trial, h)
				if err != nil {
					t.Fatalf("Ask(%d): %v", trial, err)
				}
				checkConditional(t, s, p)
				if s.text(p, 0) == "sgd" {
					sgd++
				} else if isAbsent(p.v[2]) {
					absentMom++
				}
				score := p.v[1]
				if !isAbsent(p.v[2]) {
					score += p.v[2]
				}
				h.Trials = append(h.Trials, Trial{Number: trial, State: StateDone, Point: p, Score: score, HasScore: true})
			}
			if sgd == 0 || absentMom == 0 {
				t.Errorf("80 trials: %d with sgd, %d without momentum; want both branches", sgd, absentMom)
			}
		})
	}
}

// TestTPEModelsConditionalKnobsOnTheirTrials checks the group
// decomposition: momentum's model is fitted only on the trials where it
// was present. The sgd trials with momentum near 0.1 are the best, and the
// adam trials (which have no momentum) are middling: TPE's proposals
// under sgd must crowd near 0.1, which they can only if the adam trials
// neither count as observations of momentum nor shift its split.
func TestTPEModelsConditionalKnobsOnTheirTrials(t *testing.T) {
	s := mustSpace(t, []Knob{
		{Name: "opt", Kind: KnobChoice, Choices: []string{"adam", "sgd"}},
		{Name: "momentum", Kind: KnobFloat, Low: 0, High: 1, When: "opt == sgd"},
	})
	tpe := NewTPESampler(1, TPEOptions{Startup: 10})
	h := History{Direction: Minimize}
	n := 0
	for _, m := range []float64{0.1, 0.12, 0.9, 0.5, 0.7, 0.3, 0.95, 0.08, 0.6, 0.4, 0.85, 0.2} {
		h.Trials = append(h.Trials, Trial{Number: n, State: StateDone, Point: Point{v: []float64{1, m}}, Score: math.Abs(m - 0.1), HasScore: true})
		n++
	}
	for range 12 {
		h.Trials = append(h.Trials, Trial{Number: n, State: StateDone, Point: Point{v: []float64{0, absent}}, Score: 0.3, HasScore: true})
		n++
	}
	near, sgd := 0, 0
	for trial := n; trial < n+40; trial++ {
		p, err := tpe.Ask(s, trial, h)
		if err != nil {
			t.Fatal(err)
		}
		checkConditional(t, s, p)
		if isAbsent(p.v[1]) {
			continue
		}
		sgd++
		if math.Abs(p.v[1]-0.1) < 0.15 {
			near++
		}
	}
	if sgd == 0 || near*10 < sgd*7 {
		t.Errorf("%d of %d sgd proposals have momentum within 0.15 of 0.1; want at least 70%%", near, sgd)
	}
}

// bruteGrid lists the valid points of a discrete space by masking every
// cell of the full product and dropping repeats.
func bruteGrid(s *Space) []string {
	total := 1
	for _, c := range s.count {
		total *= c
	}
	seen := map[string]bool{}
	var out []string
	for n := range total {
		v := make([]float64, len(s.knobs))
		rest := n
		for i := len(s.knobs) - 1; i >= 0; i-- {
			v[i] = s.level(i, rest%s.count[i])
			rest /= s.count[i]
		}
		s.mask(v)
		text := s.FormatPoint(Point{v: v})
		if !seen[text] {
			seen[text] = true
			out = append(out, text)
		}
	}
	slices.Sort(out)
	return out
}

func TestGridEnumeratesValidCombinations(t *testing.T) {
	spaces := map[string][]Knob{
		"branch": {
			{Name: "opt", Kind: KnobChoice, Choices: []string{"adam", "sgd", "rms"}},
			{Name: "momentum", Kind: KnobFloat, Low: 0, High: 0.9, Step: 0.3, When: "opt == sgd"},
			{Name: "lr", Kind: KnobInt, Low: 1, High: 3},
		},
		"nested int": {
			{Name: "width_3", Kind: KnobInt, Low: 8, High: 32, Step: 8, When: "layers >= 3"},
			{Name: "layers", Kind: KnobInt, Low: 1, High: 7, Step: 2, When: "arch == mlp"},
			{Name: "arch", Kind: KnobChoice, Choices: []string{"cnn", "mlp"}},
			{Name: "width_5", Kind: KnobInt, Low: 8, High: 16, Step: 8, When: "layers in [5, 7] and arch != cnn"},
			{Name: "tag", Kind: KnobFixed, Value: "x", When: "layers != 3"},
		},
		"two tests": {
			{Name: "a", Kind: KnobChoice, Choices: []string{"x", "y", "z", "w"}},
			{Name: "n", Kind: KnobInt, Low: -3, High: 3},
			{Name: "p", Kind: KnobChoice, Choices: []string{"0", "1"}, When: "a in [x, z] and n > -2"},
			{Name: "q", Kind: KnobInt, Low: 0, High: 2, When: "n <= 0 and p == '1'"},
		},
	}
	for name, knobs := range spaces {
		t.Run(name, func(t *testing.T) {
			s := mustSpace(t, knobs)
			want := bruteGrid(s)
			size, finite := s.Size()
			if !finite || size != len(want) {
				t.Fatalf("Size() = %d, %v; want %d valid points", size, finite, len(want))
			}
			var got []string
			for trial := range size {
				p, err := NewGridSampler().Ask(s, trial, History{})
				if err != nil {
					t.Fatalf("Ask(%d): %v", trial, err)
				}
				checkConditional(t, s, p)
				got = append(got, s.FormatPoint(p))
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Errorf("grid cells:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			if _, err := NewGridSampler().Ask(s, size, History{}); err == nil {
				t.Errorf("Ask(%d) past the grid: nil error", size)
			}
		})
	}
}

func TestGridConditionalHugeInt(t *testing.T) {
	// An int tested by a condition splits into runs, not into levels: a
	// range of 2^40 values costs three runs.
	s := mustSpace(t, []Knob{
		{Name: "n", Kind: KnobInt, Low: 0, High: 1 << 40},
		{Name: "big", Kind: KnobChoice, Choices: []string{"a", "b"}, When: "n >= 1000"},
	})
	size, _ := s.Size()
	if want := 1000 + 2*((1<<40)+1-1000); size != want {
		t.Fatalf("Size = %d, want %d", size, want)
	}
	for _, trial := range []int{0, 999, 1000, 1001, size - 1} {
		p, err := NewGridSampler().Ask(s, trial, History{})
		if err != nil {
			t.Fatal(err)
		}
		checkConditional(t, s, p)
	}
	p, _ := NewGridSampler().Ask(s, size-1, History{})
	if got, want := s.FormatPoint(p), fmt.Sprintf("n=%d,big=b", 1<<40); got != want {
		t.Errorf("last cell = %q, want %q", got, want)
	}
}

func TestSpecConditional(t *testing.T) {
	toml := `direction = "minimize"
budget = 50
[param]
opt = "choice:adam,sgd"
momentum = { type = "float", low = 0, high = 0.99, when = "opt == \"sgd\"" }
nesterov = "choice:yes,no if opt=sgd"
layers = "int:1:4"
width_3 = { type = "int", low = 8, high = 64, step = 8, when = "layers >= 3" }
`
	s, err := ParseSpec([]byte(toml))
	if err != nil {
		t.Fatal(err)
	}
	f, err := SpecFromFlags([]string{
		"opt=choice:adam,sgd", "momentum=float:0:0.99 if opt == 'sgd'", "nesterov=choice:yes,no if opt in [sgd]",
		"layers=int:1:4", "width_3=int:8:64:step=8 if layers>=3",
	}, "minimize", "", "", 50, 0)
	if err != nil {
		t.Fatal(err)
	}
	// "opt in [sgd]" and "opt == sgd" are different texts, so differ.
	if d := DiffSpec(s, f); d != `param.nesterov.when: "opt == 'sgd'" → "opt in ['sgd']"` {
		t.Errorf("DiffSpec = %q", d)
	}
	f.Space.knobs[2].When = "opt == 'sgd'"
	if !bytes.Equal(s.Canonical(), f.Canonical()) {
		t.Errorf("TOML and flags differ:\n%s\n%s", s.Canonical(), f.Canonical())
	}
	back, err := ParseCanonical(s.Canonical())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back.Canonical(), s.Canonical()) {
		t.Errorf("canonical round trip changed:\n%s\n%s", s.Canonical(), back.Canonical())
	}
	if !strings.Contains(string(s.Canonical()), `"when": "layers >= 3"`) {
		t.Errorf("canonical form lacks the condition:\n%s", s.Canonical())
	}
	// An unconditional spec's canonical bytes have no "when" key: studies
	// created before conditions existed keep their bytes.
	u, err := SpecFromFlags([]string{"x=float:0:1"}, "minimize", "", "", 5, 0)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(u.Canonical()), "when") {
		t.Errorf("unconditional canonical form mentions when:\n%s", u.Canonical())
	}
}

func TestSpecConditionalRefuses(t *testing.T) {
	tests := []struct {
		name  string
		flags []string
		want  string
	}{
		{"empty condition", []string{"opt=choice:a,b", "m=float:0:1 if "}, `nothing after " if "`},
		{"unknown", []string{"opt=choice:a,b", "m=float:0:1 if op == a"}, `condition names "op", which is not a param`},
		{"never", []string{"n=int:1:3", "m=float:0:1 if n > 3"}, "can never hold"},
		{"grid too", []string{"n=int:1:3", "m=float:0:1 if n == 0"}, "can never hold"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := SpecFromFlags(tc.flags, "minimize", "", "", 5, 0)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("SpecFromFlags = %v, want an error saying %q", err, tc.want)
			}
		})
	}
	_, err := ParseSpec([]byte("direction = \"min\"\nbudget = 1\n[param]\nopt = \"choice:a,b\"\nm = { type = \"float\", low = 0, high = 1, when = 3 }\n"))
	if err == nil || !strings.Contains(err.Error(), "param.m.when") {
		t.Errorf("ParseSpec with when = 3: %v, want an error naming param.m.when", err)
	}
}

func TestGridSpecConditional(t *testing.T) {
	s, err := SpecFromFlags([]string{"opt=choice:adam,sgd", "m=float:0:0.9:step=0.3 if opt==sgd", "lr=int:1:2"}, "", "grid", "", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	// adam: 2 cells (lr); sgd: 4 momenta × 2 = 8.
	if s.Budget != 10 {
		t.Errorf("grid budget = %d, want 10 valid cells", s.Budget)
	}
}

// FuzzConditionalSpace builds a space from four fuzzed conditions and,
// when NewSpace accepts it, checks that every sampler gives valid points
// (present exactly where the conditions hold, text round trip) and that
// grid's cells are exactly the valid points. The seeds run as a regular
// test.
func FuzzConditionalSpace(f *testing.F) {
	f.Add("", "a == p", "n >= 2 and a != r", "f2 == 1 and n in [1, 5]")  // a chain
	f.Add("", "a == p", "n >= 2 and a != r", "f2 == 1 and n in [1, -3]") // never holds
	f.Add("g == y", "a in [p, q]", "g not in [x]", "")
	f.Add("n < 0", "", "a == q", "n > -3")
	f.Add("a == p", "g == x", "n != 0", "a == q") // a tests itself
	f.Add("n > 1", "a == q", "", "")              // a cycle
	f.Fuzz(func(t *testing.T, wa, wn, wf, wg string) {
		s, err := NewSpace([]Knob{
			{Name: "a", Kind: KnobChoice, Choices: []string{"p", "q", "r"}, When: wa},
			{Name: "n", Kind: KnobInt, Low: -3, High: 5, When: wn},
			{Name: "f2", Kind: KnobInt, Low: 0, High: 2, When: wf},
			{Name: "g", Kind: KnobChoice, Choices: []string{"x", "y"}, When: wg},
		})
		if err != nil {
			if !strings.HasPrefix(err.Error(), "study: ") {
				t.Fatalf("NewSpace error %q lacks the package prefix", err)
			}
			return
		}
		motpe := NewTPESampler(1, TPEOptions{Startup: 3, Directions: []Direction{Minimize, Maximize}})
		for _, sm := range []Sampler{NewRandomSampler(1), NewSobolSampler(1), NewTPESampler(1, TPEOptions{Startup: 3}), motpe} {
			h := History{Direction: Minimize}
			for trial := range 12 {
				p, err := sm.Ask(s, trial, h)
				if err != nil {
					t.Fatal(err)
				}
				checkConditional(t, s, p)
				h.Trials = append(h.Trials, Trial{Number: trial, State: StateDone, Point: p, Score: float64(trial % 5), HasScore: true,
					Scores: []float64{float64(trial % 5), float64(trial % 3)}})
			}
		}
		want := bruteGrid(s)
		size, _ := s.Size()
		if size != len(want) {
			t.Fatalf("Size = %d, want %d valid points", size, len(want))
		}
		var got []string
		for trial := range size {
			p, err := NewGridSampler().Ask(s, trial, History{})
			if err != nil {
				t.Fatal(err)
			}
			checkConditional(t, s, p)
			got = append(got, s.FormatPoint(p))
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("grid cells %q, want %q", got, want)
		}
		// Every valid point's presence pattern must be reachable: a knob
		// NewSpace accepted can be present somewhere.
		for i, k := range s.knobs {
			if !slices.ContainsFunc(want, func(p string) bool { return strings.HasPrefix(p, k.Name+"=") || strings.Contains(p, ","+k.Name+"=") }) {
				t.Fatalf("knob %d (%s, when %q) is absent from every valid point, yet NewSpace accepted it", i, k.Name, k.When)
			}
		}
	})
}
