package study

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/soma-hpc/soma/fsstore"
)

// The study's watcher role (issue 19). At the end of a study, while its
// last trials run, one process may stay to retry those that die (go
// stale); every other one with nothing to claim can leave and free its
// allocation. The role is held like a trial attempt: a record claimed by
// link(2) under study/<s>/watch/<k>, rewritten every HeartbeatInterval,
// stale once its heartbeat is older than the grace period. A watcher
// that dies (or leaves, Release) is replaced by the next process that
// looks, by claiming <k+1>: of any number of processes, exactly one wins.

// Meta keys and values of a watch record.
const (
	kindWatch     = "watch"
	watchWatching = "watching"
	watchReleased = "released"
)

// ErrWatched: another live process keeps watch over the study; the error
// is a *WatchedError that says which.
var ErrWatched = errors.New("study: another process keeps watch")

// WatchedError is Watch's answer when another live process holds the
// watcher role.
type WatchedError struct {
	Study   string
	Watcher int // the holder's watch record number (study/<s>/watch/<n>)
	Who     Who
}

func (e *WatchedError) Error() string {
	return fmt.Sprintf("study %s: %s keeps watch for trials that go stale (watch/%d)", e.Study, e.Who, e.Watcher)
}

func (e *WatchedError) Is(target error) bool { return target == ErrWatched }

// Watcher is this process's hold on the study's watcher role, from Watch.
// Refresh must be called every Study.HeartbeatInterval, and Release when
// the process stops watching. It is safe for concurrent use.
type Watcher struct {
	s      *Study
	number int
	who    Who
	blob   fsstore.Digest

	mu       sync.Mutex
	beat     int64
	done     bool // superseded or released: nothing more is written
	lostRole bool // superseded
}

// WatchState is the study's latest watch record as read (Study.Watching).
type WatchState struct {
	Number int
	Who    Who
	// Live: the holder watches now (not released, heartbeat within the
	// grace period).
	Live bool
	// Released: the holder left the role on purpose.
	Released bool
	// Time is the file-server time of its last write.
	Time time.Time
}

func (n names) watches() string    { return n.base() + "/watch" }
func (n names) watch(k int) string { return n.watches() + "/" + strconv.Itoa(k) }
func (w *Watcher) name() string    { return w.s.names.watch(w.number) }

// Number is the role's watch record number (study/<s>/watch/<n>).
func (w *Watcher) Number() int { return w.number }

// Watch claims the study's watcher role for who, unless a live process
// holds it: then it returns a *WatchedError (errors.Is ErrWatched). A
// holder that has released the role, or whose record is stale or cannot
// be read, is replaced: Watch claims the next watch record by link(2),
// so of any number of processes looking at once exactly one wins, and
// the others get ErrWatched.
//
// Cost: one listing of study/<s>/watch the first time a Study looks,
// then a stat (of the record after the latest known) and one record read
// per look; one claim to take the role.
func (s *Study) Watch(ctx context.Context, who Who) (*Watcher, error) {
	for range 64 {
		st, found, err := s.Watching(ctx)
		if err != nil {
			return nil, err
		}
		if found && st.Live {
			return nil, &WatchedError{Study: s.name, Watcher: st.Number, Who: st.Who}
		}
		k := 0
		if found {
			k = st.Number + 1
		}
		empty, err := s.blobForEmpty(ctx)
		if err != nil {
			return nil, err
		}
		w := &Watcher{s: s, number: k, who: who, blob: empty}
		won, err := s.store.Claim(ctx, w.name(), empty, w.meta(watchWatching))
		if err != nil {
			return nil, fmt.Errorf("study %s: take the watcher role: %w", s.name, err)
		}
		s.mu.Lock()
		s.watchHigh = max(s.watchHigh, k)
		s.mu.Unlock()
		if won {
			return w, nil
		}
		// Another process claimed it first: see who, and whether it lives.
	}
	return nil, fmt.Errorf("study %s: take the watcher role: lost 64 races in a row", s.name)
}

// Watching reads the study's latest watch record; found is false when no
// process has ever watched. A record that cannot be read counts as not
// live (its holder is replaced).
func (s *Study) Watching(ctx context.Context) (WatchState, bool, error) {
	s.mu.Lock()
	k, listed := s.watchHigh, s.watchListed
	s.mu.Unlock()
	if !listed {
		// The first look: a listing. Later looks start from the highest
		// number seen, and probe the next names instead (a listing may
		// lag on NFS; a stat of a known name does not).
		kids, err := s.store.Children(ctx, s.names.watches())
		if err != nil {
			return WatchState{}, false, fmt.Errorf("study %s: watcher: %w", s.name, err)
		}
		for _, c := range kids {
			if n, ok := parseNumber(c); ok {
				k = max(k, n)
			}
		}
	}
	for {
		p, err := s.store.Probe(ctx, s.names.watch(k+1))
		if err != nil {
			return WatchState{}, false, fmt.Errorf("study %s: watcher: %w", s.name, err)
		}
		if p == fsstore.Missing {
			break
		}
		k++
	}
	s.mu.Lock()
	s.watchHigh, s.watchListed = max(s.watchHigh, k), true
	s.mu.Unlock()
	if k < 0 {
		return WatchState{}, false, nil
	}
	st := WatchState{Number: k}
	b, err := s.store.Resolve(ctx, s.names.watch(k))
	var ce *fsstore.CorruptError
	switch {
	case errors.Is(err, fsstore.ErrNotFound), errors.As(err, &ce):
		return st, true, nil
	case err != nil:
		return WatchState{}, false, fmt.Errorf("study %s: watcher: %w", s.name, err)
	}
	if b.Meta.Value(keyKind) != kindWatch {
		return st, true, nil
	}
	st.Time = b.Time
	st.Who.Host, st.Who.Job = b.Meta.Value(keyHost), b.Meta.Value(keyJob)
	st.Who.PID, _ = strconv.Atoi(b.Meta.Value(keyPID))
	switch b.Meta.Value(keyState) {
	case watchReleased:
		st.Released = true
		return st, true, nil
	case watchWatching:
	default:
		return st, true, nil
	}
	now, err := s.clock.now(ctx, s.store)
	if err != nil {
		return WatchState{}, false, fmt.Errorf("study %s: %w", s.name, err)
	}
	beat, _ := strconv.ParseInt(b.Meta.Value(keyBeat), 10, 64)
	r := Record{Number: -1, Attempt: k, Beat: beat, Time: b.Time} // beats keyed apart from trials
	st.Live = now.Sub(s.beats.lastProgress(&r, now)) <= s.grace
	return st, true, nil
}

func (w *Watcher) meta(state string) fsstore.Meta {
	return fsstore.Meta{
		{Key: keyKind, Value: kindWatch},
		{Key: keyVersion, Value: strconv.Itoa(RecordVersion)},
		{Key: keyState, Value: state},
		{Key: keyBeat, Value: strconv.FormatInt(w.beat, 10)},
		{Key: keyHost, Value: w.who.Host},
		{Key: keyPID, Value: strconv.Itoa(w.who.PID)},
		{Key: keyJob, Value: w.who.Job},
	}
}

// Refresh renews the role's lease: it rewrites the record with its
// heartbeat counter advanced, then looks whether a later watcher has
// claimed the role (this one was seen stale: the process was stopped,
// or lost the folder, for longer than the grace period). Then it returns
// ErrSuperseded and the role is lost; the caller stops watching. Between
// such a claim and this look, two processes may watch for one refresh
// interval: they retry stale trials by claim, so nothing runs twice.
// Cost: one record written, one stat.
func (w *Watcher) Refresh(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		if w.lostRole {
			return fmt.Errorf("study %s: watcher: %w", w.s.name, ErrSuperseded)
		}
		return fmt.Errorf("study %s: watcher: released", w.s.name)
	}
	w.beat++
	b, err := w.s.store.Bind(ctx, w.name(), w.blob, w.meta(watchWatching))
	if err != nil {
		return fmt.Errorf("study %s: watcher: %w", w.s.name, err)
	}
	w.s.clock.observe(b.Time)
	p, err := w.s.store.Probe(ctx, w.s.names.watch(w.number+1))
	if err != nil {
		return fmt.Errorf("study %s: watcher: %w", w.s.name, err)
	}
	if p != fsstore.Missing {
		w.done, w.lostRole = true, true
		return fmt.Errorf("study %s: watcher: %w", w.s.name, ErrSuperseded)
	}
	return nil
}

// Release gives the role up: the record says so, and the next process
// that looks takes the role at once instead of after the grace period.
// Releasing a role already lost or released does nothing. Cost: one
// record written.
func (w *Watcher) Release(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return nil
	}
	w.done = true
	if _, err := w.s.store.Bind(ctx, w.name(), w.blob, w.meta(watchReleased)); err != nil {
		return fmt.Errorf("study %s: release the watcher role: %w", w.s.name, err)
	}
	return nil
}
