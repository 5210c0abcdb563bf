package study

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/soma-hpc/soma/fsstore"
)

// Meta keys of a point claim (study/<s>/point/<digest of the point text>).
const (
	kindPoint = "point"
	keyTrial  = "trial"
)

// maxReasks bounds how many alternatives Take asks the sampler for when
// the proposals for a trial of a discrete space are held by other trials.
func maxReasks(size int) int { return min(max(64, 4*size), 100000) }

// Next claims the next trial this process should run and returns its Run.
//
// Retries come first, lowest trial number first: a trial whose latest
// attempt is stale (no heartbeat for the grace period), interrupted,
// unreadable, or failed with retries left is retried by claiming its next
// attempt, with the same point. Then new trials, from the lowest free
// number below Limit, each with the point the sampler proposes for that
// number. A claim is link(2): of any number of processes on any number of
// machines, exactly one gets a given attempt, and the others move on.
//
// It returns ErrBudgetReached when every trial of the budget has ended,
// ErrNoWork when nothing is claimable now but trials are still running
// (they may end, or go stale and become claimable: a runner that wants to
// finish the budget waits and calls Next again), and ErrSpaceExhausted
// when a discrete space has no free point left.
func (s *Study) Next(ctx context.Context, who Who) (*Run, error) {
	// Samplers that ignore the other trials' results let Next reuse the
	// last listing of the trial folder (look); it lists again before it
	// concludes that nothing is left to claim.
	quick := s.indexSampler()
	called := time.Now()
	for {
		run, err := s.next(ctx, who, quick)
		if !quick || run != nil || (err != nil && !errors.Is(err, ErrNoWork) && !errors.Is(err, ErrBudgetReached)) {
			return run, err
		}
		// A listing begun since this call is as fresh as a second look
		// would be. (Bug, issue 19: after a wait longer than the reuse
		// window (relistAfter), the quick look listed and read anyway, and
		// Next looked a second time: a waiting soma-trial paid 17 store
		// operations per look instead of 9.)
		s.mu.Lock()
		fresh := s.last.begunSince(called)
		s.mu.Unlock()
		if fresh {
			return run, err
		}
		quick = false
	}
}

func (s *Study) next(ctx context.Context, who Who, quick bool) (*Run, error) {
	snap, err := s.look(ctx, lookFor{quick: quick, trials: !s.indexSampler(), probe: true})
	if err != nil {
		return nil, err
	}
	for _, r := range snap.open {
		if !s.retryable(&r) {
			continue
		}
		run, err := s.retry(ctx, r.Number, r.Attempt, &r, who)
		if err == nil || !errors.Is(err, ErrTaken) {
			return run, err
		}
	}
	for _, n := range sortedKeys(snap.broken) {
		if s.readable(snap, n) {
			continue
		}
		run, err := s.retry(ctx, n, snap.broken[n], nil, who)
		if err == nil || !errors.Is(err, ErrTaken) {
			return run, err
		}
	}
	h := s.historyFor(snap)
	// Trial numbers are never given back, so the numbers below the first
	// one this process found free are never free again.
	s.mu.Lock()
	low := s.idx.lowestFree()
	s.mu.Unlock()
	// Claim the lowest free number; after losing that race to another
	// process, spread over the lowest free numbers instead of all racing
	// for the same one again: every lost race costs a temp file written
	// and fsynced for nothing. Each attempt picks at random among the
	// window's untried numbers; the plain scan below then covers the
	// rest, so every number is still claimed by someone. A process that
	// never loses claims in order; one that lost once starts spread out
	// from then on (else each of its claims would first lose the race for
	// the lowest number again). Measured with 8 processes and 1000
	// trials: a 16-number window taken in turn from a per-process offset
	// lost 1.4 races per trial once Next reused its listing (look), as
	// every process, skipping the numbers others had taken since, met the
	// others at the first free one; random picks in a 64-number window
	// lose 0.1.
	tried := map[int]bool{}
	var window []int
	s.mu.Lock() // once for the scan, not once per number (hasLocked)
	for n := low; n < s.lim() && len(window) < spreadWindow; n++ {
		if !snap.hasLocked(n) {
			window = append(window, n)
		} else if len(window) == 0 {
			low = n + 1
		}
	}
	s.idx.takenBelow(low)
	contended := s.contended
	s.mu.Unlock()
	// The first number found taken (a lost claim, or claimNew's look)
	// says the snapshot is behind the others' claims: one listing of the
	// trial folder then learns every number taken (learnTaken), where a
	// look or a claim per number, in turn, cost 179 LOOKUPs a trial with
	// 8 processes on the slow-filesystem harness (issue 18). Once per
	// call: a number lost after it was taken since, and is rare.
	relisted := false
	taken := func(err error) (again bool, _ error) {
		if !errors.Is(err, ErrTaken) {
			return false, err
		}
		if !relisted {
			relisted = true
			if err := s.learnTaken(ctx, snap); err != nil {
				return false, err
			}
		}
		return true, nil
	}
	if len(window) > 0 {
		rest := window
		if !contended {
			tried[window[0]] = true
			run, err := s.claimNew(ctx, window[0], who, h)
			if err == nil {
				return run, nil
			}
			if again, err := taken(err); !again {
				return nil, err
			}
			// Others claim here too: from now on start spread out.
			s.mu.Lock()
			s.contended = true
			s.mu.Unlock()
			rest = window[1:]
		}
		if len(rest) > 0 {
			for _, i := range rand.Perm(len(rest)) {
				n := rest[i]
				if snap.has(n) { // learned taken since the window was made
					continue
				}
				tried[n] = true
				run, err := s.claimNew(ctx, n, who, h)
				if err == nil {
					return run, nil
				}
				if again, err := taken(err); !again {
					return nil, err
				}
			}
		}
	}
	for n := low; n < s.lim(); n++ {
		if tried[n] {
			continue
		}
		if snap.has(n) {
			if n == low {
				low++
				s.mu.Lock()
				s.idx.takenBelow(low)
				s.mu.Unlock()
			}
			continue
		}
		run, err := s.claimNew(ctx, n, who, h)
		if err == nil {
			return run, nil
		}
		if again, err := taken(err); !again {
			return nil, err
		}
	}
	ended, running := snap.ended, 0
	wait := s.grace
	for _, r := range snap.open {
		if r.Number >= s.lim() {
			continue
		}
		running++
		if r.State == StateRunning {
			// The earliest moment this attempt could be seen stale.
			wait = min(wait, max(0, s.grace-snap.Now.Sub(r.Time)))
		}
	}
	if ended == s.lim() {
		// Every trial's latest record was read and ended it (readLatest:
		// a record that cannot be read ends nothing, and is retried).
		return nil, fmt.Errorf("%w: study %s: all %d trials ended", ErrBudgetReached, s.name, s.lim())
	}
	// Trials still running, or folders listed without a readable record
	// yet (being taken right now, or a listing that lags).
	return nil, &NoWorkError{Study: s.name, Ended: ended, Running: running, Limit: s.lim(), RetryAfter: wait}
}

// spreadWindow is how many of the lowest free trial numbers concurrent
// Next calls spread over.
const spreadWindow = 64

// NoWorkError is Next's answer when nothing is claimable now but the
// budget has not ended: some trials are running elsewhere. errors.Is
// ErrNoWork. A runner that wants to see the budget through (and retry
// attempts that go stale) sleeps RetryAfter and calls Next again; one
// that only helps while there is work exits.
type NoWorkError struct {
	Study          string
	Ended, Running int
	Limit          int
	// RetryAfter is how long until the first running attempt could be
	// seen stale, if its runner stops beating now (at most the grace
	// period).
	RetryAfter time.Duration
}

func (e *NoWorkError) Error() string {
	return fmt.Sprintf("study %s: no claimable trial now: %d of %d trials ended, %d running elsewhere", e.Study, e.Ended, e.Limit, e.Running)
}

func (e *NoWorkError) Is(target error) bool { return target == ErrNoWork }

func sortedKeys(m map[int]int) []int { return slices.Sorted(maps.Keys(m)) }

// readable reports whether trial n has a readable latest attempt in snap
// or in the Study's cache of ended trials.
func (s *Study) readable(snap *Snapshot, n int) bool {
	if _, ok := slices.BinarySearchFunc(snap.open, n, func(r Record, n int) int { return r.Number - n }); ok {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.idx.ended(n)
}

// IndexSampler reports whether the study's sampler proposes from the
// trial number alone, ignoring the other trials' results (random, sobol,
// grid): a runner may then claim a trial before the last one is recorded.
func (s *Study) IndexSampler() bool { return s.indexSampler() }

// indexSampler reports whether the study's sampler proposes from the
// trial number alone, ignoring the other trials' results.
func (s *Study) indexSampler() bool {
	switch s.sampler.(type) {
	case *RandomSampler, *SobolSampler, GridSampler:
		return true
	}
	return false
}

// historyFor returns snap's History for the sampler, or an empty one for
// the samplers whose proposal depends only on the trial number, which
// saves converting every record on each Next.
func (s *Study) historyFor(snap *Snapshot) History {
	if s.indexSampler() {
		return History{Direction: snap.Direction}
	}
	return snap.History()
}

// retryable reports whether r's trial may be taken again: its latest
// attempt is stale, interrupted, or failed with retries left.
func (s *Study) retryable(r *Record) bool {
	switch r.State {
	case StateStale, StateInterrupted:
		return true
	case StateFailed:
		return r.Failures < s.spec.MaxRetries
	}
	return false
}

// Take claims exactly trial n, for a runner told which trial to run (one
// trial per Slurm array task). A trial nobody has taken is claimed as
// attempt 0 with the sampler's point; a trial whose latest attempt is
// stale, interrupted, or failed with retries left is retried with its
// point. Otherwise Take returns a *TakenError (errors.Is ErrTaken) saying
// who holds it or how it ended. A trial number outside [0, Limit) is an
// error that wraps ErrBudgetReached.
func (s *Study) Take(ctx context.Context, n int, who Who) (*Run, error) {
	if n >= s.lim() {
		// The budget may have been raised since (soma extend).
		if err := s.refreshChanges(ctx); err != nil {
			return nil, err
		}
	}
	if n < 0 || n >= s.lim() {
		return nil, fmt.Errorf("%w: study %s runs trials 0 to %d; trial %d is outside (raise the budget: soma extend ROOT --study %s --budget %d; or pick another trial)", ErrBudgetReached, s.name, s.lim()-1, n, s.name, n+1)
	}
	snap, err := s.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	if r, ok := snap.Trial(n); ok {
		if !s.retryable(&r) {
			return nil, &TakenError{Study: s.name, Trial: n, Attempt: r.Attempt, State: r.State, Who: r.Who}
		}
		return s.retry(ctx, n, r.Attempt, &r, who)
	}
	if a, ok := snap.broken[n]; ok {
		return s.retry(ctx, n, a, nil, who)
	}
	run, err := s.claimNew(ctx, n, who, s.historyFor(snap))
	var te *TakenError
	if errors.As(err, &te) {
		// Taken since the snapshot: say by whom and how it stands.
		if rd := s.readLatest(ctx, n, false, false); rd.found {
			te.Attempt, te.State, te.Who = rd.attempt, rd.rec.State, rd.rec.Who
		}
	}
	return run, err
}

// BlobReuse is how long a Study binds names to the empty curve's blob
// after it last stored it, before storing it again (blobForEmpty), and
// MinGCAge the least grace (soma gc --older-than) under which a GC is
// safe while trials run: a sixth of it, so a writer binds well within
// the grace of its Put whatever the file server's delays (fsstore's GC).
const (
	BlobReuse = 10 * time.Second
	MinGCAge  = 6 * BlobReuse
)

// blobReuse says when this Study last stored the empty curve's blob.
type blobReuse struct {
	every time.Duration    // BlobReuse; a test seam
	now   func() time.Time // time.Now; a test seam
	at    time.Time        // now() before the last Put that succeeded; zero: none
}

// fresh reports whether at t less than every has passed since the last
// Put began. Elapsed time only, on this machine's clocks, never compared
// with another machine's: by both the monotonic clock (which NTP does not
// step) and the wall clock (which, unlike Go's monotonic clock on Linux,
// CLOCK_MONOTONIC, counts the time a suspended machine slept: golang/go
// issue 24595), so a clock stepped back, or a laptop that slept, makes
// the blob stored again rather than reused.
func (b *blobReuse) fresh(t time.Time) bool {
	if b.at.IsZero() {
		return false
	}
	mono, wall := t.Sub(b.at), t.Round(0).Sub(b.at.Round(0))
	return mono >= 0 && mono < b.every && wall >= 0 && wall < b.every
}

// blobForEmpty returns the digest of the curve blob of an attempt that has
// reported nothing, storing it if need be. It is the same bytes for every
// attempt. A Put of bytes already stored refreshes the blob's time, which
// is what keeps soma gc from removing it before a record that refers to
// it is bound (fsstore's GC). Bug (issue 13, item 6): the digest was kept
// for the life of the process, and a gc meanwhile could remove the blob
// and leave records pointing at nothing. So the blob is Put again once
// BlobReuse has passed since the last Put began, and not on every use
// (issue 18: four file-server operations per trial, a lookup, a stat, a
// utimensat and its lookup). Why that is safe: fsstore's GC removes a
// blob bound by a name only if the writer's Bind came more than its
// grace G after the writer's Put (rule W there). Here the blob's time is
// at least the server's time when the last Put began (the Put refreshed
// it or stored it afresh after that moment), the Bind comes at most
// BlobReuse after that moment plus the claim's own round trips, and soma
// gc refuses a G below MinGCAge = 6 x BlobReuse: W holds with five
// sixths of G to spare for slow round trips, against all of G before. A
// process measures BlobReuse on its own clocks (blobReuse.fresh), which
// runs at the server's rate to within parts per million. On a bucket,
// where an object's time cannot be touched, a Put refreshes a blob only
// once it is s3store.RefreshAfter (10 s) old, so the bound there is
// BlobReuse + RefreshAfter: W holds with four sixths of G to spare (the
// argument for the bucket is at s3store's GC). One exception
// (Run.write): an attempt whose record has referred to the blob since
// its claim binds it again without a Put.
func (s *Study) blobForEmpty(ctx context.Context) (fsstore.Digest, error) {
	s.mu.Lock()
	start := s.reuse.now()
	if d := s.emptyBlob; !d.IsZero() && s.reuse.fresh(start) {
		s.mu.Unlock()
		return d, nil
	}
	s.mu.Unlock()
	b, _ := encodeCurve(nil, "")
	d, err := s.store.Put(ctx, b)
	if err != nil {
		return d, fmt.Errorf("study %s: %w", s.name, err)
	}
	s.mu.Lock()
	if s.emptyBlob != d {
		s.emptyBlob = d // its decoded curve is kept (query.go)
		s.curves[d] = curveBlob{Version: RecordVersion, Curve: []Step{}}
	}
	if s.reuse.at.IsZero() || start.After(s.reuse.at) {
		s.reuse.at = start
	}
	s.mu.Unlock()
	return d, nil
}

// emptyDigest returns the empty curve's digest once blobForEmpty has
// stored it (else the zero Digest, which no Run's blob is).
func (s *Study) emptyDigest() fsstore.Digest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.emptyBlob
}

// learnTaken lists the trial folder once and learns every trial number
// in it that snap does not have: taken (a number is never given back),
// so Next skips them without a look or a claim each. What it learns only
// saves work: the claim (link) still decides who gets a number, and a
// trial folder whose claim has not landed yet (or never will) is read,
// and retried if broken, by the next full look, as a listing's are.
func (s *Study) learnTaken(ctx context.Context, snap *Snapshot) error {
	kids, err := s.store.Children(ctx, s.names.trials())
	var ce *fsstore.CorruptError
	switch {
	case errors.As(err, &ce):
		return nil // the folder is not soma's: the looks report it
	case err != nil:
		return fmt.Errorf("study %s: %w", s.name, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range kids {
		if n, ok := parseNumber(k); ok && n < s.ceil() && !snap.hasLocked(n) {
			s.idx.learn(n)
		}
	}
	return nil
}

// claimNew claims attempt 0 of trial n with the sampler's point.
func (s *Study) claimNew(ctx context.Context, n int, who Who, h History) (*Run, error) {
	name := s.names.attempt(n, 0)
	// Once this process has lost a race for a number (contended), a
	// cheap look first (an open of the name: no write): a trial another
	// process has just taken is skipped without paying for a claim (a
	// temp file written and fsynced). The claim below decides; this only
	// saves work, and only where others claim too: a process that never
	// lost a race would pay a round trip per trial for nothing (issue
	// 13, item 9: 1 of the 33 file-server operations of a trial at P=1).
	s.mu.Lock()
	look := s.contended
	s.mu.Unlock()
	if look {
		if taken, err := s.store.Exists(ctx, name); err != nil {
			return nil, fmt.Errorf("study %s: take trial %d: %w", s.name, n, err)
		} else if taken {
			s.learn(n)
			return nil, &TakenError{Study: s.name, Trial: n, State: StateRunning}
		}
	}
	// Enqueued points (soma enqueue) come before sampled ones.
	q, queued, err := s.nextQueued(ctx)
	if err != nil {
		return nil, err
	}
	p, sub := q.Point, 0
	if !queued {
		if p, sub, err = s.propose(ctx, n, 0, h); err != nil {
			return nil, err
		}
	}
	run, err := s.claimAttempt(ctx, n, 0, p, 0, who)
	if err != nil {
		return nil, err
	}
	if queued {
		if err := run.holdQueued(ctx, q.ID, h); err != nil {
			return nil, err
		}
	}
	if err := run.holdPoint(ctx, sub, h); err != nil {
		return nil, err
	}
	return run, nil
}

// retry claims attempt prev+1 of trial n. latest is attempt prev's record,
// or nil when it could not be read (its point is then asked again).
func (s *Study) retry(ctx context.Context, n, prev int, latest *Record, who Who) (*Run, error) {
	fails := 0
	var p Point
	if latest != nil {
		fails = latest.Failures
		if latest.State == StateFailed {
			fails++
		}
		p = latest.Point
	}
	var h History
	if p.IsZero() {
		snap, err := s.snapshot(ctx)
		if err != nil {
			return nil, err
		}
		h = s.historyFor(snap)
		if p, _, err = s.propose(ctx, n, 0, h); err != nil {
			return nil, err
		}
	}
	run, err := s.claimAttempt(ctx, n, prev+1, p, fails, who)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.idx.sawAttempt(n, prev+1)
	s.mu.Unlock()
	if latest != nil && latest.State == StateStale {
		// The stale attempt may have finished between our read and our
		// claim. Both sides write, then read the other: its runner checks
		// for our attempt after writing its result (Run.Finish), and we
		// look at its record after our claim. If it ended, our attempt
		// adopts its outcome rather than running the trial again.
		if adopted, err := run.adopt(ctx, prev); err != nil || adopted {
			if err != nil {
				return nil, err
			}
			return nil, &TakenError{Study: s.name, Trial: n, Attempt: prev + 1, State: run.f.state, Who: run.f.who}
		}
	}
	if latest != nil {
		// An enqueued point's trial retried: it still holds its entry,
		// or takes it now, or (another trial took it) gets a new point.
		if id, ok := s.queuedEntry(latest.PointText); ok {
			if err := run.holdQueued(ctx, id, h); err != nil {
				return nil, err
			}
		}
	}
	if err := run.holdPoint(ctx, 0, h); err != nil {
		return nil, err
	}
	return run, nil
}

// claimAttempt claims study/<s>/trial/<n>/<a> as a running attempt.
func (s *Study) claimAttempt(ctx context.Context, n, a int, p Point, fails int, who Who) (*Run, error) {
	empty, err := s.blobForEmpty(ctx)
	if err != nil {
		return nil, err
	}
	now, err := s.clock.now(ctx, s.store)
	if err != nil {
		return nil, fmt.Errorf("study %s: %w", s.name, err)
	}
	f := fields{
		state: StateRunning, pointText: s.spec.Space.FormatPoint(p), dir: s.spec.Direction,
		step: -1, fails: fails, who: who, start: now, from: -1,
	}
	name := s.names.attempt(n, a)
	claim := s.store.Claim
	if cn, ok := s.store.(newClaimer); ok && a == 0 {
		// A trial's first attempt makes the trial's folder: make it
		// first (one round trip fewer than opening it, failing, and
		// making it).
		claim = cn.ClaimNew
	}
	won, err := claim(ctx, name, empty, f.meta())
	if err != nil {
		return nil, fmt.Errorf("study %s: take trial %d: %w", s.name, n, err)
	}
	s.learn(n) // taken, by this process or another
	s.mu.Lock()
	s.idx.sawAttempt(n, a)
	s.mu.Unlock()
	if !won {
		return nil, &TakenError{Study: s.name, Trial: n, Attempt: a, State: StateRunning}
	}
	return &Run{s: s, number: n, attempt: a, point: p, f: f, blob: empty, held: true}, nil
}

// newClaimer is the optional store capability of claiming a name whose
// folder is most likely new (fsstore.Store.ClaimNew).
type newClaimer interface {
	ClaimNew(ctx context.Context, name string, d fsstore.Digest, meta fsstore.Meta) (bool, error)
}

// propose asks the sampler for trial n's point. In a discrete space it
// skips points that other trials hold: the sub-th alternative (sub ≥ 1)
// for trial n is the sampler's proposal for trial n + sub·Limit, a number
// no real trial has, so every process computes the same sequence of
// alternatives. It returns the point and the sub it came from.
func (s *Study) propose(ctx context.Context, n, from int, h History) (Point, int, error) {
	size, _ := s.spec.Space.Size()
	limit := maxReasks(size)
	for sub := from; ; sub++ {
		if err := ctx.Err(); err != nil {
			return Point{}, 0, err
		}
		if sub > limit {
			return Point{}, 0, fmt.Errorf("%w: study %s: %d proposals for trial %d were all held by other trials", ErrSpaceExhausted, s.name, limit, n)
		}
		virtual := n + sub*s.lim()
		s.askMu.Lock()
		p, err := s.sampler.Ask(s.spec.Space, virtual, h)
		s.askMu.Unlock()
		if err != nil && sub > 0 {
			// Index samplers (grid) have no alternatives past their range.
			return Point{}, 0, fmt.Errorf("%w: study %s: no alternative for trial %d: %v", ErrSpaceExhausted, s.name, n, err)
		}
		if err != nil {
			return Point{}, 0, fmt.Errorf("study %s: ask for trial %d: %w", s.name, n, err)
		}
		if !s.dedup {
			return p, sub, nil
		}
		owner, err := s.pointOwner(ctx, p)
		if err != nil {
			return Point{}, 0, err
		}
		if owner < 0 || owner == n {
			return p, sub, nil
		}
	}
}

// pointOwner returns the trial holding point p, or -1 if none does. A
// point claim that cannot be read counts as held.
func (s *Study) pointOwner(ctx context.Context, p Point) (int, error) {
	b, err := s.store.Resolve(ctx, s.pointName(p))
	if errors.Is(err, fsstore.ErrNotFound) {
		return -1, nil
	}
	var ce *fsstore.CorruptError
	if errors.As(err, &ce) {
		return -2, nil
	}
	if err != nil {
		return 0, fmt.Errorf("study %s: point: %w", s.name, err)
	}
	t, ok := parseNumber(b.Meta.Value(keyTrial))
	if !ok {
		return -2, nil
	}
	return t, nil
}

func (s *Study) pointName(p Point) string {
	return s.names.point(fsstore.Sum([]byte(s.spec.Space.FormatPoint(p))))
}

// holdPoint claims the run's point for its trial in a discrete space. If
// another trial took it first, the run asks for the next alternative and
// rewrites its record with it; if none is left, the attempt is recorded
// failed for good and ErrSpaceExhausted returned.
func (r *Run) holdPoint(ctx context.Context, sub int, h History) error {
	s := r.s
	if !s.dedup {
		return nil
	}
	for {
		meta := fsstore.Meta{
			{Key: keyKind, Value: kindPoint},
			{Key: keyVersion, Value: strconv.Itoa(RecordVersion)},
			{Key: keyTrial, Value: strconv.Itoa(r.number)},
			{Key: keyPoint, Value: r.f.pointText},
		}
		won, err := s.store.Claim(ctx, s.pointName(r.point), r.blob, meta)
		if err != nil {
			return fmt.Errorf("study %s: trial %d: hold point: %w", s.name, r.number, err)
		}
		if won {
			return nil
		}
		owner, err := s.pointOwner(ctx, r.point)
		if err != nil {
			return err
		}
		if owner == r.number {
			return nil // a retry of the trial that holds it
		}
		p, next, err := s.propose(ctx, r.number, sub+1, h)
		if err != nil {
			if errors.Is(err, ErrSpaceExhausted) {
				r.mu.Lock()
				f := r.f
				f.state, f.fails = StateFailed, s.spec.MaxRetries
				_, werr := r.write(ctx, f, nil, "no free point left in the discrete space")
				r.finished = true
				r.mu.Unlock()
				return errors.Join(err, werr)
			}
			return err
		}
		sub = next
		r.mu.Lock()
		r.point = p
		r.f.pointText = s.spec.Space.FormatPoint(p)
		_, err = r.write(ctx, r.f, nil, "")
		r.mu.Unlock()
		if err != nil {
			return err
		}
	}
}
