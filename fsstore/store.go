package fsstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// FormatVersion is the on-disk format this soma writes and reads.
const FormatVersion = 1

const markerName = "soma.json"

type marker struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
}

// Options configure Open.
type Options struct {
	// Create makes the root (and its parents) if it does not exist, and
	// initialises an empty folder as a store. Without it, Open refuses a
	// folder that is not already a store.
	Create bool
	// Parallelism bounds the concurrent file reads of Scan, ResolveMany and
	// GetMany. Zero means 4×GOMAXPROCS, at least 8: on a network
	// filesystem each open is a round trip, so more than the cores help.
	Parallelism int
}

// Store is a soma store rooted at a folder. It is safe for concurrent use.
type Store struct {
	root     string
	tmp      string
	names    string
	blobs    string
	parallel int
	prefix   string // temp file prefix: host.pid.
	seq      atomic.Uint64

	hintsOnce sync.Once // sealHints
	hints     bool

	// Fault-injection seams for this package's tests.
	link       func(oldname, newname string) error
	beforeLink func(tmp string) error
}

// Open opens the store at root. See Options.Create.
//
// Open refuses a non-empty folder that is not a store (ErrNotStore) and a
// store of a newer format (ErrNewerFormat); both messages say what to do.
func Open(root string, opts Options) (*Store, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("fsstore: open %s: %w", root, err)
	}
	s := &Store{
		root:     abs,
		tmp:      filepath.Join(abs, "tmp"),
		names:    filepath.Join(abs, "names"),
		blobs:    filepath.Join(abs, "blobs", Algo),
		parallel: opts.Parallelism,
		link:     os.Link,
	}
	if s.parallel <= 0 {
		s.parallel = max(8, 4*runtime.GOMAXPROCS(0))
	}
	host, _ := os.Hostname()
	s.prefix = SanitizeSegment(host) + "." + strconv.Itoa(os.Getpid()) + "."

	b, err := os.ReadFile(filepath.Join(abs, markerName))
	switch {
	case err == nil:
		return s, s.checkMarker(b)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("fsstore: open %s: %w", abs, err)
	}
	// No marker: a new store, or a folder that is not one.
	entries, err := os.ReadDir(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if !opts.Create {
			return nil, fmt.Errorf("fsstore: open %s: %w (create it with 'soma init', or check the path)", abs, ErrNotFound)
		}
	case err != nil:
		return nil, fmt.Errorf("fsstore: open %s: %w", abs, err)
	case len(entries) > 0 && !onlyStoreFolders(entries):
		// The marker may have been linked between our read of it and the
		// listing, by a process that has since made its own folders here
		// (soma-trial's logs/): read it again before refusing. (Bug: 8
		// soma-trials starting together on a new folder; one in three
		// runs, one of them refused the store as "not a store".)
		if b, err := os.ReadFile(filepath.Join(abs, markerName)); err == nil {
			return s, s.checkMarker(b)
		}
		return nil, fmt.Errorf("%w: %s is not empty and has no %s; point soma at an empty or new folder", ErrNotStore, abs, markerName)
	case !opts.Create:
		return nil, fmt.Errorf("%w: %s has no %s (create a store there with 'soma init')", ErrNotStore, abs, markerName)
	}
	if err := s.create(); err != nil {
		return nil, err
	}
	return s, nil
}

// onlyStoreFolders reports whether a folder without a marker holds only
// what create makes before it links the marker: another process is
// creating the store right now. (Bug found by 4 soma-trial processes
// starting together: all but one refused the half-made store as "not a
// store".)
func onlyStoreFolders(entries []fs.DirEntry) bool {
	for _, e := range entries {
		switch e.Name() {
		case "tmp", "names", "blobs":
		default:
			return false
		}
	}
	return true
}

func (s *Store) checkMarker(b []byte) error {
	var m marker
	if err := json.Unmarshal(b, &m); err != nil || m.Format != "soma-store" {
		return fmt.Errorf("%w: %s has a %s that is not soma's (%v)", ErrNotStore, s.root, markerName, err)
	}
	if m.Version > FormatVersion {
		return fmt.Errorf("%w: %s has format version %d, this soma reads up to %d; upgrade soma on this machine", ErrNewerFormat, s.root, m.Version, FormatVersion)
	}
	if m.Version < 1 {
		return fmt.Errorf("%w: %s has format version %d", ErrNotStore, s.root, m.Version)
	}
	return nil
}

func (s *Store) create() error {
	for _, d := range []string{s.tmp, s.names, s.blobs} {
		if err := os.MkdirAll(d, 0o777); err != nil {
			return fmt.Errorf("fsstore: create %s: %w", s.root, err)
		}
	}
	b, _ := json.Marshal(marker{Format: "soma-store", Version: FormatVersion})
	b = append(b, '\n')
	tmp, err := s.writeTemp(bytes.NewReader(b), nil)
	if err != nil {
		return err
	}
	defer os.Remove(tmp.path)
	// Two processes creating the same store at once: link makes exactly one
	// marker; the loser finds it equal to its own.
	err = os.Link(tmp.path, filepath.Join(s.root, markerName))
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("fsstore: create %s: %w", s.root, err)
	}
	if err := syncDir(s.root); err != nil {
		return err
	}
	got, err := os.ReadFile(filepath.Join(s.root, markerName))
	if err != nil {
		return fmt.Errorf("fsstore: create %s: %w", s.root, err)
	}
	return s.checkMarker(got)
}

// Root returns the store's absolute root folder.
func (s *Store) Root() string { return s.root }

// Bound is a name as read back from the store.
type Bound struct {
	Name   string
	Digest Digest
	Meta   Meta
	// Time is the mtime the file server stamped on the record.
	Time time.Time
}

type tempFile struct {
	path  string
	mtime time.Time
}

// writeTemp writes r to a new unique file in tmp/, fsyncs and closes it,
// checking the errors of both. If h is non-nil every byte also goes to it.
func (s *Store) writeTemp(r io.Reader, h io.Writer) (tempFile, error) {
	return s.writeTempMode(r, h, 0o666)
}

// writeTempMode is writeTemp with the file made with mode (less umask).
func (s *Store) writeTempMode(r io.Reader, h io.Writer, mode uint32) (tempFile, error) {
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	path := filepath.Join(s.tmp, s.prefix+strconv.FormatUint(s.seq.Add(1), 10)+"-"+hex.EncodeToString(rnd[:]))
	const flags = unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL
	fd, err := openRaw(path, flags, mode)
	if errors.Is(err, fs.ErrNotExist) {
		// tmp/ removed by hand: make it again rather than fail every write.
		if mkErr := os.MkdirAll(s.tmp, 0o777); mkErr == nil {
			fd, err = openRaw(path, flags, mode)
		}
	}
	if err != nil {
		return tempFile{}, fmt.Errorf("fsstore: temp file %s: %w", path, err)
	}
	ok := false
	defer func() {
		if !ok {
			unix.Close(fd)
			os.Remove(path)
		}
	}()
	w := io.Writer(fdWriter(fd))
	if h != nil {
		w = io.MultiWriter(w, h)
	}
	if _, err := io.Copy(w, r); err != nil {
		return tempFile{}, fmt.Errorf("fsstore: write %s: %w", path, err)
	}
	if err := fsync(fd); err != nil {
		return tempFile{}, fmt.Errorf("fsstore: fsync %s: %w", path, err)
	}
	// fstat after fsync: the server's post-write attributes.
	var st unix.Stat_t
	if err := fstatRaw(fd, &st); err != nil {
		return tempFile{}, fmt.Errorf("fsstore: stat %s: %w", path, err)
	}
	ok = true
	if err := unix.Close(fd); err != nil {
		os.Remove(path)
		return tempFile{}, fmt.Errorf("fsstore: close %s: %w", path, err)
	}
	return tempFile{path: path, mtime: mtime(&st)}, nil
}

func (s *Store) namePath(name string) string {
	return filepath.Join(s.names, filepath.FromSlash(name))
}

// Claim binds name to d with meta only if name is not bound, and reports
// whether this call bound it. Exactly one of any number of concurrent
// claimers, on any number of machines sharing the folder, gets true.
//
// It is link(2) of a unique temp file. If link returns an error other than
// EEXIST, the temp file's link count decides: NFS may lose the reply of a
// link that succeeded and answer a retransmission with EEXIST (open(2),
// notes on O_EXCL).
func (s *Store) Claim(ctx context.Context, name string, d Digest, meta Meta) (bool, error) {
	if err := s.checkWrite(ctx, name, d); err != nil {
		return false, fmt.Errorf("claim %s: %w", name, err)
	}
	tmp, err := s.writeTemp(bytes.NewReader(encodeRecord(d, meta)), nil)
	if err != nil {
		return false, fmt.Errorf("claim %s: %w", name, err)
	}
	if s.beforeLink != nil {
		if err := s.beforeLink(tmp.path); err != nil {
			return false, fmt.Errorf("claim %s: %w", name, err)
		}
	}
	dst := s.namePath(name)
	won, err := s.linkClaim(tmp.path, dst)
	if errors.Is(err, fs.ErrNotExist) {
		// The name's folder is new (a trial's first attempt): make it,
		// one mkdir where MkdirAll would stat first.
		if err := mkdirParent(dst); err != nil {
			_ = unix.Unlink(tmp.path)
			return false, fmt.Errorf("claim %s: %w", name, nameConflict(err))
		}
		won, err = s.linkClaim(tmp.path, dst)
	}
	// The temp name goes before the folder's fsync, not after it (it was
	// a defer): the unlink then joins the link's journal transaction
	// rather than dirtying the just-committed inode and folder again.
	// Measured on journaled ext4, 8 processes: unlinkat 42-44 -> 27-31 us
	// of soma-trial's CPU per trial. A claim lost in a crash is as if the
	// crash came before it; the link's fsync below still comes before
	// anyone is told the claim was won.
	_ = unix.Unlink(tmp.path)
	if err != nil {
		return false, fmt.Errorf("claim %s: %w", name, nameConflict(err))
	}
	if won {
		if err := syncDir(filepath.Dir(dst)); err != nil {
			return true, fmt.Errorf("claim %s: %w", name, err)
		}
	}
	return won, nil
}

// mkdirParent makes the folder of path, and its parents if missing.
func mkdirParent(path string) error {
	dir := filepath.Dir(path)
	err := os.Mkdir(dir, 0o777)
	switch {
	case err == nil, errors.Is(err, fs.ErrExist):
		return nil
	case errors.Is(err, fs.ErrNotExist):
		return os.MkdirAll(dir, 0o777)
	}
	return err
}

// linkClaim links tmp to dst and says whether this link made dst.
func (s *Store) linkClaim(tmp, dst string) (bool, error) {
	err := s.link(tmp, dst)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		return false, err // dst's folder is missing: no link was made
	}
	// Whatever link said, a link count of 2 on our unique temp file means
	// our link happened (the reply was lost and the retry saw EEXIST, or
	// the error came after the fact).
	if st, serr := os.Lstat(tmp); serr == nil {
		if sys, ok := st.Sys().(*syscall.Stat_t); ok && sys.Nlink == 2 {
			return true, nil
		}
	}
	if errors.Is(err, fs.ErrExist) {
		return false, nil
	}
	return false, err
}

// nameConflict turns ENOTDIR/EISDIR into an explanation: a name is a leaf.
func nameConflict(err error) error {
	if errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.EISDIR) {
		return fmt.Errorf("a bound name is a prefix of this one, or this one is a prefix of bound names (names are leaves): %w", err)
	}
	return err
}

// Bind points name at d with meta, replacing any earlier binding
// atomically: a reader sees the old record or the new one, never a mix.
// It returns the record as written, with the server's time.
func (s *Store) Bind(ctx context.Context, name string, d Digest, meta Meta) (Bound, error) {
	return s.bind(ctx, name, d, meta, 0o666)
}

// Seal is Bind for a name's last binding: the caller will never bind the
// name again (a trial attempt that ended its trial). Probe then reports
// it Sealed, so a reader that only needs to know that much skips reading
// it. The record is the same; only its file's mode differs (see Probe).
// Bind may still replace it, and the replacement is not sealed.
func (s *Store) Seal(ctx context.Context, name string, d Digest, meta Meta) (Bound, error) {
	return s.bind(ctx, name, d, meta, 0o666|sealBit)
}

func (s *Store) bind(ctx context.Context, name string, d Digest, meta Meta, mode uint32) (Bound, error) {
	if err := s.checkWrite(ctx, name, d); err != nil {
		return Bound{}, fmt.Errorf("bind %s: %w", name, err)
	}
	tmp, err := s.writeTempMode(bytes.NewReader(encodeRecord(d, meta)), nil, mode)
	if err != nil {
		return Bound{}, fmt.Errorf("bind %s: %w", name, err)
	}
	if s.beforeLink != nil {
		if err := s.beforeLink(tmp.path); err != nil {
			return Bound{}, fmt.Errorf("bind %s: %w", name, err)
		}
	}
	dst := s.namePath(name)
	// rename(2) itself: os.Rename stats the target first (to refuse a
	// folder, which rename refuses too: EISDIR, see nameConflict).
	err = renameRaw(tmp.path, dst)
	if errors.Is(err, fs.ErrNotExist) {
		if mkErr := os.MkdirAll(filepath.Dir(dst), 0o777); mkErr != nil {
			os.Remove(tmp.path)
			return Bound{}, fmt.Errorf("bind %s: %w", name, nameConflict(mkErr))
		}
		err = renameRaw(tmp.path, dst)
	}
	if err != nil {
		os.Remove(tmp.path)
		return Bound{}, fmt.Errorf("bind %s: %w", name, nameConflict(err))
	}
	if err := syncDir(filepath.Dir(dst)); err != nil {
		return Bound{}, fmt.Errorf("bind %s: %w", name, err)
	}
	return Bound{Name: name, Digest: d, Meta: meta, Time: tmp.mtime}, nil
}

func (s *Store) checkWrite(ctx context.Context, name string, d Digest) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := ValidateName(name); err != nil {
		return err
	}
	if d.IsZero() {
		return errors.New("fsstore: zero digest")
	}
	return nil
}

// Resolve returns the record bound to name: ErrNotFound if none, a
// *CorruptError if the record cannot be read back.
func (s *Store) Resolve(ctx context.Context, name string) (Bound, error) {
	if err := ctx.Err(); err != nil {
		return Bound{}, err
	}
	if err := ValidateName(name); err != nil {
		return Bound{}, fmt.Errorf("resolve: %w", err)
	}
	return s.readRecord(name, s.namePath(name))
}

// Presence is what Probe learns of a name from one stat.
type Presence int

const (
	Missing Presence = iota // not bound
	Present                 // bound (maybe sealed: the hint is off or lost)
	Sealed                  // bound by Seal: its last binding
)

// sealBit marks a sealed record's file: the owner-execute bit, which no
// other record file has (they are made with mode 0666 less umask). A
// filesystem that shows every file as executable (FAT, CIFS and WSL's
// drvfs mounts of Windows drives, say) cannot tell them apart: Probe
// finds that out once (sealHints) and then never reports Sealed. A umask
// that clears the owner-execute bit only loses the hint.
const sealBit = 0o100

// Probe reports with one stat whether name is bound, and whether by
// Seal. Like Exists it is a look, never a decision: on NFS a name bound
// on another machine moments ago may still look unbound. A Sealed name
// stays bound as sealed until somebody Binds it again.
func (s *Store) Probe(ctx context.Context, name string) (Presence, error) {
	if err := ctx.Err(); err != nil {
		return Missing, err
	}
	if err := ValidateName(name); err != nil {
		return Missing, fmt.Errorf("probe: %w", err)
	}
	var st unix.Stat_t
	err := unix.Lstat(s.namePath(name), &st)
	switch {
	case err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR:
		return Missing, nil
	case err == nil:
		if st.Mode&sealBit != 0 && s.sealHints() {
			return Sealed, nil
		}
		return Present, nil
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESTALE) || errors.Is(err, syscall.ENOTDIR):
		return Missing, nil
	}
	return Missing, fmt.Errorf("probe %s: %w", name, err)
}

// sealHints reports whether this store's filesystem keeps the modes
// soma makes files with, so that sealBit means Seal: it makes a file
// without execute bits in tmp/ once and looks at it. On error, no hints.
func (s *Store) sealHints() bool {
	s.hintsOnce.Do(func() {
		// An empty file, not written nor fsynced: only its mode counts.
		var rnd [6]byte
		_, _ = rand.Read(rnd[:])
		p := filepath.Join(s.tmp, s.prefix+"mode-"+hex.EncodeToString(rnd[:]))
		fd, err := openRaw(p, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o666)
		if err != nil {
			return
		}
		defer os.Remove(p)
		var st unix.Stat_t
		err = fstatRaw(fd, &st)
		unix.Close(fd)
		if err == nil && st.Mode&0o111 == 0 {
			s.hints = true
		}
	})
	return s.hints
}

// Exists reports whether name is bound, with one stat and no read: a
// cheap look before an expensive step (a claim), never a decision. On NFS
// a name bound on another machine moments ago may still look unbound
// (cached lookups); the claim that follows decides.
func (s *Store) Exists(ctx context.Context, name string) (bool, error) {
	p, err := s.Probe(ctx, name)
	return p != Missing, err
}

// readRecord opens, fstats and parses one record. open+fstat rather than
// stat: on NFS open revalidates attributes (close-to-open), stat may not.
func (s *Store) readRecord(name, path string) (Bound, error) {
	fd, err := openRaw(path, unix.O_RDONLY, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESTALE) || errors.Is(err, syscall.ENOTDIR) {
			return Bound{}, fmt.Errorf("resolve %s: %w", name, ErrNotFound)
		}
		return Bound{}, fmt.Errorf("resolve %s: open %s: %w", name, path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := fstatRaw(fd, &st); err != nil {
		return Bound{}, fmt.Errorf("resolve %s: stat %s: %w", name, path, err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return Bound{}, fmt.Errorf("resolve %s: %w (it is a prefix of other names)", name, ErrNotFound)
	}
	var buf [1024]byte
	b := buf[:0]
	if st.Size >= int64(len(buf)) {
		b = make([]byte, 0, st.Size+1)
	}
	b, err = readAllRaw(fd, b)
	if err != nil {
		return Bound{}, fmt.Errorf("resolve %s: read %s: %w", name, path, err)
	}
	d, meta, err := decodeRecord(b)
	if err != nil {
		return Bound{}, &CorruptError{Name: name, Path: path, Err: err}
	}
	return Bound{Name: name, Digest: d, Meta: meta, Time: mtime(&st)}, nil
}

// Unbind removes name's binding. It returns ErrNotFound if name is not
// bound. Unbinding is how a lease is released; a name that was claimed can
// then be claimed again.
func (s *Store) Unbind(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := ValidateName(name); err != nil {
		return fmt.Errorf("unbind: %w", err)
	}
	p := s.namePath(name)
	if err := os.Remove(p); err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESTALE) {
			return fmt.Errorf("unbind %s: %w", name, ErrNotFound)
		}
		return fmt.Errorf("unbind %s: %w", name, err)
	}
	return syncDir(filepath.Dir(p))
}

// Touch refreshes name's time to the file server's now, without rewriting
// it (utimensat with UTIME_NOW, which NFS sends as "set to server time").
// It returns the new time. It is the cheap half of a heartbeat; layers that
// need progress visible in content (GPFS reports remote mtimes late) rebind
// with a counter instead.
func (s *Store) Touch(ctx context.Context, name string) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	if err := ValidateName(name); err != nil {
		return time.Time{}, fmt.Errorf("touch: %w", err)
	}
	p := s.namePath(name)
	now := []unix.Timespec{{Nsec: unix.UTIME_NOW}, {Nsec: unix.UTIME_NOW}}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, now, 0); err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ESTALE) {
			return time.Time{}, fmt.Errorf("touch %s: %w", name, ErrNotFound)
		}
		return time.Time{}, fmt.Errorf("touch %s: %w", name, err)
	}
	t, err := fstatTime(p)
	if err != nil {
		return time.Time{}, fmt.Errorf("touch %s: %w", name, err)
	}
	return t, nil
}

// Now returns the file server's current time: it writes a probe file in
// tmp/ and reads back the mtime the server stamped on it.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	tmp, err := s.writeTemp(bytes.NewReader(nil), nil)
	if err != nil {
		return time.Time{}, fmt.Errorf("server time: %w", err)
	}
	os.Remove(tmp.path)
	return tmp.mtime, nil
}

func fstatTime(p string) (time.Time, error) {
	f, err := os.Open(p)
	if err != nil {
		return time.Time{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return time.Time{}, err
	}
	return st.ModTime(), nil
}

// syncDir fsyncs a directory so a link, rename or unlink in it is durable.
func syncDir(dir string) error {
	fd, err := openRaw(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return fmt.Errorf("fsstore: sync dir %s: %w", dir, err)
	}
	err = fsync(fd)
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	// Some filesystems refuse fsync on directories; the write is still
	// atomic, only its durability across a power cut is up to them.
	if err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOTSUP) {
		return fmt.Errorf("fsstore: sync dir %s: %w", dir, err)
	}
	return nil
}
