package study

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/soma-hpc/soma/fsstore"
)

// readWorkers bounds the concurrent reads of one query: on a network
// filesystem every open is a round trip, so more than the cores help.
const readWorkers = 16

// Snapshot is a study as one reader saw it at one moment: the latest
// attempt of every trial. Records whose trial ended (done, pruned, failed
// with no retry left) never change, so a Study keeps them in memory and
// later snapshots do not read them again.
type Snapshot struct {
	Study     string
	Direction Direction
	// Limit is the number of trials the study runs (Study.Limit).
	Limit int
	// Now is the file-server time the snapshot was taken at; a running
	// attempt whose last heartbeat is older than Now minus the grace
	// period has State StateStale.
	Now time.Time
	// Trials holds the latest readable attempt of each trial, by number.
	// Curve and Reason are filled only by Study.Curves. Records are shared
	// with the Study's cache: do not modify them.
	Trials []Record
	// Corrupt lists the records (and, for Curves, the curve blobs) that
	// could not be read: *RecordError or *fsstore.CorruptError values.
	// They are counted, never results.
	Corrupt []error
	// Foreign lists the names under the study's trial and pack folders
	// that are not its records (*ForeignError values: stray files, editor
	// droppings, trial numbers outside the budget), by name. They are
	// never run, retried, counted, or results. (Bug: a trial folder
	// numbered past the budget was read, retried and run like any other,
	// and views counted it: "46 of 45 ended".) A look that probes for
	// attempts (Next) does not list the trials' folders, so it reports
	// only what the trial folder's own listing shows.
	Foreign []error

	present []int       // trial numbers listed in the store, sorted (shared: read only)
	learned *Study      // whose learned numbers (claims, lost races) count as present too
	broken  map[int]int // trial -> attempt whose record is unreadable
	open    []Record    // the trials that have not ended, by number
	ended   int         // trials below Limit that have ended
}

// History returns the sampler's and pruner's view of s (types.go).
func (s *Snapshot) History() History {
	h := History{Direction: s.Direction, Trials: make([]Trial, len(s.Trials))}
	for i := range s.Trials {
		h.Trials[i] = s.Trials[i].Trial()
	}
	return h
}

// Finished returns the trials that ran to the end (StateDone), by number.
// Pruned trials are not among them: their scores were measured earlier in
// training and are not comparable.
func (s *Snapshot) Finished() []Record {
	var out []Record
	for _, r := range s.Trials {
		if r.State == StateDone {
			out = append(out, r)
		}
	}
	return out
}

// Best returns the done trial with the best score (the lowest trial
// number among equals). It returns ErrNoDirection for a study without a
// direction (it never guesses) and ErrNoResult when no trial is done.
func (s *Snapshot) Best() (Record, error) {
	if s.Direction == DirectionUnknown {
		return Record{}, fmt.Errorf("%w: study %q has no direction, so no score is best (set direction = \"minimize\" or \"maximize\" in a new study's spec)", ErrNoDirection, s.Study)
	}
	best := -1
	for i, r := range s.Trials {
		if r.State != StateDone || !r.HasScore {
			continue
		}
		if best < 0 || s.Direction.Better(r.Score, s.Trials[best].Score) {
			best = i
		}
	}
	if best < 0 {
		return Record{}, fmt.Errorf("%w in study %q", ErrNoResult, s.Study)
	}
	return s.Trials[best], nil
}

// Counts returns the number of trials in each state, StateStale included.
func (s *Snapshot) Counts() map[State]int {
	c := make(map[State]int, 6)
	for _, r := range s.Trials {
		c[r.State]++
	}
	return c
}

// has reports whether trial n exists in the store (it may have no
// readable record yet).
//
// The numbers the Study learned after this look count too (a number is
// never given back, so that only makes the answer fresher): it asks the
// Study rather than copy its learned numbers into every snapshot (a map
// of up to foldLearned numbers, cloned on every Next, was a fifth of
// soma-trial's allocations).
func (s *Snapshot) has(n int) bool {
	if _, ok := slices.BinarySearch(s.present, n); ok {
		return true
	}
	if st := s.learned; st != nil {
		st.mu.Lock()
		defer st.mu.Unlock()
		return st.idx.hasLearned(n)
	}
	return false
}

// hasLocked is has for a caller that holds the lock of the Study that
// made the snapshot.
func (s *Snapshot) hasLocked(n int) bool {
	if _, ok := slices.BinarySearch(s.present, n); ok {
		return true
	}
	return s.learned != nil && s.learned.idx.hasLearned(n)
}

// Trial returns trial n's latest attempt, if the snapshot holds it.
func (s *Snapshot) Trial(n int) (Record, bool) {
	i, ok := slices.BinarySearchFunc(s.Trials, n, func(r Record, n int) int { return r.Number - n })
	if !ok {
		return Record{}, false
	}
	return s.Trials[i], true
}

// Trials returns the latest attempt of every trial: running, stale,
// done, pruned, failed and interrupted alike. It lists the trial folder
// once, reads the records of trials that have not ended (and, on a cold
// Study, every record, or the packs that hold them), and fetches no blob.
func (s *Study) Trials(ctx context.Context) (*Snapshot, error) {
	return s.snapshot(ctx)
}

// History returns what a sampler needs: every trial's latest attempt with
// state, point and score, no curves. Its cost is one Trials: no blob is
// fetched. Samplers use only StateDone trials as results.
func (s *Study) History(ctx context.Context) (History, error) {
	snap, err := s.snapshot(ctx)
	if err != nil {
		return History{}, err
	}
	return snap.History(), nil
}

// Finished returns the trials that ran to the end, by number, at the cost
// of one Trials (no blob fetched).
func (s *Study) Finished(ctx context.Context) ([]Record, error) {
	snap, err := s.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	return snap.Finished(), nil
}

// Best returns the best done trial (see Snapshot.Best).
func (s *Study) Best(ctx context.Context) (Record, error) {
	snap, err := s.snapshot(ctx)
	if err != nil {
		return Record{}, err
	}
	return snap.Best()
}

// Curves returns what a pruner needs: Trials with every trial's curve and
// stop reason, at the cost of one Trials plus one blob fetch per trial
// whose curve this Study has not fetched before (curves of ended trials
// are immutable and cached; running ones are fetched again as they grow).
func (s *Study) Curves(ctx context.Context) (*Snapshot, error) {
	snap, err := s.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.fillCurves(ctx, snap.Trials, &snap.Corrupt, true); err != nil {
		return nil, err
	}
	return snap, nil
}

// fillCurves sets Curve and Reason of recs from the blob cache, fetching
// what is missing. With evict, cached blobs that recs do not reference are
// dropped, so the cache holds one curve per trial at most.
func (s *Study) fillCurves(ctx context.Context, recs []Record, corrupt *[]error, evict bool) error {
	s.mu.Lock()
	var need []fsstore.Digest
	seen := make(map[fsstore.Digest]bool)
	for i := range recs {
		d := recs[i].blob
		if _, ok := s.curves[d]; !ok && !seen[d] && !d.IsZero() {
			seen[d] = true
			need = append(need, d)
		}
	}
	s.mu.Unlock()
	var got []fsstore.Blob
	if len(need) > 0 {
		got = s.store.GetMany(ctx, need)
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	bad := make(map[fsstore.Digest]error)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range got {
		if b.Err != nil {
			var ce *fsstore.CorruptError
			if errors.As(b.Err, &ce) || errors.Is(b.Err, fsstore.ErrNotFound) {
				bad[b.Digest] = b.Err
				continue
			}
			return fmt.Errorf("study %s: curves: %w", s.name, b.Err)
		}
		c, err := decodeCurve(b.Data)
		if err != nil {
			bad[b.Digest] = err
			continue
		}
		s.curves[b.Digest] = c
	}
	keep := make(map[fsstore.Digest]bool, len(recs))
	for i := range recs {
		r := &recs[i]
		keep[r.blob] = true
		if c, ok := s.curves[r.blob]; ok {
			r.Curve, r.Reason = c.Curve, c.Reason
			continue
		}
		if err := bad[r.blob]; err != nil {
			*corrupt = append(*corrupt, &RecordError{Name: s.names.attempt(r.Number, r.Attempt), Err: fmt.Errorf("curve: %w", err)})
		}
	}
	if evict {
		maps.DeleteFunc(s.curves, func(d fsstore.Digest, _ curveBlob) bool { return !keep[d] && d != s.emptyBlob })
	}
	return nil
}

// trialRead is the result of reading one trial's latest attempt.
type trialRead struct {
	n, attempt int
	rec        Record
	found      bool
	foreign    []error // *ForeignError: names in the trial's folder that are not attempts
	err        error   // *RecordError or *fsstore.CorruptError: unreadable record
	fatal      error   // the read itself failed
}

// fail notes err, from a look at the trial's folder (Probe, Children):
// a *fsstore.CorruptError (a link or a special file where a folder or a
// record belongs, say) makes the trial unreadable, reported with its path
// like a record that cannot be read; any other error fails the read.
func (res *trialRead) fail(err error) {
	var ce *fsstore.CorruptError
	if errors.As(err, &ce) {
		res.err = ce
		return
	}
	res.fatal = err
}

// readLatest reads trial n's highest attempt: one listing of its folder
// and one record. With probe, it finds the highest attempt by looking for
// the one after the highest it knows instead (attempts are claimed in
// order, so there is no gap): usually one stat instead of a listing, for
// Next, which reads every trial other processes ran; stray files in the
// trial's folder then go uncounted (Foreign).
//
// With probe and hints, the highest attempt known is read first, and if
// it ended the trial, nothing more is looked at: no look for a later
// attempt. (A later attempt can exist only if it was claimed while this
// one looked stale, and this one's late runner ended it after: this look
// then counts the trial ended while the retry runs; the retry still
// records, and other looks see it.) For looks that need no more than
// that (Next with an index sampler): at the end of a budget shared by 8
// processes each learns of the others' ~875 trials.
//
// Bug (issue 18, in round trips): hints used to stat the sealed record
// only (fsstore.Probe: its mode says it ended), and checkSealed then read
// each such record anyway before Next said the budget was reached (a
// record damaged in place keeps its mode): a stat, then a look for the
// next attempt and a read, about 10 file-server operations per trial
// and process, where this read is 5. At P=8 on the slow-filesystem
// harness that was 70 of a trial's 126 operations.
func (s *Study) readLatest(ctx context.Context, n int, probe, hints bool) trialRead {
	res := trialRead{n: n, attempt: -1}
	if probe {
		s.mu.Lock()
		a, _ := s.idx.highestAttempt(n)
		s.mu.Unlock()
		var first trialRead // attempt a's read, if hints
		if hints {
			first = s.readAttempt(ctx, n, a)
			switch {
			case first.fatal != nil:
				return first
			case first.found && first.rec.Final(s.spec.MaxRetries):
				return first
			case first.err == nil && !first.found:
				// Missing: no later attempt either (attempts are
				// claimed in order).
				return first
			}
		}
		for {
			p, err := s.store.Probe(ctx, s.names.attempt(n, a+1))
			if err != nil {
				res.attempt = a
				res.fail(err)
				return res
			}
			if p == fsstore.Missing {
				break
			}
			a++
		}
		if hints && a == first.attempt {
			return first // no later attempt: the one read is the latest
		}
		res.attempt = a
	} else {
		kids, err := s.store.Children(ctx, s.names.trial(n))
		if err != nil {
			res.fail(err)
			return res
		}
		for _, k := range kids {
			a, ok := parseNumber(k)
			if !ok {
				res.foreign = append(res.foreign, &ForeignError{Name: s.names.trial(n) + "/" + k, Why: "attempt name " + strconv.Quote(k) + " is not an attempt number"})
				continue
			}
			res.attempt = max(res.attempt, a)
		}
	}
	// A listing may lag behind (NFS); attempts are never removed, so the
	// highest this process has seen is still there.
	s.mu.Lock()
	if h, ok := s.idx.highestAttempt(n); ok && h > res.attempt {
		res.attempt = h
	}
	s.mu.Unlock()
	if res.attempt < 0 {
		return res
	}
	rd := s.readAttempt(ctx, n, res.attempt)
	rd.foreign = res.foreign
	return rd
}

// readAttempt reads attempt a of trial n: found false and no error if it
// is not bound.
func (s *Study) readAttempt(ctx context.Context, n, a int) trialRead {
	res := trialRead{n: n, attempt: a}
	b, err := s.store.Resolve(ctx, s.names.attempt(n, a))
	var ce *fsstore.CorruptError
	switch {
	case errors.Is(err, fsstore.ErrNotFound):
		return res
	case errors.As(err, &ce):
		res.err = ce
		return res
	case err != nil:
		res.fatal = err
		return res
	}
	rec, err := decodeRecord(s.name, s.spec.Space, n, a, b)
	if err != nil {
		res.err = err
		return res
	}
	res.rec, res.found = rec, true
	return res
}

// snapshot reads the latest attempt of every trial; see Trials.
func (s *Study) snapshot(ctx context.Context) (*Snapshot, error) {
	return s.look(ctx, lookFor{trials: true})
}

// Listing the trial folder costs one directory entry per trial (a 100k
// trial study: ~70 ms on a local disk, seconds over NFS), and Next used to
// do it for every trial it handed out, so a budget of n trials cost O(n²).
// Next now reuses the last listing (plus the numbers it has learned since:
// its own claims and the numbers it found taken) for a while, when its
// sampler does not need the other trials' results; see look.
const (
	// relistAfter: a look is reused for at least this long (each one
	// reads every trial other processes ran since the last)...
	relistAfter = 5 * time.Second
	// ...and at most relistShare of the time goes to listing.
	relistShare = 20
	// foldLearned: more numbers learned than this since the last look are
	// folded into its listing.
	foldLearned = 256
)

// lastLook is what the last full look found: the listing of the trial
// folder and the trials that had not ended, which quick looks reuse
// (reuseLook) for a while. Study.mu guards it. Its slices are shared
// with snapshots: they are replaced, never changed in place.
type lastLook struct {
	listed  []int         // trial numbers present, sorted; nil: no look yet
	foreign []error       // stray names the listing found
	open    []Record      // trials that had not ended, sorted by number
	at      time.Time     // when the look began
	took    time.Duration // how long it took
}

// reusable reports whether a quick look at now may reuse this one: there
// was one, and it began less than relistAfter ago, or less than
// relistShare times its own duration (so that at most 1/relistShare of
// the time goes to listing). A clock that went back reuses nothing.
func (l *lastLook) reusable(now time.Time) bool {
	since := now.Sub(l.at)
	return l.listed != nil && since >= 0 && since < max(relistAfter, relistShare*l.took)
}

// begunSince reports whether the last look began at or after t: it is
// then as fresh as a look begun now.
func (l *lastLook) begunSince(t time.Time) bool { return !l.at.Before(t) }

// lookFor says what a look is for.
type lookFor struct {
	// quick: the last look may be reused (see look).
	quick bool
	// trials: Snapshot.Trials holds every trial; else only the ones that
	// have not ended (Next's view for index samplers, which a large study
	// would otherwise copy whole on every call).
	trials bool
	// probe: find each trial's latest attempt by probing (readLatest), as
	// Next does; views list, to count stray files.
	probe bool
}

// look reads the latest attempt of every trial that has not ended (those
// that have are cached). With want.quick, it may instead reuse what the
// last look found (see relistAfter), reading nothing: numbers taken by
// other processes since then are found when claiming them, and trials
// that other processes interrupt, or that go stale, are retried once the
// next look sees them.
//
// A full look is four steps: list the trial folder (listTrials), pick
// the numbers not known ended (notEnded), read each one's latest attempt
// in parallel (readLatest), then sort the reads into ended, open, broken
// and empty trials under the lock (takeReads), which also records what
// the next quick look reuses.
func (s *Study) look(ctx context.Context, want lookFor) (*Snapshot, error) {
	now, err := s.clock.now(ctx, s.store)
	if err != nil {
		return nil, fmt.Errorf("study %s: %w", s.name, err)
	}
	snap := &Snapshot{
		Study: s.name, Direction: s.spec.Direction, Limit: s.lim(), Now: now,
		broken: make(map[int]int),
	}
	if want.quick && s.reuseLook(snap, want.trials) {
		return snap, nil
	}
	start := time.Now()
	present, err := s.listTrials(ctx, snap)
	if err != nil {
		return nil, err
	}
	// A look that needs no more than whether a trial ended reads its
	// highest known attempt first (readLatest).
	hints := want.probe && !want.trials
	todo := s.notEnded(present)
	reads := make([]trialRead, len(todo))
	forEach(ctx, len(todo), readWorkers, func(i int) { reads[i] = s.readLatest(ctx, todo[i], want.probe, hints) })
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	open, empty, err := s.takeReads(snap, reads, now)
	if err != nil {
		return nil, err
	}
	if len(empty) > 0 {
		present = s.dropEmpty(present, empty)
	}
	s.notice(snap.Foreign)
	s.notice(snap.Corrupt)
	slices.SortFunc(open, func(x, y Record) int { return x.Number - y.Number })
	snap.present, snap.open = present, open
	s.last.open, s.last.at, s.last.took = open, start, time.Since(start)
	snap.ended = s.endedCount()
	if want.trials {
		snap.Trials = mergeRecords(s.idx.endedList(), open)
	} else {
		snap.Trials = open
	}
	return snap, nil
}

// reuseLook fills snap from the last look, reading nothing, and reports
// true, if that look is recent enough to reuse (relistAfter,
// relistShare); else it changes nothing and reports false. The trials
// that had not ended then are still open unless they ended since, or a
// newer attempt (a retry) was claimed since. With trials, snap.Trials
// holds the ended trials too.
func (s *Study) reuseLook(snap *Snapshot, trials bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.last.reusable(time.Now()) {
		return false
	}
	if s.idx.learnedCount() > foldLearned {
		// Fold what was learned into the listing (a new slice: older
		// snapshots share the old one), so that the map copied into
		// each snapshot stays small.
		s.last.listed = s.idx.foldLearned(s.last.listed)
	}
	snap.present, snap.Foreign = s.last.listed, s.last.foreign
	snap.learned = s
	snap.open = s.idx.stillOpen(s.last.open)
	snap.ended = s.endedCount()
	snap.Trials = snap.open
	if trials {
		snap.Trials = mergeRecords(s.idx.endedList(), slices.Clone(snap.open))
	}
	return true
}

// listTrials picks up changes to the study (refreshChanges: soma
// extend's budgets, soma enqueue's points; one stat when none), loads
// new packs, and lists the trial folder. It returns the trial numbers
// present, sorted: those listed within the budget's ceiling, and those
// the index knows ended (from packs or earlier reads) even where a
// lagging listing misses them. Names that are not trials go to
// snap.Foreign, a trial folder that is not soma's to snap.Corrupt.
//
// It records the listing for the quick looks that follow (reuseLook),
// and forgets the numbers learned that it shows; snap.Limit is the
// limit in force after the refresh.
func (s *Study) listTrials(ctx context.Context, snap *Snapshot) ([]int, error) {
	if err := s.refreshChanges(ctx); err != nil {
		return nil, err
	}
	snap.Limit = s.lim()
	if err := s.loadPacks(ctx, snap); err != nil {
		return nil, err
	}
	kids, err := s.store.Children(ctx, s.names.trials())
	var ce *fsstore.CorruptError
	switch {
	case errors.As(err, &ce):
		// The trial folder itself is not soma's (a link, say): reported,
		// and no trial is read through it.
		snap.Corrupt = append(snap.Corrupt, ce)
	case err != nil:
		return nil, fmt.Errorf("study %s: %w", s.name, err)
	}
	present := make([]int, 0, len(kids))
	for _, k := range kids {
		n, ok := parseNumber(k)
		switch {
		case !ok:
			snap.Foreign = append(snap.Foreign, &ForeignError{Name: s.names.trials() + "/" + k, Why: "trial name " + strconv.Quote(k) + " is not a trial number"})
		case n >= s.ceil():
			// Only numbers the budget allows are ever claimed, retried
			// or counted: a folder past it was not made by soma.
			snap.Foreign = append(snap.Foreign, &ForeignError{Name: s.names.trial(n), Why: fmt.Sprintf("trial %d is outside the budget (trials 0 to %d)", n, s.ceil()-1)})
		default:
			present = append(present, n)
		}
	}
	slices.Sort(present)
	s.mu.Lock()
	defer s.mu.Unlock()
	if ended := s.idx.endedList(); len(ended) > 0 {
		present = mergeInts(present, numbers(ended))
	}
	// Clipped: this look appends more to its own list; the next quick
	// looks share this one.
	s.last.listed, s.last.foreign = present, slices.Clip(snap.Foreign)
	s.idx.forgetListed(present)
	snap.learned = s
	return present, nil
}

// notEnded returns the trial numbers whose latest attempt a look must
// read: those of present, and those learned since, that the index does
// not know ended.
func (s *Study) notEnded(present []int) []int {
	var todo []int
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range present {
		if !s.idx.ended(n) {
			todo = append(todo, n)
		}
	}
	for _, n := range s.idx.learnedNumbers() {
		if !s.idx.ended(n) {
			todo = append(todo, n)
		}
	}
	return todo
}

// takeReads sorts a look's reads: it returns the trials that have not
// ended (a running attempt whose last progress is older than the grace
// at now is marked stale) and the trials with no attempt found (empty);
// it caches those that ended at once (addFinals), notes each trial's
// highest attempt, and adds unreadable records to snap.Corrupt and
// snap.broken and stray names to snap.Foreign. A read that failed
// outright (trialRead.fatal) fails the look. The caller holds s.mu.
func (s *Study) takeReads(snap *Snapshot, reads []trialRead, now time.Time) (open []Record, empty []int, err error) {
	var ended []Record // cached at once (addFinals)
	for _, rd := range reads {
		snap.Foreign = append(snap.Foreign, rd.foreign...)
		if rd.fatal != nil {
			return nil, nil, fmt.Errorf("study %s: trial %d: %w", s.name, rd.n, rd.fatal)
		}
		if h, _ := s.idx.highestAttempt(rd.n); rd.attempt >= 0 && rd.attempt > h {
			s.idx.sawAttempt(rd.n, rd.attempt)
		}
		if rd.err != nil {
			snap.Corrupt = append(snap.Corrupt, rd.err)
			snap.broken[rd.n] = rd.attempt
			continue
		}
		if !rd.found {
			empty = append(empty, rd.n)
			continue
		}
		r := rd.rec
		if r.State == StateRunning && now.Sub(s.beats.lastProgress(&r, now)) > s.grace {
			r.State = StateStale
		}
		if !r.Final(s.spec.MaxRetries) {
			open = append(open, r)
			continue
		}
		ended = append(ended, r)
	}
	s.addFinals(ended)
	return open, empty, nil
}

// dropEmpty returns present less the numbers of empty (trial folders
// with no attempt in them), as a new slice, and records it as the
// listing that quick looks reuse. The caller holds s.mu.
//
// A trial folder with no attempt in it is not taken: a claim makes the
// folder, then links the attempt, and one that died in between (or a
// hand's mkdir, or a stray file in it) left the folder alone. Counted
// present, its trial was never claimed, and a runner waited forever for
// it to end. It is claimed like a free number now; if its claim is
// being made right now, or a listing lags, the link decides (ErrTaken).
func (s *Study) dropEmpty(present, empty []int) []int {
	slices.Sort(empty)
	present = slices.DeleteFunc(slices.Clone(present), func(n int) bool {
		_, found := slices.BinarySearch(empty, n)
		return found
	})
	s.last.listed = present
	return present
}

// endedCount is how many trials of the budget this Study knows ended.
// The caller holds s.mu.
func (s *Study) endedCount() int { return s.idx.endedBelow(s.lim()) }

// numbers returns the trial numbers of recs.
func numbers(recs []Record) []int {
	out := make([]int, len(recs))
	for i := range recs {
		out[i] = recs[i].Number
	}
	return out
}

// addFinal caches r, the latest attempt of a trial that has ended. The
// caller holds s.mu.
func (s *Study) addFinal(r Record) {
	if s.idx.add(r) {
		s.beats.forget(r.Number)
	}
}

// addFinals caches recs, the latest attempts of trials that have ended,
// with one merge (trialIndex.addAll). The caller holds s.mu.
func (s *Study) addFinals(recs []Record) {
	for _, r := range s.idx.addAll(recs) {
		s.beats.forget(r.Number)
	}
}

// mergeRecords merges two lists sorted by trial number into a new one.
func mergeRecords(a, b []Record) []Record {
	slices.SortFunc(b, func(x, y Record) int { return x.Number - y.Number })
	out := make([]Record, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		if a[i].Number <= b[j].Number {
			out = append(out, a[i])
			i++
		} else {
			out = append(out, b[j])
			j++
		}
	}
	out = append(out, a[i:]...)
	return append(out, b[j:]...)
}

// mergeInts merges two sorted lists into a new one, without duplicates.
func mergeInts(a, b []int) []int {
	out := make([]int, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || (i < len(a) && a[i] < b[j]):
			out = append(out, a[i])
			i++
		case i == len(a) || b[j] < a[i]:
			out = append(out, b[j])
			j++
		default:
			out = append(out, a[i])
			i++
			j++
		}
	}
	return out
}

// Attempts returns every attempt of every trial (superseded ones too),
// sorted by trial and attempt, with the records that could not be read.
// With curves it also fetches every attempt's curve blob (one fetch each,
// cached). It is the listing for tables and exports; samplers and pruners
// use History and Curves.
func (s *Study) Attempts(ctx context.Context, curves bool) ([]Record, []error, error) {
	snap, err := s.snapshot(ctx)
	if err != nil {
		return nil, nil, err
	}
	var out []Record
	var corrupt []error
	var names []string
	type at struct{ n, a int }
	var keys []at
	for _, r := range snap.Trials {
		out = append(out, r)
		// Earlier attempts are named 0..Attempt-1; a trial with attempt 0
		// only has nothing more to read.
		for a := 0; a < r.Attempt; a++ {
			keys = append(keys, at{r.Number, a})
			names = append(names, s.names.attempt(r.Number, a))
		}
	}
	for n, a := range snap.broken {
		for i := 0; i < a; i++ {
			keys = append(keys, at{n, i})
			names = append(names, s.names.attempt(n, i))
		}
	}
	corrupt = append(corrupt, snap.Corrupt...)
	bounds := make([]fsstore.Bound, len(names))
	errs := make([]error, len(names))
	forEach(ctx, len(names), readWorkers, func(i int) { bounds[i], errs[i] = s.store.Resolve(ctx, names[i]) })
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	for i, k := range keys {
		var ce *fsstore.CorruptError
		switch err := errs[i]; {
		case errors.Is(err, fsstore.ErrNotFound):
			continue
		case errors.As(err, &ce):
			corrupt = append(corrupt, ce)
			continue
		case err != nil:
			return nil, nil, fmt.Errorf("study %s: %w", s.name, err)
		}
		r, err := decodeRecord(s.name, s.spec.Space, k.n, k.a, bounds[i])
		if err != nil {
			corrupt = append(corrupt, err)
			continue
		}
		if r.State == StateRunning {
			// Superseded by a later attempt: it will never run on.
			r.State = StateStale
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Record) int {
		if a.Number != b.Number {
			return a.Number - b.Number
		}
		return a.Attempt - b.Attempt
	})
	if curves {
		if err := s.fillCurves(ctx, out, &corrupt, false); err != nil {
			return nil, nil, err
		}
	}
	return out, corrupt, nil
}
