package fsstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// GCOptions configure GC.
type GCOptions struct {
	// TempOlderThan is the grace: temp files, and unreferenced blobs,
	// whose server time is older than this are removed. Zero means one
	// hour. It must exceed the longest time any writer takes from a Put
	// to the Bind that refers to its digest (see GC), and from writing a
	// temp file to publishing it. Age is measured against the server's
	// Now, not this clock.
	TempOlderThan time.Duration
	// Blobs enables removal of blobs that no bound name refers to.
	Blobs bool
	// Refs, if not nil, reports the digests referred to from elsewhere
	// than the names' own digests (a digest in a record's meta, inside a
	// bound blob), given the names of GC's scan. It is called after that
	// scan, so what it reads counts as read by it.
	Refs func(ctx context.Context, bound []Bound) (keep func(Digest) bool, err error)
	// DryRun reports what would be removed and removes nothing.
	DryRun bool

	// Fault-injection seams for this package's tests: afterScan runs
	// after the scan of the names, beforeRecheck after a blob was moved
	// aside and before its time is read again.
	afterScan     func()
	beforeRecheck func(d Digest)
}

// GCReport says what GC removed (or would remove, with DryRun).
type GCReport struct {
	TempFiles int `json:"temp_files"`
	// TempFolders is how many processes' temp folders (tmp/<host>.<pid>.<random>)
	// were removed: empty, and unchanged for the grace.
	TempFolders int   `json:"temp_folders"`
	TempBytes   int64 `json:"temp_bytes"`
	Blobs       int   `json:"blobs"`
	BlobBytes   int64 `json:"blob_bytes"`
	BlobsKept   int   `json:"blobs_kept"`
	CorruptRec  int   `json:"corrupt_records"`
	// CorruptPaths are the files of the corrupt or foreign records that
	// stopped blob collection.
	CorruptPaths []string `json:"-"`
}

// GC removes stale temp files and, with opts.Blobs, unreferenced blobs.
// It never touches ".nfsXXXX" files (NFS silly renames of files still
// open somewhere). Safe to run while other processes use the store,
// given the writers' rule below; while any record is corrupt or foreign
// (a link) no blob is removed at all, since it might refer to any.
//
// Why a blob a writer is about to bind is never removed. A writer binds
// a name to digest d after Put(d) (bug, issue 13, item 6: Put of bytes
// already stored returned without a trace, study reused a digest Put
// once per process, and a GC between that Put and the Bind removed the
// blob, leaving a record pointing at nothing). Now:
//
//   - Put stores the blob, or if it is stored sets its mtime to the
//     server's now with utimensat by name, which finds the blob and
//     refreshes it in one call, or finds nothing (ENOENT) and stores it
//     anew. A writer Binds within the grace G of its Put (W; study binds
//     the empty curve's blob up to study.BlobReuse after its Put, a
//     worker.Placer the lease blob up to worker.LeaseBlobReuse, no
//     longer, and soma gc refuses a G under six times that); a layer
//     that keeps a digest for longer Puts it again before binding, unless
//     the name has referred to that digest without a break since such a
//     bind (then every scan that reads the name, before or after the
//     new bind, finds the digest: the argument below applies to the
//     first bind).
//   - GC reads the server's time S, then scans every name (R: the
//     digests they and Refs refer to). A blob not in R is moved aside
//     (renameat to a ".gc-" name in its folder), its mtime m is read
//     again from the moved file, and it is removed only if m + G < S;
//     otherwise it is moved back.
//
// Suppose GC removes blob b while a name N is bound to it, by a writer
// whose Put was at T_p and Bind at T_b (server times). If T_b < S, the
// scan, which started at S, lists N (but see NFS below) and b is in R:
// not removed. So T_b >= S, and by W, T_p > T_b - G >= S - G. The
// writer's utimensat ran either before GC moved b aside, and then GC
// read m >= T_p > S - G and put b back; or after, and then it found no b
// and the writer stored the bytes anew, so N refers to the new file, not
// the removed one. Either way, a contradiction. Temp files follow the
// same rule with T_p the time the temp file was written.
//
// On NFS a listing can miss names created in the last 30-60 s, and a
// client may resolve a name from its cache: both are covered as long as
// G is well above a minute (the default is an hour); tests use seconds
// on a local disk. While a blob is moved aside (microseconds) a reader
// of it sees ErrNotFound.
func (s *Store) GC(ctx context.Context, opts GCOptions) (GCReport, error) {
	var rep GCReport
	if opts.TempOlderThan <= 0 {
		opts.TempOlderThan = time.Hour
	}
	now, err := s.Now(ctx)
	if err != nil {
		return rep, fmt.Errorf("gc: %w", err)
	}
	cutoff := now.Add(-opts.TempOlderThan)
	if err := s.gcTemp(cutoff, opts.DryRun, &rep); err != nil {
		return rep, fmt.Errorf("gc: %w", err)
	}
	if !opts.Blobs {
		return rep, nil
	}
	// S (now) was read before the scan starts: see the argument above.
	bound, corrupt, err := s.Scan(ctx, "")
	if err != nil {
		return rep, fmt.Errorf("gc: %w", err)
	}
	// A corrupt record might point at any blob: refuse to guess. So might
	// a foreign one (a link: ErrForeign), whatever it points at.
	if len(corrupt) > 0 {
		rep.CorruptRec = len(corrupt)
		for _, ce := range corrupt {
			rep.CorruptPaths = append(rep.CorruptPaths, ce.Path)
		}
		return rep, fmt.Errorf("gc: %d corrupt or foreign records (first: %v); fix or remove them before collecting blobs", len(corrupt), corrupt[0])
	}
	live := make(map[Digest]bool, len(bound))
	for _, b := range bound {
		live[b.Digest] = true
	}
	keep := func(Digest) bool { return false }
	if opts.Refs != nil {
		if keep, err = opts.Refs(ctx, bound); err != nil {
			return rep, err
		}
	}
	if opts.afterScan != nil {
		opts.afterScan()
	}
	bfd, err := s.openDir("blobs/"+Algo, false)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return rep, nil
	case isForeign(err):
		return rep, fmt.Errorf("gc: %w", s.foreign("", Digest{}, "blobs/"+Algo))
	case err != nil:
		return rep, fmt.Errorf("gc: %w", err)
	}
	defer unix.Close(bfd)
	subs, err := readNames(bfd, s.blobs)
	if err != nil {
		return rep, fmt.Errorf("gc: %w", err)
	}
	for _, sub := range subs {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		// Never into a link: O_NOFOLLOW.
		xfd, err := openatRetry(bfd, sub, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			continue // not a folder of ours (or gone)
		}
		err = eachFile(xfd, filepath.Join(s.blobs, sub), func(name string, st *unix.Stat_t) {
			if strings.HasPrefix(name, gcAside) {
				// Left by a GC that died between moving a blob aside
				// and deciding: put it back (same bytes if a writer
				// stored them meanwhile); a later GC decides.
				if leaf, _, ok := strings.Cut(strings.TrimPrefix(name, gcAside), "."); ok && !opts.DryRun {
					_ = unix.Linkat(xfd, name, xfd, leaf, 0)
					_ = unix.Unlinkat(xfd, name, 0)
				}
				return
			}
			d, perr := ParseDigest(Algo + ":" + sub + name)
			if perr != nil {
				return // not ours (".nfsXXXX" among them)
			}
			if live[d] || keep(d) || !mtime(st).Before(cutoff) {
				rep.BlobsKept++
				return
			}
			if opts.DryRun {
				rep.Blobs++
				rep.BlobBytes += st.Size
				return
			}
			removed, size := s.removeBlob(xfd, name, d, cutoff, opts.beforeRecheck)
			if removed {
				rep.Blobs++
				rep.BlobBytes += size
			} else {
				rep.BlobsKept++
			}
		})
		unix.Close(xfd)
		if err != nil {
			return rep, fmt.Errorf("gc: %w", err)
		}
	}
	// No fsync of the folders: a removal lost in a crash is redone by
	// the next GC, and a blob left under its aside name is put back by
	// it.
	return rep, nil
}

// gcAside starts the name a blob has while GC decides on it; it is not
// a valid blob name (a leading '.').
const gcAside = ".gc-"

// removeBlob removes the blob leaf (digest d) from the folder xfd unless
// a Put refreshed it since GC looked: it moves it aside, reads its mtime
// again from the moved file, and then removes it (mtime before cutoff)
// or moves it back. See GC for why this, and not a remove after a stat.
func (s *Store) removeBlob(xfd int, leaf string, d Digest, cutoff time.Time, beforeRecheck func(Digest)) (bool, int64) {
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	aside := gcAside + leaf + "." + hex.EncodeToString(rnd[:])
	if err := renameat(xfd, leaf, xfd, aside); err != nil {
		return false, 0 // gone already, or not ours to move
	}
	if beforeRecheck != nil {
		beforeRecheck(d)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(xfd, aside, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && mtime(&st).Before(cutoff) {
		if unix.Unlinkat(xfd, aside, 0) == nil {
			return true, st.Size
		}
	}
	// Refreshed (or unreadable): back in place. EEXIST: a writer stored
	// the same bytes meanwhile; ours are not needed.
	_ = unix.Linkat(xfd, aside, xfd, leaf, 0)
	_ = unix.Unlinkat(xfd, aside, 0)
	return false, 0
}

// readNames lists the open folder fd (dir names it in errors), leaving
// fd open.
func readNames(fd int, dir string) ([]string, error) {
	// A fresh descriptor of the same folder (".": no lookup of a name, no
	// link to follow), for its own read offset.
	own, err := openatRetry(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(own), dir)
	defer f.Close()
	return f.Readdirnames(-1)
}

// eachFile calls fn for each regular file in the open folder fd (dir
// names it in errors), with its lstat. Links and other things are
// skipped: never followed, never removed.
// gcTemp removes the temp files under tmp/ last written before cutoff:
// those in each process's folder (tmpDir), and those directly in tmp/
// (where soma before issue 18 made them, and where one of those may
// still be running). A process's folder is removed once it is empty and
// was last changed before cutoff; its process, if still alive, makes it
// again at its next write (tmpDir replaces a descriptor whose folder is
// gone). rmdir removes only an empty folder, atomically, so a temp file
// made at that moment either keeps the folder or finds it gone and is
// made in a new one. Never into a link: O_NOFOLLOW.
func (s *Store) gcTemp(cutoff time.Time, dryRun bool, rep *GCReport) error {
	tfd, err := s.openDir("tmp", true)
	if err != nil {
		if isForeign(err) {
			return fmt.Errorf("temp folder: %w", s.foreign("", Digest{}, "tmp"))
		}
		return fmt.Errorf("temp folder %s: %w", s.tmp, err)
	}
	defer unix.Close(tfd)
	old := func(dir int) func(name string, st *unix.Stat_t) {
		return func(name string, st *unix.Stat_t) {
			if strings.HasPrefix(name, ".nfs") || !mtime(st).Before(cutoff) {
				return
			}
			rep.TempFiles++
			rep.TempBytes += st.Size
			if !dryRun {
				_ = unix.Unlinkat(dir, name, 0)
			}
		}
	}
	if err := eachFile(tfd, s.tmp, old(tfd)); err != nil {
		return err
	}
	names, err := readNamesLive(tfd, s.tmp)
	if err != nil {
		return err
	}
	for _, n := range names {
		var st unix.Stat_t
		if unix.Fstatat(tfd, n, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || strings.HasPrefix(n, ".") {
			continue
		}
		sfd, err := openatRetry(tfd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			continue // gone meanwhile, or not ours to read
		}
		err = eachFile(sfd, filepath.Join(s.tmp, n), old(sfd))
		unix.Close(sfd)
		if err != nil {
			return err
		}
		// The folder's mtime as listed: the removals just made changed
		// it, but only an empty folder goes, and it was empty of
		// anything newer than cutoff.
		if n != s.tmpSub && mtime(&st).Before(cutoff) && !dryRun {
			if unix.Unlinkat(tfd, n, unix.AT_REMOVEDIR) == nil {
				rep.TempFolders++
			}
		}
	}
	return nil
}

// readNamesLive is readNames of a folder that may have been removed
// meanwhile: then it has no names.
func readNamesLive(fd int, dir string) ([]string, error) {
	names, err := readNames(fd, dir)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ESTALE) {
		return nil, nil
	}
	return names, err
}

func eachFile(fd int, dir string, fn func(name string, st *unix.Stat_t)) error {
	names, err := readNamesLive(fd, dir)
	if err != nil {
		return err
	}
	for _, n := range names {
		var st unix.Stat_t
		if unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			continue
		}
		fn(n, &st)
	}
	return nil
}
