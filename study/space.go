package study

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// KnobKind is the kind of one knob of a Space.
type KnobKind int

const (
	// KnobInvalid is the zero KnobKind; NewSpace refuses it.
	KnobInvalid KnobKind = iota
	// KnobInt is a whole number in [Low, High], on the grid Low + k·Step
	// (Step defaults to 1), optionally sampled on a log scale.
	KnobInt
	// KnobFloat is a real number in [Low, High], optionally on a log scale
	// or on the grid Low + k·Step.
	KnobFloat
	// KnobChoice is one of Choices, which are text.
	KnobChoice
	// KnobFixed always takes Value; it is part of the point (so it reaches
	// the objective) but no sampler searches it.
	KnobFixed
)

// String returns the kind's name as written in specs: int, float, choice,
// fixed.
func (k KnobKind) String() string {
	switch k {
	case KnobInt:
		return "int"
	case KnobFloat:
		return "float"
	case KnobChoice:
		return "choice"
	case KnobFixed:
		return "fixed"
	}
	return "invalid"
}

// ParseKnobKind is the inverse of KnobKind.String.
func ParseKnobKind(s string) (KnobKind, error) {
	switch s {
	case "int", "integer":
		return KnobInt, nil
	case "float", "real":
		return KnobFloat, nil
	case "choice", "categorical":
		return KnobChoice, nil
	case "fixed", "const":
		return KnobFixed, nil
	}
	return KnobInvalid, fmt.Errorf("study: knob type %q: want int, float, choice or fixed%s", s,
		suggest(s, []string{"int", "float", "choice", "fixed"}))
}

// maxExactInt is the largest magnitude an int knob may reach: every
// integer up to 2^53 is exact in a float64, which is how points hold them.
const maxExactInt = 1 << 53

// maxNameLen bounds knob names; they become environment variable names.
const maxNameLen = 64

// Knob is one dimension of a Space. Which fields matter depends on Kind:
//
//   - KnobInt: Low, High (whole numbers within ±2^53, where float64
//     holds every one), Step (a whole number ≥ 1; 0 means 1), Log (needs
//     Low ≥ 1 and Step 1).
//   - KnobFloat: Low, High (any finite float64s; High − Low may exceed
//     math.MaxFloat64), Step (0 = continuous, else High − Low must be a
//     whole number of steps, fewer than 2^53, each no finer than float64's
//     spacing near the bounds), Log (needs Low > 0 and no Step).
//   - KnobChoice: Choices (at least one, distinct).
//   - KnobFixed: Value.
//
// Names are letters, digits and '_', start with a letter or '_', and are
// distinct even ignoring case (each becomes SOMA_PARAM_<NAME>). Options
// and fixed values are non-empty UTF-8 text without ',', '=', control
// characters or leading/trailing spaces, so that the text form of a point
// can always be read back.
type Knob struct {
	Name    string
	Kind    KnobKind
	Low     float64
	High    float64
	Step    float64
	Log     bool
	Choices []string
	Value   string
	// When, if not empty, is the knob's condition on other knobs
	// ("opt == 'sgd'", "layers >= 3", see cond.go): where it is false,
	// the knob is absent from the point. NewSpace normalises it.
	When string
}

// Space is a validated, immutable list of knobs. Knob order is part of the
// space: it is the order of a point's text and JSON forms. A *Space is safe
// for concurrent use.
type Space struct {
	knobs []Knob
	// jsonNum[i] reports whether knob i (choice or fixed) has only
	// JSON-number options, so that PointJSON writes them as numbers.
	jsonNum []bool
	// count[i] is the number of distinct values of knob i (0 if
	// continuous).
	count []int
	// decimals[i] is how many decimals a stepped float knob's levels are
	// rounded to: those of its low and step, so 0.1·3 is 0.3.
	decimals []int

	// Conditional spaces only (all nil otherwise; see cond.go).
	// conds[i] is knob i's own condition; order lists the knobs parents
	// first; presence[i] is the conjunction, ancestors' atoms included,
	// that decides whether knob i is present; group[i] numbers the
	// distinct presences (groupKeys[g] is its text, "" for always); grid
	// enumerates the valid cells when every knob is discrete.
	conds     [][]condAtom
	order     []int
	presence  [][]condAtom
	group     []int
	groupKeys []string
	grid      *condGrid
}

// NewSpace validates knobs and returns the space they define. It refuses,
// with an error that names the knob and the fix: an empty list, a bad or
// duplicate name, an empty range, a bound that is not finite, an int
// bound beyond ±2^53, a log scale with a non-positive low, a step that
// does not divide the range or that float64 cannot resolve, and an option
// or fixed value that could not be read back from a point's text; and,
// for conditional knobs (When, cond.go), a condition that does not parse,
// names an unknown knob or option, tests a float or fixed knob, forms a
// cycle or can never hold. Whatever it accepts, every sampler can sample,
// and every knob is present in some point. Knobs are copied; Int
// knobs with Step 0 get Step 1, and bounds of −0 become 0.
func NewSpace(knobs []Knob) (*Space, error) {
	if len(knobs) == 0 {
		return nil, fmt.Errorf("study: space has no knobs (add at least one param)")
	}
	s := &Space{
		knobs:    make([]Knob, len(knobs)),
		jsonNum:  make([]bool, len(knobs)),
		count:    make([]int, len(knobs)),
		decimals: make([]int, len(knobs)),
	}
	seen := make(map[string]string, len(knobs))
	for i, k := range knobs {
		k.Choices = append([]string(nil), k.Choices...)
		if err := checkName(k.Name); err != nil {
			return nil, err
		}
		up := strings.ToUpper(k.Name)
		if prev, ok := seen[up]; ok {
			if prev == k.Name {
				return nil, fmt.Errorf("study: param %q: defined twice (remove one)", k.Name)
			}
			return nil, fmt.Errorf("study: params %q and %q: differ only in case, so both would be SOMA_PARAM_%s (rename one)", prev, k.Name, up)
		}
		seen[up] = k.Name
		if err := checkKnob(&k); err != nil {
			return nil, err
		}
		s.knobs[i] = k
		switch k.Kind {
		case KnobInt:
			s.count[i] = int((int64(k.High)-int64(k.Low))/int64(k.Step)) + 1
		case KnobFloat:
			if k.Step > 0 {
				s.count[i] = int(math.Round(steps(k.Low, k.High, k.Step))) + 1
				s.decimals[i] = max(decimals(k.Low), decimals(k.Step))
			}
		case KnobChoice:
			s.count[i] = len(k.Choices)
			s.jsonNum[i] = allJSONNumbers(k.Choices)
		case KnobFixed:
			s.count[i] = 1
			s.jsonNum[i] = allJSONNumbers([]string{k.Value})
		}
	}
	if err := s.resolveConds(); err != nil {
		return nil, err
	}
	return s, nil
}

func checkName(name string) error {
	if name == "" {
		return fmt.Errorf("study: a param has an empty name (name every param)")
	}
	if len(name) > maxNameLen {
		return fmt.Errorf("study: param %q: name longer than %d bytes (shorten it)", name, maxNameLen)
	}
	for i, r := range name {
		ok := r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (i > 0 && r >= '0' && r <= '9')
		if !ok {
			return fmt.Errorf("study: param %q: name may hold only letters, digits and '_', and must not start with a digit (it becomes SOMA_PARAM_<NAME> and {name}); %q is not allowed", name, r)
		}
	}
	return nil
}

// checkText validates an option or fixed value: it must survive the text
// form name=value,name=value and a record's meta unchanged.
func checkText(name, what, v string) error {
	switch {
	case v == "":
		return fmt.Errorf("study: param %q: %s is empty (give it text)", name, what)
	case !utf8.ValidString(v):
		return fmt.Errorf("study: param %q: %s %q is not valid UTF-8", name, what, v)
	case strings.TrimSpace(v) != v:
		return fmt.Errorf("study: param %q: %s %q has leading or trailing space (trim it)", name, what, v)
	}
	for _, r := range v {
		switch {
		case r == ',' || r == '=':
			return fmt.Errorf("study: param %q: %s %q contains %q, which separates a point's text form (choose text without ',' or '=')", name, what, v, r)
		case unicode.IsControl(r) || r == utf8.RuneError:
			return fmt.Errorf("study: param %q: %s %q contains control character %U (remove it)", name, what, v, r)
		}
	}
	return nil
}

func checkKnob(k *Knob) error {
	finite := func(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
	switch k.Kind {
	case KnobInt, KnobFloat:
		if len(k.Choices) > 0 || k.Value != "" {
			return fmt.Errorf("study: param %q: %s takes low and high, not choices or a value (use type choice or fixed)", k.Name, k.Kind)
		}
		if !finite(k.Low) || !finite(k.High) {
			return fmt.Errorf("study: param %q: low %v and high %v must be finite numbers (give bounds within ±%v)", k.Name, k.Low, k.High, math.MaxFloat64)
		}
		if k.Low > k.High {
			return fmt.Errorf("study: param %q: low %v > high %v (swap them)", k.Name, k.Low, k.High)
		}
		if !finite(k.Step) || k.Step < 0 {
			return fmt.Errorf("study: param %q: step %v must be a positive number (or 0 for none)", k.Name, k.Step)
		}
		// −0 becomes 0: an int knob with high −0 handed out −0, whose
		// text "0" read back as +0, a different point.
		if k.Low == 0 {
			k.Low = 0
		}
		if k.High == 0 {
			k.High = 0
		}
	case KnobChoice:
		if k.Low != 0 || k.High != 0 || k.Step != 0 || k.Log || k.Value != "" {
			return fmt.Errorf("study: param %q: choice takes only choices (drop low, high, step, log and value)", k.Name)
		}
		if len(k.Choices) == 0 {
			return fmt.Errorf("study: param %q: choice has no options (list at least one)", k.Name)
		}
		seen := make(map[string]bool, len(k.Choices))
		for _, c := range k.Choices {
			if err := checkText(k.Name, "option", c); err != nil {
				return err
			}
			if seen[c] {
				return fmt.Errorf("study: param %q: option %q listed twice (remove one)", k.Name, c)
			}
			seen[c] = true
		}
		return nil
	case KnobFixed:
		if k.Low != 0 || k.High != 0 || k.Step != 0 || k.Log || len(k.Choices) > 0 {
			return fmt.Errorf("study: param %q: fixed takes only a value (drop low, high, step, log and choices)", k.Name)
		}
		return checkText(k.Name, "value", k.Value)
	default:
		return fmt.Errorf("study: param %q: kind %d is not int, float, choice or fixed (set a type)", k.Name, int(k.Kind))
	}

	if k.Kind == KnobInt {
		if k.Step == 0 {
			k.Step = 1
		}
		for _, x := range []struct {
			what string
			v    float64
		}{{"low", k.Low}, {"high", k.High}, {"step", k.Step}} {
			if x.v != math.Trunc(x.v) {
				return fmt.Errorf("study: param %q: %s %v is not a whole number (use type float)", k.Name, x.what, x.v)
			}
			if math.Abs(x.v) > maxExactInt {
				return fmt.Errorf("study: param %q: %s %v is beyond ±2^53 (use type float)", k.Name, x.what, x.v)
			}
		}
		// In int64, not float64: the width of a range within ±2^53 fits
		// int64 but not always a float64 (2^53 − (−2^53) − 1 rounds), and a
		// rounded width made Mod accept highs off the grid.
		lo, hi, st := int64(k.Low), int64(k.High), int64(k.Step)
		if (hi-lo)%st != 0 {
			return fmt.Errorf("study: param %q: high %v is not low %v plus a whole number of steps %v (set high to %v)",
				k.Name, k.High, k.Low, k.Step, lo+(hi-lo)/st*st)
		}
		if k.Log {
			if k.Low < 1 {
				return fmt.Errorf("study: param %q: log scale needs low ≥ 1, got %v (raise low or drop log)", k.Name, k.Low)
			}
			if k.Step != 1 {
				return fmt.Errorf("study: param %q: log scale and step %v do not mix (drop one)", k.Name, k.Step)
			}
		}
		return nil
	}
	// KnobFloat.
	if k.Log {
		if k.Low <= 0 {
			return fmt.Errorf("study: param %q: log scale needs low > 0, got %v (raise low or drop log)", k.Name, k.Low)
		}
		if k.Step != 0 {
			return fmt.Errorf("study: param %q: log scale and step %v do not mix (drop one)", k.Name, k.Step)
		}
	}
	if k.Step > 0 {
		n := steps(k.Low, k.High, k.Step)
		if !(math.Round(n) < maxExactInt) {
			return fmt.Errorf("study: param %q: step %v is too small for the range (drop step for a continuous knob)", k.Name, k.Step)
		}
		// Below float64's spacing near the bounds, neighbouring levels
		// round onto each other and the grid cannot be held; at or above
		// it, levels stay distinct and read back (levelIndex).
		m := math.Max(math.Abs(k.Low), math.Abs(k.High))
		if gap := m - math.Nextafter(m, 0); k.Step < gap {
			return fmt.Errorf("study: param %q: step %v is finer than float64 can tell apart near %v (spacing %v); use a step of at least %v, or drop step", k.Name, k.Step, m, gap, gap)
		}
		// The decimal noise of (high − low)/step (0.3/0.1 is
		// 2.9999999999999996) is forgiven, but not a fraction of a step:
		// 1e-9·n alone reached ½ at 5e8 levels, past which any high was
		// accepted. n·2^-51 covers the two roundings of n itself.
		if math.Abs(n-math.Round(n)) > max(min(1e-9*math.Max(1, n), 0.25), n*0x1p-51) {
			return fmt.Errorf("study: param %q: high %v is not low %v plus a whole number of steps %v (set high to %v)",
				k.Name, k.High, k.Low, k.Step, addSteps(k.Low, int(math.Floor(n)), k.Step))
		}
	}
	return nil
}

// The helpers below map between a knob's range and [0, 1] without ever
// forming an intermediate outside float64. The naive low + u·(high − low)
// overflowed for ranges wider than math.MaxFloat64 (issue 13 item 3:
// [-1.7e308, 1.7e308] gave high − low = +Inf, so every random, sobol and
// startup-tpe point was Inf clamped to nextafter(high), and tpe's model,
// fitted over an infinite width, proposed NaN).

// lerp returns low + u·(high − low) for u ∈ [0, 1] and low ≤ high. Where
// high − low is finite it is exactly that expression (so points of
// ordinary ranges keep their bits); where it overflows, low < 0 < high and
// low·(1−u) + high·u has no intermediate outside [low, high].
func lerp(low, high, u float64) float64 {
	if w := high - low; !math.IsInf(w, 0) {
		return low + u*w
	}
	return low*(1-u) + high*u
}

// unit is the inverse of lerp: (x − low)/(high − low) for low < high,
// computed on halves when the width overflows (exact halving: a width
// that overflows has both bounds far from the subnormals).
func unit(low, high, x float64) float64 {
	if w := high - low; !math.IsInf(w, 0) {
		return (x - low) / w
	}
	return (x/2 - low/2) / (high/2 - low/2)
}

// steps returns (x − low)/step, the number of steps from low to x,
// without x − low overflowing: when it does, |x|, |low| ≥ MaxFloat64/2
// and x/step − low/step is the same quotient (±Inf only if step is so
// small that the count exceeds any grid soma accepts).
func steps(low, x, step float64) float64 {
	if d := x - low; !math.IsInf(d, 0) {
		return d / step
	}
	return x/step - low/step
}

// addSteps returns low + j·step, the grid value j steps above low, when
// j·step alone overflows but the sum does not ([-1.7e308, 1.7e308] with
// step 1e307 has levels whose j·step is past MaxFloat64).
func addSteps(low float64, j int, step float64) float64 {
	if v := low + float64(j)*step; !math.IsInf(v, 0) {
		return v
	}
	return 2 * (low/2 + float64(j)*(step/2))
}

// logSpan returns ln(high/low) for 0 < low < high: always > 0 and finite.
// The ratio keeps the span exact for narrow ranges far from 1, where
// ln(high) − ln(low) can round to 0 ([1e300, nextafter(1e300, +Inf)]);
// when the ratio overflows (a subnormal low and a huge high) the span is
// hundreds and the difference of logs is exact enough.
func logSpan(low, high float64) float64 {
	if r := high / low; !math.IsInf(r, 0) {
		return math.Log(r)
	}
	return math.Log(high) - math.Log(low)
}

// logLerp is lerp on a log scale: low·(high/low)^u, for 0 < low < high.
// It may return a little past high (or +Inf when high is near
// MaxFloat64); callers clamp.
func logLerp(low, high, u float64) float64 {
	if r := high / low; !math.IsInf(r, 0) {
		return low * math.Exp(u*math.Log(r))
	}
	return math.Exp(math.Log(low) + u*(math.Log(high)-math.Log(low)))
}

// logUnit is the inverse of logLerp: ln(x/low)/ln(high/low).
func logUnit(low, high, x float64) float64 {
	l := math.Log(x / low)
	if math.IsInf(l, 0) {
		l = math.Log(x) - math.Log(low)
	}
	return l / logSpan(low, high)
}

// allJSONNumbers reports whether every option is a JSON number literal.
func allJSONNumbers(opts []string) bool {
	for _, o := range opts {
		if !isJSONNumber(o) {
			return false
		}
	}
	return true
}

// isJSONNumber reports whether s matches the JSON number grammar
// (RFC 8259 §6) and is finite as a float64.
func isJSONNumber(s string) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	digits := func() int {
		j := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		return i - j
	}
	if i < len(s) && s[i] == '0' {
		i++
	} else if digits() == 0 {
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	if i != len(s) {
		return false
	}
	f, err := strconv.ParseFloat(s, 64)
	return err == nil && !math.IsInf(f, 0)
}

// Knobs returns a copy of the space's knobs, in order.
func (s *Space) Knobs() []Knob {
	out := make([]Knob, len(s.knobs))
	for i, k := range s.knobs {
		k.Choices = append([]string(nil), k.Choices...)
		out[i] = k
	}
	return out
}

// Len returns the number of knobs.
func (s *Space) Len() int { return len(s.knobs) }

// Size returns the number of distinct points and true when every knob is
// discrete (int, float with a step, choice, fixed); otherwise (0, false).
// In a conditional space it counts only valid points: an absent knob
// contributes one way, not its levels. A count that does not fit in an
// int saturates at math.MaxInt.
func (s *Space) Size() (n int, finite bool) {
	n = 1
	for _, c := range s.count {
		if c == 0 {
			return 0, false
		}
	}
	if s.grid != nil {
		return s.grid.total, true
	}
	for _, c := range s.count {
		if n > math.MaxInt/c {
			return math.MaxInt, true
		}
		n *= c
	}
	return n, true
}

// level returns the value of knob i at grid level j (0 ≤ j < count[i]),
// as a point holds it: the number for int/float, the option index for a
// choice, 0 for fixed.
func (s *Space) level(i, j int) float64 {
	k := &s.knobs[i]
	switch k.Kind {
	case KnobInt, KnobFloat:
		if j >= s.count[i]-1 {
			return k.High
		}
		if k.Kind == KnobInt {
			// Exact in int64; in float64, odd j past 2^53 rounded.
			return float64(int64(k.Low) + int64(j)*int64(k.Step))
		}
		v := addSteps(k.Low, j, k.Step)
		// Round away the binary noise of j·step when the decimal forms
		// of low and step are short (0.1·3 → 0.3).
		if d := s.decimals[i]; d <= 17 {
			if r, err := strconv.ParseFloat(strconv.FormatFloat(v, 'f', d, 64), 64); err == nil && math.Abs(r-v) <= 1e-9*k.Step {
				v = r
			}
		}
		return min(max(v, k.Low), k.High)
	case KnobChoice:
		return float64(j)
	}
	return 0
}

// levelIndex returns the grid level of knob i (an int or stepped float)
// nearest to x, clamped to [0, count): the inverse of level. For floats
// it looks two levels either side of the quotient (x − low)/step, because
// levels far from low are rounded to float64 (a step of 7 near 2e16,
// where floats are 4 apart) and the quotient of rounded values can round
// to the wrong neighbour.
func (s *Space) levelIndex(i int, x float64) int {
	k := &s.knobs[i]
	last := s.count[i] - 1
	if k.Kind == KnobInt {
		return int(min(max((int64(x)-int64(k.Low))/int64(k.Step), 0), int64(last)))
	}
	j0 := int(min(max(math.Round(steps(k.Low, x, k.Step)), 0), float64(last)))
	best, bestD := j0, math.Inf(1)
	for j := max(j0-2, 0); j <= min(j0+2, last); j++ {
		if d := math.Abs(s.level(i, j) - x); d < bestD {
			best, bestD = j, d
		}
	}
	return best
}

// decimals returns the number of digits after the point in x's shortest
// decimal form.
func decimals(x float64) int {
	t := strconv.FormatFloat(math.Abs(x), 'f', -1, 64)
	if _, frac, ok := strings.Cut(t, "."); ok {
		return len(frac)
	}
	return 0
}

// suggest returns ` (did you mean "x"?)` for the candidate nearest to s by
// edit distance (transpositions count one), or "" when none is close. On a
// tie, a candidate with the same letters as s (a transposition) wins.
func suggest(s string, candidates []string) string {
	ls := strings.ToLower(s)
	best, bestD, bestAnagram := "", -1, false
	for _, c := range candidates {
		lc := strings.ToLower(c)
		d := editDistance(ls, lc)
		an := sortedBytes(ls) == sortedBytes(lc)
		if bestD < 0 || d < bestD || (d == bestD && an && !bestAnagram) {
			best, bestD, bestAnagram = c, d, an
		}
	}
	if bestD < 0 || bestD > max(2, len(s)/3) || bestD >= max(len(s), 1) {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

func sortedBytes(s string) string {
	b := []byte(s)
	slices.Sort(b)
	return string(b)
}

// editDistance is the optimal-string-alignment distance between a and b,
// by bytes: insertions, deletions, substitutions and adjacent
// transpositions each cost one.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			c := 1
			if a[i-1] == b[j-1] {
				c = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+c)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
