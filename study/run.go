package study

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/soma-hpc/soma/fsstore"
)

// maxReason bounds the stop reason kept in an attempt's blob (a runner
// passes the tail of an objective's stderr).
const maxReason = 16 << 10

// Run is one claimed trial attempt, handed out by Study.Next or
// Study.Take. Its runner evaluates Point, calls Heartbeat regularly
// (Study.HeartbeatInterval), Report for each intermediate value, and
// Finish once. A Run is safe for concurrent use (a heartbeat goroutine
// beside the reporting one); its writes are applied in call order.
//
// If the runner dies, nothing needs cleaning up: the attempt goes stale
// after the grace period and another process retries it.
type Run struct {
	s       *Study
	number  int
	attempt int

	mu    sync.Mutex
	point Point
	f     fields
	curve []Step
	blob  fsstore.Digest
	// held: the attempt's record has referred to blob without a break
	// since a bind that followed a Put of blob within the grace (the
	// claim's, or a write's): so blob may be bound again without a Put
	// (write). False after a failed write, which may have bound
	// something else.
	held       bool
	finished   bool
	superseded bool
	pending    bool // Add has added values that are not written yet

	history   *History // Judge's view of the other trials, and when it was read
	historyAt time.Time
	best      float64 // the best of curve[:bestN] (NaN: none), for Judge
	bestN     int
}

// Study returns the study the run belongs to.
func (r *Run) Study() *Study { return r.s }

// Number returns the trial number.
func (r *Run) Number() int { return r.number }

// Attempt returns the attempt number: 0, or the retry count.
func (r *Run) Attempt() int { return r.attempt }

// Point returns the point to evaluate.
func (r *Run) Point() Point {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.point
}

// PointText returns the point's text form ("lr=0.001,batch=64").
func (r *Run) PointText() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.f.pointText
}

// Values returns the point's knob names and values as text, in knob order
// (for SOMA_PARAM_<NAME> and {name} substitution).
func (r *Run) Values() []KV { return r.s.spec.Space.Values(r.Point()) }

// PointJSON returns the point as a JSON object (for SOMA_PARAMS).
func (r *Run) PointJSON() ([]byte, error) { return r.s.spec.Space.PointJSON(r.Point()) }

// Who returns the runner the attempt was claimed for.
func (r *Run) Who() Who {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.f.who
}

// Start returns the file-server time the attempt was taken at.
func (r *Run) Start() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.f.start
}

// Name returns the attempt's name in the store
// ("study/<study>/trial/<n>/<attempt>").
func (r *Run) Name() string { return r.s.names.attempt(r.number, r.attempt) }

// check returns the error for a run that may not write any more.
func (r *Run) check() error {
	if r.finished {
		return fmt.Errorf("%w: study %s trial %d attempt %d", ErrFinished, r.s.name, r.number, r.attempt)
	}
	if r.superseded {
		return r.supersededErr()
	}
	return nil
}

func (r *Run) supersededErr() error {
	return fmt.Errorf("%w: study %s trial %d attempt %d was seen stale and retried as attempt %d (stop the objective)", ErrSuperseded, r.s.name, r.number, r.attempt, r.attempt+1)
}

// isSuperseded reports whether attempt+1 of the run's trial exists. It
// opens that one name (answered by the file server, not a listing).
func (r *Run) isSuperseded(ctx context.Context) (next Record, found bool, err error) {
	name := r.s.names.attempt(r.number, r.attempt+1)
	b, err := r.s.store.Resolve(ctx, name)
	if errors.Is(err, fsstore.ErrNotFound) {
		return Record{}, false, nil
	}
	var ce *fsstore.CorruptError
	if errors.As(err, &ce) {
		return Record{}, true, nil
	}
	if err != nil {
		return Record{}, false, fmt.Errorf("study %s: trial %d: %w", r.s.name, r.number, err)
	}
	rec, err := decodeRecord(r.s.name, r.s.spec.Space, r.number, r.attempt+1, b)
	if err != nil {
		return Record{AdoptedFrom: -1}, true, nil
	}
	return rec, true, nil
}

// write rebinds the attempt's record with f, and, when curve is non-nil
// or reason set, a new curve blob. The caller holds r.mu.
func (r *Run) write(ctx context.Context, f fields, curve []Step, reason string) (fsstore.Bound, error) {
	blob, held := r.blob, r.held
	switch {
	case len(curve) == 0 && reason == "" && curve != nil && r.held && r.blob == r.s.emptyDigest():
		// The result of a trial that reported nothing: its record has
		// referred to the empty curve's blob since the claim, which Put
		// it, so every gc scan that reads the name finds the blob
		// referred to (fsstore's GC): a second Put would only refresh
		// its time again. Measured: 3 file-server operations per trial
		// (the blob's folder opened, a stat, a utimensat).
	case len(curve) == 0 && reason == "" && curve != nil:
		// The empty curve's blob (blobForEmpty: Put on every use).
		var err error
		if blob, err = r.s.blobForEmpty(ctx); err != nil {
			return fsstore.Bound{}, err
		}
		held = true
	case curve != nil || reason != "":
		b, err := encodeCurve(curve, reason)
		if err != nil {
			return fsstore.Bound{}, fmt.Errorf("study %s: trial %d: %w", r.s.name, r.number, err)
		}
		if blob, err = r.s.store.Put(ctx, b); err != nil {
			return fsstore.Bound{}, fmt.Errorf("study %s: trial %d: %w", r.s.name, r.number, err)
		}
		held = true
	}
	bind := r.s.store.Bind
	if (&Record{State: f.state, Failures: f.fails}).Final(r.s.spec.MaxRetries) {
		// The record that ends the trial is never rewritten: sealed (a
		// hint in its mode, fsstore.Probe). Next's looks read it anyway
		// (readLatest): a record damaged in place keeps its mode.
		bind = r.s.store.Seal
	}
	b, err := bind(ctx, r.Name(), blob, f.meta())
	if err != nil {
		// The record may now refer to blob, or to what it did before.
		r.held = false
		return b, fmt.Errorf("study %s: trial %d: %w", r.s.name, r.number, err)
	}
	r.s.clock.observe(b.Time)
	r.f, r.blob, r.held = f, blob, held
	return b, nil
}

// Heartbeat renews the attempt's lease: it rewrites the record with its
// heartbeat counter advanced (progress readable in the content, which is
// what other nodes see first on GPFS), stamping the server's time. It
// returns ErrSuperseded when another process has retried the attempt
// (the runner must stop the objective; nothing it writes counts any
// more), and ErrFinished after Finish.
func (r *Run) Heartbeat(ctx context.Context) error { return r.beat(ctx, false) }

// checkStep is what Report and Add check of a value before taking it: a
// run still open, a finite value, and a step after the last one. The
// caller holds r.mu.
func (r *Run) checkStep(step int64, value float64) error {
	if math.IsNaN(value) || math.IsInf(value, 0) {
		return fmt.Errorf("study %s: trial %d: step %d: value %v is not a finite number (report a number, or finish the trial as failed)", r.s.name, r.number, step, value)
	}
	if err := r.check(); err != nil {
		return err
	}
	if step < 0 || (len(r.curve) > 0 && step <= r.curve[len(r.curve)-1].Step) {
		last := int64(-1)
		if len(r.curve) > 0 {
			last = r.curve[len(r.curve)-1].Step
		}
		return fmt.Errorf("study %s: trial %d: step %d after step %d (steps must increase, from 0)", r.s.name, r.number, step, last)
	}
	return nil
}

// Report records an intermediate value at step (steps must increase) and
// asks the study's pruner whether to stop. It rewrites the record and the
// curve blob, so the curve is watchable while it is drawn, and counts as
// a heartbeat. With a pruner other than none it reads the other trials'
// curves (Study.Curves). It returns ErrSuperseded as Heartbeat does.
func (r *Run) Report(ctx context.Context, step int64, value float64) (prune bool, err error) {
	r.mu.Lock()
	if err := r.checkStep(step, value); err != nil {
		r.mu.Unlock()
		return false, err
	}
	if _, found, err := r.isSuperseded(ctx); err != nil {
		r.mu.Unlock()
		return false, err
	} else if found {
		r.superseded = true
		r.mu.Unlock()
		return false, r.supersededErr()
	}
	curve := append(r.curve[:len(r.curve):len(r.curve)], Step{Step: step, Value: value})
	f := r.f
	f.beat++
	f.step, f.value, f.hasValue = step, value, true
	if _, err := r.write(ctx, f, curve, ""); err != nil {
		r.mu.Unlock()
		return false, err
	}
	r.curve, r.pending = curve, false
	r.mu.Unlock()

	if _, none := r.s.pruner.(NonePruner); none {
		return false, nil
	}
	snap, err := r.s.Curves(ctx)
	if err != nil {
		return false, err
	}
	h := snap.History()
	// With several objectives the pruner judges the metric it was given,
	// in that metric's direction.
	h.Direction = r.s.spec.pruneDirection()
	others := h.Trials[:0:0]
	for _, t := range h.Trials {
		if t.Number != r.number {
			others = append(others, t)
		}
	}
	h.Trials = others
	r.s.askMu.Lock()
	prune, err = r.s.pruner.Prune(r.number, curve, h)
	r.s.askMu.Unlock()
	if err != nil {
		return false, fmt.Errorf("study %s: trial %d: pruner: %w", r.s.name, r.number, err)
	}
	return prune, nil
}

// Curve returns the intermediate values reported so far.
func (r *Run) Curve() []Step {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.curve[:len(r.curve):len(r.curve)]
}

// Finish records how the attempt ended, once:
//
//   - StateDone with its final score, which must be a finite number;
//   - StatePruned: score is the value it was pruned at (NaN: the last
//     value reported);
//   - StateFailed (the objective failed; retried up to the spec's
//     MaxRetries, then the trial is failed) or StateInterrupted (a signal
//     stopped it, not its fault; always retried): score is ignored.
//
// reason says why it stopped (a failure's message and stderr tail; kept
// up to 16 KiB in the attempt's blob). The record is written first, then
// Finish checks for a retry of this attempt: if one exists, the result
// changes nothing and Finish returns ErrSuperseded, unless the retry
// adopted this very result.
func (r *Run) Finish(ctx context.Context, state State, score float64, reason string) error {
	if state == StateDone && r.s.spec.Objectives() > 1 {
		return fmt.Errorf("study %s: trial %d: the study has %d objectives (%s); finish it with FinishScores", r.s.name, r.number, r.s.spec.Objectives(), strings.Join(r.s.spec.Metrics, ", "))
	}
	return r.finish(ctx, state, score, nil, reason)
}

// FinishScores ends a done attempt of a study with several objectives:
// scores holds one finite value per metric, in the spec's order. It is
// Finish(ctx, StateDone, …) otherwise.
func (r *Run) FinishScores(ctx context.Context, scores []float64, reason string) error {
	if n := r.s.spec.Objectives(); len(scores) != n {
		return fmt.Errorf("study %s: trial %d: %d scores for %d objectives", r.s.name, r.number, len(scores), n)
	}
	for i, x := range scores {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return fmt.Errorf("study %s: trial %d: score %s %v is not a finite number (finish it as failed instead)", r.s.name, r.number, r.s.spec.Metrics[i], x)
		}
	}
	return r.finish(ctx, StateDone, scores[0], slices.Clone(scores), reason)
}

func (r *Run) finish(ctx context.Context, state State, score float64, scores []float64, reason string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.check(); err != nil {
		return err
	}
	f := r.f
	if r.pending && len(r.curve) > 0 {
		// Values Add took since the last Flush end the curve: the record's
		// last step and value are theirs. (Bug: with reports coalesced, a
		// trial that reported 19 epochs was recorded done with the last
		// step of its last flush, 1, and a pruned one fell back to that
		// step's value as its score.)
		last := r.curve[len(r.curve)-1]
		f.step, f.value, f.hasValue = last.Step, last.Value, true
	}
	f.state = state
	f.hasScore, f.score, f.scores = false, 0, nil
	switch state {
	case StateDone:
		if math.IsNaN(score) || math.IsInf(score, 0) {
			return fmt.Errorf("study %s: trial %d: score %v is not a finite number (finish it as failed instead)", r.s.name, r.number, score)
		}
		f.score, f.hasScore = score, true
		f.scores = scores
	case StatePruned:
		switch {
		case !math.IsNaN(score) && !math.IsInf(score, 0):
			f.score, f.hasScore = score, true
		case f.hasValue:
			f.score, f.hasScore = f.value, true
		}
	case StateFailed, StateInterrupted:
	default:
		return fmt.Errorf("study %s: trial %d: cannot finish in state %q (want done, pruned, failed or interrupted)", r.s.name, r.number, state)
	}
	if len(reason) > maxReason {
		reason = "…" + reason[len(reason)-maxReason:]
	}
	curve := r.curve
	if curve == nil {
		curve = []Step{}
	}
	b, err := r.write(ctx, f, curve, reason)
	if err != nil {
		return err
	}
	r.finished = true
	r.s.beats.forget(r.number)
	// The look for a retry comes after the write, and nothing this
	// process knew before the write can stand in for it (issue 18 asked;
	// two file-server operations): a retrier claims attempt+1 and then
	// reads this attempt (adopt), so either it sees this result, or this
	// look sees it. A heartbeat's look, or the time since the last one,
	// is no proof: another process judges staleness by its own grace
	// (Options.Grace), on GPFS from mtimes that lag, and retries a
	// record it finds broken whatever its age.
	next, found, err := r.isSuperseded(ctx)
	if err != nil {
		return err
	}
	if found && next.AdoptedFrom != r.attempt {
		r.superseded = true
		return r.supersededErr()
	}
	if !found {
		// The latest attempt, as written: if it ends the trial, this
		// process need not read it back (look would, on the next Next).
		if rec, err := decodeRecord(r.s.name, r.s.spec.Space, r.number, r.attempt, b); err == nil && rec.Final(r.s.spec.MaxRetries) {
			r.s.mu.Lock()
			r.s.addFinal(rec)
			r.s.idx.markMine(r.number)
			r.s.ownSincePack++
			r.s.mu.Unlock()
		}
	}
	return nil
}

// adopt is called right after claiming this attempt as a retry of the
// stale attempt prev. If prev has ended after all, this attempt becomes a
// copy of its outcome (AdoptedFrom = prev) and adopt reports true: the
// trial is not run again.
func (r *Run) adopt(ctx context.Context, prev int) (bool, error) {
	s := r.s
	name := s.names.attempt(r.number, prev)
	b, err := s.store.Resolve(ctx, name)
	if err != nil {
		var ce *fsstore.CorruptError
		if errors.Is(err, fsstore.ErrNotFound) || errors.As(err, &ce) {
			return false, nil
		}
		return false, fmt.Errorf("study %s: trial %d: %w", s.name, r.number, err)
	}
	old, err := decodeRecord(s.name, s.spec.Space, r.number, prev, b)
	if err != nil || (old.State != StateDone && old.State != StatePruned) {
		// Failed and interrupted attempts are retried anyway (a failed
		// one counts: this attempt already carries its failure).
		if err == nil && old.State == StateFailed {
			r.mu.Lock()
			defer r.mu.Unlock()
			f := r.f
			f.fails = old.Failures + 1
			if f.fails > s.spec.MaxRetries {
				return r.copyOutcome(ctx, &old, prev)
			}
			_, err := r.write(ctx, f, nil, "")
			return false, err
		}
		return false, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.copyOutcome(ctx, &old, prev)
}

// copyOutcome rewrites this attempt as a copy of old's ended outcome. The
// caller holds r.mu.
func (r *Run) copyOutcome(ctx context.Context, old *Record, prev int) (bool, error) {
	f := fieldsOf(old)
	f.from = prev
	f.fails = min(f.fails, r.s.spec.MaxRetries)
	r.blob, r.held = old.blob, false // not Put by this process
	if _, err := r.write(ctx, f, nil, ""); err != nil {
		return false, err
	}
	r.point = old.Point
	r.finished = true
	return true, nil
}
