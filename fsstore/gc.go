package fsstore

import (
	"context"
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
	// TempOlderThan: temp files whose server time is older than this are
	// removed (a writer that died between write and publish). Zero means
	// one hour. Age is measured against the server's Now, not this clock.
	TempOlderThan time.Duration
	// Blobs enables removal of blobs that no bound name points at and that
	// Keep does not keep. Blobs younger than TempOlderThan are kept too:
	// a writer puts a blob before it binds a name to it.
	Blobs bool
	// Keep reports digests referenced from outside the names' own digests
	// (for example a digest held in a record's meta). May be nil.
	Keep func(Digest) bool
	// DryRun reports what would be removed and removes nothing.
	DryRun bool
}

// GCReport says what GC removed (or would remove, with DryRun).
type GCReport struct {
	TempFiles  int   `json:"temp_files"`
	TempBytes  int64 `json:"temp_bytes"`
	Blobs      int   `json:"blobs"`
	BlobBytes  int64 `json:"blob_bytes"`
	BlobsKept  int   `json:"blobs_kept"`
	CorruptRec int   `json:"corrupt_records"`
}

// GC removes stale temp files and, with opts.Blobs, unreferenced blobs.
// It never touches ".nfsXXXX" files (NFS silly renames of files still
// open somewhere). Safe to run while other processes use the store.
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
	tfd, err := s.tmpDir(-1)
	if err != nil {
		return rep, fmt.Errorf("gc: %w", err)
	}
	err = eachFile(tfd, s.tmp, func(name string, st *unix.Stat_t) {
		if strings.HasPrefix(name, ".nfs") || !mtime(st).Before(cutoff) {
			return
		}
		rep.TempFiles++
		rep.TempBytes += st.Size
		if !opts.DryRun {
			_ = unix.Unlinkat(tfd, name, 0)
		}
	})
	if err != nil {
		return rep, fmt.Errorf("gc: %w", err)
	}
	if !opts.Blobs {
		return rep, nil
	}
	bound, corrupt, err := s.Scan(ctx, "")
	if err != nil {
		return rep, fmt.Errorf("gc: %w", err)
	}
	// A corrupt record might point at any blob: refuse to guess. So might
	// a foreign one (a link: ErrForeign), whatever it points at.
	if len(corrupt) > 0 {
		rep.CorruptRec = len(corrupt)
		return rep, fmt.Errorf("gc: %d corrupt or foreign records (first: %v); fix or remove them before collecting blobs", len(corrupt), corrupt[0])
	}
	live := make(map[Digest]bool, len(bound))
	for _, b := range bound {
		live[b.Digest] = true
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
			if strings.HasPrefix(name, ".nfs") {
				return
			}
			d, perr := ParseDigest(Algo + ":" + sub + name)
			if perr != nil {
				return // not ours
			}
			if live[d] || (opts.Keep != nil && opts.Keep(d)) || !mtime(st).Before(cutoff) {
				rep.BlobsKept++
				return
			}
			rep.Blobs++
			rep.BlobBytes += st.Size
			if !opts.DryRun {
				_ = unix.Unlinkat(xfd, name, 0)
			}
		})
		unix.Close(xfd)
		if err != nil {
			return rep, fmt.Errorf("gc: %w", err)
		}
	}
	return rep, nil
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
func eachFile(fd int, dir string, fn func(name string, st *unix.Stat_t)) error {
	names, err := readNames(fd, dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ESTALE) {
			return nil
		}
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
