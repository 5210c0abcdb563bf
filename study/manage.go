package study

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/soma-hpc/soma/fsstore"
)

// This file tends a study while it runs, each change a new record in the
// folder and none an edit (seed 003: changing your mind halfway is the
// newest record, not a vote), with no server and safe while array tasks
// run:
//
//	study/<s>/change/<k>         change k ≥ 1, claimed in order: a newer
//	                             version of the spec (Extend; the highest
//	                             wins) or a batch of enqueued points (Enqueue)
//	study/<s>/dequeued/<k>.<i>   point i of change k, claimed by the trial
//	                             that evaluates it: each runs exactly once
//
// Changes are found by a predictable name (a probe of change/<k+1> at each
// look that reads the store: one stat when nothing changed), never by a
// listing, which on NFS can miss entries made in the last 30 to 60 s
// (while an open or link of a known name is answered by the server).

// ErrBelowClaimed: a budget was asked lower than the trials already
// claimed; a claimed trial is never given back.
var ErrBelowClaimed = errors.New("study: budget below the trials already claimed")

// Meta kinds and keys of the records in this file.
const (
	kindVersion  = "spec_version"
	kindQueued   = "queued_points"
	kindDequeued = "dequeued"
	keyNPoints   = "points"
)

func (n names) change(k int) string { return n.base() + "/change/" + strconv.Itoa(k) }
func (n names) dequeued(id QueueID) string {
	return n.base() + "/dequeued/" + strconv.Itoa(id.Change) + "." + strconv.Itoa(id.Index)
}

// Version is one newer version of a study's spec, written by Extend.
type Version struct {
	Number int       `json:"version"` // its change number: the highest wins
	Budget int       `json:"budget"`
	Time   time.Time `json:"time"` // file-server time it was written
	Who    Who       `json:"who"`
}

// QueueID names one enqueued point: point Index of change Change.
type QueueID struct{ Change, Index int }

func (id QueueID) String() string { return fmt.Sprintf("%d.%d", id.Change, id.Index) }

// Queued is one point of a study's queue (Enqueue).
type Queued struct {
	ID    QueueID
	Text  string // the point in the space's text form
	Point Point
}

// manageState is what a Study knows of its spec's versions and its queue.
// mu serialises the refreshes (store reads); the fields are read and
// written under the Study's mu. Lock order: manage.mu, then Study.mu.
type manageState struct {
	mu       sync.Mutex
	budget   int       // the newest version's budget
	versions []Version // readable versions, in order
	seen     int       // highest change number looked at (applied or not)

	queue  []Queued           // enqueued points read, in order
	taken  map[QueueID]bool   // points known claimed by some trial
	byText map[string]QueueID // point text -> its entry
}

// lim is the number of trial numbers handed out now.
func (s *Study) lim() int { return int(s.limit.Load()) }

// ceil is the highest limit of any version seen: trial numbers below it
// are the study's.
func (s *Study) ceil() int { return int(s.ceiling.Load()) }

// limitFor is the limit a budget gives: the budget, or the size of a
// discrete space when that is smaller.
func (s *Study) limitFor(budget int) int {
	if size, finite := s.spec.Space.Size(); finite {
		return min(budget, size)
	}
	return budget
}

// setBudget applies a version's budget. The caller holds s.mu.
func (s *Study) setBudget(budget int) {
	s.manage.budget = budget
	l := s.limitFor(budget)
	s.limit.Store(int64(l))
	if int64(l) > s.ceiling.Load() {
		s.ceiling.Store(int64(l))
	}
}

// Budget returns the budget in force: the newest version's.
func (s *Study) Budget() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.manage.budget
}

// CreatedBudget returns the budget the study was created with, before
// any newer version of its spec.
func (s *Study) CreatedBudget() int { return s.spec.Budget }

// Versions returns the newer versions of the spec seen so far (Extend),
// oldest first; none if the budget was never changed.
func (s *Study) Versions() []Version {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Version(nil), s.manage.versions...)
}

// refreshChanges reads the changes written since the last look, by name
// (change/<k+1> until one is missing): one stat when nothing changed. A
// change that cannot be read, or a version that changes more than the
// budget, is reported (Problems) and not applied.
func (s *Study) refreshChanges(ctx context.Context) error {
	s.manage.mu.Lock()
	defer s.manage.mu.Unlock()
	for {
		s.mu.Lock()
		k := s.manage.seen + 1
		s.mu.Unlock()
		name := s.names.change(k)
		// A stat first: nothing changed is the common case, and a record
		// is read only when there is one.
		if p, err := s.store.Probe(ctx, name); err == nil && p == fsstore.Missing {
			return nil
		}
		b, err := s.store.Resolve(ctx, name)
		var ce *fsstore.CorruptError
		var bad error
		var v Version
		var q []Queued
		switch {
		case errors.Is(err, fsstore.ErrNotFound):
			return nil
		case errors.As(err, &ce):
			bad = ce
		case err != nil:
			return fmt.Errorf("study %s: %w", s.name, err)
		default:
			v, q, bad = s.decodeChange(ctx, k, b)
		}
		s.mu.Lock()
		s.manage.seen = k
		switch {
		case bad != nil:
			s.notice([]error{bad})
		case q != nil:
			s.manage.queue = append(s.manage.queue, q...)
			if s.manage.byText == nil {
				s.manage.byText = make(map[string]QueueID)
			}
			for _, e := range q {
				s.manage.byText[e.Text] = e.ID
			}
		default:
			s.manage.versions = append(s.manage.versions, v)
			s.setBudget(v.Budget)
		}
		s.mu.Unlock()
	}
}

// decodeChange reads change k: a version (its blob the study's spec with
// only the budget changed) or a batch of queued points (its blob the
// points' texts, one per line).
func (s *Study) decodeChange(ctx context.Context, k int, b fsstore.Bound) (Version, []Queued, error) {
	fail := func(format string, args ...any) (Version, []Queued, error) {
		return Version{}, nil, &RecordError{Name: b.Name, Err: fmt.Errorf(format, args...)}
	}
	kind := b.Meta.Value(keyKind)
	if kind != kindVersion && kind != kindQueued {
		return fail("kind %q, want %q or %q", kind, kindVersion, kindQueued)
	}
	if v, err := strconv.Atoi(b.Meta.Value(keyVersion)); err != nil || v > RecordVersion {
		return fail("%w: record version %q, this soma reads up to %d (upgrade soma)", ErrNewerFormat, b.Meta.Value(keyVersion), RecordVersion)
	}
	blob, err := s.store.Get(ctx, b.Digest)
	if err != nil {
		return fail("%w", err)
	}
	if kind == kindQueued {
		lines := strings.Split(string(blob), "\n")
		if n, err := strconv.Atoi(b.Meta.Value(keyNPoints)); err != nil || n != len(lines) {
			return fail("%d points, the record says %q", len(lines), b.Meta.Value(keyNPoints))
		}
		q := make([]Queued, len(lines))
		for i, text := range lines {
			p, err := s.spec.Space.ParsePoint(text)
			if err != nil {
				return fail("point %d: %w", i, err)
			}
			q[i] = Queued{ID: QueueID{Change: k, Index: i}, Text: text, Point: p}
		}
		return Version{}, q, nil
	}
	sp, err := ParseCanonical(blob)
	if err != nil {
		return fail("spec: %w", err)
	}
	want := *s.spec
	want.Budget = sp.Budget
	if !bytes.Equal(want.Canonical(), blob) {
		return fail("changes more than the budget (%s); only soma extend writes versions", oneLineDiff(DiffSpec(s.spec, sp)))
	}
	pid, _ := strconv.Atoi(b.Meta.Value(keyPID))
	return Version{Number: k, Budget: sp.Budget, Time: b.Time, Who: Who{Host: b.Meta.Value(keyHost), PID: pid, Job: b.Meta.Value(keyJob)}}, nil, nil
}

func oneLineDiff(d string) string { return strings.ReplaceAll(d, "\n", "; ") }

// Extension says what Extend did.
type Extension struct {
	Study    string
	From, To int // the budget before and after
	// Unchanged: the budget already was To; nothing was written.
	Unchanged bool
	Version   Version // the version written
	// Claimed is the number of trial numbers claimed so far (the highest
	// claimed plus one); Ended and Running count the trials as read.
	Claimed, Ended, Running int
}

// Extend sets study name's budget to budget by writing a newer version of
// its spec (study/<s>/version/<k>, claimed: of two Extends at once, one
// writes k and the other k+1, the newest wins). Every runner of the study
// picks it up at its next look, with no restart: a raised budget hands
// out the new trial numbers, a lowered one stops handing out those past
// it. A budget below the trials already claimed is refused
// (ErrBelowClaimed): a claimed trial is never given back. A trial claimed
// by a runner that had not yet seen a lowered budget still runs and
// counts. The same budget writes nothing (Extension.Unchanged).
func Extend(ctx context.Context, store Store, name string, budget int, who Who) (Extension, error) {
	for tries := 0; ; tries++ {
		st, err := Open(ctx, store, name, nil, Options{})
		if err != nil {
			return Extension{}, err
		}
		ext, lost, err := st.extend(ctx, budget, who)
		if err != nil || !lost {
			return ext, err
		}
		if tries == 20 {
			return ext, fmt.Errorf("study %s: extend: lost the race for the next version 20 times (others extend it now; retry)", name)
		}
	}
}

// extend writes the version; lost reports that another change took its
// number (the caller opens the study again and retries: the claim, not a
// lock, orders the changes).
func (s *Study) extend(ctx context.Context, budget int, who Who) (ext Extension, lost bool, err error) {
	if err := s.refreshChanges(ctx); err != nil {
		return Extension{}, false, err
	}
	s.mu.Lock()
	cur, k := s.manage.budget, s.manage.seen+1
	s.mu.Unlock()
	ext = Extension{Study: s.name, From: cur, To: budget}
	if budget < 1 {
		return ext, false, fmt.Errorf("study %s: budget %d: want the number of trials, at least 1", s.name, budget)
	}
	sp := *s.spec
	sp.Budget = budget
	if err := sp.Validate(); err != nil {
		return ext, false, fmt.Errorf("study %s: %w", s.name, err)
	}
	snap, err := s.snapshot(ctx)
	if err != nil {
		return ext, false, err
	}
	claimed, err := s.claimed(ctx, snap, budget)
	if err != nil {
		return ext, false, err
	}
	ext.Claimed = claimed
	for _, r := range snap.Trials {
		switch {
		case r.Final(s.spec.MaxRetries):
			ext.Ended++
		case r.State == StateRunning:
			ext.Running++
		}
	}
	if budget < claimed {
		return ext, false, fmt.Errorf("%w: study %s: budget %d is below the %d trials already claimed (trials 0 to %d; a claimed trial is never given back): the lowest budget now is %d",
			ErrBelowClaimed, s.name, budget, claimed, claimed-1, claimed)
	}
	if budget == cur {
		ext.Unchanged = true
		return ext, false, nil
	}
	d, err := s.store.Put(ctx, sp.Canonical())
	if err != nil {
		return ext, false, fmt.Errorf("study %s: extend: %w", s.name, err)
	}
	meta := fsstore.Meta{
		{Key: keyKind, Value: kindVersion},
		{Key: keyVersion, Value: strconv.Itoa(RecordVersion)},
		{Key: keySpecValue, Value: strconv.Itoa(SpecVersion)},
		{Key: keyBudget, Value: strconv.Itoa(budget)},
		{Key: keyHost, Value: who.Host},
		{Key: keyPID, Value: strconv.Itoa(who.PID)},
	}
	if who.Job != "" {
		meta = append(meta, fsstore.Pair{Key: keyJob, Value: who.Job})
	}
	won, err := s.store.Claim(ctx, s.names.change(k), d, meta)
	if err != nil {
		return ext, false, fmt.Errorf("study %s: extend: %w", s.name, err)
	}
	if !won {
		return ext, true, nil
	}
	b, err := s.store.Resolve(ctx, s.names.change(k))
	if err != nil {
		return ext, false, fmt.Errorf("study %s: extend: read back version %d: %w", s.name, k, err)
	}
	ext.Version = Version{Number: k, Budget: budget, Time: b.Time, Who: who}
	return ext, false, nil
}

// claimed returns the highest claimed trial number plus one: from the
// look's listing, and, for a lowered budget, from the names of the trials
// at and past it (a listing may lag on NFS; a name's open is answered by
// the server).
func (s *Study) claimed(ctx context.Context, snap *Snapshot, budget int) (int, error) {
	n := 0
	if len(snap.present) > 0 {
		n = snap.present[len(snap.present)-1] + 1
	}
	for k := range snap.broken {
		n = max(n, k+1)
	}
	for _, r := range snap.Trials {
		n = max(n, r.Number+1)
	}
	if hi := s.ceil(); budget < hi && hi-budget <= 1<<16 {
		for t := hi - 1; t >= max(budget, n); t-- {
			ok, err := s.store.Exists(ctx, s.names.attempt(t, 0))
			if err != nil {
				return 0, fmt.Errorf("study %s: %w", s.name, err)
			}
			if ok {
				return t + 1, nil
			}
		}
	}
	return n, nil
}

// Queue returns the study's enqueued points known at its last look, in
// order, and which of them a trial has taken (one stat per point not yet
// known taken).
func (s *Study) Queue(ctx context.Context) ([]Queued, map[QueueID]bool, error) {
	if err := s.refreshChanges(ctx); err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	q := append([]Queued(nil), s.manage.queue...)
	s.mu.Unlock()
	taken := make(map[QueueID]bool)
	for _, e := range q {
		ok, err := s.isDequeued(ctx, e.ID)
		if err != nil {
			return nil, nil, err
		}
		taken[e.ID] = ok
	}
	return q, taken, nil
}

// isDequeued reports whether a trial has claimed the enqueued point id.
func (s *Study) isDequeued(ctx context.Context, id QueueID) (bool, error) {
	s.mu.Lock()
	known := s.manage.taken[id]
	s.mu.Unlock()
	if known {
		return true, nil
	}
	ok, err := s.store.Exists(ctx, s.names.dequeued(id))
	if err != nil {
		return false, fmt.Errorf("study %s: queue: %w", s.name, err)
	}
	if ok {
		s.markDequeued(id)
	}
	return ok, nil
}

func (s *Study) markDequeued(id QueueID) {
	s.mu.Lock()
	if s.manage.taken == nil {
		s.manage.taken = make(map[QueueID]bool)
	}
	s.manage.taken[id] = true
	s.mu.Unlock()
}

// nextQueued returns the first enqueued point known at the last look that
// no trial has taken, if any: nothing to do when the queue is empty, one
// stat per point not yet known taken otherwise. The claim of its
// dequeued name (holdQueued) decides who runs it.
func (s *Study) nextQueued(ctx context.Context) (Queued, bool, error) {
	s.mu.Lock()
	q := s.manage.queue
	s.mu.Unlock()
	for _, e := range q {
		taken, err := s.isDequeued(ctx, e.ID)
		if err != nil {
			return Queued{}, false, err
		}
		if !taken {
			return e, true, nil
		}
	}
	return Queued{}, false, nil
}

// queuedEntry returns the enqueued point whose text is text.
func (s *Study) queuedEntry(text string) (QueueID, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.manage.byText[text]
	return id, ok
}

// holdQueued claims the enqueued point id for the run's trial. If another
// trial took it first, the run takes the next enqueued point, or the
// sampler's, and rewrites its record with it: so each enqueued point is
// evaluated by exactly one trial, whichever process claims it. A runner
// that dies between claiming its trial and claiming the point leaves the
// point free; the trial's retry (same point) claims it then, or, if
// another trial took it meanwhile, gets a new point.
func (r *Run) holdQueued(ctx context.Context, id QueueID, h History) error {
	s := r.s
	for {
		meta := fsstore.Meta{
			{Key: keyKind, Value: kindDequeued},
			{Key: keyVersion, Value: strconv.Itoa(RecordVersion)},
			{Key: keyTrial, Value: strconv.Itoa(r.number)},
		}
		won, err := s.store.Claim(ctx, s.names.dequeued(id), r.blob, meta)
		if err != nil {
			return fmt.Errorf("study %s: trial %d: take queued point %s: %w", s.name, r.number, id, err)
		}
		s.markDequeued(id)
		if won {
			return nil
		}
		b, err := s.store.Resolve(ctx, s.names.dequeued(id))
		if err == nil {
			if t, ok := parseNumber(b.Meta.Value(keyTrial)); ok && t == r.number {
				return nil // a retry of the trial that holds it
			}
		}
		q, ok, err := s.nextQueued(ctx)
		if err != nil {
			return err
		}
		p := q.Point
		if !ok {
			if h.Trials == nil && !s.indexSampler() {
				snap, err := s.snapshot(ctx)
				if err != nil {
					return err
				}
				h = s.historyFor(snap)
			}
			if p, _, err = s.propose(ctx, r.number, 0, h); err != nil {
				return err
			}
		}
		r.mu.Lock()
		r.point = p
		r.f.pointText = s.spec.Space.FormatPoint(p)
		_, err = r.write(ctx, r.f, nil, "")
		r.mu.Unlock()
		if err != nil || !ok {
			return err
		}
		id = q.ID
	}
}

// Enqueued says what Enqueue wrote.
type Enqueued struct {
	Study  string
	Change int      // the change record written
	Points []Queued // written, in order
	// Limit is the study's limit; Claimed the trial numbers claimed so
	// far; Waiting the enqueued points no trial has taken, these
	// included. Waiting > Limit − Claimed: some will not run unless the
	// budget is raised (Extend).
	Limit, Claimed, Waiting int
}

// Enqueue adds points (text forms, "lr=0.01,batch=64"; see
// Space.ParseUserPoint) to study name's queue, as one change record.
// Runners evaluate enqueued points before any sampled one, in order, each
// exactly once across all processes, from their next look (with tpe,
// every claim looks; with random, sobol and grid, a runner reuses a look
// for a few seconds). Each takes a trial number of the budget and is a
// trial like any other (samplers learn from it). Every point is checked
// against the space first: one that does not fit, or one already
// enqueued, refuses the whole call with an error naming the point and
// the knob, and nothing is written.
func Enqueue(ctx context.Context, store Store, name string, points []string) (Enqueued, error) {
	st, err := Open(ctx, store, name, nil, Options{})
	if err != nil {
		return Enqueued{}, err
	}
	q, taken, err := st.Queue(ctx)
	if err != nil {
		return Enqueued{}, err
	}
	have := make(map[string]QueueID, len(q))
	for _, e := range q {
		have[e.Text] = e.ID
	}
	res := Enqueued{Study: name}
	if len(points) == 0 {
		return res, fmt.Errorf("study %s: no points to enqueue", name)
	}
	texts := make([]string, 0, len(points))
	seen := make(map[string]int)
	for i, text := range points {
		p, err := st.Space().ParseUserPoint(text)
		if err != nil {
			return res, fmt.Errorf("study %s: point %d: %w", name, i+1, err)
		}
		canon := st.Space().FormatPoint(p)
		if id, dup := have[canon]; dup {
			return res, fmt.Errorf("study %s: point %d (%s) is already enqueued (%s); nothing was enqueued", name, i+1, canon, id)
		}
		if j, dup := seen[canon]; dup {
			return res, fmt.Errorf("study %s: points %d and %d are the same point (%s); nothing was enqueued", name, j+1, i+1, canon)
		}
		seen[canon] = i
		texts = append(texts, canon)
		res.Points = append(res.Points, Queued{Text: canon, Point: p})
	}
	d, err := store.Put(ctx, []byte(strings.Join(texts, "\n")))
	if err != nil {
		return res, fmt.Errorf("study %s: enqueue: %w", name, err)
	}
	meta := fsstore.Meta{
		{Key: keyKind, Value: kindQueued},
		{Key: keyVersion, Value: strconv.Itoa(RecordVersion)},
		{Key: keyNPoints, Value: strconv.Itoa(len(texts))},
	}
	st.mu.Lock()
	k := st.manage.seen + 1
	st.mu.Unlock()
	for {
		won, err := store.Claim(ctx, st.names.change(k), d, meta)
		if err != nil {
			return res, fmt.Errorf("study %s: enqueue: %w", name, err)
		}
		if won {
			break
		}
		k++ // another change was written meanwhile
	}
	res.Change = k
	for i := range res.Points {
		res.Points[i].ID = QueueID{Change: k, Index: i}
	}
	snap, err := st.snapshot(ctx)
	if err != nil {
		return res, err
	}
	res.Limit = st.Limit()
	res.Claimed, _ = st.claimed(ctx, snap, st.Limit())
	res.Waiting = len(res.Points)
	for _, e := range q {
		if !taken[e.ID] {
			res.Waiting++
		}
	}
	return res, nil
}
