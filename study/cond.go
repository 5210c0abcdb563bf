package study

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Conditional knobs (issue 21). A knob may carry a condition, When, on
// other knobs: "opt == 'sgd'", "opt in ['sgd', 'adam']", "layers >= 3",
// several joined by "and". A knob whose condition is false is absent from
// the point: not given a default, left out of the point's text and JSON,
// of SOMA_PARAMS and SOMA_PARAM_<NAME>, and of {name} substitution. A
// condition reads only choice and int knobs, and a knob whose referenced
// knob is absent is absent too, so conditions nest (width_3 when
// layers >= 3, layers when arch == 'mlp').
//
// The language is deliberately small — a conjunction of comparisons of one
// knob with literals — so that everything about a space can be decided
// when it is made: cycles, unknown knobs and conditions that can never
// hold are refused, grid counts the valid combinations exactly, and TPE
// can group knobs that are present together.

// Grammar (whitespace between tokens is free):
//
//	cond  = atom { "and" atom }
//	atom  = NAME op value | NAME [ "not" ] "in" "[" value { "," value } [ "," ] "]"
//	op    = "==" | "=" | "!=" | "<" | "<=" | ">" | ">="
//	value = 'text' | "text" | bare
//
// A bare value is a run of characters other than space, quotes, brackets,
// ',', and the operator characters =<>!. "=" means "==" (for the short
// --param form, "momentum=float:0:1 if opt=sgd").

// maxCondLen bounds a condition's text; maxCondAtoms its comparisons.
const (
	maxCondLen   = 4096
	maxCondAtoms = 64
)

// condAtom is one comparison of a knob with literals.
type condAtom struct {
	name string   // the knob compared
	op   string   // ==, !=, <, <=, >, >=, in, not in
	vals []string // the literals as text (one, except for in / not in)

	// Resolved by resolveConds.
	knob int
	ok   []bool  // choice knobs: ok[j] is the atom's truth at option j
	nums []int64 // int knobs: the literals
}

// String writes the atom in the form conditions are normalised to.
func (a *condAtom) String() string {
	quote := func(v string) string {
		switch {
		case a.nums != nil || (a.ok == nil && isIntText(v)):
			return v
		case strings.Contains(v, "'"):
			return `"` + v + `"`
		}
		return "'" + v + "'"
	}
	if a.op == "in" || a.op == "not in" {
		q := make([]string, len(a.vals))
		for i, v := range a.vals {
			q[i] = quote(v)
		}
		return a.name + " " + a.op + " [" + strings.Join(q, ", ") + "]"
	}
	return a.name + " " + a.op + " " + quote(a.vals[0])
}

func isIntText(v string) bool {
	_, err := strconv.ParseInt(v, 10, 64)
	return err == nil
}

// condString joins atoms with " and ".
func condString(atoms []condAtom) string {
	s := make([]string, len(atoms))
	for i := range atoms {
		s[i] = atoms[i].String()
	}
	return strings.Join(s, " and ")
}

// CondError says why a condition could not be read.
type CondError struct {
	Text   string // the condition as given
	Pos    int    // byte offset of the problem in Text
	Reason string
}

func (e *CondError) Error() string {
	t := e.Text
	if len(t) > 200 {
		t = t[:200] + "…"
	}
	return fmt.Sprintf("condition %q: at byte %d: %s", t, e.Pos, e.Reason)
}

// parseCond reads a condition's syntax; it knows nothing of the space.
func parseCond(text string) ([]condAtom, error) {
	fail := func(pos int, format string, args ...any) ([]condAtom, error) {
		return nil, &CondError{Text: text, Pos: pos, Reason: fmt.Sprintf(format, args...)}
	}
	if len(text) > maxCondLen {
		return fail(maxCondLen, "longer than %d bytes (split the space, or simplify)", maxCondLen)
	}
	l := condLexer{s: text}
	var atoms []condAtom
	for {
		if len(atoms) == maxCondAtoms {
			return fail(l.i, "more than %d comparisons", maxCondAtoms)
		}
		l.space()
		start := l.i
		name := l.ident()
		if name == "" {
			if l.i >= len(text) {
				return fail(l.i, "want a param name (write e.g. opt == 'sgd')")
			}
			return fail(l.i, "want a param name, got %q", l.rest())
		}
		l.space()
		a := condAtom{name: name}
		switch op := l.op(); op {
		case "":
			w := l.word()
			if w == "in" {
				a.op = "in"
			} else if w == "not" {
				l.space()
				if l.word() != "in" {
					return fail(l.i, `want "in" after "not"`)
				}
				a.op = "not in"
			} else {
				return fail(start+len(name), "after %q want ==, !=, <, <=, >, >= or in", name)
			}
			l.space()
			if !l.eat('[') {
				return fail(l.i, "want '[' to start the list after %s", a.op)
			}
			for {
				l.space()
				if l.eat(']') {
					break
				}
				v, err := l.value()
				if err != "" {
					return fail(l.i, "%s", err)
				}
				a.vals = append(a.vals, v)
				l.space()
				if l.eat(',') {
					continue
				}
				if l.eat(']') {
					break
				}
				return fail(l.i, "want ',' or ']' in the list")
			}
			if len(a.vals) == 0 {
				return fail(l.i, "empty list (name at least one value)")
			}
		default:
			if op == "=" {
				op = "=="
			}
			a.op = op
			l.space()
			v, err := l.value()
			if err != "" {
				return fail(l.i, "%s", err)
			}
			a.vals = []string{v}
		}
		atoms = append(atoms, a)
		l.space()
		if l.i >= len(text) {
			return atoms, nil
		}
		at := l.i
		if l.word() != "and" {
			l.i = at
			return fail(at, "want \"and\" or the end, got %q (only and is supported: no or, no parentheses)", l.rest())
		}
	}
}

type condLexer struct {
	s string
	i int
}

func (l *condLexer) rest() string {
	r := l.s[l.i:]
	if len(r) > 20 {
		r = r[:20] + "…"
	}
	return r
}

func (l *condLexer) space() {
	for l.i < len(l.s) && (l.s[l.i] == ' ' || l.s[l.i] == '\t') {
		l.i++
	}
}

func (l *condLexer) eat(c byte) bool {
	if l.i < len(l.s) && l.s[l.i] == c {
		l.i++
		return true
	}
	return false
}

func identByte(c byte, first bool) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (!first && c >= '0' && c <= '9')
}

func (l *condLexer) ident() string {
	j := l.i
	for j < len(l.s) && identByte(l.s[j], j == l.i) {
		j++
	}
	id := l.s[l.i:j]
	l.i = j
	return id
}

// word reads an identifier-like keyword (and, in, not).
func (l *condLexer) word() string { return l.ident() }

func (l *condLexer) op() string {
	for _, op := range []string{"==", "!=", "<=", ">=", "<", ">", "="} {
		if strings.HasPrefix(l.s[l.i:], op) {
			l.i += len(op)
			return op
		}
	}
	return ""
}

// value reads a quoted or bare literal; the error is "" on success.
func (l *condLexer) value() (string, string) {
	if l.i >= len(l.s) {
		return "", "want a value, got the end"
	}
	if q := l.s[l.i]; q == '\'' || q == '"' {
		end := strings.IndexByte(l.s[l.i+1:], q)
		if end < 0 {
			return "", fmt.Sprintf("unterminated %c-quoted value", q)
		}
		v := l.s[l.i+1 : l.i+1+end]
		l.i += end + 2
		if v == "" {
			return "", "empty value"
		}
		return v, ""
	}
	j := l.i
	for j < len(l.s) && !strings.ContainsRune(" \t'\"[],=<>!", rune(l.s[j])) {
		j++
	}
	if j == l.i {
		return "", fmt.Sprintf("want a value, got %q", l.rest())
	}
	v := l.s[l.i:j]
	l.i = j
	return v, ""
}

// resolveConds parses every knob's When against the space, normalises it,
// and refuses unknown knobs, comparisons that do not fit the knob's kind,
// cycles and conditions that can never hold. It fills s.conds, s.order,
// s.group and s.grid.
func (s *Space) resolveConds() error {
	n := len(s.knobs)
	conds := make([][]condAtom, n)
	has := false
	for i := range s.knobs {
		k := &s.knobs[i]
		if k.When == "" {
			continue
		}
		atoms, err := parseCond(k.When)
		if err != nil {
			return fmt.Errorf("study: param %q: %w", k.Name, err)
		}
		for j := range atoms {
			if err := s.resolveAtom(k.Name, &atoms[j]); err != nil {
				return err
			}
		}
		conds[i] = atoms
		k.When = condString(atoms)
		has = true
	}
	if !has {
		return nil
	}
	s.conds = conds
	// Topological order, parents first; a cycle is refused naming it.
	state := make([]int, n) // 0 new, 1 on the stack, 2 done
	var stack []int
	var visit func(i int) error
	visit = func(i int) error {
		switch state[i] {
		case 1:
			at := slices.Index(stack, i)
			names := make([]string, 0, len(stack)-at+1)
			for _, j := range stack[at:] {
				names = append(names, s.knobs[j].Name)
			}
			names = append(names, s.knobs[i].Name)
			return fmt.Errorf("study: params %s: their conditions form a cycle (%s), so none could ever be decided (remove one of the conditions)",
				strings.Join(names[:len(names)-1], ", "), strings.Join(names, " needs "))
		case 2:
			return nil
		}
		state[i] = 1
		stack = append(stack, i)
		for _, a := range conds[i] {
			if err := visit(a.knob); err != nil {
				return err
			}
		}
		stack = stack[:len(stack)-1]
		state[i] = 2
		s.order = append(s.order, i)
		return nil
	}
	for i := range n {
		if err := visit(i); err != nil {
			return err
		}
	}
	// A knob is present iff the conjunction of its atoms and of its
	// ancestors' atoms holds. Every atom tests one knob, so the
	// conjunction is satisfiable iff, for each knob tested, some value
	// passes every atom on it.
	s.presence = make([][]condAtom, n)
	for _, i := range s.order {
		var all []condAtom
		for _, a := range conds[i] {
			all = append(all, s.presence[a.knob]...)
		}
		all = append(all, conds[i]...)
		s.presence[i] = dedupAtoms(all)
		if a, ok := s.satisfiable(s.presence[i]); !ok {
			return fmt.Errorf("study: param %q: condition %q can never hold: no value of %s passes %s (fix the condition or the range of %s)",
				s.knobs[i].Name, s.knobs[i].When, s.knobs[a].Name, s.atomsOn(s.presence[i], a), s.knobs[a].Name)
		}
	}
	// Knobs whose presence conditions are the same are present together:
	// TPE models each such group on the trials where it was present.
	s.group = make([]int, n)
	keys := map[string]int{}
	for i := range n {
		key := condString(s.presence[i])
		g, ok := keys[key]
		if !ok {
			g = len(s.groupKeys)
			keys[key] = g
			s.groupKeys = append(s.groupKeys, key)
		}
		s.group[i] = g
	}
	return s.buildGrid()
}

// dedupAtoms returns atoms without repeats, sorted by their text.
func dedupAtoms(atoms []condAtom) []condAtom {
	slices.SortStableFunc(atoms, func(a, b condAtom) int { return strings.Compare(a.String(), b.String()) })
	return slices.CompactFunc(atoms, func(a, b condAtom) bool { return a.String() == b.String() })
}

func (s *Space) atomsOn(atoms []condAtom, knob int) string {
	var on []condAtom
	for _, a := range atoms {
		if a.knob == knob {
			on = append(on, a)
		}
	}
	return strconv.Quote(condString(on))
}

// resolveAtom binds atom a of param owner's condition to its knob and
// checks its literals.
func (s *Space) resolveAtom(owner string, a *condAtom) error {
	i := s.index(a.name)
	if i < 0 {
		names := make([]string, len(s.knobs))
		for j, k := range s.knobs {
			names[j] = k.Name
		}
		return fmt.Errorf("study: param %q: condition names %q, which is not a param (%s)%s", owner, a.name, s.names(), suggest(a.name, names))
	}
	a.knob = i
	k := &s.knobs[i]
	switch k.Kind {
	case KnobChoice:
		if a.op != "==" && a.op != "!=" && a.op != "in" && a.op != "not in" {
			return fmt.Errorf("study: param %q: condition %s %s: %q is a choice, which compares with ==, != or in (order comparisons are for int params)", owner, a.name, a.op, a.name)
		}
		in := make([]bool, len(k.Choices))
		for _, v := range a.vals {
			j := slices.Index(k.Choices, v)
			if j < 0 {
				return fmt.Errorf("study: param %q: condition on %q: %q is not one of its options (%s)%s", owner, a.name, v, strings.Join(k.Choices, ", "), suggest(v, k.Choices))
			}
			in[j] = true
		}
		a.ok = make([]bool, len(k.Choices))
		for j := range in {
			a.ok[j] = in[j] == (a.op == "==" || a.op == "in")
		}
	case KnobInt:
		a.nums = make([]int64, len(a.vals))
		for j, v := range a.vals {
			x, err := strconv.ParseInt(v, 10, 64)
			if err != nil || strconv.FormatInt(x, 10) != v {
				return fmt.Errorf("study: param %q: condition on %q: %q is not a whole number (%s is an int param)", owner, a.name, v, a.name)
			}
			a.nums[j] = x
		}
		if a.op != "in" && a.op != "not in" && len(a.nums) != 1 {
			return fmt.Errorf("study: param %q: condition on %q: %s takes one value", owner, a.name, a.op)
		}
	default:
		return fmt.Errorf("study: param %q: condition on %q: %q is a %s param; conditions test choice and int params (make it a choice or int, or drop the condition)", owner, a.name, a.name, k.Kind)
	}
	return nil
}

// holds reports whether atom a is true for the knob value x (as a Point
// holds it: an option index or a whole number).
func (a *condAtom) holds(x float64) bool {
	if isAbsent(x) {
		return false
	}
	if a.ok != nil {
		j := int(x)
		return j >= 0 && j < len(a.ok) && a.ok[j]
	}
	n := int64(x)
	switch a.op {
	case "==":
		return n == a.nums[0]
	case "!=":
		return n != a.nums[0]
	case "<":
		return n < a.nums[0]
	case "<=":
		return n <= a.nums[0]
	case ">":
		return n > a.nums[0]
	case ">=":
		return n >= a.nums[0]
	case "in":
		return slices.Contains(a.nums, n)
	case "not in":
		return !slices.Contains(a.nums, n)
	}
	return false
}

// absent marks a knob that is not part of a point. Every absent value is
// this one NaN (math.NaN's bits), so that Point.Equal, which compares
// bits, sees two absent values as equal.
var absent = math.NaN()

func isAbsent(x float64) bool { return x != x }

// mask sets every knob whose condition is false in v to absent, in
// dependency order (a knob whose tested knob is absent is absent).
func (s *Space) mask(v []float64) {
	for _, i := range s.order {
		if !s.condHolds(i, v) {
			v[i] = absent
		}
	}
}

// condHolds reports whether knob i's own condition holds on v.
func (s *Space) condHolds(i int, v []float64) bool {
	for j := range s.conds[i] {
		a := &s.conds[i][j]
		if !a.holds(v[a.knob]) {
			return false
		}
	}
	return true
}

// Conditional reports whether knob name can be absent from a point, and
// its condition (normalised) if so.
func (s *Space) Conditional(name string) (when string, ok bool) {
	i := s.index(name)
	if i < 0 || s.knobs[i].When == "" {
		return "", false
	}
	return s.knobs[i].When, true
}

// levelRun is the grid levels [lo, lo+n) of a knob that conditions test,
// on which every atom on the knob has the same truth.
type levelRun struct{ lo, n int }

// runs splits knob i's levels into maximal runs on which every atom of
// the space that tests knob i has the same truth value.
func (s *Space) runs(i int) []levelRun {
	k := &s.knobs[i]
	count := s.count[i]
	var atoms []*condAtom
	cuts := []int{0, count}
	for c := range s.conds {
		for j := range s.conds[c] {
			a := &s.conds[c][j]
			if a.knob != i {
				continue
			}
			atoms = append(atoms, a)
			if k.Kind == KnobInt {
				lo, hi, st := int64(k.Low), int64(k.High), int64(k.Step)
				// below(L) is the number of levels with value < L.
				below := func(L int64) int {
					switch {
					case L <= lo:
						return 0
					case L > hi:
						return count
					}
					return int((L - lo + st - 1) / st)
				}
				for _, L := range a.nums {
					cuts = append(cuts, below(L))
					if L < math.MaxInt64 {
						cuts = append(cuts, below(L+1))
					}
				}
			}
		}
	}
	if k.Kind == KnobChoice {
		for j := 1; j < count; j++ {
			cuts = append(cuts, j)
		}
	}
	slices.Sort(cuts)
	cuts = slices.Compact(cuts)
	truth := func(level int) string {
		b := make([]byte, len(atoms))
		x := s.level(i, level)
		for j, a := range atoms {
			if a.holds(x) {
				b[j] = 1
			}
		}
		return string(b)
	}
	var out []levelRun
	prev := ""
	for j := 0; j+1 < len(cuts); j++ {
		lo, hi := cuts[j], cuts[j+1]
		t := truth(lo)
		if len(out) > 0 && t == prev {
			out[len(out)-1].n += hi - lo
			continue
		}
		out = append(out, levelRun{lo: lo, n: hi - lo})
		prev = t
	}
	return out
}

// satisfiable reports whether some assignment passes every atom; if not,
// it returns a knob on which no value passes the atoms on it.
func (s *Space) satisfiable(atoms []condAtom) (int, bool) {
	for _, a := range atoms {
		found := false
		for _, r := range s.runs(a.knob) {
			x := s.level(a.knob, r.lo)
			all := true
			for _, b := range atoms {
				if b.knob == a.knob && !b.holds(x) {
					all = false
					break
				}
			}
			if all {
				found = true
				break
			}
		}
		if !found {
			return a.knob, false
		}
	}
	return 0, true
}

// maxCondCombos bounds the combinations of runs of tested knobs that grid
// enumerates.
const maxCondCombos = 1 << 16

// condGrid enumerates the valid cells of a conditional space: each combo
// fixes, for every tested knob, a run of levels (or absence), and so which
// knobs are present; its cells are the mixed-radix product of the present
// knobs' levels (runs for tested knobs), the last knob varying fastest.
type condGrid struct {
	ctl    []int        // tested knobs, in knob order
	runs   [][]levelRun // runs[c] of knob ctl[c]
	combos []gridCombo
	total  int // cells, saturated at math.MaxInt
}

type gridCombo struct {
	run   []int // per tested knob: the run, or -1 when absent
	v     []float64
	start int // first cell
	size  int
}

// buildGrid fills s.grid when every knob is discrete.
func (s *Space) buildGrid() error {
	for _, c := range s.count {
		if c == 0 {
			return nil // continuous: no grid
		}
	}
	g := &condGrid{}
	for i := range s.knobs {
		for c := range s.conds {
			if slices.ContainsFunc(s.conds[c], func(a condAtom) bool { return a.knob == i }) {
				g.ctl = append(g.ctl, i)
				g.runs = append(g.runs, s.runs(i))
				break
			}
		}
	}
	tuples := 1
	for _, r := range g.runs {
		if tuples > maxCondCombos/len(r) {
			return fmt.Errorf("study: conditions test %d params whose runs of values combine in more than %d ways (simplify the conditions)", len(g.ctl), maxCondCombos)
		}
		tuples *= len(r)
	}
	idx := make([]int, len(g.ctl))
	for t := range tuples {
		rest := t
		for c := len(g.ctl) - 1; c >= 0; c-- {
			idx[c] = rest % len(g.runs[c])
			rest /= len(g.runs[c])
		}
		v := make([]float64, len(s.knobs))
		for c, i := range g.ctl {
			v[i] = s.level(i, g.runs[c][idx[c]].lo)
		}
		s.mask(v)
		combo := gridCombo{run: slices.Clone(idx), v: v, start: g.total, size: 1}
		dup := false
		for c, i := range g.ctl {
			if isAbsent(v[i]) {
				if idx[c] != 0 {
					dup = true // counted with run 0
					break
				}
				combo.run[c] = -1
			}
		}
		if dup {
			continue
		}
		for i := range s.knobs {
			if isAbsent(v[i]) {
				continue
			}
			r := s.count[i]
			if c := slices.Index(g.ctl, i); c >= 0 {
				r = g.runs[c][combo.run[c]].n
			}
			combo.size = satMul(combo.size, r)
		}
		g.total = satAdd(g.total, combo.size)
		g.combos = append(g.combos, combo)
	}
	s.grid = g
	return nil
}

func satMul(a, b int) int {
	if b != 0 && a > math.MaxInt/b {
		return math.MaxInt
	}
	return a * b
}

func satAdd(a, b int) int {
	if a > math.MaxInt-b {
		return math.MaxInt
	}
	return a + b
}

// cell returns cell n (0 ≤ n < total) of a conditional grid.
func (s *Space) cell(n int) []float64 {
	g := s.grid
	ci, _ := slices.BinarySearchFunc(g.combos, n, func(c gridCombo, n int) int {
		switch {
		case c.start+c.size <= n:
			return -1
		case c.start > n:
			return 1
		}
		return 0
	})
	combo := &g.combos[ci]
	v := slices.Clone(combo.v)
	rest := n - combo.start
	for i := len(s.knobs) - 1; i >= 0; i-- {
		if isAbsent(v[i]) {
			continue
		}
		if c := slices.Index(g.ctl, i); c >= 0 {
			r := g.runs[c][combo.run[c]]
			v[i] = s.level(i, r.lo+rest%r.n)
			rest /= r.n
			continue
		}
		v[i] = s.level(i, rest%s.count[i])
		rest /= s.count[i]
	}
	return v
}
