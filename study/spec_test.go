package study

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

func TestParseSpecFull(t *testing.T) {
	text, err := os.ReadFile("testdata/spec_full.toml")
	if err != nil {
		t.Fatal(err)
	}
	s, err := ParseSpec(text)
	if err != nil {
		t.Fatal(err)
	}
	if s.Direction != Minimize || s.Metric != "val_loss" || s.Budget != 200 || s.Seed != 42 || s.MaxRetries != 2 {
		t.Errorf("ParseSpec top level = %+v", s)
	}
	if s.Sampler != (SamplerSpec{Name: "tpe", Startup: 16, Candidates: 32}) {
		t.Errorf("Sampler = %+v", s.Sampler)
	}
	wantPruner := PrunerSpec{Name: "median", Percentile: 50, Startup: 3, Warmup: 5, Interval: 2, MinTrials: 1}
	if s.Pruner != wantPruner {
		t.Errorf("Pruner = %+v, want %+v", s.Pruner, wantPruner)
	}
	var names []string
	for _, k := range s.Space.Knobs() {
		names = append(names, k.Name)
	}
	if got := strings.Join(names, ","); got != "lr,batch,opt,width,drop,epochs" {
		t.Errorf("knob order = %s, want the file's order", got)
	}
	k := s.Space.Knobs()
	if k[3].Choices[1] != "128" || k[5].Value != "10" || !k[1].Log || k[4].Step != 0.1 {
		t.Errorf("knobs = %+v", k)
	}

	// The same study from flags.
	f, err := SpecFromFlags([]string{
		"lr=float:1e-5:1e-1:log", "batch=int:16:256:log", "opt=choice:adam,sgd",
		"width=choice:64,128", "drop=float:0:0.5:step=0.1", "epochs=fixed:10",
	}, "min", "tpe:startup=16,candidates=32", "median:startup=3,warmup=5,interval=2", 200, 42)
	if err != nil {
		t.Fatal(err)
	}
	f.Metric, f.MaxRetries = "val_loss", 2
	if d := DiffSpec(s, f); d != "" {
		t.Errorf("flags and TOML differ:\n%s", d)
	}
	if !bytes.Equal(s.Canonical(), f.Canonical()) {
		t.Errorf("Canonical differs:\n%s\n%s", s.Canonical(), f.Canonical())
	}
}

func TestParseSpecDefaults(t *testing.T) {
	s, err := ParseSpec([]byte("direction = \"max\"\nbudget = 10\n[param]\nx = \"float:0:1\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Sampler != (SamplerSpec{Name: "tpe", Startup: 10, Candidates: 24}) || s.Pruner != (PrunerSpec{Name: "none"}) ||
		s.Direction != Maximize || s.Seed != 0 || s.MaxRetries != 0 {
		t.Errorf("defaults = %+v", s)
	}
	g, err := ParseSpec([]byte("sampler = \"grid\"\n[param]\nx = \"int:1:4\"\ny = \"choice:a,b\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if g.Budget != 8 || g.Direction != DirectionUnknown {
		t.Errorf("grid spec budget %d direction %v, want 8 unknown", g.Budget, g.Direction)
	}
	d, err := ParseSpec([]byte("direction = \"min\"\nbudget = 5\nparam.b.type = \"fixed\"\nparam.b.value = 1\nparam.a = \"int:1:2\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if k := d.Space.Knobs(); len(k) != 2 || k[0].Name != "b" || k[1].Name != "a" {
		t.Errorf("dotted keys: knobs %+v, want b then a", k)
	}
	p, err := ParseSpec([]byte("direction = \"min\"\nbudget = 5\npruner = \"asha\"\n[param]\nx = \"float:0:1\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p.Pruner != (PrunerSpec{Name: "asha", Eta: 4}) {
		t.Errorf("asha defaults = %+v", p.Pruner)
	}
}

func TestParseSpecErrors(t *testing.T) {
	const params = "\n[param]\nx = \"float:0:1\"\n"
	tests := []struct{ name, text, want string }{
		{"typo top", "direction = \"min\"\nbugdet = 10" + params, `bugdet: unknown key (did you mean "budget"?)`},
		{"typo sampler", "direction = \"min\"\nbudget = 10\n[sampler]\nnmae = \"tpe\"" + params, `sampler.nmae: unknown key (did you mean "name"?)`},
		{"typo pruner key", "direction = \"min\"\nbudget = 10\n[pruner]\nname = \"median\"\nwarmpu = 3" + params, `pruner.warmpu: unknown key (did you mean "warmup"?)`},
		{"typo param key", "direction = \"min\"\nbudget = 10\n[param]\nx = { type = \"float\", low = 0, hihg = 1 }", `needs low and high`},
		{"typo param key 2", "direction = \"min\"\nbudget = 10\n[param]\nx = { type = \"float\", low = 0, high = 1, lgo = true }", `param.x.lgo: unknown key (did you mean "log"?)`},
		{"typo sampler name", "direction = \"min\"\nbudget = 10\nsampler = \"tep\"" + params, `did you mean "tpe"?`},
		{"typo pruner name", "direction = \"min\"\nbudget = 10\npruner = \"meidan\"" + params, `did you mean "median"?`},
		{"typo direction", "direction = \"minimse\"\nbudget = 10" + params, `did you mean "minimize"?`},
		{"typo kind", "direction = \"min\"\nbudget = 10\n[param]\nx = \"flaot:0:1\"", `did you mean "float"?`},
		{"key of other pruner", "direction = \"min\"\nbudget = 10\n[pruner]\nname = \"median\"\neta = 3" + params, "applies to pruner asha"},
		{"key of other sampler", "direction = \"min\"\nbudget = 10\n[sampler]\nname = \"random\"\nstartup = 3" + params, "applies to sampler tpe"},
		{"wrong type", "direction = \"min\"\nbudget = \"ten\"" + params, "budget: want a whole number"},
		{"no params", "direction = \"min\"\nbudget = 10\n", "no [param] table"},
		{"tpe without direction", "budget = 10" + params, "needs a direction"},
		{"pruner without direction", "budget = 10\nsampler = \"random\"\npruner = \"median\"" + params, "needs a direction"},
		{"no budget", "direction = \"min\"" + params, "budget 0"},
		{"grid too small", "sampler = \"grid\"\nbudget = 10\n[param]\nx = \"int:1:3\"", "only 3 cells"},
		{"grid continuous", "sampler = \"grid\"\n[param]\nx = \"float:1:3\"", "give it a step"},
		{"bad toml", "direction = ", "study: spec:"},
		{"version", "version = 2" + params, "version 2"},
		{"percentile needs value", "direction = \"min\"\nbudget = 10\npruner = \"percentile\"" + params, "needs percentile"},
		{"bad param", "direction = \"min\"\nbudget = 10\n[param]\nx = \"float:1:0\"", "swap them"},
		{"comma option", "direction = \"min\"\nbudget = 10\n[param]\nx = { type = \"choice\", choices = [\"a,b\"] }", "contains ','"},
		{"negative seed", "direction = \"min\"\nbudget = 10\nseed = -1" + params, "seed -1"},
		{"infinite low", "direction = \"min\"\nbudget = 10\n[param]\nx = { type = \"float\", low = -inf, high = 1 }", `param "x": low -Inf and high 1 must be finite numbers (give bounds within`},
		{"nan high", "direction = \"min\"\nbudget = 10\n[param]\nx = { type = \"float\", low = 0, high = nan }", `param "x": low 0 and high NaN must be finite`},
		{"log low zero", "direction = \"min\"\nbudget = 10\n[param]\nx = { type = \"float\", low = 0, high = 1, log = true }", "log scale needs low > 0, got 0 (raise low or drop log)"},
		// int64 values past 2^53 used to be converted to float64 silently:
		// 9007199254740993 became 9007199254740992.
		{"int past 2^53", "direction = \"min\"\nbudget = 10\n[param]\nx = { type = \"int\", low = 0, high = 9007199254740993 }", "param.x.high: 9007199254740993 is beyond ±2^53"},
		{"int near 2^63", "direction = \"min\"\nbudget = 10\n[param]\nx = { type = \"int\", low = -9223372036854775808, high = 9223372036854775807 }", "param.x.low: -9223372036854775808 is beyond ±2^53"},
		{"int text past 2^53", "direction = \"min\"\nbudget = 10\n[param]\nx = \"int:0:9007199254740993\"", `param "x": high 9007199254740993 is beyond ±2^53`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ParseSpec([]byte(tc.text))
			if err == nil {
				t.Fatalf("ParseSpec = %+v, nil; want an error containing %q", s, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ParseSpec error = %q, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestSpecFromFlagsErrors(t *testing.T) {
	tests := []struct {
		name                       string
		params                     []string
		direction, sampler, pruner string
		budget                     int
		want                       string
	}{
		{"no params", nil, "min", "", "", 10, "no params"},
		{"no kind", []string{"x"}, "min", "", "", 10, "want name=kind:args"},
		{"bad number", []string{"x=float:a:1"}, "min", "", "", 10, `low "a" is not a number`},
		{"bad option", []string{"x=float:0:1:lgo"}, "min", "", "", 10, `did you mean "log"?`},
		{"equals in option", []string{"x=choice:a=b,c"}, "min", "", "", 10, "contains '='"},
		{"bad direction", []string{"x=float:0:1"}, "up", "", "", 10, "want minimize or maximize"},
		{"sampler option typo", []string{"x=float:0:1"}, "min", "tpe:startpu=3", "", 10, `did you mean "startup"?`},
		{"sampler option value", []string{"x=float:0:1"}, "min", "tpe:startup=x", "", 10, "want a whole number"},
		{"pruner option of asha", []string{"x=float:0:1"}, "min", "", "median:eta=3", 10, "applies to pruner asha"},
		{"duplicate option", []string{"x=float:0:1"}, "min", "", "median:warmup=3,warmup=4", 10, "given twice"},
		// strconv.ParseFloat returns ±Inf with ErrRange; this said
		// `low "-1e309" is not a number`.
		{"low past float64", []string{"x=float:-1e309:1"}, "min", "", "", 10, `param "x": low -1e309 is beyond float64's range (give bounds within ±1.7976931348623157e+308)`},
		{"infinite high", []string{"x=float:0:inf"}, "min", "", "", 10, `param "x": low 0 and high +Inf must be finite numbers (give bounds within`},
		{"nan low", []string{"x=float:nan:1"}, "min", "", "", 10, "must be finite numbers"},
		{"log negative low", []string{"x=float:-1:1:log"}, "min", "", "", 10, "log scale needs low > 0"},
		{"int past 2^53", []string{"x=int:0:9007199254740993"}, "min", "", "", 10, `param "x": high 9007199254740993 is beyond ±2^53, where float64 skips whole numbers (use type float, or bounds within ±9007199254740992)`},
		{"int at 2^63", []string{"x=int:-9223372036854775808:0"}, "min", "", "", 10, `low -9223372036854775808 is beyond ±2^53`},
		{"int past 2^64", []string{"x=int:0:99999999999999999999"}, "min", "", "", 10, `high 99999999999999999999 is beyond ±2^53`},
		{"int exponent past 2^53", []string{"x=int:0:1e300"}, "min", "", "", 10, `high 1e300 is beyond ±2^53`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := SpecFromFlags(tc.params, tc.direction, tc.sampler, tc.pruner, tc.budget, 1)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("SpecFromFlags error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestCanonicalRoundTrip(t *testing.T) {
	specs := map[string]*Spec{}
	text, _ := os.ReadFile("testdata/spec_full.toml")
	var err error
	if specs["full"], err = ParseSpec(text); err != nil {
		t.Fatal(err)
	}
	if specs["asha"], err = SpecFromFlags([]string{"x=int:1:9"}, "max", "random", "asha:min_resource=2,eta=3", 7, 1<<63+5); err != nil {
		t.Fatal(err)
	}
	if specs["percentile"], err = SpecFromFlags([]string{"x=float:0:1"}, "", "sobol", "", 7, 0); err != nil {
		t.Fatal(err)
	}
	for name, s := range specs {
		t.Run(name, func(t *testing.T) {
			c := s.Canonical()
			back, err := ParseCanonical(c)
			if err != nil {
				t.Fatalf("ParseCanonical(%s): %v", c, err)
			}
			if !bytes.Equal(back.Canonical(), c) {
				t.Errorf("Canonical after a round trip =\n%s\nwant\n%s", back.Canonical(), c)
			}
			if d := DiffSpec(s, back); d != "" {
				t.Errorf("DiffSpec after round trip = %q", d)
			}
		})
	}
	for _, bad := range []struct{ name, text, want string }{
		{"unknown field", strings.Replace(string(specs["asha"].Canonical()), `"budget"`, `"extra": 1, "budget"`, 1), "unknown field"},
		{"version", strings.Replace(string(specs["asha"].Canonical()), `"version": 1`, `"version": 9`, 1), "version 9"},
		{"format", strings.Replace(string(specs["asha"].Canonical()), `soma-study-spec`, `other`, 1), "format"},
		{"trailing", string(specs["asha"].Canonical()) + "{}", "trailing"},
	} {
		t.Run(bad.name, func(t *testing.T) {
			_, err := ParseCanonical([]byte(bad.text))
			if err == nil || !strings.Contains(err.Error(), bad.want) {
				t.Errorf("ParseCanonical error = %v, want it to contain %q", err, bad.want)
			}
		})
	}
}

func TestDiffSpec(t *testing.T) {
	base := func() *Spec {
		s, err := SpecFromFlags([]string{"lr=float:1e-5:1e-1:log", "opt=choice:adam,sgd"}, "min", "", "", 100, 1)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	tests := []struct {
		name   string
		change func(*Spec)
		want   []string
	}{
		{"equal", func(*Spec) {}, nil},
		{"budget", func(s *Spec) { s.Budget = 200 }, []string{"budget: 100 → 200"}},
		{"direction", func(s *Spec) { s.Direction = Maximize }, []string{"direction: minimize → maximize"}},
		{"sampler", func(s *Spec) { s.Sampler = SamplerSpec{Name: "random"} },
			[]string{"sampler.name: tpe → random", "sampler.startup: 10 → (none)"}},
		{"param", func(s *Spec) {
			s.Space, _ = NewSpace([]Knob{{Name: "lr", Kind: KnobFloat, Low: 1e-5, High: 0.2, Log: true},
				{Name: "opt", Kind: KnobChoice, Choices: []string{"adam", "sgd"}}, {Name: "mom", Kind: KnobFloat, High: 1}})
		}, []string{"param.lr.high: 0.1 → 0.2", "param.mom.type: (none) → float", "param order: lr,opt → lr,opt,mom"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			old, new := base(), base()
			tc.change(new)
			d := DiffSpec(old, new)
			if tc.want == nil {
				if d != "" {
					t.Errorf("DiffSpec = %q, want \"\"", d)
				}
				return
			}
			for _, w := range tc.want {
				if !strings.Contains(d, w) {
					t.Errorf("DiffSpec =\n%s\nwant a line %q", d, w)
				}
			}
		})
	}
}

func TestNewSamplerAndPruner(t *testing.T) {
	for _, tc := range []struct{ sampler, pruner string }{
		{"tpe", "none"}, {"random", "median"}, {"sobol", "percentile:percentile=25"}, {"grid", "asha"},
	} {
		t.Run(tc.sampler+"/"+tc.pruner, func(t *testing.T) {
			s, err := SpecFromFlags([]string{"x=int:0:9"}, "min", tc.sampler, tc.pruner, 0, 3)
			if tc.sampler != "grid" {
				s, err = SpecFromFlags([]string{"x=int:0:9"}, "min", tc.sampler, tc.pruner, 10, 3)
			}
			if err != nil {
				t.Fatal(err)
			}
			sm, err := s.NewSampler()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sm.Ask(s.Space, 0, History{Direction: s.Direction}); err != nil {
				t.Fatal(err)
			}
			pr, err := s.NewPruner()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := pr.Prune(0, []Step{{Step: 1, Value: 1}}, History{Direction: s.Direction}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// FuzzParseSpec: whatever ParseSpec accepts has a canonical form that
// reads back to the same study.
func FuzzParseSpec(f *testing.F) {
	full, _ := os.ReadFile("testdata/spec_full.toml")
	for _, seed := range []string{
		string(full),
		"direction = \"min\"\nbudget = 10\n[param]\nx = \"float:0:1\"\n",
		"sampler = \"grid\"\n[param]\nx = \"int:1:4\"\ny = \"choice:a,b\"\nz = \"fixed:q\"\n",
		"direction = \"max\"\nbudget = 3\npruner = \"asha:eta=3\"\n[param.x]\ntype = \"int\"\nlow = 1\nhigh = 100\nlog = true\n",
		"direction = \"max\"\nbudget = 3\npruner = \"percentile:percentile=10\"\n[param]\nx = { type = \"choice\", choices = [1, 2.5, true] }\n",
		"direction = \"min\"\nbudget = 10\n[param]\nx = { type = \"float\", low = -1.7e308, high = 1.7e308, step = 1e307 }\n",
		"direction = \"min\"\nbudget = 10\n[param]\nx = { type = \"int\", low = -9007199254740992, high = 9007199254740991, step = 3 }\n",
		"bugdet = 1", "[param]\n\"a b\" = \"fixed:1\"", "",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, text []byte) {
		s, err := ParseSpec(text)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "study: ") {
				t.Fatalf("ParseSpec error %q lacks the package prefix", err)
			}
			return
		}
		c := s.Canonical()
		back, err := ParseCanonical(c)
		if err != nil {
			t.Fatalf("ParseCanonical(Canonical(ParseSpec(%q))): %v\n%s", text, err, c)
		}
		if !bytes.Equal(back.Canonical(), c) || DiffSpec(s, back) != "" {
			t.Fatalf("canonical round trip changed the spec:\n%s\n%s", c, back.Canonical())
		}
	})
}
