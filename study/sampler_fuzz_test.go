package study

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// fuzzTrials is how many trials each sampler runs per fuzzed space: past
// tpe's startup (fuzzStartup), so its model proposes most of them.
const (
	fuzzTrials  = 20
	fuzzStartup = 5
)

// floatsBetween returns how many float64 values lie in (low, high]
// (−0 and +0 count as one), so that a test can tell a range with room for
// fuzzTrials distinct values from one that has a handful.
func floatsBetween(low, high float64) uint64 {
	ord := func(x float64) int64 {
		b := int64(math.Float64bits(x))
		if b < 0 {
			b = math.MinInt64 - b // negative floats order backwards
		}
		return b
	}
	// The true difference is below 2^64; the wrap of int64 keeps it.
	return uint64(ord(high) - ord(low))
}

// manyValues reports whether knob k is continuous and has so many
// representable values that fuzzTrials draws must all differ: 2^40 keeps
// both a 53-bit uniform and sobol's 30-bit coordinates (at least 2^10
// float spacings apart after scaling) from colliding.
func manyValues(k Knob) bool {
	return k.Kind == KnobFloat && k.Step == 0 && floatsBetween(k.Low, k.High) >= 1<<40
}

// checkSamplerRun runs fuzzTrials trials of sampler on space, feeding each
// point back as a result (every seventh as still running, which tpe treats
// as pending; two scores each, for the multi-objective samplers), and
// fails unless every point is inside its knobs' bounds,
// on their grids, whole for int knobs, readable from its own text, and —
// for knobs with many values — different on every trial.
func checkSamplerRun(t *testing.T, name string, sampler Sampler, space *Space, trials int) {
	t.Helper()
	knobs := space.Knobs()
	seen := make([]map[float64]int, len(knobs))
	for i := range seen {
		seen[i] = map[float64]int{}
	}
	h := History{Direction: Minimize}
	for trial := range trials {
		p, err := sampler.Ask(space, trial, h)
		if err != nil {
			t.Fatalf("%s: Ask(trial %d): %v", name, trial, err)
		}
		if len(p.v) != len(knobs) {
			t.Fatalf("%s: trial %d: point has %d values, space has %d knobs", name, trial, len(p.v), len(knobs))
		}
		text := space.FormatPoint(p)
		for i, k := range knobs {
			x := p.v[i]
			switch k.Kind {
			case KnobInt, KnobFloat:
				if !(x >= k.Low && x <= k.High) {
					t.Fatalf("%s: trial %d: %s = %v, outside [%v, %v]", name, trial, k.Name, x, k.Low, k.High)
				}
				if k.Kind == KnobInt && x != math.Trunc(x) {
					t.Fatalf("%s: trial %d: int %s = %v", name, trial, k.Name, x)
				}
			case KnobChoice:
				if x != math.Trunc(x) || x < 0 || int(x) >= len(k.Choices) {
					t.Fatalf("%s: trial %d: choice %s = %v", name, trial, k.Name, x)
				}
			}
			if manyValues(k) {
				if prev, dup := seen[i][x]; dup {
					t.Fatalf("%s: trials %d and %d both gave %s = %v (of %d values in [%v, %v])",
						name, prev, trial, k.Name, x, floatsBetween(k.Low, k.High), k.Low, k.High)
				}
				seen[i][x] = trial
			}
		}
		// ParsePoint snaps a stepped value to its grid level, so reading
		// back the same bits also proves the point is on its grid.
		back, err := space.ParsePoint(text)
		if err != nil {
			t.Fatalf("%s: trial %d: point %s does not read back: %v", name, trial, text, err)
		}
		if !back.Equal(p) {
			t.Fatalf("%s: trial %d: point %s reads back as %s", name, trial, text, space.FormatPoint(back))
		}
		// Two scores for the multi-objective samplers, which read Scores;
		// the others read Score.
		hash := fnv1a(text)
		sc := []float64{float64(hash%1000) / 1000, float64(hash>>32%1000) / 1000}
		tr := Trial{Number: trial, State: StateDone, Point: p, Score: sc[0], HasScore: true, Scores: sc, LastStep: -1}
		if trial%7 == 6 {
			tr.State, tr.HasScore = StateRunning, false
		}
		h.Trials = append(h.Trials, tr)
	}
}

// fuzzKnob builds knob "x" from fuzzed fields: kind 0 is int (bounds and
// step truncated to whole numbers, so the fuzzer reaches valid int knobs),
// kind 1 float; bounds are ordered.
func fuzzKnob(kind uint8, low, high, step float64, log bool) Knob {
	k := Knob{Name: "x", Kind: KnobFloat, Low: min(low, high), High: max(low, high), Step: step, Log: log}
	if math.IsNaN(low) || math.IsNaN(high) {
		k.Low, k.High = low, high
	}
	if kind%2 == 0 {
		k.Kind = KnobInt
		k.Low, k.High, k.Step = math.Trunc(k.Low), math.Trunc(k.High), math.Trunc(k.Step)
	}
	return k
}

// FuzzSamplers: for any knob NewSpace accepts, alone and beside a
// continuous and a choice knob, random, sobol, tpe, multi-objective tpe,
// nsga2 and (when the space is discrete) grid give points inside the bounds, on the grid, and distinct
// across trials where the knob is continuous with room for it; a knob
// NewSpace refuses is refused by name. The seeds include the ranges of
// issue 13 item 3: a float range wider than math.MaxFloat64 gave
// 1.6999999999999997e+308 on every random and sobol trial and NaN from
// tpe's model, because high − low overflowed to +Inf.
func FuzzSamplers(f *testing.F) {
	const max53 = 1 << 53
	for _, s := range []struct {
		kind            uint8
		low, high, step float64
		log             bool
	}{
		{1, -1.7e308, 1.7e308, 0, false},                               // issue 13 item 3, spec
		{1, -1e308, 1e308, 0, false},                                   // issue 13 item 3, --param
		{1, -math.MaxFloat64, math.MaxFloat64, 0, false},               // widest range
		{1, -math.MaxFloat64, 1, 0, false},                             // overflows with one huge bound
		{1, -1.7e308, 1.7e308, 1e307, false},                           // step: j·step overflows
		{1, -math.MaxFloat64, math.MaxFloat64, math.MaxFloat64, false}, // 3 levels
		{1, 5e-324, math.MaxFloat64, 0, true},                          // log: ratio overflows
		{1, 1e300, math.Nextafter(1e300, 2e300), 0, true},              // log: ln(high) = ln(low)
		{1, 1, 1 + 1e-12, 0, true},                                     // narrow log, 4503 values
		{1, 5e-324, 1e-320, 0, false},                                  // subnormals
		{1, 0, 5e-324, 0, false},                                       // two values
		{1, 0.5, 0.5, 0, false},                                        // equal bounds
		{1, 2, 2, 0, true},
		{1, 0, 1, 0.1, false},
		{1, -5, 5, 0, false},
		{1, 1e-5, 1e-1, 0, true},
		{0, -max53, max53, 0, false},     // width 2^54: past float64's whole numbers
		{0, -max53, max53 - 1, 3, false}, // width 2^54−1 rounds to 2^54 in float64
		{0, 1, max53, 0, true},
		{0, max53 - 1, max53, 0, true}, // log-int: ln(high+½) = ln(low−½)
		{0, -3, 3, 0, false},
		{0, 7, 7, 0, false},
		{0, -1e19, 1e19, 0, false}, // refused: beyond ±2^53
		{1, math.Inf(-1), 1, 0, false},
		{1, math.NaN(), 1, 0, false},
	} {
		f.Add(s.kind, s.low, s.high, s.step, s.log, uint64(1))
	}
	f.Fuzz(func(t *testing.T, kind uint8, low, high, step float64, log bool, seed uint64) {
		k := fuzzKnob(kind, low, high, step, log)
		alone, err := NewSpace([]Knob{k})
		if err != nil {
			if !strings.HasPrefix(err.Error(), `study: param "x": `) || !strings.Contains(err.Error(), "(") {
				t.Fatalf("NewSpace(%+v) error %q does not name the param and the fix", k, err)
			}
			return
		}
		mixed, err := NewSpace([]Knob{k, {Name: "y", Kind: KnobFloat, Low: -1, High: 1}, {Name: "c", Kind: KnobChoice, Choices: []string{"a", "b", "c"}}})
		if err != nil {
			t.Fatal(err)
		}
		for _, space := range []*Space{alone, mixed} {
			for _, sm := range []struct {
				name    string
				sampler Sampler
			}{
				{"random", NewRandomSampler(seed)},
				{"sobol", NewSobolSampler(seed)},
				{"tpe", NewTPESampler(seed, TPEOptions{Startup: fuzzStartup})},
				{"motpe", NewTPESampler(seed, TPEOptions{Startup: fuzzStartup, Directions: []Direction{Minimize, Maximize}})},
				{"nsga2", NewNSGA2Sampler(seed, []Direction{Minimize, Maximize})},
			} {
				checkSamplerRun(t, fmt.Sprintf("%s, %d knobs, x %+v", sm.name, space.Len(), k), sm.sampler, space, fuzzTrials)
			}
			if n, finite := space.Size(); finite {
				checkSamplerRun(t, fmt.Sprintf("grid, %d knobs, x %+v", space.Len(), k), NewGridSampler(), space, min(n, fuzzTrials))
			}
		}
	})
}

// TestWideRangesSample is issue 13 item 3 as reported: a float range whose
// width overflows float64, written in a TOML spec or as --param, gave
// random, sobol and tpe the same point on every trial (high − low = +Inf,
// so low + u·(high − low) was +Inf, clamped to nextafter(high)), and tpe's
// model NaN. Each sampler must now give fuzzTrials distinct points inside
// the range, spread over both signs.
func TestWideRangesSample(t *testing.T) {
	toml := func(knob string) func() (*Spec, error) {
		return func() (*Spec, error) {
			return ParseSpec([]byte("direction = \"minimize\"\nbudget = 20\n[param]\nx = " + knob + "\n"))
		}
	}
	flag := func(param string) func() (*Spec, error) {
		return func() (*Spec, error) { return SpecFromFlags([]string{param}, "minimize", "", "", 20, 1) }
	}
	for _, tc := range []struct {
		name string
		spec func() (*Spec, error)
	}{
		{"toml 1.7e308", toml(`{ type = "float", low = -1.7e308, high = 1.7e308 }`)},
		{"flag 1e308", flag("x=float:-1e308:1e308")},
		{"flag MaxFloat64", flag("x=float:-1.7976931348623157e308:1.7976931348623157e308")},
		{"toml step 1e307", toml(`{ type = "float", low = -1.7e308, high = 1.7e308, step = 1e307 }`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, err := tc.spec()
			if err != nil {
				t.Fatal(err)
			}
			for _, sm := range []struct {
				name    string
				sampler Sampler
			}{
				{"random", NewRandomSampler(1)},
				{"sobol", NewSobolSampler(1)},
				{"tpe", NewTPESampler(1, TPEOptions{Startup: fuzzStartup})},
				{"motpe", NewTPESampler(1, TPEOptions{Startup: fuzzStartup, Directions: []Direction{Minimize, Minimize}})},
			} {
				checkSamplerRun(t, sm.name, sm.sampler, spec.Space, fuzzTrials)
				// checkSamplerRun checks distinctness only for continuous
				// knobs; the stepped one has 35 levels, so count them, and
				// both signs must appear.
				var neg, pos int
				seen := map[float64]bool{}
				h := History{Direction: Minimize}
				for trial := range fuzzTrials {
					p, _ := sm.sampler.Ask(spec.Space, trial, h)
					x := p.v[0]
					seen[x] = true
					if x < 0 {
						neg++
					} else if x > 0 {
						pos++
					}
					h.Trials = append(h.Trials, Trial{Number: trial, State: StateDone, Point: p, Score: float64(trial % 5), HasScore: true,
						Scores: []float64{float64(trial % 5), float64(trial % 3)}, LastStep: -1})
				}
				if len(seen) < fuzzTrials/2 || neg == 0 || pos == 0 {
					t.Errorf("%s: %d trials gave %d distinct values, %d negative and %d positive", sm.name, fuzzTrials, len(seen), neg, pos)
				}
			}
		})
	}
}
