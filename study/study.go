package study

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/soma-hpc/soma/fsstore"
)

// Errors to branch on with errors.Is.
var (
	// ErrNoStudy: Open with a nil spec found no study of that name.
	ErrNoStudy = errors.New("study: no such study")
	// ErrSpecMismatch: the spec given to Open is not the study's; the
	// error is a *SpecMismatchError that shows the difference.
	ErrSpecMismatch = errors.New("study: spec differs from the study's")
	// ErrNewerFormat: a record was written by a newer soma.
	ErrNewerFormat = errors.New("study: written by a newer soma")
	// ErrTaken: the trial is running elsewhere or finished; the error is a
	// *TakenError that says by whom and in which state.
	ErrTaken = errors.New("study: trial already taken")
	// ErrBudgetReached: every trial of the budget is finished (done,
	// pruned, or failed with no retry left); nothing will ever be
	// claimable again. Also wrapped by Take for a trial number outside the
	// budget.
	ErrBudgetReached = errors.New("study: budget reached")
	// ErrNoWork: nothing is claimable now, but some trials are still
	// running; one of them may go stale and become claimable later.
	ErrNoWork = errors.New("study: no claimable trial now")
	// ErrSpaceExhausted: the study's discrete space has no point left that
	// no other trial holds.
	ErrSpaceExhausted = errors.New("study: every point of the discrete space is taken")
	// ErrSuperseded: another process retried this attempt (it was seen
	// stale); its runner must stop. What it writes changes nothing.
	ErrSuperseded = errors.New("study: attempt superseded by a retry")
	// ErrFinished: the Run was already finished.
	ErrFinished = errors.New("study: attempt already finished")
	// ErrNoDirection: the study has no direction, so no score is better
	// than another; nothing guesses minimize.
	ErrNoDirection = errors.New("study: direction unknown")
	// ErrNoResult: no trial is done yet.
	ErrNoResult = errors.New("study: no finished trial")
)

// SpecMismatchError is returned by Open when the spec it was given differs
// from the study's. Diff has one line per difference ("budget: 100 →
// 200"), old value first.
//
// BudgetOnly says that only the budget differs (Budget in force, Given
// asked): the budget of a study is changed in place with soma extend,
// which keeps its history.
type SpecMismatchError struct {
	Study      string
	Diff       string
	BudgetOnly bool
	Budget     int
	Given      int
	// Root, when the caller sets it, is named in the soma extend line
	// instead of ROOT.
	Root string
}

func (e *SpecMismatchError) Error() string {
	if e.BudgetOnly {
		root := e.Root
		if root == "" {
			root = "ROOT"
		}
		return fmt.Sprintf("study %q exists with a different spec (stored → given):\n%s\nuse the stored spec, a new study name, or change the budget in place, history kept: soma extend %s --study %s --budget %d", e.Study, e.Diff, root, e.Study, e.Given)
	}
	return fmt.Sprintf("study %q exists with a different spec (stored → given):\n%s\nuse the stored spec, or a new study name", e.Study, e.Diff)
}

func (e *SpecMismatchError) Is(target error) bool { return target == ErrSpecMismatch }

// TakenError says why a trial could not be taken: it is running (State
// running) or finished (done, pruned, failed).
type TakenError struct {
	Study   string
	Trial   int
	Attempt int
	State   State
	Who     Who
}

func (e *TakenError) Error() string {
	s := fmt.Sprintf("study %s: trial %d attempt %d is %s", e.Study, e.Trial, e.Attempt, e.State)
	if w := e.Who.String(); w != "" {
		s += " (" + w + ")"
	}
	return s
}

func (e *TakenError) Is(target error) bool { return target == ErrTaken }

// Store is what package study needs of a store. *fsstore.Store and
// *fsstore.Counter both satisfy it.
type Store interface {
	blobStore
	nameStore
	timeSource
}

type blobStore interface {
	Put(ctx context.Context, b []byte) (fsstore.Digest, error)
	Get(ctx context.Context, d fsstore.Digest) ([]byte, error)
	GetMany(ctx context.Context, ds []fsstore.Digest) []fsstore.Blob
}

type nameStore interface {
	Claim(ctx context.Context, name string, d fsstore.Digest, meta fsstore.Meta) (bool, error)
	Bind(ctx context.Context, name string, d fsstore.Digest, meta fsstore.Meta) (fsstore.Bound, error)
	Resolve(ctx context.Context, name string) (fsstore.Bound, error)
	Seal(ctx context.Context, name string, d fsstore.Digest, meta fsstore.Meta) (fsstore.Bound, error)
	Exists(ctx context.Context, name string) (bool, error)
	Probe(ctx context.Context, name string) (fsstore.Presence, error)
	Children(ctx context.Context, prefix string) ([]string, error)
}

type timeSource interface {
	Now(ctx context.Context) (time.Time, error)
}

var (
	_ Store = (*fsstore.Store)(nil)
	_ Store = (*fsstore.Counter)(nil)

	_ newClaimer = (*fsstore.Store)(nil)
	_ newClaimer = (*fsstore.Counter)(nil)
)

// Options configure Open.
type Options struct {
	// Grace is the lease: a running attempt whose last heartbeat is older
	// than this in file-server time is stale and may be retried. Zero
	// means DefaultGrace. Runners should heartbeat several times per
	// grace period (see Study.HeartbeatInterval).
	Grace time.Duration
}

// Study is one study in a store, opened by Open. It is safe for
// concurrent use by many goroutines (a runner with several objectives at
// once shares one), and many processes on many machines may open the same
// study: everything they agree on is in the store.
type Study struct {
	store   Store
	name    string
	names   names
	spec    *Spec
	sampler Sampler
	pruner  Pruner
	grace   time.Duration
	clock   *serverClock
	beats   beats
	// limit is the number of trial numbers handed out: the budget, or the
	// size of a discrete space if that is smaller. It changes when a newer
	// version of the spec (Extend) is seen: read it with lim.
	limit atomic.Int64
	// ceiling is the highest limit any version of the spec has set (ceil):
	// trial numbers below it are the study's, even past a lowered limit
	// (one claimed while a lowering was being written is a real trial).
	ceiling atomic.Int64
	// manage: the spec's versions and the queue of enqueued points
	// (manage.go).
	manage manageState
	// dedup: the space is discrete, so points are claimed too.
	dedup bool

	// askMu serialises calls into the sampler and the pruner, which need
	// not be safe for concurrent use.
	askMu sync.Mutex

	mu sync.Mutex
	// idx: what is known of each trial number (ended, highest attempt,
	// learned to exist); see trialIndex.
	idx       trialIndex
	emptyBlob fsstore.Digest
	reuse     blobReuse // when emptyBlob was last stored (blobForEmpty)
	curves    map[fsstore.Digest]curveBlob
	packs     packCache
	contended bool // this process lost a race for a new trial number
	// ownSincePack: trials this Study ended since it last wrote a pack
	// of its own (Pack with Own), for Pack with Running.
	ownSincePack int
	noPacks      bool // test seam: read every trial from its folder

	// last: what the last full look found, which quick looks reuse for a
	// while (reuseLook). The numbers learned since are in idx.
	last lastLook

	// The highest watch record number seen (-1: none), and whether the
	// watch folder was listed once (Watching).
	watchHigh   int
	watchListed bool

	// Problems met by looks and not yet returned by Problems, and the
	// messages of all those met, so that each is returned once.
	problems []error
	noticed  map[string]bool
}

// Problems returns what this Study's looks have found wrong in the
// study's folder since the last call, each once for the Study's life:
// names that are not its records (*ForeignError) and records that cannot
// be read (*RecordError, *fsstore.CorruptError; such a record ends
// nothing, so Next retries its trial). Views read Snapshot.Foreign and
// Snapshot.Corrupt instead; a runner that only calls Next (soma-trial)
// reports these, so that it never passes over them in silence.
func (s *Study) Problems() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.problems
	s.problems = nil
	return out
}

// notice queues errs for Problems, skipping those already queued once.
// The caller holds s.mu.
func (s *Study) notice(errs []error) {
	for _, err := range errs {
		msg := err.Error()
		if s.noticed[msg] {
			continue
		}
		if s.noticed == nil {
			s.noticed = make(map[string]bool)
		}
		s.noticed[msg] = true
		s.problems = append(s.problems, err)
	}
}

// learn notes that trial n exists (claimed here or found taken), for
// the views that reuse the last listing.
func (s *Study) learn(n int) {
	s.mu.Lock()
	s.idx.learn(n)
	s.mu.Unlock()
}

// Meta keys of the study record.
const (
	kindStudy    = "study"
	keySampler   = "sampler"
	keyPruner    = "pruner"
	keyBudget    = "budget"
	keySpecValue = "spec_version"
)

// Open opens the study name in store.
//
// With a spec, Open creates the study if it does not exist (by claim:
// of any number of processes creating it at once, one writes it and the
// others find it equal), or checks that spec defines the same study as
// the stored one; a different spec is refused with a *SpecMismatchError
// (errors.Is ErrSpecMismatch) showing the difference. With a nil spec,
// Open joins an existing study, or returns ErrNoStudy.
func Open(ctx context.Context, store Store, name string, spec *Spec, opts Options) (*Study, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	n := names{study: name}
	var stored *Spec
	if spec != nil {
		if err := spec.Validate(); err != nil {
			return nil, err
		}
		canon := spec.Canonical()
		d, err := store.Put(ctx, canon)
		if err != nil {
			return nil, fmt.Errorf("study: create %s: %w", name, err)
		}
		meta := fsstore.Meta{
			{Key: keyKind, Value: kindStudy},
			{Key: keyVersion, Value: strconv.Itoa(RecordVersion)},
			{Key: keySpecValue, Value: strconv.Itoa(SpecVersion)},
			{Key: keyDir, Value: spec.Direction.String()},
			{Key: keySampler, Value: spec.Sampler.Name},
			{Key: keyPruner, Value: spec.Pruner.Name},
			{Key: keyBudget, Value: strconv.Itoa(spec.Budget)},
		}
		// Joining is the common case: look before claiming, which saves a
		// write per process. The claim still decides who creates it.
		won := false
		if _, err := store.Resolve(ctx, n.spec()); errors.Is(err, fsstore.ErrNotFound) {
			if won, err = store.Claim(ctx, n.spec(), d, meta); err != nil {
				return nil, fmt.Errorf("study: create %s: %w", name, err)
			}
		}
		if won {
			stored = spec
		} else {
			b, old, err := loadSpec(ctx, store, n)
			if err != nil {
				return nil, err
			}
			if b.Digest != d {
				// The spec as created, or with the budget of its newest
				// version (soma extend): a job script written either way
				// joins.
				st, err := newStudy(store, name, old, opts)
				if err != nil {
					return nil, err
				}
				if err := st.refreshChanges(ctx); err != nil {
					return nil, err
				}
				cur := *old
				cur.Budget = st.Budget()
				if bytes.Equal(cur.Canonical(), canon) {
					return st, nil
				}
				diff := DiffSpec(&cur, spec)
				if diff == "" {
					diff = "(the stored canonical form differs; it was written by another soma version)"
				}
				budgetOnly := !strings.Contains(diff, "\n") && strings.HasPrefix(diff, "budget:")
				return nil, &SpecMismatchError{Study: name, Diff: diff, BudgetOnly: budgetOnly, Budget: cur.Budget, Given: spec.Budget}
			}
			stored = old
		}
	} else {
		var err error
		if _, stored, err = loadSpec(ctx, store, n); err != nil {
			return nil, err
		}
	}
	st, err := newStudy(store, name, stored, opts)
	if err != nil {
		return nil, err
	}
	if err := st.refreshChanges(ctx); err != nil {
		return nil, err
	}
	return st, nil
}

// loadSpec reads a study's spec record and blob.
func loadSpec(ctx context.Context, store Store, n names) (fsstore.Bound, *Spec, error) {
	b, err := store.Resolve(ctx, n.spec())
	if errors.Is(err, fsstore.ErrNotFound) {
		return b, nil, fmt.Errorf("%w: %q (create it with a spec: --spec FILE or --param flags, or 'soma init')", ErrNoStudy, n.study)
	}
	if err != nil {
		return b, nil, fmt.Errorf("study: open %s: %w", n.study, err)
	}
	if k := b.Meta.Value(keyKind); k != kindStudy {
		return b, nil, fmt.Errorf("study: open %s: %s is not a study record (kind %q)", n.study, n.spec(), k)
	}
	if v, err := strconv.Atoi(b.Meta.Value(keyVersion)); err != nil || v > RecordVersion {
		return b, nil, fmt.Errorf("study: open %s: %w: study record version %q, this soma reads up to %d (upgrade soma on this machine)", n.study, ErrNewerFormat, b.Meta.Value(keyVersion), RecordVersion)
	}
	blob, err := store.Get(ctx, b.Digest)
	if err != nil {
		return b, nil, fmt.Errorf("study: open %s: spec: %w", n.study, err)
	}
	sp, err := ParseCanonical(blob)
	if err != nil {
		return b, nil, fmt.Errorf("study: open %s: stored spec: %w", n.study, err)
	}
	return b, sp, nil
}

func newStudy(store Store, name string, spec *Spec, opts Options) (*Study, error) {
	sampler, err := spec.NewSampler()
	if err != nil {
		return nil, err
	}
	pruner, err := spec.NewPruner()
	if err != nil {
		return nil, err
	}
	grace := opts.Grace
	if grace <= 0 {
		grace = DefaultGrace
	}
	s := &Study{
		store:   store,
		name:    name,
		names:   names{study: name},
		spec:    spec,
		sampler: sampler,
		pruner:  pruner,
		grace:   grace,
		clock:   newServerClock(grace),
		idx:     newTrialIndex(),
		reuse:   blobReuse{every: BlobReuse, now: time.Now},
		curves:  make(map[fsstore.Digest]curveBlob),
		packs:   packCache{loaded: make(map[string]packInfo), covered: make(map[int]bool), foreign: make(map[string][]error)},
	}
	s.watchHigh = -1
	if _, finite := spec.Space.Size(); finite {
		s.dedup = true
	}
	s.manage.budget = spec.Budget
	s.limit.Store(int64(s.limitFor(spec.Budget)))
	s.ceiling.Store(s.limit.Load())
	return s, nil
}

// Name returns the study's name.
func (s *Study) Name() string { return s.name }

// Spec returns the study's spec as stored, with the budget of its newest
// version (Extend). Do not modify it.
func (s *Study) Spec() *Spec {
	sp := *s.spec
	sp.Budget = s.Budget()
	return &sp
}

// Space returns the study's space.
func (s *Study) Space() *Space { return s.spec.Space }

// Direction returns the study's direction; DirectionUnknown when nobody
// set one (it never guesses).
func (s *Study) Direction() Direction { return s.spec.Direction }

// Limit returns how many trials the study runs: its budget, or the number
// of points of a discrete space when that is smaller (no point is
// evaluated twice).
func (s *Study) Limit() int { return s.lim() }

// Grace returns the lease in force (Options.Grace or DefaultGrace).
func (s *Study) Grace() time.Duration { return s.grace }

// HeartbeatInterval is how often a runner should call Run.Heartbeat: a
// fifth of the grace period, so that a few lost beats never make a live
// attempt stale.
func (s *Study) HeartbeatInterval() time.Duration { return s.grace / 5 }

// List returns the names of the studies in store, sorted: every name
// under study/ that has a study record. It opens one record per study and
// no blob.
func List(ctx context.Context, store Store) ([]string, error) {
	kids, err := store.Children(ctx, "study")
	if err != nil {
		return nil, fmt.Errorf("study: list: %w", err)
	}
	var out []string
	for _, k := range kids {
		if ValidateName(k) != nil {
			continue
		}
		b, err := store.Resolve(ctx, names{study: k}.spec())
		if err != nil {
			var ce *fsstore.CorruptError
			if errors.Is(err, fsstore.ErrNotFound) || errors.As(err, &ce) {
				continue
			}
			return nil, fmt.Errorf("study: list: %w", err)
		}
		if b.Meta.Value(keyKind) == kindStudy {
			out = append(out, k)
		}
	}
	return out, nil
}

// forEach runs fn(0..n-1) on up to workers goroutines and waits for them;
// it stops handing out work once ctx is done.
//
// The goroutines are started once and take the indexes in turn. (They
// were one goroutine per index, an errgroup with a limit: at the end of a
// budget each soma-trial probes every trial it has not seen end, and
// with 8 processes and 1000 trials that was 7000 goroutines, each
// growing its stack for a 3 µs stat: morestack alone was 5% of
// soma-trial's CPU.) One index, or one worker, runs on the caller's
// goroutine.
func forEach(ctx context.Context, n, workers int, fn func(i int)) {
	workers = min(max(1, workers), n)
	if workers <= 1 {
		for i := range n {
			if ctx.Err() != nil {
				return
			}
			fn(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				fn(i)
			}
		})
	}
	wg.Wait()
}
