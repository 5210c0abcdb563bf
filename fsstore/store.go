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
	"path"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
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
	// tmpSub is this Store's own temp folder under tmp/,
	// <host>.<pid>.<random>: see tmpDir.
	tmpSub string
	seq    atomic.Uint64
	fds    beneath // the root's and tmp/'s descriptors (beneath.go)

	hintsOnce sync.Once // sealHints
	hints     bool

	// Fault-injection seams for this package's tests.
	link       func(oldDir int, oldName string, newDir int, newName string) error
	beforeLink func(tmp string) error
}

// A Store holds two folders open for its life (the root and tmp/; see
// beneath.go): every path below the root is resolved from them. It also
// keeps open the name folders its last writes used, at most 64
// (dircache.go).

func linkat(oldDir int, oldName string, newDir int, newName string) error {
	for {
		err := unix.Linkat(oldDir, oldName, newDir, newName, 0)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
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
		link:     linkat,
	}
	s.fds.tmpFD = -1
	s.fds.clockFD = -1
	s.fds.blobDirs.max = 256 // every blobs/sha256/<2 hex>
	if s.parallel <= 0 {
		s.parallel = max(8, 4*runtime.GOMAXPROCS(0))
	}
	host, _ := os.Hostname()
	s.prefix = SanitizeSegment(host) + "." + strconv.Itoa(os.Getpid()) + "."
	var sub [4]byte
	_, _ = rand.Read(sub[:])
	s.tmpSub = s.prefix + hex.EncodeToString(sub[:])

	// The root is opened following a link AT the root (--root
	// ~/scratch/x where scratch is a link); links inside it never are.
	rootFD, err := openRaw(abs, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if errors.Is(err, fs.ErrNotExist) && opts.Create {
		if err := os.MkdirAll(abs, 0o777); err != nil {
			return nil, fmt.Errorf("fsstore: create %s: %w", abs, err)
		}
		rootFD, err = openRaw(abs, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("fsstore: open %s: %w (create it with 'soma init', or check the path)", abs, ErrNotFound)
	case errors.Is(err, syscall.ENOTDIR):
		// (It said only "not a directory"; issue 16.)
		return nil, fmt.Errorf("fsstore: open %s: %w: the root, or a folder above it, is a file (give a folder)", abs, err)
	case err != nil:
		return nil, fmt.Errorf("fsstore: open %s: %w", abs, err)
	}
	s.fds.root.fd, s.fds.root.path = rootFD, abs
	ok := false
	defer func() {
		if !ok {
			s.closeFDs()
		}
	}()
	b, err := s.readMarker()
	switch {
	case err == nil:
		// A refused marker closes what was opened: it used to return the
		// store with the error, and a caller that dropped it on error
		// leaked its descriptors.
		if err := s.checkMarker(b); err != nil {
			return nil, err
		}
		ok = true
		return s, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("fsstore: open %s: %w", abs, err)
	}
	// No marker: a new store, or a folder that is not one.
	entries, err := os.ReadDir(abs)
	switch {
	case err != nil:
		return nil, fmt.Errorf("fsstore: open %s: %w", abs, err)
	case len(entries) > 0 && !onlyStoreFolders(entries):
		// The marker may have been linked between our read of it and the
		// listing, by a process that has since made its own folders here
		// (soma-trial's logs/): read it again before refusing. (Bug: 8
		// soma-trials starting together on a new folder; one in three
		// runs, one of them refused the store as "not a store".)
		if b, err := s.readMarker(); err == nil {
			if err := s.checkMarker(b); err != nil {
				return nil, err
			}
			ok = true
			return s, nil
		}
		return nil, notStore(abs, entries)
	case !opts.Create:
		return nil, fmt.Errorf("%w: %s has no %s (create a store there with 'soma init')", ErrNotStore, abs, markerName)
	}
	if err := s.create(); err != nil {
		return nil, err
	}
	ok = true
	return s, nil
}

// closeFDs closes the descriptors of a Store that Open does not return.
func (s *Store) closeFDs() {
	unix.Close(s.fds.root.fd)
	if s.fds.tmpFD >= 0 {
		unix.Close(s.fds.tmpFD)
	}
	if s.fds.clockFD >= 0 {
		unix.Close(s.fds.clockFD)
	}
	s.fds.dirs.closeAll()
	s.fds.blobDirs.closeAll()
	s.fds.up.closeAll()
}

// readMarker reads soma.json, not through a link.
func (s *Store) readMarker() ([]byte, error) {
	fd, err := s.openBeneath(markerName, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if isForeign(err) {
		return nil, s.foreign("", Digest{}, markerName)
	}
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return readAllRaw(fd, make([]byte, 0, 128))
}

// onlyStoreFolders reports whether a folder without a marker holds only
// what create makes before it links the marker: another process is
// creating the store right now. (Bug found by 4 soma-trial processes
// starting together: all but one refused the half-made store as "not a
// store".)
// notStore explains a folder that is not empty and has no soma.json,
// and how to recover: a store that lost its soma.json (its names/ and
// blobs/ are there) gets it back with the exact line to write; any other
// folder is not a store. (It said only "point soma at an empty or new
// folder"; issue 16.)
func notStore(abs string, entries []fs.DirEntry) error {
	has := map[string]bool{}
	for _, e := range entries {
		has[e.Name()] = e.IsDir()
	}
	if has["names"] && has["blobs"] {
		b, _ := json.Marshal(marker{Format: "soma-store", Version: FormatVersion})
		return fmt.Errorf("%w: %s has names/ and blobs/ but no %s: if it is a soma store that lost its %s, write it back (echo '%s' > %s), else point soma at an empty or new folder",
			ErrNotStore, abs, markerName, markerName, b, filepath.Join(abs, markerName))
	}
	return fmt.Errorf("%w: %s is not empty and has no %s, so it is not a soma store: point soma at an empty or new folder (e.g. %s)",
		ErrNotStore, abs, markerName, filepath.Join(abs, "soma"))
}

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
	// (It said "not soma's (<nil>)" for JSON with another format: the
	// parse error stood where the reason should; issue 16.)
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("%w: %s has a %s that is not soma's (%w)", ErrNotStore, s.root, markerName, err)
	}
	if m.Format != "soma-store" {
		return fmt.Errorf("%w: %s has a %s that is not soma's: its format is %q, not \"soma-store\"", ErrNotStore, s.root, markerName, m.Format)
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
	for _, rel := range []string{"tmp", "names", "blobs/" + Algo} {
		fd, err := s.openDir(rel, true)
		if isForeign(err) {
			return fmt.Errorf("fsstore: create %s: %w", s.root, s.foreign("", Digest{}, rel))
		}
		if err != nil {
			return fmt.Errorf("fsstore: create %s: %s: %w", s.root, rel, err)
		}
		unix.Close(fd)
	}
	b, _ := json.Marshal(marker{Format: "soma-store", Version: FormatVersion})
	b = append(b, '\n')
	tmp, err := s.writeTemp(bytes.NewReader(b), nil)
	if err != nil {
		return err
	}
	defer tmp.remove()
	// Two processes creating the same store at once: link makes exactly one
	// marker; the loser finds it equal to its own.
	err = linkat(tmp.dir, tmp.name, s.fds.root.fd, markerName)
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("fsstore: create %s: %w", s.root, err)
	}
	if err := syncFD(s.fds.root.fd, s.root); err != nil {
		return err
	}
	got, err := s.readMarker()
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

// tempFile is a written temp file: name in the folder dir (tmp/'s
// descriptor), path for messages.
type tempFile struct {
	dir   int
	name  string
	path  string
	mtime time.Time
}

// remove unlinks the temp file (its last link, or its temp name once
// published).
func (t tempFile) remove() { _ = unix.Unlinkat(t.dir, t.name, 0) }

// writeTemp writes r to a new unique file in tmp/, fsyncs and closes it,
// checking the errors of both. If h is non-nil every byte also goes to it.
// Its mtime is not read (tempFile.mtime is zero): see writeTempMode.
func (s *Store) writeTemp(r io.Reader, h io.Writer) (tempFile, error) {
	return s.writeTempMode(r, h, 0o666, false)
}

// writeTempMode is writeTemp with the file made with mode (less umask),
// and with timed, its mtime as the file server stamped it read back
// (fstat after the fsync) into tempFile.mtime: a round trip (GETATTR on
// NFS), so only for the writes that report a time (Bind, Now). A claim
// did it too and never used it (issue 18: one GETATTR per trial).
func (s *Store) writeTempMode(r io.Reader, h io.Writer, mode uint32, timed bool) (tempFile, error) {
	return s.writeTempOpts(r, h, mode, timed, true)
}

// writeTempOpts is writeTempMode, with the fsync only if durable.
func (s *Store) writeTempOpts(r io.Reader, h io.Writer, mode uint32, timed, durable bool) (tempFile, error) {
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	name := s.prefix + strconv.FormatUint(s.seq.Add(1), 10) + "-" + hex.EncodeToString(rnd[:])
	path := filepath.Join(s.tmpPath(), name)
	dir, err := s.tmpDir(-1)
	if err != nil {
		return tempFile{}, err
	}
	const flags = unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := openatRetry(dir, name, flags, mode)
	if goneDir(err) {
		// tmp/ removed by hand: make it again rather than fail every write.
		if dir, err = s.tmpDir(dir); err != nil {
			return tempFile{}, err
		}
		fd, err = openatRetry(dir, name, flags, mode)
	}
	if err != nil {
		return tempFile{}, notWritableTemp(path, err)
	}
	t := tempFile{dir: dir, name: name, path: path}
	ok := false
	defer func() {
		if !ok {
			unix.Close(fd)
			t.remove()
		}
	}()
	w := io.Writer(fdWriter(fd))
	if h != nil {
		w = io.MultiWriter(w, h)
	}
	if _, err := io.Copy(w, r); err != nil {
		return tempFile{}, fmt.Errorf("fsstore: write %s: %w", path, err)
	}
	if !durable {
		// Nothing to wait for (ClaimEphemeral).
	} else if err := fsync(fd); err != nil {
		return tempFile{}, fmt.Errorf("fsstore: fsync %s: %w", path, err)
	}
	if timed {
		// fstat after fsync: the server's post-write attributes.
		var st unix.Stat_t
		if err := fstatRaw(fd, &st); err != nil {
			return tempFile{}, fmt.Errorf("fsstore: stat %s: %w", path, err)
		}
		t.mtime = mtime(&st)
	}
	ok = true
	if err := unix.Close(fd); err != nil {
		t.remove()
		return tempFile{}, fmt.Errorf("fsstore: close %s: %w", path, err)
	}
	return t, nil
}

func (s *Store) namePath(name string) string {
	return filepath.Join(s.names, filepath.FromSlash(name))
}

// nameDir splits name into its folder, relative to the root, and its
// leaf: "a/b/c" is "names/a/b" and "c".
func nameDir(name string) (dir, leaf string) {
	i := strings.LastIndexByte(name, '/')
	if i < 0 {
		return "names", name
	}
	return "names/" + name[:i], name[i+1:]
}

// writeErr wraps the error of opening (or making) rel for a write of
// name: a link on the way is foreign, a file where a folder belongs is
// a name conflict.
func (s *Store) writeErr(op, name, rel string, err error) error {
	if isForeign(err) {
		return fmt.Errorf("%s %s: %w", op, name, s.foreign(name, Digest{}, rel))
	}
	return fmt.Errorf("%s %s: %s: %w", op, name, filepath.Join(s.root, filepath.FromSlash(rel)), nameConflict(err))
}

// Claim binds name to d with meta only if name is not bound, and reports
// whether this call bound it. Exactly one of any number of concurrent
// claimers, on any number of machines sharing the folder, gets true.
//
// It is link(2) of a unique temp file. If link returns an error other than
// EEXIST, the temp file's link count decides: NFS may lose the reply of a
// link that succeeded and answer a retransmission with EEXIST (open(2),
// notes on O_EXCL).
//
// A symbolic link (or special file) at name, or in place of any folder
// above it, is refused with a *CorruptError wrapping ErrForeign that
// names it; nothing is written through it.
func (s *Store) Claim(ctx context.Context, name string, d Digest, meta Meta) (bool, error) {
	return s.claim(ctx, name, d, meta, false)
}

// ClaimNew is Claim for a name whose folder is most likely new (a trial's
// first attempt): it makes the folder first (mkdirat in its parent, then
// opens it) rather than opening it and making it when that fails, and
// keeps the parent open for the next (dirCache). Two file-server round
// trips for a new folder instead of four (three the first time); one
// more than Claim's if it exists after all. Otherwise it is Claim,
// exactly.
func (s *Store) ClaimNew(ctx context.Context, name string, d Digest, meta Meta) (bool, error) {
	return s.claim(ctx, name, d, meta, true)
}

// ClaimEphemeral is Claim for a name that matters only while the
// processes using it live: a placement lease and its end markers. The
// link(2) that decides who wins is the same; what it skips is making the
// claim durable (the temp file's fsync and the folder's), which on a
// local disk is a journal commit each, most of a placement's cost (issue
// 15: 3.5 fsyncs a placed plan, ~0.2x the plans/s of sending them
// straight). Why a lease needs no durability: a crash that loses the
// link or the record's bytes is a crash of the machine whose disk it is,
// which killed every holder and worker on it (a local folder), or of a
// file server, whose NFS replies to a link or an unlink only once it is
// on stable storage (the record's bytes may be lost: the name then reads
// as corrupt, which a lease's reclaimer ends like a stale lease). Never
// for what must outlive a crash: a trial's claim, a result.
func (s *Store) ClaimEphemeral(ctx context.Context, name string, d Digest, meta Meta) (bool, error) {
	return s.claimOpts(ctx, name, d, meta, false, false)
}

// makeDir makes the folder rel below the root (its parents too, if
// missing) and returns it opened, following no link: mkdirat in the
// parent, which the cache keeps open (dirCache), then an open of rel
// from it. A folder already there is fine.
func (s *Store) makeDir(rel string) (int, error) {
	parent, base := path.Split(rel)
	parent = strings.TrimSuffix(parent, "/")
	if parent == "" {
		return s.fds.root.mkdirAll(rel)
	}
	pfd, cached := s.fds.dirs.take(parent)
	var err error
	if !cached {
		if pfd, err = s.openDir(parent, true); err != nil {
			return -1, err
		}
	}
	err = mkdirat(pfd, base)
	if cached && goneDir(err) {
		// The cached parent was removed: open the one at the path now.
		unix.Close(pfd)
		if pfd, err = s.openDir(parent, true); err != nil {
			return -1, err
		}
		err = mkdirat(pfd, base)
	}
	if err != nil {
		unix.Close(pfd)
		return -1, err
	}
	fd, err := openComponents(pfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	s.fds.dirs.put(parent, pfd)
	return fd, err
}

// mkdirat makes name in the folder dirFD; one already there is fine.
func mkdirat(dirFD int, name string) error {
	for {
		err := unix.Mkdirat(dirFD, name, 0o777)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EEXIST):
			return nil
		}
		return err
	}
}

func (s *Store) claim(ctx context.Context, name string, d Digest, meta Meta, newDir bool) (bool, error) {
	return s.claimOpts(ctx, name, d, meta, newDir, true)
}

// claimOpts is Claim: in a folder most likely new (newDir), and made
// durable (fsyncs) or not (ClaimEphemeral).
func (s *Store) claimOpts(ctx context.Context, name string, d Digest, meta Meta, newDir, durable bool) (bool, error) {
	if err := s.checkWrite(ctx, name, d); err != nil {
		return false, fmt.Errorf("claim %s: %w", name, err)
	}
	tmp, err := s.writeTempOpts(bytes.NewReader(encodeRecord(d, meta)), nil, 0o666, false, durable)
	if err != nil {
		return false, fmt.Errorf("claim %s: %w", name, err)
	}
	if s.beforeLink != nil {
		if err := s.beforeLink(tmp.path); err != nil {
			return false, fmt.Errorf("claim %s: %w", name, err)
		}
	}
	// The name's folder first (made if new: a trial's first attempt),
	// then link into it, then fsync it: see beneath.go.
	dir, leaf := nameDir(name)
	var pfd int
	cached := false
	switch {
	case newDir:
		pfd, err = s.makeDir(dir)
	case !durable:
		// A lease: its worker's folder as the last lease claimed or
		// released there left it (dirCache), else opened by its path. A
		// placer claims in the same few folders again and again: the
		// open and close were 2 of a placement's 18 system calls (issue
		// 15).
		if pfd, cached = s.fds.dirs.take(dir); !cached {
			pfd, err = s.openDir(dir, true)
		}
	default:
		pfd, err = s.openDir(dir, true)
	}
	if err != nil {
		tmp.remove()
		return false, s.writeErr("claim", name, dir, err)
	}
	defer func() {
		if pfd >= 0 {
			unix.Close(pfd)
		}
	}()
	won, err := s.linkClaim(tmp, pfd, leaf)
	if cached && err != nil && goneDir(err) {
		// The cached folder was removed (a worker's leases, by hand or
		// from another machine; ESTALE on NFS): no link was made in it.
		// Claim in the folder at the path now, if there is one.
		unix.Close(pfd)
		if pfd, err = s.openDir(dir, true); err != nil {
			pfd = -1
			tmp.remove()
			return false, s.writeErr("claim", name, dir, err)
		}
		won, err = s.linkClaim(tmp, pfd, leaf)
	}
	// The temp name goes before the folder's fsync, not after it (it was
	// a defer): the unlink then joins the link's journal transaction
	// rather than dirtying the just-committed inode and folder again.
	// Measured on journaled ext4, 8 processes: unlinkat 42-44 -> 27-31 us
	// of soma-trial's CPU per trial. A claim lost in a crash is as if the
	// crash came before it; the link's fsync below still comes before
	// anyone is told the claim was won.
	tmp.remove()
	if err != nil {
		return false, fmt.Errorf("claim %s: %w", name, nameConflict(err))
	}
	if !won {
		// Taken, or a link or special file sits at the name: say which
		// (a lost claim only: one more stat on a rare path).
		var st unix.Stat_t
		if unix.Fstatat(pfd, leaf, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && foreignMode(st.Mode) {
			return false, fmt.Errorf("claim %s: %w", name, &CorruptError{Name: name, Path: s.namePath(name), Err: ErrForeign})
		}
		return false, nil
	}
	if !durable {
		// As ClaimEphemeral says. The folder is kept for the next lease
		// claimed or released in it (dirCache keeps the 64 used last).
		s.fds.dirs.put(dir, pfd)
		pfd = -1
		return true, nil
	}
	if err := syncFD(pfd, filepath.Dir(s.namePath(name))); err != nil {
		return true, fmt.Errorf("claim %s: %w", name, err)
	}
	// The claimer binds the name next (a heartbeat, a result): keep its
	// folder open for that (dirCache).
	s.fds.dirs.put(dir, pfd)
	pfd = -1
	return true, nil
}

// foreignMode reports whether a file of mode is one soma never makes in
// a store: not a regular file and not a folder.
func foreignMode(mode uint32) bool {
	t := mode & unix.S_IFMT
	return t != unix.S_IFREG && t != unix.S_IFDIR
}

// linkClaim links tmp to leaf in the folder pfd and says whether this
// link made it.
func (s *Store) linkClaim(tmp tempFile, pfd int, leaf string) (bool, error) {
	err := s.link(tmp.dir, tmp.name, pfd, leaf)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		return false, err // the folder was removed under us: no link was made
	}
	var st unix.Stat_t
	var nlink uint64
	if unix.Fstatat(tmp.dir, tmp.name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
		nlink = uint64(st.Nlink)
	}
	return settleLink(err, nlink)
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
	tmp, err := s.writeTempMode(bytes.NewReader(encodeRecord(d, meta)), nil, mode, true)
	if err != nil {
		return Bound{}, fmt.Errorf("bind %s: %w", name, err)
	}
	if s.beforeLink != nil {
		if err := s.beforeLink(tmp.path); err != nil {
			return Bound{}, fmt.Errorf("bind %s: %w", name, err)
		}
	}
	dir, leaf := nameDir(name)
	// The folder as the last write to it left it open (dirCache), else
	// opened (made if need be) by its path.
	pfd, cached := s.fds.dirs.take(dir)
	if !cached {
		if pfd, err = s.openDir(dir, true); err != nil {
			tmp.remove()
			return Bound{}, s.writeErr("bind", name, dir, err)
		}
	}
	// renameat(2) never follows its target: a link at the name itself is
	// replaced by the record, and what it pointed at is untouched. (To
	// refuse it instead would cost a stat of every record on every bind,
	// a round trip on NFS, for a name that is soma's own: the running
	// attempt's, claimed by this process.)
	err = renameat(tmp.dir, tmp.name, pfd, leaf)
	if cached && goneDir(err) {
		// The cached folder was removed: open the one at the path now.
		unix.Close(pfd)
		if pfd, err = s.openDir(dir, true); err != nil {
			tmp.remove()
			return Bound{}, s.writeErr("bind", name, dir, err)
		}
		err = renameat(tmp.dir, tmp.name, pfd, leaf)
	}
	if err != nil {
		unix.Close(pfd)
		tmp.remove()
		return Bound{}, fmt.Errorf("bind %s: %w", name, nameConflict(err))
	}
	if err := syncFD(pfd, filepath.Dir(s.namePath(name))); err != nil {
		unix.Close(pfd)
		return Bound{}, fmt.Errorf("bind %s: %w", name, err)
	}
	// Kept open after a Seal too: the trial loop looks next for a retry
	// of the attempt it sealed, in the same folder (openName), which
	// then needs no proof that the folder is still there (putWritten).
	s.fds.dirs.putWritten(dir, pfd)
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
	return s.readRecord(name)
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
// Seal. A link at the name is Present (reading it reports it foreign); a
// link in a folder above it is an error wrapping ErrForeign. Like Exists it is a look, never a decision: on NFS a name bound
// on another machine moments ago may still look unbound. A Sealed name
// stays bound as sealed until somebody Binds it again.
func (s *Store) Probe(ctx context.Context, name string) (Presence, error) {
	if err := ctx.Err(); err != nil {
		return Missing, err
	}
	if err := ValidateName(name); err != nil {
		return Missing, fmt.Errorf("probe: %w", err)
	}
	for try := 1; ; try++ {
		p, err := s.probe(name)
		if errors.Is(err, errReplaced) && try < replacedTries {
			continue
		}
		if errors.Is(err, errStaleOpen) {
			return Missing, nil // stale at every try: as a removed folder reads
		}
		return p, err
	}
}

// errReplaced means the file a read opened was removed or replaced on the
// server before the read was done (ESTALE on NFS, where a file handle
// outlives its file; ENOENT on FUSE loopbacks such as internal/tools/slowfs):
// the name was rebound meanwhile, and a new open finds what is bound now.
// Bug (issue 18, found on internal/tools/slowfs at P=4 and P=8): the error of
// the fstat reached the trial loop ("take trial 36: probe
// study/s/trial/36/0: no such file or directory") and soma-trial exited.
// A local disk never shows it: an open file stays readable there.
var errReplaced = errors.New("fsstore: replaced while read")

// replacedTries bounds the reads of a name that keeps being replaced
// under them: each try is a few round trips, and a name rebound again
// within every one of them is a heartbeat storm, not a read.
const replacedTries = 8

// errStaleOpen is errReplaced for an open by name that answered ESTALE:
// the file the lookup found was replaced (or removed) before the open
// reached the server. Bug (issue 18, TestReadWhileRebound under load):
// readRecord and Probe took ESTALE from the open itself for a name that is
// not bound, so a name rebound at that moment by another process read as
// missing ("resolve a/0: fsstore: not found" for a record that always
// existed) — the kernel retries such an open once (LOOKUP_REVAL), and a
// rebind can land within the retry too. Now the open is tried again, up
// to replacedTries; a name stale at every try (a folder on its path
// removed on another machine) still reads as not bound.
var errStaleOpen = fmt.Errorf("%w (stale at open)", errReplaced)

// staleOpen wraps err, the error of an open by name, in errStaleOpen if
// it is ESTALE.
func staleOpen(err error) error {
	if errors.Is(err, syscall.ESTALE) {
		return fmt.Errorf("%w: %w", errStaleOpen, err)
	}
	return err
}

// replaced wraps err in errReplaced if it says the open file is gone.
func replaced(err error) error {
	if errors.Is(err, syscall.ESTALE) || errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("%w: %w", errReplaced, err)
	}
	return err
}

// probe is one try of Probe.
func (s *Store) probe(name string) (Presence, error) {
	// An O_PATH open and fstat rather than lstat(2), which would follow a
	// link in a folder above the name: a sealed-looking file behind a
	// link would count as an ended trial nobody reads. On NFS an O_PATH
	// open sends nothing to the server (no OPEN), and the mode comes from
	// the attributes the lookup of the leaf brought (modeCached), where an
	// fstat would send a GETATTR.
	fd, err := s.openName(name, unix.O_PATH, true)
	err = staleOpen(err)
	switch {
	case errors.Is(err, errStaleOpen):
		return Missing, err // Probe tries again
	case isForeign(err):
		ce := s.foreign(name, Digest{}, "names/"+name)
		if ce.Path == s.namePath(name) {
			return Present, nil // the name itself: reading it reports it
		}
		// A linked folder above the name: every name below it would look
		// bound (a reader probing attempt after attempt never ends).
		return Missing, fmt.Errorf("probe %s: %w", name, ce)
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESTALE) || errors.Is(err, syscall.ENOTDIR):
		return Missing, nil
	case err != nil:
		return Missing, fmt.Errorf("probe %s: %w", name, err)
	}
	var st unix.Stat_t
	err = modeCached(fd, &st)
	unix.Close(fd)
	switch {
	case err != nil:
		return Missing, fmt.Errorf("probe %s: %w", name, replaced(err))
	case st.Mode&unix.S_IFMT == unix.S_IFDIR:
		return Missing, nil
	case st.Mode&unix.S_IFMT == unix.S_IFREG && st.Mode&sealBit != 0 && s.sealHints():
		return Sealed, nil
	}
	return Present, nil
}

// sealHints reports whether this store's filesystem keeps the modes
// soma makes files with, so that sealBit means Seal: it makes a file
// without execute bits in tmp/ once and looks at it. On error, no hints.
func (s *Store) sealHints() bool {
	s.hintsOnce.Do(func() {
		// An empty file, not written nor fsynced: only its mode counts.
		var rnd [6]byte
		_, _ = rand.Read(rnd[:])
		name := s.prefix + "mode-" + hex.EncodeToString(rnd[:])
		dir, err := s.tmpDir(-1)
		if err != nil {
			return
		}
		fd, err := openatRetry(dir, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o666)
		if err != nil {
			return
		}
		defer unix.Unlinkat(dir, name, 0)
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
// A link at the name or above it is never followed: the record reads as
// a *CorruptError wrapping ErrForeign, with the link's path. O_NONBLOCK:
// a FIFO planted at a name must not hang the reader (it changes nothing
// for a regular file).
func (s *Store) readRecord(name string) (Bound, error) {
	for try := 1; ; try++ {
		b, err := s.readRecordOnce(name)
		if errors.Is(err, errReplaced) && try < replacedTries {
			continue
		}
		if errors.Is(err, errStaleOpen) {
			// Stale at every try: as a removed folder reads.
			return Bound{}, fmt.Errorf("resolve %s: %w", name, ErrNotFound)
		}
		return b, err
	}
}

// readRecordOnce is one try of readRecord.
func (s *Store) readRecordOnce(name string) (Bound, error) {
	path := s.namePath(name)
	fd, err := s.openName(name, unix.O_RDONLY|unix.O_NONBLOCK, false)
	if err != nil {
		if isForeign(err) {
			return Bound{}, s.foreign(name, Digest{}, "names/"+name)
		}
		if errors.Is(err, syscall.ESTALE) {
			return Bound{}, staleOpen(err) // readRecord tries again
		}
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return Bound{}, fmt.Errorf("resolve %s: %w", name, ErrNotFound)
		}
		return Bound{}, fmt.Errorf("resolve %s: open %s: %w", name, path, err)
	}
	defer unix.Close(fd)
	b, err := readOpenRecord(fd, "resolve", name, path)
	if err != nil {
		return Bound{}, err
	}
	return b, nil
}

// readOpenRecord reads and decodes the record open at fd, which is name's
// file at path: one fstat, then the reads readSized makes for the size
// that fstat gave (none past it), and nothing else (the cost tests and
// slowfs's TestOpsPinned count these calls). It is the part that
// readRecordOnce and touchResolveOnce share after their open; op
// ("resolve", "touch") begins its errors with op and name:
//   - ErrNotFound, for a folder at the name (a prefix of other names);
//   - errReplaced (wrapping the cause) if the fstat or a read says the
//     file is gone: the name was rebound since the open, and the caller
//     may open it again;
//   - any other error of the fstat or a read, wrapped.
//
// Two come without the op and name: a *CorruptError wrapping ErrForeign
// for a file that is neither regular nor a folder (nothing is read); and
// a *CorruptError for bytes that do not decode, returned with the
// Bound's Name and Time set (the time was read all the same).
func readOpenRecord(fd int, op, name, path string) (Bound, error) {
	var st unix.Stat_t
	if err := fstatRaw(fd, &st); err != nil {
		return Bound{}, fmt.Errorf("%s %s: stat %s: %w", op, name, path, replaced(err))
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return Bound{}, fmt.Errorf("%s %s: %w (it is a prefix of other names)", op, name, ErrNotFound)
	}
	if foreignMode(st.Mode) {
		return Bound{}, &CorruptError{Name: name, Path: path, Err: ErrForeign}
	}
	var buf [1024]byte
	b := buf[:0]
	if st.Size >= int64(len(buf)) {
		b = make([]byte, 0, st.Size+1)
	}
	b, err := readSized(fd, b, st.Size)
	if err != nil {
		return Bound{}, fmt.Errorf("%s %s: read %s: %w", op, name, path, replaced(err))
	}
	t := mtime(&st)
	d, meta, err := decodeRecord(b)
	if err != nil {
		return Bound{Name: name, Time: t}, &CorruptError{Name: name, Path: path, Err: err}
	}
	return Bound{Name: name, Digest: d, Meta: meta, Time: t}, nil
}

// Unbind removes name's binding. It returns ErrNotFound if name is not
// bound. Unbinding is how a lease is released; a name that was claimed can
// then be claimed again. A link or special file at the name, or a link
// above it, is refused (ErrForeign), not removed.
func (s *Store) Unbind(ctx context.Context, name string) error {
	return s.unbind(ctx, name, true)
}

// UnbindEphemeral is Unbind for a name claimed by ClaimEphemeral: the
// unlink, without the folder's fsync (see ClaimEphemeral for why).
func (s *Store) UnbindEphemeral(ctx context.Context, name string) error {
	return s.unbind(ctx, name, false)
}

func (s *Store) unbind(ctx context.Context, name string, durable bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := ValidateName(name); err != nil {
		return fmt.Errorf("unbind: %w", err)
	}
	dir, leaf := nameDir(name)
	// A lease's folder as a claim or release there left it (dirCache; see
	// claimOpts), else opened by its path.
	pfd, cached := -1, false
	if !durable {
		pfd, cached = s.fds.dirs.take(dir)
	}
	var st unix.Stat_t
	var err error
	if cached {
		err = unix.Fstatat(pfd, leaf, &st, unix.AT_SYMLINK_NOFOLLOW)
		if goneDir(err) {
			// Not there, or the cached folder was removed: look at the
			// folder at the path (a name there may be bound).
			unix.Close(pfd)
			cached = false
		}
	}
	if !cached {
		pfd, err = s.openDir(dir, false)
		switch {
		case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESTALE) || errors.Is(err, syscall.ENOTDIR):
			return fmt.Errorf("unbind %s: %w", name, ErrNotFound)
		case err != nil:
			return s.writeErr("unbind", name, dir, err)
		}
		err = unix.Fstatat(pfd, leaf, &st, unix.AT_SYMLINK_NOFOLLOW)
	}
	defer func() {
		if pfd < 0 {
			return
		}
		if durable {
			unix.Close(pfd)
			return
		}
		s.fds.dirs.put(dir, pfd)
	}()
	if err == nil && foreignMode(st.Mode) {
		return fmt.Errorf("unbind %s: %w", name, &CorruptError{Name: name, Path: s.namePath(name), Err: ErrForeign})
	}
	if err == nil {
		err = unix.Unlinkat(pfd, leaf, 0)
	}
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESTALE) {
			return fmt.Errorf("unbind %s: %w", name, ErrNotFound)
		}
		return fmt.Errorf("unbind %s: %w", name, nameConflict(err))
	}
	if !durable {
		return nil
	}
	return syncFD(pfd, filepath.Dir(s.namePath(name)))
}

// Touch refreshes name's time to the file server's now, without rewriting
// it (futimens with UTIME_NOW, which NFS sends as "set to server time").
// It returns the new time. It is the cheap half of a heartbeat; layers that
// need progress visible in content (GPFS reports remote mtimes late) rebind
// with a counter instead. A link at the name or above it is refused
// (ErrForeign): its target's time is never set.
func (s *Store) Touch(ctx context.Context, name string) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	if err := ValidateName(name); err != nil {
		return time.Time{}, fmt.Errorf("touch: %w", err)
	}
	// Open (not through links), set the times on the descriptor, fstat it:
	// as many calls as utimensat by path and then open+fstat for the time
	// (which it was).
	fd, err := s.openBeneath("names/"+name, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	switch {
	case isForeign(err):
		return time.Time{}, fmt.Errorf("touch %s: %w", name, s.foreign(name, Digest{}, "names/"+name))
	case errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ESTALE) || errors.Is(err, syscall.ENOTDIR):
		return time.Time{}, fmt.Errorf("touch %s: %w", name, ErrNotFound)
	case err != nil:
		return time.Time{}, fmt.Errorf("touch %s: %w", name, err)
	}
	defer unix.Close(fd)
	// The times first, the kind after (one fstat, not two): a folder or
	// special file found there had its own time set, which follows
	// nothing and writes nothing else.
	if err := futimesNow(fd); err != nil {
		return time.Time{}, fmt.Errorf("touch %s: %w", name, err)
	}
	var st unix.Stat_t
	if err := fstatRaw(fd, &st); err != nil {
		return time.Time{}, fmt.Errorf("touch %s: %w", name, err)
	}
	switch {
	case st.Mode&unix.S_IFMT == unix.S_IFDIR:
		return time.Time{}, fmt.Errorf("touch %s: %w (it is a prefix of other names)", name, ErrNotFound)
	case foreignMode(st.Mode):
		return time.Time{}, fmt.Errorf("touch %s: %w", name, &CorruptError{Name: name, Path: s.namePath(name), Err: ErrForeign})
	}
	return mtime(&st), nil
}

// Now returns the file server's current time: it sets the times of this
// Store's clock file to now (futimens with UTIME_NOW, which NFS sends as
// "set to server time", as Touch does) and reads back the mtime the
// server stamped (fstat). The clock file, <host>.<pid>.clock-<random> in
// the Store's temp folder (tmpDir),
// is made on the first call and kept open for the Store's life, so a call
// costs two system calls and no file made, fsynced or removed.
//
// It wrote and fsynced a new empty file in tmp/ per call, then removed
// it: on ext4 the fsync of a new inode commits the journal, and worker
// placement reads Now once per placement (issue 15: 7 fsyncs per
// placement and release, one of them this). The time is the same
// server's either way: a futimens stamps it as a create does.
//
// The clock file outlives the process (a Store has no Close) until GC
// removes it as a temp file older than its grace; it is touched at every
// call, so GC leaves a used one alone. One removed under an open Store
// (by GC after an idle grace, or by hand) is made again: on NFS the old
// descriptor answers ESTALE.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	fd, err := s.clock(-1)
	if err != nil {
		return time.Time{}, fmt.Errorf("server time: %w", err)
	}
	t, err := touchFD(fd)
	if goneDir(err) {
		if fd, err = s.clock(fd); err != nil {
			return time.Time{}, fmt.Errorf("server time: %w", err)
		}
		t, err = touchFD(fd)
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("server time: clock file in %s: %w", s.tmpPath(), err)
	}
	return t, nil
}

// touchFD sets fd's times to the server's now and returns its mtime.
func touchFD(fd int) (time.Time, error) {
	if err := futimesNow(fd); err != nil {
		return time.Time{}, err
	}
	var st unix.Stat_t
	if err := fstatRaw(fd, &st); err != nil {
		return time.Time{}, err
	}
	return mtime(&st), nil
}

// clock returns the descriptor of this Store's clock file (Now), making
// the file on first use. stale is a descriptor that failed with ENOENT
// or ESTALE: a new file replaces it. As in tmpDir, the replaced
// descriptor is left open: a concurrent Now may still be using it.
func (s *Store) clock(stale int) (int, error) {
	s.fds.clockMu.Lock()
	defer s.fds.clockMu.Unlock()
	if s.fds.clockFD >= 0 && s.fds.clockFD != stale {
		return s.fds.clockFD, nil
	}
	// A new name every time (O_EXCL): the file is this process's own, so
	// futimens(UTIME_NOW) is allowed whatever the umask (utimensat(2):
	// the owner, or write access).
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	name := s.prefix + "clock-" + hex.EncodeToString(rnd[:])
	dir, err := s.tmpDir(-1)
	if err != nil {
		return -1, err
	}
	const flags = unix.O_RDONLY | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := openatRetry(dir, name, flags, 0o666)
	if goneDir(err) {
		if dir, err = s.tmpDir(dir); err != nil {
			return -1, err
		}
		fd, err = openatRetry(dir, name, flags, 0o666)
	}
	if err != nil {
		return -1, notWritableTemp(filepath.Join(s.tmpPath(), name), err)
	}
	s.fds.clockFD, s.fds.clockName = fd, name
	return fd, nil
}

// Close removes what this Store made for itself under tmp/: its clock
// file (Now) and its temp folder, if that is empty, so that a process
// that ends cleanly leaves nothing there. Call it once the Store's work
// is done (defer it after Open). What a killed process leaves, GC removes
// after its grace.
//
// It was missing: every command that wrote or asked the server's time,
// a read-only `soma status` or `soma best` included, left a folder with
// its clock file in tmp/ until GC's grace had passed, and `soma status
// --watch` added an inotify watch for each of them.
//
// The descriptors stay open until the process ends: a goroutine that
// still runs an operation (a heartbeat being stopped) must not find a
// closed number reused for another file. Such a straggler, or any call
// after Close, makes what it needs again (GC removes it later). Close is
// not an operation on the study: its errors say only that something was
// left for GC.
func (s *Store) Close() error {
	var errs []error
	// clock's order: clockMu, then tmpMu (in tmpDir).
	s.fds.clockMu.Lock()
	defer s.fds.clockMu.Unlock()
	s.fds.tmpMu.Lock()
	defer s.fds.tmpMu.Unlock()
	if s.fds.clockFD >= 0 && s.fds.tmpFD >= 0 {
		if err := unix.Unlinkat(s.fds.tmpFD, s.fds.clockName, 0); err != nil && !goneDir(err) {
			errs = append(errs, fmt.Errorf("remove clock file %s: %w", filepath.Join(s.tmpPath(), s.fds.clockName), err))
		}
	}
	s.fds.clockFD, s.fds.clockName = -1, ""
	if s.fds.tmpFD >= 0 {
		// rmdir removes only an empty folder: a temp file of a write
		// still running keeps it (ENOTEMPTY: left for GC, as gcTemp
		// leaves it).
		tfd, err := s.openDir("tmp", false)
		if err == nil {
			err = unix.Unlinkat(tfd, s.tmpSub, unix.AT_REMOVEDIR)
			unix.Close(tfd)
		}
		if err != nil && !goneDir(err) && !errors.Is(err, unix.ENOTEMPTY) {
			errs = append(errs, fmt.Errorf("remove temp folder %s: %w", s.tmpPath(), err))
		}
		s.fds.tmpFD = -1
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("fsstore: close %s (left for soma gc): %w", s.root, err)
	}
	return nil
}

// syncDir fsyncs a directory so a link, rename or unlink in it is durable.
func syncDir(dir string) error {
	fd, err := openRaw(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return fmt.Errorf("fsstore: sync dir %s: %w", dir, err)
	}
	err = syncFD(fd, dir)
	if cerr := unix.Close(fd); err == nil && cerr != nil {
		err = fmt.Errorf("fsstore: sync dir %s: %w", dir, cerr)
	}
	return err
}

// syncFD fsyncs the open folder fd (dir names it in errors).
func syncFD(fd int, dir string) error {
	err := fsync(fd)
	// Some filesystems refuse fsync on directories; the write is still
	// atomic, only its durability across a power cut is up to them.
	if err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOTSUP) {
		return fmt.Errorf("fsstore: sync dir %s: %w", dir, err)
	}
	return nil
}
