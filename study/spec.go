package study

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// SpecVersion is the version of the canonical spec format (Spec.Canonical).
const SpecVersion = 1

// Spec is a study's definition: its space, direction, sampler, pruner,
// budget, seed and retry limit. It is written by hand as TOML (ParseSpec)
// or given as command-line flags (SpecFromFlags); both give the same Spec.
// Its Canonical form is what the store keeps, and two processes agree on a
// study when their canonical forms are equal (DiffSpec explains when not).
//
// A Spec is plain data; change it only before calling Canonical or
// NewSampler, and call Validate after changing it by hand.
type Spec struct {
	Space *Space
	// Direction is Minimize or Maximize; DirectionUnknown is allowed only
	// with samplers and pruners that never compare scores (random, sobol,
	// grid; none).
	Direction Direction
	// Metric optionally names the score, for listings ("val_loss").
	Metric  string
	Sampler SamplerSpec
	Pruner  PrunerSpec
	// Budget is the number of trials. For grid, 0 means the grid's size.
	Budget int
	Seed   uint64
	// MaxRetries is how many times a failed attempt is retried before its
	// trial is failed for good (0: never). Interrupted and stale attempts
	// are always retried.
	MaxRetries int
	// Directions and Metrics define a study with several objectives (at
	// least two, one metric per direction; objectives.go); Direction and
	// Metric are then unset.
	Directions []Direction
	Metrics    []string
}

// SamplerSpec chooses and configures a sampler. Fields that do not apply
// to Name are zero.
type SamplerSpec struct {
	// Name is random, sobol, grid, tpe, or nsga2 (several objectives).
	Name string
	// Startup (tpe) is how many trials must be finished or pruned before
	// the model is used; until then points come from sobol. Default 10.
	Startup int
	// Candidates (tpe) is how many points are drawn from the good-trials
	// model per ask; the best ratio wins. Default 24.
	Candidates int
}

// PrunerSpec chooses and configures a pruner. Fields that do not apply to
// Name are zero.
type PrunerSpec struct {
	// Name is none, median, percentile or asha.
	Name string
	// Startup (median, percentile): finished trials needed before anything
	// is pruned. Default 5.
	Startup int
	// Warmup (median, percentile): steps below this are never pruned.
	// Default 0.
	Warmup int64
	// Interval (median, percentile): judge only the first report in each
	// interval of this many steps past Warmup. Default 1.
	Interval int64
	// MinTrials (median, percentile): other trials that must have reported
	// at this step before it is judged. Default 1.
	MinTrials int
	// Percentile (percentile): a trial is pruned when its best value is
	// worse than this percentile of the finished trials at the same step
	// (keep the best Percentile %). Median is 50.
	Percentile float64
	// MinResource (asha): the first rung's step r; 0 means automatic
	// (a hundredth of the longest finished curve). Rung k is at
	// r·Eta^(MinEarlyStoppingRate+k).
	MinResource int64
	// Eta (asha): the reduction factor; 1/Eta of a rung is promoted.
	// Default 4.
	Eta int
	// MinEarlyStoppingRate (asha): s in r·Eta^(s+k). Default 0.
	MinEarlyStoppingRate int
	// Metric, with several objectives, names the metric whose
	// intermediate values the pruner judges (required then, "" otherwise).
	Metric string
}

// Names of samplers and pruners, in the order they are listed in errors.
var (
	samplerNames = []string{"tpe", "random", "sobol", "grid", "nsga2"}
	prunerNames  = []string{"none", "median", "percentile", "asha"}
)

// samplerKeys and prunerKeys list the option keys each name takes, as
// written in TOML and flags.
func samplerKeys(name string) []string {
	if name == "tpe" {
		return []string{"startup", "candidates"}
	}
	return nil
}

func prunerKeys(name string) []string {
	switch name {
	case "median":
		return []string{"startup", "warmup", "interval", "min_trials", "metric"}
	case "percentile":
		return []string{"percentile", "startup", "warmup", "interval", "min_trials", "metric"}
	case "asha":
		return []string{"min_resource", "eta", "min_early_stopping_rate", "metric"}
	}
	return nil
}

// defaultSampler returns the sampler spec with name's defaults.
func defaultSampler(name string) SamplerSpec {
	s := SamplerSpec{Name: name}
	if name == "tpe" {
		s.Startup, s.Candidates = 10, 24
	}
	return s
}

func defaultPruner(name string) PrunerSpec {
	p := PrunerSpec{Name: name}
	switch name {
	case "median", "percentile":
		p.Startup, p.Interval, p.MinTrials = 5, 1, 1
		if name == "median" {
			p.Percentile = 50
		}
	case "asha":
		p.Eta = 4
	}
	return p
}

// Validate checks the whole spec, fills the budget of a grid study with
// the grid's size when it is 0, and returns an error that names the field
// and the fix.
func (s *Spec) Validate() error {
	if s.Space == nil {
		return fmt.Errorf("study: spec has no space (add params)")
	}
	if !slices.Contains(samplerNames, s.Sampler.Name) {
		return fmt.Errorf("study: sampler %q: want one of %s%s", s.Sampler.Name, strings.Join(samplerNames, ", "), suggest(s.Sampler.Name, samplerNames))
	}
	if !slices.Contains(prunerNames, s.Pruner.Name) {
		return fmt.Errorf("study: pruner %q: want one of %s%s", s.Pruner.Name, strings.Join(prunerNames, ", "), suggest(s.Pruner.Name, prunerNames))
	}
	if s.Direction != Minimize && s.Direction != Maximize && s.Direction != DirectionUnknown {
		return fmt.Errorf("study: direction %d: want minimize or maximize", int(s.Direction))
	}
	if err := s.validateObjectives(); err != nil {
		return err
	}
	if s.Direction == DirectionUnknown && len(s.Directions) == 0 {
		if s.Sampler.Name == "tpe" {
			return fmt.Errorf(`study: sampler tpe compares scores, so it needs a direction (set direction = "minimize" or "maximize", or use sampler random, sobol or grid)`)
		}
		if s.Pruner.Name != "none" {
			return fmt.Errorf(`study: pruner %s compares scores, so it needs a direction (set direction = "minimize" or "maximize", or use pruner none)`, s.Pruner.Name)
		}
	}
	sp := &s.Sampler
	if sp.Name == "tpe" {
		if sp.Startup < 1 {
			return fmt.Errorf("study: sampler.startup %d: want at least 1", sp.Startup)
		}
		if sp.Candidates < 1 || sp.Candidates > 10000 {
			return fmt.Errorf("study: sampler.candidates %d: want 1 to 10000 (default 24)", sp.Candidates)
		}
	} else if sp.Startup != 0 || sp.Candidates != 0 {
		return fmt.Errorf("study: sampler %s takes no startup or candidates (those are for tpe)", sp.Name)
	}
	pr := &s.Pruner
	switch pr.Name {
	case "median", "percentile":
		if pr.Startup < 0 || pr.Warmup < 0 || pr.MinTrials < 1 || pr.Interval < 1 {
			return fmt.Errorf("study: pruner %s: startup %d and warmup %d must be ≥ 0, interval %d and min_trials %d ≥ 1",
				pr.Name, pr.Startup, pr.Warmup, pr.Interval, pr.MinTrials)
		}
		if pr.Name == "median" && pr.Percentile != 50 {
			return fmt.Errorf("study: pruner median is percentile 50, got %v (use pruner percentile)", pr.Percentile)
		}
		if math.IsNaN(pr.Percentile) || pr.Percentile <= 0 || pr.Percentile >= 100 {
			return fmt.Errorf("study: pruner.percentile %v: want a number strictly between 0 and 100 (the best share to keep, in %%)", pr.Percentile)
		}
		if pr.MinResource != 0 || pr.Eta != 0 || pr.MinEarlyStoppingRate != 0 {
			return fmt.Errorf("study: pruner %s takes no min_resource, eta or min_early_stopping_rate (those are for asha)", pr.Name)
		}
	case "asha":
		if pr.MinResource < 0 || pr.Eta < 2 || pr.MinEarlyStoppingRate < 0 {
			return fmt.Errorf("study: pruner asha: min_resource %d and min_early_stopping_rate %d must be ≥ 0, eta %d ≥ 2",
				pr.MinResource, pr.MinEarlyStoppingRate, pr.Eta)
		}
		if pr.Startup != 0 || pr.Warmup != 0 || pr.Interval != 0 || pr.MinTrials != 0 || pr.Percentile != 0 {
			return fmt.Errorf("study: pruner asha takes no startup, warmup, interval, min_trials or percentile (use min_resource, eta)")
		}
	case "none":
		if *pr != (PrunerSpec{Name: "none"}) {
			return fmt.Errorf("study: pruner none takes no options")
		}
	}
	if s.MaxRetries < 0 {
		return fmt.Errorf("study: max_retries %d: want ≥ 0", s.MaxRetries)
	}
	if err := checkMetric(s.Metric); err != nil {
		return err
	}
	if s.Sampler.Name == "grid" {
		n, finite := s.Space.Size()
		if !finite {
			for _, k := range s.Space.knobs {
				if k.Kind == KnobFloat && k.Step == 0 {
					return fmt.Errorf("study: sampler grid: param %q is continuous (give it a step)", k.Name)
				}
			}
		}
		if n > maxGrid {
			return fmt.Errorf("study: sampler grid: %d cells is more than %d (add steps, remove options, or use another sampler)", n, maxGrid)
		}
		if s.Budget == 0 {
			s.Budget = n
		}
		if s.Budget > n {
			return fmt.Errorf("study: budget %d: the grid has only %d cells (set budget = %d or 0)", s.Budget, n, n)
		}
	}
	if s.Budget <= 0 {
		return fmt.Errorf("study: budget %d: want the number of trials, at least 1 (set budget = 100)", s.Budget)
	}
	return nil
}

// maxGrid bounds grid studies, whose budget is the grid size.
const maxGrid = 1 << 40

func checkMetric(m string) error {
	if m == "" {
		return nil
	}
	if err := checkText("metric", "name", m); err != nil {
		return fmt.Errorf("study: metric %q: want plain text without ',', '=' or control characters", m)
	}
	return nil
}

// ParseSpec reads a study spec written by hand in TOML. It is strict: an
// unknown key is an error that names the key and suggests the nearest
// valid one, and a value of the wrong type names its key. Example:
//
//	direction = "minimize"   # or "maximize"; required for tpe and pruners
//	metric = "val_loss"      # optional, for listings
//	budget = 100             # trials; 0 or absent for grid = grid size
//	seed = 42                # default 0
//	max_retries = 2          # failed attempts retried; default 0
//
//	[sampler]                # or: sampler = "tpe"
//	name = "tpe"             # tpe (default), random, sobol, grid
//	startup = 10             # tpe: sobol trials before the model
//	candidates = 24          # tpe
//
//	[pruner]                 # or: pruner = "median:warmup=5"
//	name = "median"          # none (default), median, percentile, asha
//	startup = 5
//	warmup = 0
//	interval = 1
//
//	[param]                  # in order; this is the point's order
//	lr = { type = "float", low = 1e-5, high = 1e-1, log = true }
//	batch = "int:16:256:log" # the --param syntax also works
//	opt = { type = "choice", choices = ["adam", "sgd"] }
//	epochs = { type = "fixed", value = 10 }
//	momentum = { type = "float", low = 0, high = 0.99, when = "opt == 'sgd'" }
//	nesterov = "choice:yes,no if opt == sgd"   # flag syntax: " if " CONDITION
//
// Params may also be tables ([param.lr] with type, low, high, step, log,
// choices, value, when). Their order in the file is the space's knob
// order. A param with when is conditional (cond.go): absent from the
// points where its condition is false.
func ParseSpec(tomlText []byte) (*Spec, error) {
	var raw map[string]any
	md, err := toml.Decode(string(tomlText), &raw)
	if err != nil {
		return nil, fmt.Errorf("study: spec: %w", err)
	}
	top := newOpts("", raw)
	if v, ok, err := top.int("version"); err != nil {
		return nil, err
	} else if ok && v != SpecVersion {
		return nil, fmt.Errorf("study: spec version %d: this soma reads version %d", v, SpecVersion)
	}
	s := &Spec{}
	if s.Metrics, _, err = top.texts("metrics"); err != nil {
		return nil, err
	}
	if v, isList := raw["direction"].([]any); isList {
		top.take("direction")
		if s.Directions, err = parseDirections(v); err != nil {
			return nil, err
		}
	} else if d, ok, err := top.str("direction"); err != nil {
		return nil, err
	} else if ok {
		if s.Direction, err = ParseDirection(d); err != nil || d == "unknown" || d == "" {
			return nil, fmt.Errorf(`study: direction %q: want "minimize" or "maximize" (or leave it out)%s`, d,
				suggest(d, []string{"minimize", "maximize"}))
		}
	}
	if s.Metric, _, err = top.str("metric"); err != nil {
		return nil, err
	}
	if b, _, err := top.int("budget"); err != nil {
		return nil, err
	} else {
		s.Budget = int(b)
	}
	if seed, _, err := top.int("seed"); err != nil {
		return nil, err
	} else if seed < 0 {
		return nil, fmt.Errorf("study: seed %d: want ≥ 0", seed)
	} else {
		s.Seed = uint64(seed)
	}
	if r, _, err := top.int("max_retries"); err != nil {
		return nil, err
	} else {
		s.MaxRetries = int(r)
	}
	if s.Sampler, err = samplerFromOpts(top.sub("sampler")); err != nil {
		return nil, err
	}
	if s.Pruner, err = prunerFromOpts(top.sub("pruner")); err != nil {
		return nil, err
	}
	pv, ok := top.take("param")
	if !ok {
		return nil, fmt.Errorf("study: spec has no [param] table (add params, e.g. lr = \"float:1e-5:1e-1:log\")")
	}
	ptab, isTab := pv.(map[string]any)
	if !isTab {
		return nil, fmt.Errorf("study: param: want a table of params ([param] with one line per param)")
	}
	// Knob order is the file's order, which only MetaData remembers.
	// Dotted keys (param.lr.type = ...) name the param only inside longer
	// keys, so take each param's first appearance at any depth.
	var order []string
	for _, k := range md.Keys() {
		if len(k) >= 2 && k[0] == "param" && !slices.Contains(order, k[1]) {
			order = append(order, k[1])
		}
	}
	if len(order) != len(ptab) {
		return nil, fmt.Errorf("study: param: could not tell the order of the params (write one line per param under [param])")
	}
	knobs := make([]Knob, 0, len(order))
	for _, name := range order {
		k, err := knobFromValue(name, ptab[name])
		if err != nil {
			return nil, err
		}
		knobs = append(knobs, k)
	}
	if err := top.done([]string{"version", "direction", "metric", "metrics", "budget", "seed", "max_retries", "sampler", "pruner", "param"}); err != nil {
		return nil, err
	}
	if s.Space, err = NewSpace(knobs); err != nil {
		return nil, err
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return s, nil
}

// SpecFromFlags builds a spec from command-line flags. Each param is
// name=kind:arguments:
//
//	lr=float:1e-5:1e-1:log       float in [1e-5, 1e-1], log scale
//	drop=float:0:0.5:step=0.1    float on the grid 0, 0.1, …, 0.5
//	batch=int:16:256:log         int, log scale
//	layers=int:2:8               int; also :step=2
//	opt=choice:adam,sgd          one of the listed options
//	epochs=fixed:10              always 10
//	mom=float:0:1 if opt==sgd    only where opt is sgd (see cond.go:
//	                             ==, !=, in [a,b], <, <=, >, >= on int, and)
//
// direction is minimize, maximize or "" (unknown). sampler and pruner are
// a name optionally followed by ':' and key=value options joined by ',',
// the same keys as the TOML spec: "tpe", "tpe:startup=20",
// "median:startup=5,warmup=10", "asha:min_resource=1,eta=3"; "" means the
// default (tpe; none). budget 0 means the grid's size for grid. A study
// with several objectives needs SpecFlags (its Metrics).
func SpecFromFlags(params []string, direction, sampler, pruner string, budget int, seed uint64) (*Spec, error) {
	return SpecFlags{Params: params, Direction: direction, Sampler: sampler, Pruner: pruner, Budget: budget, Seed: seed}.Spec()
}

// SpecFlags is a study spec in command-line form (soma-trial's --param,
// --direction, --metrics, --sampler, --pruner, --budget and --seed).
type SpecFlags struct {
	Params []string
	// Direction is minimize, maximize, "" (unknown), or for several
	// objectives one per objective joined by commas:
	// "minimize,maximize" (the TOML spec's direction = [...]).
	Direction string
	// Metrics names the objectives, joined by commas, one per entry of
	// Direction and in the order the objective prints its scores:
	// "error,latency_ms" (the TOML spec's metrics = [...]). With one
	// direction it may name that one objective (metric = "...").
	Metrics         string
	Sampler, Pruner string
	Budget          int
	Seed            uint64
}

// flagList splits a comma-separated flag value, refusing empty entries.
func flagList(flag, text, example string) ([]string, error) {
	parts := strings.Split(text, ",")
	for i, p := range parts {
		if parts[i] = strings.TrimSpace(p); parts[i] == "" {
			return nil, fmt.Errorf("study: --%s %q: entry %d is empty (write e.g. --%s %s)", flag, text, i+1, flag, example)
		}
	}
	return parts, nil
}

// Spec builds and validates the spec (see SpecFromFlags for the param
// syntax).
func (f SpecFlags) Spec() (*Spec, error) {
	s := &Spec{Budget: f.Budget, Seed: f.Seed}
	var err error
	var dirs, metrics []string
	if f.Direction != "" {
		if dirs, err = flagList("direction", f.Direction, "minimize,maximize"); err != nil {
			return nil, err
		}
	}
	if f.Metrics != "" {
		if metrics, err = flagList("metrics", f.Metrics, "error,latency_ms"); err != nil {
			return nil, err
		}
	}
	for i, d := range dirs {
		x, err := ParseDirection(d)
		if err != nil || x == DirectionUnknown {
			which := ""
			if len(dirs) > 1 {
				which = fmt.Sprintf(" (entry %d)", i+1)
			}
			return nil, fmt.Errorf(`study: --direction %q%s: want minimize or maximize%s`, d, which, suggest(d, []string{"minimize", "maximize"}))
		}
		if len(dirs) == 1 {
			s.Direction = x
		} else {
			s.Directions = append(s.Directions, x)
		}
	}
	switch {
	case len(metrics) > 0 && len(dirs) == 0:
		return nil, fmt.Errorf("study: --metrics %s needs a direction per metric (--direction %s)", f.Metrics, strings.TrimSuffix(strings.Repeat("minimize,", len(metrics)), ","))
	case len(dirs) > 1 && len(metrics) == 0:
		return nil, fmt.Errorf("study: --direction %s: %d objectives need names: add --metrics NAME,NAME (one per direction, in the order the objective prints its scores, e.g. --metrics error,latency_ms)", f.Direction, len(dirs))
	case len(metrics) > 0 && len(metrics) != len(dirs):
		return nil, fmt.Errorf("study: --direction has %d entries (%s) but --metrics has %d (%s): give one direction per metric, in the same order", len(dirs), f.Direction, len(metrics), f.Metrics)
	case len(metrics) == 1:
		s.Metric = metrics[0]
	case len(metrics) > 1:
		s.Metrics = metrics
	}
	sampler, pruner := f.Sampler, f.Pruner
	if s.Sampler, err = samplerFromOpts(flagOpts("sampler", sampler)); err != nil {
		return nil, err
	}
	if s.Pruner, err = prunerFromOpts(flagOpts("pruner", pruner)); err != nil {
		return nil, err
	}
	params := f.Params
	if len(params) == 0 {
		return nil, fmt.Errorf(`study: no params (add --param "lr=float:1e-5:1e-1:log")`)
	}
	knobs := make([]Knob, 0, len(params))
	for _, p := range params {
		name, def, ok := strings.Cut(p, "=")
		if !ok {
			return nil, fmt.Errorf(`study: --param %q: want name=kind:args, e.g. "lr=float:1e-5:1e-1:log"`, p)
		}
		k, err := knobFromText(name, def)
		if err != nil {
			return nil, err
		}
		knobs = append(knobs, k)
	}
	if s.Space, err = NewSpace(knobs); err != nil {
		return nil, err
	}
	if err := flagHints(s); err != nil {
		return nil, err
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return s, nil
}

// flagHints checks, in flag syntax, what Validate's messages would say in
// TOML: a user who typed --param flags was told "set budget = 100"
// (issue 16).
func flagHints(s *Spec) error {
	several := len(s.Directions) > 0
	if several && s.Pruner.Name != "none" && !slices.Contains(s.Metrics, s.Pruner.Metric) {
		return fmt.Errorf("study: --pruner %s with several objectives: name the metric it judges, one of --metrics %s (e.g. --pruner %s:metric=%s)",
			s.Pruner.Name, strings.Join(s.Metrics, ","), s.Pruner.Name, s.Metrics[0])
	}
	if !several && s.Sampler.Name == "nsga2" {
		return errors.New("study: --sampler nsga2 is for several objectives (--direction minimize,maximize --metrics error,latency_ms); use tpe for one")
	}
	if several {
		return flagBudget(s)
	}
	if s.Direction == DirectionUnknown && s.Sampler.Name == "tpe" {
		return errors.New("study: --sampler tpe (the default) compares scores, so it needs --direction minimize or maximize (or --sampler random, sobol or grid)")
	}
	if s.Direction == DirectionUnknown && s.Pruner.Name != "none" {
		return fmt.Errorf("study: --pruner %s compares scores, so it needs --direction minimize or maximize (or no --pruner)", s.Pruner.Name)
	}
	return flagBudget(s)
}

// flagBudget checks --budget against the sampler.
func flagBudget(s *Spec) error {
	if s.Sampler.Name == "grid" {
		if n, finite := s.Space.Size(); finite && n <= maxGrid && s.Budget > n {
			return fmt.Errorf("study: --budget %d: the grid has only %d cells (give --budget %d, or leave it out for the whole grid)", s.Budget, n, n)
		}
		if s.Budget >= 0 {
			return nil
		}
	}
	if s.Budget <= 0 {
		return fmt.Errorf("study: --budget %d: want the number of trials, at least 1 (e.g. --budget 100)", s.Budget)
	}
	return nil
}

// knobFromText parses the flag syntax kind:args[ if CONDITION] for knob
// name.
func knobFromText(name, def string) (Knob, error) {
	def, when, hasWhen := strings.Cut(def, " if ")
	k, err := knobFromDef(name, def)
	if hasWhen {
		if k.When = strings.TrimSpace(when); k.When == "" {
			return k, fmt.Errorf("study: param %q: nothing after \" if \" (write e.g. %s=%s if opt == sgd)", name, name, def)
		}
	}
	return k, err
}

func knobFromDef(name, def string) (Knob, error) {
	kindText, rest, _ := strings.Cut(def, ":")
	kind, err := ParseKnobKind(kindText)
	if err != nil {
		return Knob{}, fmt.Errorf("study: param %q: %q: want int:LOW:HIGH, float:LOW:HIGH, choice:A,B or fixed:VALUE%s", name, def,
			suggest(kindText, []string{"int", "float", "choice", "fixed"}))
	}
	k := Knob{Name: name, Kind: kind}
	switch kind {
	case KnobChoice:
		if rest == "" {
			return k, fmt.Errorf("study: param %q: choice has no options (write choice:a,b)", name)
		}
		k.Choices = strings.Split(rest, ",")
		return k, nil
	case KnobFixed:
		k.Value = rest
		return k, nil
	}
	f := strings.Split(rest, ":")
	if len(f) < 2 {
		return k, fmt.Errorf("study: param %q: %q: want %s:LOW:HIGH[:log][:step=S]", name, def, kind)
	}
	num := func(what, t string) (float64, error) {
		x, err := strconv.ParseFloat(t, 64)
		if errors.Is(err, strconv.ErrRange) && math.IsInf(x, 0) {
			return 0, fmt.Errorf("study: param %q: %s %s is beyond float64's range (give bounds within ±%v)", name, what, t, math.MaxFloat64)
		}
		if err != nil {
			return 0, fmt.Errorf("study: param %q: %s %q is not a number", name, what, t)
		}
		if kind == KnobInt {
			return x, exactInt(name, what, t)
		}
		return x, nil
	}
	if k.Low, err = num("low", f[0]); err != nil {
		return k, err
	}
	if k.High, err = num("high", f[1]); err != nil {
		return k, err
	}
	for _, o := range f[2:] {
		switch {
		case o == "log":
			k.Log = true
		case strings.HasPrefix(o, "step="):
			if k.Step, err = num("step", strings.TrimPrefix(o, "step=")); err != nil {
				return k, err
			}
		default:
			return k, fmt.Errorf("study: param %q: option %q: want log or step=S%s", name, o, suggest(o, []string{"log", "step="}))
		}
	}
	return k, nil
}

// exactInt refuses an int knob's bound past ±2^53 as the user wrote it,
// before float64 changes it: 9007199254740993 (2^53+1) would otherwise
// become 2^53 without a word (and pass), and 2^63 would be refused as
// -9.223372036854776e+18, a number the user never wrote. Texts that are
// not whole numbers (2.5) are left to NewSpace.
func exactInt(name, what, text string) error {
	b, ok := new(big.Float).SetPrec(4096).SetString(text)
	if ok && b.IsInt() && b.Abs(b).Cmp(big.NewFloat(maxExactInt)) > 0 {
		return fmt.Errorf("study: param %q: %s %s is beyond ±2^53, where float64 skips whole numbers (use type float, or bounds within ±%d)", name, what, text, int64(maxExactInt))
	}
	return nil
}

// knobFromValue reads one [param] entry: a string in flag syntax or a
// table.
func knobFromValue(name string, v any) (Knob, error) {
	if t, ok := v.(string); ok {
		return knobFromText(name, t)
	}
	tab, ok := v.(map[string]any)
	if !ok {
		return Knob{}, fmt.Errorf(`study: param.%s: want a table or a string like "float:0:1", got %T`, name, v)
	}
	o := newOpts("param."+name, tab)
	kt, ok, err := o.str("type")
	if err != nil {
		return Knob{}, err
	}
	if !ok {
		return Knob{}, fmt.Errorf(`study: param.%s: no type (add type = "int", "float", "choice" or "fixed")`, name)
	}
	kind, err := ParseKnobKind(kt)
	if err != nil {
		return Knob{}, fmt.Errorf("study: param.%s: %w", name, err)
	}
	k := Knob{Name: name, Kind: kind}
	if k.When, _, err = o.str("when"); err != nil {
		return k, err
	}
	var allowed []string
	switch kind {
	case KnobInt, KnobFloat:
		allowed = []string{"type", "low", "high", "step", "log"}
		var lok, hok bool
		if kind == KnobInt {
			// TOML integers are int64; converting one past 2^53 to
			// float64 rounds it (see exactInt).
			for _, key := range []string{"low", "high", "step"} {
				if n, isInt := tab[key].(int64); isInt && (n > maxExactInt || n < -maxExactInt) {
					return k, fmt.Errorf("study: param.%s.%s: %d is beyond ±2^53, where float64 skips whole numbers (use type float, or bounds within ±%d)", name, key, n, int64(maxExactInt))
				}
			}
		}
		if k.Low, lok, err = o.float("low"); err != nil {
			return k, err
		}
		if k.High, hok, err = o.float("high"); err != nil {
			return k, err
		}
		if !lok || !hok {
			return k, fmt.Errorf("study: param.%s: %s needs low and high", name, kind)
		}
		if k.Step, _, err = o.float("step"); err != nil {
			return k, err
		}
		if k.Log, _, err = o.bool("log"); err != nil {
			return k, err
		}
	case KnobChoice:
		allowed = []string{"type", "choices"}
		var cok bool
		if k.Choices, cok, err = o.texts("choices"); err != nil {
			return k, err
		}
		if !cok {
			return k, fmt.Errorf(`study: param.%s: choice needs choices = ["a", "b"]`, name)
		}
	case KnobFixed:
		allowed = []string{"type", "value"}
		var vok bool
		if k.Value, vok, err = o.text("value"); err != nil {
			return k, err
		}
		if !vok {
			return k, fmt.Errorf("study: param.%s: fixed needs a value (value = 10)", name)
		}
	}
	if err := o.done(append(allowed, "when")); err != nil {
		return k, err
	}
	return k, nil
}

func samplerFromOpts(o *opts) (SamplerSpec, error) {
	if o == nil {
		return defaultSampler("tpe"), nil
	}
	name, ok, err := o.str("name")
	if err != nil {
		return SamplerSpec{}, err
	}
	if !ok {
		name = "tpe"
	}
	if !slices.Contains(samplerNames, name) {
		return SamplerSpec{}, fmt.Errorf("study: %s %q: want one of %s%s", o.key("name"), name, strings.Join(samplerNames, ", "), suggest(name, samplerNames))
	}
	s := defaultSampler(name)
	if name == "tpe" {
		if v, ok, err := o.int("startup"); err != nil {
			return s, err
		} else if ok {
			s.Startup = int(v)
		}
		if v, ok, err := o.int("candidates"); err != nil {
			return s, err
		} else if ok {
			s.Candidates = int(v)
		}
	}
	if err := o.doneFor("sampler", name, append([]string{"name"}, samplerKeys(name)...), samplerNames, samplerKeys); err != nil {
		return s, err
	}
	return s, nil
}

func prunerFromOpts(o *opts) (PrunerSpec, error) {
	if o == nil {
		return defaultPruner("none"), nil
	}
	name, ok, err := o.str("name")
	if err != nil {
		return PrunerSpec{}, err
	}
	if !ok {
		name = "none"
	}
	if !slices.Contains(prunerNames, name) {
		return PrunerSpec{}, fmt.Errorf("study: %s %q: want one of %s%s", o.key("name"), name, strings.Join(prunerNames, ", "), suggest(name, prunerNames))
	}
	p := defaultPruner(name)
	type intOpt struct {
		key string
		dst *int64
	}
	var ints []intOpt
	var startup, minTrials, eta, rate int64 = int64(p.Startup), int64(p.MinTrials), int64(p.Eta), int64(p.MinEarlyStoppingRate)
	switch name {
	case "median", "percentile":
		ints = []intOpt{{"startup", &startup}, {"warmup", &p.Warmup}, {"interval", &p.Interval}, {"min_trials", &minTrials}}
		if name == "percentile" {
			v, ok, err := o.float("percentile")
			if err != nil {
				return p, err
			}
			if !ok {
				return p, fmt.Errorf("study: pruner percentile needs percentile (e.g. 25 keeps the best quarter)")
			}
			p.Percentile = v
		}
	case "asha":
		ints = []intOpt{{"min_resource", &p.MinResource}, {"eta", &eta}, {"min_early_stopping_rate", &rate}}
	}
	for _, x := range ints {
		v, ok, err := o.int(x.key)
		if err != nil {
			return p, err
		}
		if ok {
			*x.dst = v
		}
	}
	p.Startup, p.MinTrials, p.Eta, p.MinEarlyStoppingRate = int(startup), int(minTrials), int(eta), int(rate)
	if name != "none" {
		if p.Metric, _, err = o.str("metric"); err != nil {
			return p, err
		}
	}
	if err := o.doneFor("pruner", name, append([]string{"name"}, prunerKeys(name)...), prunerNames, prunerKeys); err != nil {
		return p, err
	}
	return p, nil
}

// opts is one section of options (a TOML table or a flag's key=value
// list) read key by key; done reports the keys nobody read.
type opts struct {
	prefix string
	kv     map[string]any
	used   map[string]bool
	flag   bool // values are text from a flag
}

func newOpts(prefix string, kv map[string]any) *opts {
	return &opts{prefix: prefix, kv: kv, used: map[string]bool{}}
}

// flagOpts parses "name:k=v,k=v" into opts with name under "name".
func flagOpts(section, text string) *opts {
	if text == "" {
		return nil
	}
	name, rest, _ := strings.Cut(text, ":")
	kv := map[string]any{"name": name}
	o := &opts{prefix: "--" + section + " ", kv: kv, used: map[string]bool{}, flag: true}
	if rest != "" {
		for _, p := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(p, "=")
			if _, dup := kv[k]; dup {
				kv["\x00dup"] = k
			}
			kv[k] = v
		}
	}
	return o
}

func (o *opts) key(k string) string {
	if o.flag {
		return o.prefix + k
	}
	if o.prefix == "" {
		return k
	}
	return o.prefix + "." + k
}

// sub returns the section under key k: a table, or a string in flag
// syntax ("median:warmup=5"); nil when absent.
func (o *opts) sub(k string) *opts {
	v, ok := o.take(k)
	if !ok {
		return nil
	}
	switch t := v.(type) {
	case map[string]any:
		return newOpts(o.key(k), t)
	case string:
		f := flagOpts(k, t)
		if f != nil {
			f.prefix = o.key(k) + " "
			f.flag = true
		}
		return f
	}
	// Let the caller's name lookup report the type.
	return newOpts(o.key(k), map[string]any{"name": v})
}

func (o *opts) take(k string) (any, bool) {
	v, ok := o.kv[k]
	if ok {
		o.used[k] = true
	}
	return v, ok
}

func (o *opts) typeErr(k, want string, v any) error {
	return fmt.Errorf("study: %s: want %s, got %s", o.key(k), want, describe(v))
}

func describe(v any) string {
	switch t := v.(type) {
	case string:
		return strconv.Quote(t)
	case map[string]any:
		return "a table"
	case []any:
		return "an array"
	}
	return fmt.Sprintf("%v", v)
}

func (o *opts) str(k string) (string, bool, error) {
	v, ok := o.take(k)
	if !ok {
		return "", false, nil
	}
	s, isStr := v.(string)
	if !isStr {
		return "", true, o.typeErr(k, "text in quotes", v)
	}
	return s, true, nil
}

// text reads a value that may be written as any scalar and is kept as
// text (a fixed value): 10, 0.5, true and "x" all work.
func (o *opts) text(k string) (string, bool, error) {
	v, ok := o.take(k)
	if !ok {
		return "", false, nil
	}
	t, err := scalarText(v)
	if err != nil {
		return "", true, fmt.Errorf("study: %s: %w", o.key(k), err)
	}
	return t, true, nil
}

func scalarText(v any) (string, error) {
	switch t := v.(type) {
	case string:
		return t, nil
	case int64:
		return strconv.FormatInt(t, 10), nil
	case float64:
		return strconv.FormatFloat(t, 'g', -1, 64), nil
	case bool:
		return strconv.FormatBool(t), nil
	}
	return "", fmt.Errorf("want a number, text or true/false, got %s", describe(v))
}

func (o *opts) texts(k string) ([]string, bool, error) {
	v, ok := o.take(k)
	if !ok {
		return nil, false, nil
	}
	arr, isArr := v.([]any)
	if !isArr {
		return nil, true, o.typeErr(k, `an array like ["a", "b"]`, v)
	}
	out := make([]string, len(arr))
	for i, e := range arr {
		t, err := scalarText(e)
		if err != nil {
			return nil, true, fmt.Errorf("study: %s[%d]: %w", o.key(k), i, err)
		}
		out[i] = t
	}
	return out, true, nil
}

func (o *opts) int(k string) (int64, bool, error) {
	v, ok := o.take(k)
	if !ok {
		return 0, false, nil
	}
	switch t := v.(type) {
	case int64:
		return t, true, nil
	case string:
		if o.flag {
			n, err := strconv.ParseInt(t, 10, 64)
			if err == nil {
				return n, true, nil
			}
		}
	}
	return 0, true, o.typeErr(k, "a whole number", v)
}

func (o *opts) float(k string) (float64, bool, error) {
	v, ok := o.take(k)
	if !ok {
		return 0, false, nil
	}
	switch t := v.(type) {
	case float64:
		return t, true, nil
	case int64:
		return float64(t), true, nil
	case string:
		if o.flag {
			x, err := strconv.ParseFloat(t, 64)
			if err == nil {
				return x, true, nil
			}
		}
	}
	return 0, true, o.typeErr(k, "a number", v)
}

func (o *opts) bool(k string) (bool, bool, error) {
	v, ok := o.take(k)
	if !ok {
		return false, false, nil
	}
	switch t := v.(type) {
	case bool:
		return t, true, nil
	case string:
		if o.flag {
			b, err := strconv.ParseBool(t)
			if err == nil {
				return b, true, nil
			}
		}
	}
	return false, true, o.typeErr(k, "true or false", v)
}

// done returns an error for the first unread key (in sorted order, so
// the message is deterministic), suggesting the nearest allowed key.
func (o *opts) done(allowed []string) error {
	if k, ok := o.kv["\x00dup"].(string); ok {
		return fmt.Errorf("study: %s: given twice", o.key(k))
	}
	for _, k := range o.unused() {
		return fmt.Errorf("study: %s: unknown key%s; valid keys here: %s", o.key(k), suggest(k, allowed), strings.Join(allowed, ", "))
	}
	return nil
}

// doneFor is done for a sampler or pruner section: a key that belongs to
// another sampler or pruner says which.
func (o *opts) doneFor(section, name string, allowed, names []string, keysOf func(string) []string) error {
	if unused := o.unused(); len(unused) > 0 {
		k := unused[0] // explain the first stray key; done lists them all
		for _, other := range names {
			if slices.Contains(keysOf(other), k) && other != name {
				return fmt.Errorf("study: %s: applies to %s %s, not %s (remove it or set name = %q)", o.key(k), section, other, name, other)
			}
		}
	}
	return o.done(allowed)
}

func (o *opts) unused() []string {
	var out []string
	for k := range o.kv {
		if !o.used[k] && k != "\x00dup" {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// canonSpec is the stored form of a Spec (Canonical). Fields are in a
// fixed order and every field is written, so equal specs give equal
// bytes.
type canonSpec struct {
	Format     string       `json:"format"`
	Version    int          `json:"version"`
	Direction  string       `json:"direction"`
	Metric     string       `json:"metric"`
	Budget     int          `json:"budget"`
	Seed       uint64       `json:"seed"`
	MaxRetries int          `json:"max_retries"`
	Sampler    canonSampler `json:"sampler"`
	Pruner     canonPruner  `json:"pruner"`
	Params     []canonParam `json:"params"`
	// Several objectives; omitted for one, so that those specs keep their
	// canonical bytes.
	Directions []string `json:"directions,omitempty"`
	Metrics    []string `json:"metrics,omitempty"`
}

type canonSampler struct {
	Name       string `json:"name"`
	Startup    int    `json:"startup"`
	Candidates int    `json:"candidates"`
}

type canonPruner struct {
	Name                 string  `json:"name"`
	Startup              int     `json:"startup"`
	Warmup               int64   `json:"warmup"`
	Interval             int64   `json:"interval"`
	MinTrials            int     `json:"min_trials"`
	Percentile           float64 `json:"percentile"`
	MinResource          int64   `json:"min_resource"`
	Eta                  int     `json:"eta"`
	MinEarlyStoppingRate int     `json:"min_early_stopping_rate"`
	Metric               string  `json:"metric,omitempty"`
}

type canonParam struct {
	Name    string   `json:"name"`
	Type    string   `json:"type"`
	Low     float64  `json:"low"`
	High    float64  `json:"high"`
	Step    float64  `json:"step"`
	Log     bool     `json:"log"`
	Choices []string `json:"choices"`
	Value   string   `json:"value"`
	// When is omitted when empty, so that unconditional specs keep the
	// canonical bytes they had before conditions existed.
	When string `json:"when,omitempty"`
}

const canonFormat = "soma-study-spec"

// Canonical returns the spec as deterministic, versioned JSON: the
// study's definition as the store keeps it. Equal specs give equal bytes;
// ParseCanonical reads it back to an equal Spec. s must be valid.
func (s *Spec) Canonical() []byte {
	c := canonSpec{
		Format:     canonFormat,
		Version:    SpecVersion,
		Direction:  s.Direction.String(),
		Metric:     s.Metric,
		Budget:     s.Budget,
		Seed:       s.Seed,
		MaxRetries: s.MaxRetries,
		Sampler:    canonSampler(s.Sampler),
		Pruner:     canonPruner(s.Pruner),
		Metrics:    s.Metrics,
	}
	for _, d := range s.Directions {
		c.Directions = append(c.Directions, d.String())
	}
	if s.Space != nil {
		for _, k := range s.Space.knobs {
			ch := k.Choices
			if ch == nil {
				ch = []string{}
			}
			c.Params = append(c.Params, canonParam{Name: k.Name, Type: k.Kind.String(), Low: k.Low, High: k.High,
				Step: k.Step, Log: k.Log, Choices: ch, Value: k.Value, When: k.When})
		}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", " ")
	if err := enc.Encode(c); err != nil {
		// Only NaN or Inf could fail, and Validate refuses them.
		panic(fmt.Sprintf("study: canonical spec: %v", err))
	}
	return b.Bytes()
}

// ParseCanonical reads what Canonical wrote, strictly: unknown fields, a
// different format or version, and an invalid spec are errors.
func ParseCanonical(b []byte) (*Spec, error) {
	var c canonSpec
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("study: canonical spec: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("study: canonical spec: trailing data")
	}
	if c.Format != canonFormat {
		return nil, fmt.Errorf("study: canonical spec: format %q, want %q", c.Format, canonFormat)
	}
	if c.Version != SpecVersion {
		return nil, fmt.Errorf("study: canonical spec version %d: this soma reads version %d (upgrade soma)", c.Version, SpecVersion)
	}
	dir, err := ParseDirection(c.Direction)
	if err != nil {
		return nil, err
	}
	s := &Spec{Direction: dir, Metric: c.Metric, Budget: c.Budget, Seed: c.Seed, MaxRetries: c.MaxRetries,
		Sampler: SamplerSpec(c.Sampler), Pruner: PrunerSpec(c.Pruner), Metrics: c.Metrics}
	for _, d := range c.Directions {
		x, err := ParseDirection(d)
		if err != nil {
			return nil, err
		}
		s.Directions = append(s.Directions, x)
	}
	knobs := make([]Knob, len(c.Params))
	for i, p := range c.Params {
		kind, err := ParseKnobKind(p.Type)
		if err != nil {
			return nil, err
		}
		var ch []string
		if len(p.Choices) > 0 {
			ch = p.Choices
		}
		knobs[i] = Knob{Name: p.Name, Kind: kind, Low: p.Low, High: p.High, Step: p.Step, Log: p.Log, Choices: ch, Value: p.Value, When: p.When}
	}
	if s.Space, err = NewSpace(knobs); err != nil {
		return nil, err
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return s, nil
}

// specLines flattens a spec into (key, value) lines in a fixed order, for
// DiffSpec.
func specLines(s *Spec) [][2]string {
	var l [][2]string
	add := func(k string, v any) { l = append(l, [2]string{k, fmt.Sprint(v)}) }
	add("direction", s.Direction)
	add("metric", strconv.Quote(s.Metric))
	add("budget", s.Budget)
	add("seed", s.Seed)
	add("max_retries", s.MaxRetries)
	if len(s.Directions) > 0 {
		add("directions", s.Directions)
		add("metrics", strings.Join(s.Metrics, ","))
		add("pruner.metric", s.Pruner.Metric)
	}
	add("sampler.name", s.Sampler.Name)
	if s.Sampler.Name == "tpe" {
		add("sampler.startup", s.Sampler.Startup)
		add("sampler.candidates", s.Sampler.Candidates)
	}
	p := s.Pruner
	add("pruner.name", p.Name)
	switch p.Name {
	case "median", "percentile":
		add("pruner.percentile", p.Percentile)
		add("pruner.startup", p.Startup)
		add("pruner.warmup", p.Warmup)
		add("pruner.interval", p.Interval)
		add("pruner.min_trials", p.MinTrials)
	case "asha":
		add("pruner.min_resource", p.MinResource)
		add("pruner.eta", p.Eta)
		add("pruner.min_early_stopping_rate", p.MinEarlyStoppingRate)
	}
	if s.Space != nil {
		var names []string
		for _, k := range s.Space.knobs {
			names = append(names, k.Name)
			pre := "param." + k.Name
			add(pre+".type", k.Kind)
			switch k.Kind {
			case KnobInt, KnobFloat:
				add(pre+".low", k.Low)
				add(pre+".high", k.High)
				add(pre+".step", k.Step)
				add(pre+".log", k.Log)
			case KnobChoice:
				add(pre+".choices", strings.Join(k.Choices, ","))
			case KnobFixed:
				add(pre+".value", strconv.Quote(k.Value))
			}
			if k.When != "" {
				add(pre+".when", strconv.Quote(k.When))
			}
		}
		add("param order", strings.Join(names, ","))
	}
	return l
}

// DiffSpec returns a readable difference between two specs, one line per
// differing key ("budget: 100 → 200", "param.lr.high: 0.1 → 0.2",
// "param.mom: (none) → float"), or "" when they define the same study
// (equal Canonical forms).
func DiffSpec(old, new *Spec) string {
	a, b := specLines(old), specLines(new)
	bm := make(map[string]string, len(b))
	for _, kv := range b {
		bm[kv[0]] = kv[1]
	}
	am := make(map[string]string, len(a))
	var out []string
	for _, kv := range a {
		am[kv[0]] = kv[1]
		nv, ok := bm[kv[0]]
		if !ok {
			nv = "(none)"
		}
		if nv != kv[1] {
			out = append(out, fmt.Sprintf("%s: %s → %s", kv[0], kv[1], nv))
		}
	}
	for _, kv := range b {
		if _, ok := am[kv[0]]; !ok {
			out = append(out, fmt.Sprintf("%s: (none) → %s", kv[0], kv[1]))
		}
	}
	if len(out) == 0 && !bytes.Equal(old.Canonical(), new.Canonical()) {
		// Same printed values, different bits (e.g. floats printed alike).
		out = append(out, "canonical forms differ in a value printed alike")
	}
	return strings.Join(out, "\n")
}

// NewSampler returns the spec's sampler, seeded with s.Seed.
func (s *Spec) NewSampler() (Sampler, error) {
	switch s.Sampler.Name {
	case "random":
		return NewRandomSampler(s.Seed), nil
	case "sobol":
		return NewSobolSampler(s.Seed), nil
	case "grid":
		return NewGridSampler(), nil
	case "nsga2":
		return NewNSGA2Sampler(s.Seed, s.Directions), nil
	case "tpe":
		if s.Sampler.Startup < 1 || s.Sampler.Candidates < 1 {
			return nil, fmt.Errorf("study: sampler tpe: startup %d and candidates %d must be ≥ 1", s.Sampler.Startup, s.Sampler.Candidates)
		}
		return NewTPESampler(s.Seed, TPEOptions{Startup: s.Sampler.Startup, Candidates: s.Sampler.Candidates, Directions: s.Directions}), nil
	}
	return nil, fmt.Errorf("study: sampler %q: want one of %s%s", s.Sampler.Name, strings.Join(samplerNames, ", "), suggest(s.Sampler.Name, samplerNames))
}

// NewPruner returns the spec's pruner.
func (s *Spec) NewPruner() (Pruner, error) {
	p := s.Pruner
	switch p.Name {
	case "none", "":
		return NonePruner{}, nil
	case "median", "percentile":
		return &PercentilePruner{Percentile: p.Percentile, Startup: p.Startup, Warmup: p.Warmup, Interval: p.Interval, MinTrials: p.MinTrials}, nil
	case "asha":
		return &ASHAPruner{MinResource: p.MinResource, Eta: p.Eta, MinEarlyStoppingRate: p.MinEarlyStoppingRate}, nil
	}
	return nil, fmt.Errorf("study: pruner %q: want one of %s%s", p.Name, strings.Join(prunerNames, ", "), suggest(p.Name, prunerNames))
}
