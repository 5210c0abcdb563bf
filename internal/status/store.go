package status

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/internal/rootstore"
	"github.com/soma-hpc/soma/study"
)

// Store is the store as the views see it: an *fsstore.Store that counts
// the files each view opens (soma status --verbose) and that still tells
// the time when the root is not writable by this user.
//
// The file server's "now" is learned by stamping this process's clock
// file in tmp/ and reading its time back (fsstore.Store.Now). A researcher looking at a colleague's study may
// not be allowed to write there; then Store falls back to this machine's
// clock, and Clock says so, so that the views can print it: ages and
// staleness are then only as right as the two clocks agree.
//
// A Store is safe for concurrent use.
type Store struct {
	fs rootstore.Store // a folder (*fsstore.Store) or a bucket

	records, blobs, lists, probes atomic.Int64

	mu         sync.Mutex
	localClock error // why the server's time could not be read, once it could not

	// probe reads the server's time (fs.Now); a seam for tests that
	// cannot make a folder unwritable (they run as root).
	probe func(context.Context) (time.Time, error)
}

var (
	_ study.Store = (*Store)(nil)
	_ interface {
		Unbind(context.Context, string) error
	} = (*Store)(nil)
)

// RootError is a root that cannot be used: missing, not a folder, or not
// a soma store. Its message names the folder and what to do; it wraps the
// fsstore error (errors.Is fsstore.ErrNotFound, fsstore.ErrNotStore or
// fsstore.ErrNewerFormat).
type RootError struct {
	Root    string
	Problem string
	Fix     string
	Err     error
}

func (e *RootError) Error() string {
	s := e.Root + ": " + e.Problem
	if e.Fix != "" {
		s += " (" + e.Fix + ")"
	}
	return s
}

func (e *RootError) Unwrap() error { return e.Err }

// Open opens the store at root for reading. It never creates anything: a
// missing folder, a file, an empty folder and a folder that is not a soma
// store are each a *RootError with one line that says what to do.
func Open(root string) (*Store, error) {
	if rootstore.IsBucket(root) {
		// Its errors say what to fix (no bucket, no store, no keys).
		s, err := rootstore.Open(context.Background(), root, rootstore.Options{})
		if err != nil {
			return nil, err
		}
		return Wrap(s), nil
	}
	fi, err := os.Stat(root)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, &RootError{Root: root, Problem: "no such folder", Fix: "check the path; 'soma init ROOT --study NAME --spec FILE' or soma-trial --root creates a store", Err: fsstore.ErrNotFound}
	case errors.Is(err, syscall.ENOTDIR):
		// (It said "stat ROOT: not a directory"; issue 16.)
		return nil, &RootError{Root: root, Problem: "a folder above it is a file", Fix: "give the folder passed to soma-trial --root", Err: err}
	case err != nil:
		return nil, &RootError{Root: root, Problem: err.Error(), Err: err}
	case !fi.IsDir():
		return nil, &RootError{Root: root, Problem: "is a file, not a store folder", Fix: "give the folder passed to soma-trial --root", Err: fsstore.ErrNotStore}
	}
	s, err := fsstore.Open(root, fsstore.Options{})
	switch {
	case errors.Is(err, fsstore.ErrNewerFormat):
		return nil, &RootError{Root: root, Problem: "written by a newer soma", Fix: "upgrade soma on this machine", Err: err}
	case errors.Is(err, fsstore.ErrNotStore) && strings.Contains(err.Error(), "write it back"):
		// A store that lost its soma.json: fsstore's message says how to
		// write it back (issue 16).
		_, after, _ := strings.Cut(err.Error(), " has names/")
		return nil, &RootError{Root: root, Problem: "has names/" + after, Err: err}
	case errors.Is(err, fsstore.ErrNotStore):
		return nil, &RootError{Root: root, Problem: "not a soma store (no valid soma.json)", Fix: "give the folder passed to soma-trial --root", Err: err}
	case errors.Is(err, fsstore.ErrNotFound):
		return nil, &RootError{Root: root, Problem: "no such folder", Fix: "check the path", Err: err}
	case err != nil:
		return nil, err
	}
	return Wrap(s), nil
}

// Wrap returns a Store over s.
func Wrap(s rootstore.Store) *Store { return &Store{fs: s, probe: s.Now} }

// FS returns the underlying folder store, or nil for a bucket (the
// views that read files, such as the worker registry, have nothing to
// show there).
func (s *Store) FS() *fsstore.Store {
	f, _ := rootstore.Folder(s.fs)
	return f
}

// Close removes what the store made for this process (fsstore.Close):
// defer it after Open.
func (s *Store) Close() error { return s.fs.Close() }

// Backend returns the underlying store, a folder or a bucket.
func (s *Store) Backend() rootstore.Store { return s.fs }

// Root returns the store's absolute root folder.
func (s *Store) Root() string { return s.fs.Root() }

// Opens counts the files a view opened through a Store.
type Opens struct {
	Records int64 `json:"records"` // name records read (one open each)
	Blobs   int64 `json:"blobs"`   // blobs read (one open each)
	Lists   int64 `json:"lists"`   // folders listed (one open each)
	Probes  int64 `json:"probes"`  // server-time probes (the clock file stamped)
}

// Total returns the number of files and folders opened.
func (o Opens) Total() int64 { return o.Records + o.Blobs + o.Lists + o.Probes }

func (o Opens) String() string {
	return fmt.Sprintf("%d files opened: %d records, %d blobs, %d folder listings, %d clock probes",
		o.Total(), o.Records, o.Blobs, o.Lists, o.Probes)
}

// Opened returns the counts so far.
func (s *Store) Opened() Opens {
	return Opens{Records: s.records.Load(), Blobs: s.blobs.Load(), Lists: s.lists.Load(), Probes: s.probes.Load()}
}

// ResetOpened sets the counts to zero.
func (s *Store) ResetOpened() {
	for _, n := range []*atomic.Int64{&s.records, &s.blobs, &s.lists, &s.probes} {
		n.Store(0)
	}
}

// Clock returns "server" while the file server's time is used, or
// "local" with the reason once this machine's clock stands in for it.
func (s *Store) Clock() (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.localClock != nil {
		return "local", s.localClock
	}
	return "server", nil
}

// Put stores a blob (used by packing, never by the views).
func (s *Store) Put(ctx context.Context, b []byte) (fsstore.Digest, error) {
	return s.fs.Put(ctx, b)
}

// Get reads a blob.
func (s *Store) Get(ctx context.Context, d fsstore.Digest) ([]byte, error) {
	s.blobs.Add(1)
	return s.fs.Get(ctx, d)
}

// GetMany reads blobs.
func (s *Store) GetMany(ctx context.Context, ds []fsstore.Digest) []fsstore.Blob {
	s.blobs.Add(int64(len(ds)))
	return s.fs.GetMany(ctx, ds)
}

// Claim claims a name (used by packing, never by the views).
func (s *Store) Claim(ctx context.Context, name string, d fsstore.Digest, meta fsstore.Meta) (bool, error) {
	return s.fs.Claim(ctx, name, d, meta)
}

// Bind binds a name (never used by the views).
func (s *Store) Bind(ctx context.Context, name string, d fsstore.Digest, meta fsstore.Meta) (fsstore.Bound, error) {
	return s.fs.Bind(ctx, name, d, meta)
}

// Seal binds a name for the last time (never used by the views).
func (s *Store) Seal(ctx context.Context, name string, d fsstore.Digest, meta fsstore.Meta) (fsstore.Bound, error) {
	return s.fs.Seal(ctx, name, d, meta)
}

// Unbind removes a name (packing retires merged packs with it).
func (s *Store) Unbind(ctx context.Context, name string) error { return s.fs.Unbind(ctx, name) }

// Resolve reads a name's record.
func (s *Store) Resolve(ctx context.Context, name string) (fsstore.Bound, error) {
	s.records.Add(1)
	return s.fs.Resolve(ctx, name)
}

// Exists reports whether name is bound (one stat, counted as a record).
func (s *Store) Exists(ctx context.Context, name string) (bool, error) {
	s.records.Add(1)
	return s.fs.Exists(ctx, name)
}

// Probe is Exists that also says whether the name is sealed.
func (s *Store) Probe(ctx context.Context, name string) (fsstore.Presence, error) {
	s.records.Add(1)
	return s.fs.Probe(ctx, name)
}

// Children lists the segments below prefix.
func (s *Store) Children(ctx context.Context, prefix string) ([]string, error) {
	s.lists.Add(1)
	return s.fs.Children(ctx, prefix)
}

// Now returns the file server's time; see Store for the fallback when the
// root is not writable here.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	s.mu.Lock()
	local := s.localClock != nil
	s.mu.Unlock()
	if local {
		return time.Now(), nil
	}
	s.probes.Add(1)
	t, err := s.probe(ctx)
	if err == nil {
		return t, nil
	}
	if !errors.Is(err, fs.ErrPermission) && !errors.Is(err, syscall.EROFS) {
		return t, err
	}
	s.mu.Lock()
	s.localClock = fmt.Errorf("cannot write a time probe in %s/tmp (%v): ages use this machine's clock", s.Root(), errors.Unwrap(err))
	s.mu.Unlock()
	return time.Now(), nil
}

// UnknownStudyError is a study name the root does not hold. It wraps
// study.ErrNoStudy.
type UnknownStudyError struct {
	Root  string
	Study string
	Known []string // the studies the root holds
}

func (e *UnknownStudyError) Error() string {
	switch len(e.Known) {
	case 0:
		return fmt.Sprintf("no study %q in %s, which holds no study yet (create one with 'soma init' or soma-trial)", e.Study, e.Root)
	default:
		return fmt.Sprintf("no study %q in %s (it holds: %s)", e.Study, e.Root, strings.Join(e.Known, ", "))
	}
}

func (e *UnknownStudyError) Unwrap() error { return study.ErrNoStudy }

// OpenStudy joins the existing study name in s with the given lease
// (zero: study.DefaultGrace). A name the root does not hold is an
// *UnknownStudyError that lists the studies it does hold.
func OpenStudy(ctx context.Context, s *Store, name string, grace time.Duration) (*study.Study, error) {
	if err := study.ValidateName(name); err != nil {
		return nil, err
	}
	st, err := study.Open(ctx, s, name, nil, study.Options{Grace: grace})
	if errors.Is(err, study.ErrNoStudy) {
		known, lerr := study.List(ctx, s)
		if lerr != nil {
			return nil, lerr
		}
		return nil, &UnknownStudyError{Root: s.Root(), Study: name, Known: known}
	}
	return st, err
}

// Studies returns the names of the studies to show: only, when given
// (OpenStudy then says whether it exists), else every study in the root,
// sorted.
func Studies(ctx context.Context, s *Store, only string) ([]string, error) {
	if only != "" {
		return []string{only}, nil
	}
	return study.List(ctx, s)
}
