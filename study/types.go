package study

// This file is the contract between the two halves of package study: the
// pure half (spec, space, point, samplers, pruners: spec.go, space.go,
// point.go, sampler_*.go, pruner_*.go) and the store half (records,
// take/report, leases and retries, queries: record.go, trial.go, ...).
// Change it only with both halves in view.

import (
	"fmt"
	"time"
)

// Direction says which way a study's score is better.
type Direction int

const (
	// DirectionUnknown is a study nobody told; it never guesses minimise.
	DirectionUnknown Direction = iota
	Minimize
	Maximize
)

func (d Direction) String() string {
	switch d {
	case Minimize:
		return "minimize"
	case Maximize:
		return "maximize"
	}
	return "unknown"
}

// ParseDirection accepts "minimize"/"min" and "maximize"/"max".
func ParseDirection(s string) (Direction, error) {
	switch s {
	case "minimize", "min", "minimise":
		return Minimize, nil
	case "maximize", "max", "maximise":
		return Maximize, nil
	case "unknown", "":
		return DirectionUnknown, nil
	}
	return DirectionUnknown, fmt.Errorf("study: direction %q: want minimize or maximize", s)
}

// Better reports whether a is strictly better than b in direction d.
// With DirectionUnknown nothing is better than anything.
func (d Direction) Better(a, b float64) bool {
	switch d {
	case Minimize:
		return a < b
	case Maximize:
		return a > b
	}
	return false
}

// State is the state of one trial attempt, as recorded.
type State string

const (
	StateRunning     State = "running"
	StateDone        State = "done"
	StatePruned      State = "pruned"
	StateFailed      State = "failed"
	StateInterrupted State = "interrupted"
	// StateStale is never written: it is derived at read time for a running
	// attempt whose heartbeat is older than the grace period.
	StateStale State = "stale"
)

// ParseState parses a recorded state.
func ParseState(s string) (State, error) {
	switch st := State(s); st {
	case StateRunning, StateDone, StatePruned, StateFailed, StateInterrupted, StateStale:
		return st, nil
	}
	return "", fmt.Errorf("study: unknown trial state %q", s)
}

// Step is one intermediate value reported by an objective.
type Step struct {
	Step  int64   `json:"step"`
	Value float64 `json:"value"`
}

// Trial is what samplers and pruners see of one trial: its latest attempt.
type Trial struct {
	Number  int
	Attempt int
	State   State
	Point   Point
	// Score is the final score for StateDone, the last intermediate value
	// for StatePruned, and meaningless otherwise (check HasScore).
	Score    float64
	HasScore bool
	// Scores holds one score per metric for a done trial of a study with
	// several objectives (nil otherwise); Score is then Scores[0].
	Scores []float64
	// Curve holds the intermediate values in step order. It is filled only
	// by readers that fetch curves (the pruner's view); nil otherwise.
	Curve []Step
	// LastStep is the last intermediate step reported (-1 if none); it is
	// in the record, so it is known without fetching the curve.
	LastStep int64
	Who      string
	// Time is the server time of the record (last heartbeat or report).
	Time time.Time
}

// History is a sampler's or pruner's view of a study at one moment:
// every trial's latest attempt, sorted by trial number. Samplers must
// treat only StateDone trials as results; StatePruned trials are real but
// not comparable, and StateRunning ones are pending (constant liar).
type History struct {
	Direction Direction
	Trials    []Trial
}

// Sampler proposes the point for a trial number. Implementations are
// deterministic: the same (seed, trial, history) gives the same point.
type Sampler interface {
	Ask(space *Space, trial int, h History) (Point, error)
}

// Pruner decides, after an intermediate report of trial, whether to stop
// it. curve is that trial's curve so far (the last entry is the report
// being judged); h holds the other trials with their curves.
type Pruner interface {
	Prune(trial int, curve []Step, h History) (bool, error)
}
