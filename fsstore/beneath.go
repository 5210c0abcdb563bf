package fsstore

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// No write of soma follows a symbolic link inside a store (issue 13, item
// 2: with names/study/s1/trial/46 a link to a folder outside the root,
// soma-trial wrote its record into that folder). Every path below the
// root is resolved from an open descriptor of the root, never from a
// path string:
//
//   - the folder a write publishes into is opened FIRST, with
//     openat2(root, rel, O_DIRECTORY,
//     RESOLVE_NO_SYMLINKS|RESOLVE_BENEATH), which refuses a link in any
//     component, the last included, with ELOOP;
//   - the write itself (linkat, renameat, unlinkat, mkdirat, utimensat)
//     is relative to that descriptor, and the same descriptor is then
//     fsynced. Every write already ended with an fsync of its folder,
//     which needed an open of it: opening it first costs no extra call to
//     the file server compared with resolving the path twice (one more
//     where the folder is new: the open that finds it missing, then its
//     parent's, for the mkdirat; scripts/bench-trial-ops.sh counts them);
//   - temp files are made in the Store's own folder under tmp/ through
//     a descriptor of it held for the Store's life (opened the same way),
//     so the temp file's own create, link, rename and unlink are relative
//     to it too.
//
// Why not os.Root: it follows links that stay inside the root, and a
// link inside the root is exactly what the issue forbids (a trial folder
// linked to another trial's would let two trials share records). Why
// this holds on NFS: RESOLVE_NO_SYMLINKS is checked by the client's path
// walk, one component at a time, on whatever the server answers for
// each lookup; it needs nothing of the server.
//
// openat2 came with Linux 5.6. Where it is missing (ENOSYS: older
// kernels such as the 4.18 of RHEL 8, seccomp filters that do not know
// it) the first call notes it (noOpenat2, so it is tried once per Store)
// and every path is walked one component at a time with
// openat(O_NOFOLLOW|O_DIRECTORY): the same guarantee, one open per
// component instead of one per path. (Libraries do not log here; the
// fallback changes cost, not behaviour.)
//
// The root itself may be a link (--root ~/scratch/x where scratch is a
// link): only links inside it are refused.

// ErrForeign means a path in the store holds something soma did not make
// and will not use: a symbolic link, or a special file, where a folder or
// a record belongs. A read reports it as a *CorruptError (with the path)
// that wraps ErrForeign; a write refuses it the same way.
var ErrForeign = errors.New("fsstore: not soma's: a symbolic link or special file inside the store (soma never follows links inside a store; remove it, or replace it with what it points at)")

// Beneath is an open folder below which paths are resolved without
// following any link: the recipe above, for the folders soma keeps next
// to a store's (a trial's work folder, the objectives' logs). The folder
// itself may have been reached through a link. It is safe for concurrent
// use.
type Beneath struct {
	fd        int
	path      string
	noOpenat2 atomic.Bool // openat2 returned ENOSYS once: walk components
}

// beneath holds the descriptors a Store resolves its paths from.
type beneath struct {
	root Beneath // the root folder, opened once (following a link AT the root)

	tmpMu sync.Mutex
	tmpFD int // tmp/, opened on first use; -1: not yet

	clockMu   sync.Mutex
	clockFD   int    // this Store's clock file in tmp/ (Now), made on first use; -1: not yet
	clockName string // its name in the temp folder

	dirs dirCache // name folders that writes used last

	// blobDirs are the blob folders (blobs/sha256/<2 hex>) that Put used
	// last: a Put of bytes already stored (the empty curve of every
	// trial) refreshes the blob relative to its folder, without walking
	// the folder's path again (3 lookups on NFS without a lookup cache).
	blobDirs dirCache

	// up are the folders two levels above the names reads open: a
	// study's trial folder (upDirs).
	up upDirs
}

func (s *Store) openBeneath(rel string, flags int, mode uint32) (int, error) {
	return s.fds.root.open(rel, flags, mode)
}

// openName opens the file of name with flags, following no link, as
// openBeneath("names/"+name) does; but where a write left the name's
// folder open (dirCache: the running attempt's trial folder), relative to
// it: one lookup of the leaf instead of one per component of the path,
// each a round trip on NFS without a lookup cache (measured on
// internal/tools/slowfs: the look for a retry after each result went from 6
// LOOKUPs to 1). The leaf is still looked up on the server (an open of a
// known name: what another client wrote must be seen, so no name is
// taken from a cache); a folder removed meanwhile is noticed
// (dirAlive) and the name is then opened by its path. A link at the leaf
// is not followed: O_NOFOLLOW (ELOOP, or with O_PATH the link itself, as
// openBeneath's fallback gives it).
//
// Except right after a Bind into the folder: a leaf missing from a folder
// that the last write through it renamed a record into is believed
// missing without the fstat of dirAlive (a GETATTR on NFS; issue 18: one
// of a trial's 31 operations, at the look for a retry after its result).
// A folder is removed only once empty, so had it been removed since, the
// record just bound in it would have been removed first: the look would
// then answer for a name whose sibling is gone, where the look by path
// answers for a folder made anew since, which holds no later attempt of
// a trial unless a whole claim, and a retry of it, were made there in
// between.
//
// look: the open is for a look (Probe), not a read: see openNameUp.
func (s *Store) openName(name string, flags int, look bool) (int, error) {
	dir, leaf := nameDir(name)
	pfd, ok, written := s.fds.dirs.takeWritten(dir)
	if !ok {
		if fd, err, done := s.openNameUp(name, flags, look); done {
			return fd, err
		}
		return s.openBeneath("names/"+name, flags, 0)
	}
	fd, err := openatRetry(pfd, leaf, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil && goneDir(err) && !written && !dirAlive(pfd) {
		unix.Close(pfd)
		return s.openBeneath("names/"+name, flags, 0)
	}
	s.fds.dirs.put(dir, pfd)
	return fd, err
}

// openNameUp opens name relative to the folder two levels above it
// (upDirs), following no link in the two components below it
// (Beneath.open): two lookups where the path has more. done false: the
// name has no such folder, it cannot be opened, or it was removed; the
// caller then opens name by its path.
//
// With look (Probe), a folder below found missing is believed missing
// without that fstat too: Probe is a look, never a decision (the claim
// or the read that follows decides), and it is the look before each
// claim of a number others may have taken (study's claimNew, once
// contended) and each look for a change to a study (refreshChanges):
// issue 18, a GETATTR each, ~1 a trial at P=8 on internal/tools/slowfs.
// A kept folder removed meanwhile is then noticed, and set aside, by the
// next read or write through it.
func (s *Store) openNameUp(name string, flags int, look bool) (fd int, err error, done bool) {
	i := strings.LastIndexByte(name, '/')
	if i < 0 {
		return -1, nil, false
	}
	j := strings.LastIndexByte(name[:i], '/')
	if j < 0 {
		return -1, nil, false
	}
	up, rel := "names/"+name[:j], name[j+1:]
	ufd, ok := s.fds.up.get(up, func() (int, error) { return s.openDir(up, false) })
	if !ok {
		return -1, nil, false
	}
	// The folder below first, then the leaf in it: the same two lookups
	// as one open of both, but a leaf found missing (the look for a
	// next attempt, mostly) is then known missing from a folder found in
	// the kept one, which was therefore not removed (a removed folder is
	// empty): no fstat of the kept folder to tell (dirAlive), a GETATTR
	// on NFS.
	path := filepath.Join(s.root, filepath.FromSlash(up))
	b := &Beneath{fd: ufd, path: path}
	if s.fds.root.noOpenat2.Load() {
		b.noOpenat2.Store(true)
	}
	sub, leaf := rel[:i-j-1], name[i+1:]
	dfd, err := b.open(sub, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		if goneDir(err) && !look && !dirAlive(ufd) {
			s.fds.up.drop(up, ufd)
			return -1, nil, false
		}
		return -1, err, true
	}
	defer unix.Close(dfd)
	d := &Beneath{fd: dfd, path: filepath.Join(path, sub)}
	d.noOpenat2.Store(b.noOpenat2.Load())
	fd, err = d.open(leaf, flags, 0)
	return fd, err, true
}

func (s *Store) openDir(rel string, create bool) (int, error) {
	return s.fds.root.openDir(rel, create)
}

func (s *Store) foreign(name string, d Digest, rel string) *CorruptError {
	return s.fds.root.foreign(name, d, rel)
}

// open opens rel ('/'-separated, relative to the root) with flags,
// following no link in any of its components. Errors are the system
// call's: ELOOP where a component is a link (isForeign).
//
// A link at the leaf is refused too (ELOOP). openat2 is not given
// O_NOFOLLOW: RESOLVE_NO_SYMLINKS covers the leaf already, and with
// O_NOFOLLOW a linked leaf would read ENOTDIR under O_DIRECTORY, or be
// opened itself under O_PATH.
func (b *Beneath) open(rel string, flags int, mode uint32) (int, error) {
	flags |= unix.O_CLOEXEC
	if !b.noOpenat2.Load() {
		how := unix.OpenHow{
			Flags:   uint64(flags),
			Mode:    uint64(mode),
			Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_BENEATH,
		}
		for {
			fd, err := unix.Openat2(b.fd, rel, &how)
			switch {
			case errors.Is(err, unix.EINTR), errors.Is(err, unix.EAGAIN):
				// EAGAIN: a concurrent rename raced the walk (openat2(2)).
				continue
			case errors.Is(err, unix.ENOSYS):
				b.noOpenat2.Store(true)
			default:
				return fd, err
			}
			break
		}
	}
	fd, err := openComponents(b.fd, rel, flags|unix.O_NOFOLLOW, mode)
	if err == nil && flags&unix.O_PATH != 0 {
		// O_PATH|O_NOFOLLOW opened a link at the leaf itself.
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT == unix.S_IFLNK {
			unix.Close(fd)
			if err == nil {
				err = unix.ELOOP
			}
			return -1, err
		}
	}
	return fd, err
}

// openComponents is openBeneath without openat2: one openat per
// component, each with O_NOFOLLOW.
func openComponents(dirFD int, rel string, flags int, mode uint32) (int, error) {
	segs := strings.Split(rel, "/")
	fd := dirFD
	closeFD := func() {
		if fd != dirFD {
			unix.Close(fd)
		}
	}
	for i, seg := range segs {
		last := i == len(segs)-1
		fl := unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
		var m uint32
		if last {
			fl, m = flags, mode
		}
		next, err := openatRetry(fd, seg, fl, m)
		if errors.Is(err, unix.ENOTDIR) && fl&unix.O_DIRECTORY != 0 {
			// O_DIRECTORY|O_NOFOLLOW says ENOTDIR for a link as for a
			// file; tell them apart as openat2 does.
			var st unix.Stat_t
			if unix.Fstatat(fd, seg, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
				err = unix.ELOOP
			}
		}
		closeFD()
		if err != nil {
			return -1, err
		}
		fd = next
	}
	return fd, nil
}

func openatRetry(dirFD int, name string, flags int, mode uint32) (int, error) {
	for {
		fd, err := unix.Openat(dirFD, name, flags, mode)
		if !errors.Is(err, unix.EINTR) {
			return fd, err
		}
	}
}

// isForeign reports whether err from openBeneath (or an *at call relative
// to a descriptor it returned) means a link was met.
func isForeign(err error) bool {
	return errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV)
}

// foreign returns the error for a write or read of rel that met a link:
// a *CorruptError naming the first component of rel that is a link (or
// another thing soma did not make), found with lstat one component at a
// time (only after a refusal, so it costs the common path nothing).
func (b *Beneath) foreign(name string, d Digest, rel string) *CorruptError {
	p := b.path
	for seg := range strings.SplitSeq(rel, "/") {
		p = filepath.Join(p, seg)
		st, err := os.Lstat(p)
		if err != nil || !st.IsDir() {
			break
		}
	}
	return &CorruptError{Name: name, Digest: d, Path: p, Err: ErrForeign}
}

// openDir opens the folder rel below the root for the *at calls of a
// write and its fsync, following no link. With create it makes the
// folders that are missing (mkdirAll).
func (b *Beneath) openDir(rel string, create bool) (int, error) {
	fd, err := b.open(rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err == nil || !create || !errors.Is(err, unix.ENOENT) {
		return fd, err
	}
	return b.mkdirAll(rel)
}

// mkdirAll makes the folder rel and its missing parents, each with
// mkdirat in its parent opened without following links, and returns rel
// opened. A folder made meanwhile by another process is fine.
func (b *Beneath) mkdirAll(rel string) (int, error) {
	parent, base := path.Split(rel)
	parent = strings.TrimSuffix(parent, "/")
	pfd := b.fd
	if parent != "" {
		var err error
		pfd, err = b.openDir(parent, true)
		if err != nil {
			return -1, err
		}
		defer unix.Close(pfd)
	}
	if err := unix.Mkdirat(pfd, base, 0o777); err != nil && !errors.Is(err, unix.EEXIST) {
		return -1, err
	}
	return openComponents(pfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
}

// tmpDir returns the descriptor of this Store's temp folder,
// tmp/<host>.<pid>.<random>/, opening (and if need be making it and tmp/)
// on first use. stale is a descriptor that failed with ENOENT or ESTALE
// (the folder was removed: by soma gc once it sat empty for the grace, by
// hand, or on another machine): it is replaced. A replaced descriptor is
// left open rather than closed: a concurrent write may still be using it,
// and its number must not be reused under it; it happens rarely.
//
// Why a folder of its own (issue 18): every write makes, links or
// renames, and unlinks a temp file, and each of those holds the folder's
// lock on the client (the kernel's, for the whole round trip to the file
// server). With one tmp/ for every process, the processes of a node
// queued there: on the FUSE harness at 1 ms a round trip, 8 soma-trial
// processes' temp-file creates took 21-25 ms each instead of 2, their
// unlinks 8-16 ms, and P=8 ran 33-42 trials/s; with a folder each, 39-50
// (P=4: 40 -> 50). A process's own writes still share its folder, as
// they share its descriptor.
func (s *Store) tmpDir(stale int) (int, error) {
	s.fds.tmpMu.Lock()
	defer s.fds.tmpMu.Unlock()
	if s.fds.tmpFD >= 0 && s.fds.tmpFD != stale {
		return s.fds.tmpFD, nil
	}
	fd, err := s.openDir("tmp/"+s.tmpSub, true)
	if err != nil {
		if isForeign(err) {
			return -1, fmt.Errorf("fsstore: temp folder: %w", s.foreign("", Digest{}, "tmp"))
		}
		if e := notWritable(s.tmp, err); e != err {
			return -1, e
		}
		return -1, fmt.Errorf("fsstore: temp folder %s: %w", s.tmpPath(), err)
	}
	s.fds.tmpFD = fd
	return fd, nil
}

// tmpPath is the path of this Store's temp folder, for messages.
func (s *Store) tmpPath() string { return filepath.Join(s.tmp, s.tmpSub) }

// goneDir reports whether err means the folder a descriptor refers to was
// removed (ENOENT for a new name in it, ESTALE on NFS).
func goneDir(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESTALE)
}

// futimesNow sets fd's times to now (the file server's on NFS):
// futimens(3), which is utimensat(fd, NULL, {UTIME_NOW, UTIME_NOW}); x/sys
// has no wrapper that passes a NULL path. An ordinary system call (it
// enters the scheduler's syscall state), not a raw one.
func futimesNow(fd int) error {
	ts := [2]unix.Timespec{{Nsec: unix.UTIME_NOW}, {Nsec: unix.UTIME_NOW}}
	for {
		_, _, e := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(fd), 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0)
		switch e {
		case 0:
			return nil
		case unix.EINTR:
			continue
		}
		return e
	}
}

// OpenBeneath opens the folder dir (which may be reached through a link)
// for resolving paths below it without following links.
func OpenBeneath(dir string) (*Beneath, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	fd, err := openRaw(abs, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: abs, Err: err}
	}
	return &Beneath{fd: fd, path: abs}, nil
}

// Path returns the folder's absolute path.
func (b *Beneath) Path() string { return b.path }

// Fd returns the folder's descriptor, for *at system calls relative to
// it; it stays valid until Close.
func (b *Beneath) Fd() int { return b.fd }

// Close closes the folder.
func (b *Beneath) Close() error { return unix.Close(b.fd) }

// pathErr wraps err from resolving rel: a link met is a *CorruptError
// wrapping ErrForeign that names it.
func (b *Beneath) pathErr(op, rel string, err error) error {
	if isForeign(err) {
		return b.foreign("", Digest{}, rel)
	}
	return &os.PathError{Op: op, Path: filepath.Join(b.path, filepath.FromSlash(rel)), Err: err}
}

// MkdirAll makes the folder rel ('/'-separated) below b and its missing
// parents, following no link, and returns it opened. A link on the way
// is refused (ErrForeign).
func (b *Beneath) MkdirAll(rel string) (*Beneath, error) {
	fd, err := b.openDir(rel, true)
	if err != nil {
		return nil, b.pathErr("mkdir", rel, err)
	}
	return &Beneath{fd: fd, path: filepath.Join(b.path, filepath.FromSlash(rel))}, nil
}

// Mkdir makes the folder rel below b, whose parent must exist. A folder
// already there is fine; a link or anything else there is refused
// (ErrForeign, or the system call's error). One mkdirat when the parent
// is b itself; a stat more only when rel exists.
func (b *Beneath) Mkdir(rel string) error {
	parent, base := path.Split(rel)
	pfd := b.fd
	if parent = strings.TrimSuffix(parent, "/"); parent != "" {
		var err error
		if pfd, err = b.openDir(parent, false); err != nil {
			return b.pathErr("mkdir", rel, err)
		}
		defer unix.Close(pfd)
	}
	err := unix.Mkdirat(pfd, base, 0o777)
	if errors.Is(err, unix.EEXIST) {
		var st unix.Stat_t
		if err = unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR {
			if st.Mode&unix.S_IFMT == unix.S_IFLNK {
				return b.foreign("", Digest{}, rel)
			}
			err = unix.ENOTDIR
		}
	}
	if err != nil {
		return b.pathErr("mkdir", rel, err)
	}
	return nil
}

// OpenFile is os.OpenFile of rel below b, following no link (a link at
// rel itself included: with O_CREAT it is not followed either).
func (b *Beneath) OpenFile(rel string, flag int, perm os.FileMode) (*os.File, error) {
	fd, err := b.open(rel, flag, uint32(perm.Perm()))
	if err != nil {
		return nil, b.pathErr("open", rel, err)
	}
	return os.NewFile(uintptr(fd), filepath.Join(b.path, filepath.FromSlash(rel))), nil
}

// Rename renames oldName to newName, both directly in b (no '/'):
// renameat(2), which follows no link (a link at newName is replaced,
// not followed; a folder cannot replace one: ENOTDIR).
func (b *Beneath) Rename(oldName, newName string) error {
	if strings.Contains(oldName, "/") || strings.Contains(newName, "/") {
		return fmt.Errorf("fsstore: rename %q to %q: want names directly in %s", oldName, newName, b.path)
	}
	if err := renameat(b.fd, oldName, b.fd, newName); err != nil {
		return &os.LinkError{Op: "rename", Old: filepath.Join(b.path, oldName), New: filepath.Join(b.path, newName), Err: err}
	}
	return nil
}
