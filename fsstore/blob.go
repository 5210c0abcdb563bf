package fsstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

func (s *Store) blobPath(d Digest) string {
	h := d.Hex()
	return filepath.Join(s.blobs, h[:2], h[2:])
}

// blobRel splits blob d's path into its folder, relative to the root, and
// its leaf.
func blobRel(d Digest) (dir, leaf string) {
	h := d.Hex()
	return "blobs/" + Algo + "/" + h[:2], h[2:]
}

// Put stores b and returns its digest. Putting bytes that are already
// stored succeeds and never overwrites them, but sets the blob's time to
// the server's now: GC then keeps it for its grace, long enough for the
// caller to bind a name to it (see GC).
func (s *Store) Put(ctx context.Context, b []byte) (Digest, error) {
	if err := ctx.Err(); err != nil {
		return Digest{}, err
	}
	d := Sum(b)
	have, err := s.haveBlob(d)
	if err != nil || have {
		return d, err
	}
	tmp, err := s.writeTemp(bytes.NewReader(b), nil)
	if err != nil {
		return Digest{}, fmt.Errorf("put: %w", err)
	}
	return d, s.publishBlob(tmp, d)
}

// haveBlob reports whether blob d is stored, for Put, and if so sets its
// time to the server's now: utimensat by name, which finds and refreshes
// the blob in one call (or finds nothing, if GC just took it: then Put
// stores it anew). Bug (issue 13, item 6): it only stat'ed the blob, and
// GC could remove it between this Put and the caller's Bind.
func (s *Store) haveBlob(d Digest) (bool, error) {
	dir, leaf := blobRel(d)
	// The folder as the last Put left it open (blobDirs), else opened by
	// its path; it goes back to the cache when done.
	pfd, cached := s.fds.blobDirs.take(dir)
	if !cached {
		var err error
		pfd, err = s.openDir(dir, false)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return false, nil
		case isForeign(err):
			return false, fmt.Errorf("put %s: %w", d, s.foreign("", d, dir+"/"+leaf))
		case err != nil:
			return false, fmt.Errorf("put %s: %w", d, err)
		}
	}
	var st unix.Stat_t
	err := unix.Fstatat(pfd, leaf, &st, unix.AT_SYMLINK_NOFOLLOW)
	if cached && goneDir(err) {
		// No blob there, or the cached folder was removed (by hand: GC
		// removes blobs, not their folders; NFS says ESTALE): store the
		// bytes anew, through the folder at the path (publishBlob, which
		// caches that one).
		unix.Close(pfd)
		return false, nil
	}
	defer s.fds.blobDirs.put(dir, pfd)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("put %s: %w", d, err)
	case foreignMode(st.Mode):
		return false, fmt.Errorf("put %s: %w", d, &CorruptError{Digest: d, Path: s.blobPath(d), Err: ErrForeign})
	}
	now := []unix.Timespec{{Nsec: unix.UTIME_NOW}, {Nsec: unix.UTIME_NOW}}
	for {
		err = unix.UtimesNanoAt(pfd, leaf, now, unix.AT_SYMLINK_NOFOLLOW)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESTALE):
		return false, nil // GC took it since the stat: store it anew
	case errors.Is(err, fs.ErrPermission):
		// Another user's blob in a shared store, without write access:
		// its time cannot be set (utimensat(2), EPERM/EACCES).
		return false, fmt.Errorf("put %s: refresh %s: %w (run soma with umask 002 in a group-shared store: see the fsstore docs)", d, s.blobPath(d), err)
	case err != nil:
		return false, fmt.Errorf("put %s: refresh %s: %w", d, s.blobPath(d), err)
	}
	return true, nil
}

// PutStream stores everything read from r, which may be larger than
// memory, and returns its digest and length.
func (s *Store) PutStream(ctx context.Context, r io.Reader) (Digest, int64, error) {
	if err := ctx.Err(); err != nil {
		return Digest{}, 0, err
	}
	h := sha256.New()
	cw := &countWriter{w: h}
	tmp, err := s.writeTemp(ctxReader{ctx, r}, cw)
	if err != nil {
		return Digest{}, 0, fmt.Errorf("put: %w", err)
	}
	var d Digest
	h.Sum(d.sum[:0])
	d.ok = true
	return d, cw.n, s.publishBlob(tmp, d)
}

// publishBlob links the written temp file tmp into place as blob d: its
// folder opened (or made) first without following links, then linkat and
// the folder's fsync on that descriptor (beneath.go).
func (s *Store) publishBlob(tmp tempFile, d Digest) error {
	defer tmp.remove()
	dir, leaf := blobRel(d)
	pfd, err := s.openDir(dir, true)
	if isForeign(err) {
		return fmt.Errorf("put %s: %w", d, s.foreign("", d, dir))
	}
	if err != nil {
		return fmt.Errorf("put %s: %w", d, err)
	}
	defer s.fds.blobDirs.put(dir, pfd) // for the next Put into it (haveBlob)
	err = linkat(tmp.dir, tmp.name, pfd, leaf)
	// EEXIST: the same bytes are already there (or a writer raced us with
	// them); content addressing makes that success.
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("put %s: %w", d, err)
	}
	return syncFD(pfd, filepath.Dir(s.blobPath(d)))
}

// openBlob opens blob d for reading, never through a link: a link or
// special file reads as a *CorruptError wrapping ErrForeign.
func (s *Store) openBlob(d Digest) (int, error) {
	if d.IsZero() {
		return -1, fmt.Errorf("get: zero digest")
	}
	dir, leaf := blobRel(d)
	fd, err := s.openBeneath(dir+"/"+leaf, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	switch {
	case isForeign(err):
		return -1, s.foreign("", d, dir+"/"+leaf)
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESTALE) || errors.Is(err, syscall.ENOTDIR):
		return -1, fmt.Errorf("get %s: %w", d, ErrNotFound)
	case err != nil:
		return -1, fmt.Errorf("get %s: %w", d, err)
	}
	return fd, nil
}

// Get returns the blob d, verifying its digest: ErrNotFound if it is not
// stored, a *CorruptError if its bytes do not match.
func (s *Store) Get(ctx context.Context, d Digest) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	fd, err := s.openBlob(d)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	p := s.blobPath(d)
	var st unix.Stat_t
	if err := fstatRaw(fd, &st); err != nil {
		return nil, fmt.Errorf("get %s: %w", d, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, &CorruptError{Digest: d, Path: p, Err: ErrForeign}
	}
	b, err := readSized(fd, make([]byte, 0, st.Size+1), st.Size)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", d, err)
	}
	if Sum(b) != d {
		return nil, &CorruptError{Digest: d, Path: p, Err: ErrDigestMismatch}
	}
	return b, nil
}

// Has reports whether blob d is stored (without reading or verifying it).
func (s *Store) Has(ctx context.Context, d Digest) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	dir, leaf := blobRel(d)
	fd, err := s.openBeneath(dir+"/"+leaf, unix.O_PATH, 0)
	switch {
	case err == nil:
		unix.Close(fd)
		return true, nil
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return false, nil
	case isForeign(err):
		return false, fmt.Errorf("has %s: %w", d, s.foreign("", d, dir+"/"+leaf))
	}
	return false, fmt.Errorf("has %s: %w", d, err)
}

// OpenBlob streams blob d. The digest is checked as the bytes go by: the
// Read that reaches the end returns a *CorruptError instead of io.EOF if
// they did not match, so a caller that reads to EOF never mistakes a
// corrupt blob for a good one.
func (s *Store) OpenBlob(ctx context.Context, d Digest) (io.ReadCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	fd, err := s.openBlob(d)
	if err != nil {
		return nil, err
	}
	p := s.blobPath(d)
	return &verifyReader{f: os.NewFile(uintptr(fd), p), h: sha256.New(), d: d, path: p}, nil
}

type verifyReader struct {
	f    *os.File
	h    hash.Hash
	d    Digest
	path string
}

func (v *verifyReader) Read(p []byte) (int, error) {
	n, err := v.f.Read(p)
	v.h.Write(p[:n])
	if err == io.EOF {
		var got Digest
		v.h.Sum(got.sum[:0])
		got.ok = true
		if got != v.d {
			return n, &CorruptError{Digest: v.d, Path: v.path, Err: ErrDigestMismatch}
		}
	}
	return n, err
}

func (v *verifyReader) Close() error { return v.f.Close() }

// Blob is one result of GetMany.
type Blob struct {
	Digest Digest
	Data   []byte
	Err    error // ErrNotFound, a *CorruptError, or another read error
}

// GetMany fetches many blobs with bounded parallelism. The result has one
// entry per digest, in order; each carries its own error.
func (s *Store) GetMany(ctx context.Context, ds []Digest) []Blob {
	out := make([]Blob, len(ds))
	s.each(ctx, len(ds), func(i int) {
		b, err := s.Get(ctx, ds[i])
		out[i] = Blob{Digest: ds[i], Data: b, Err: err}
	})
	return out
}

// each runs fn(0..n-1) on at most s.parallel goroutines and waits for
// them; it stops handing out work once ctx is done.
//
// The goroutines are started once and take the next index until none is
// left. It started a goroutine per item (errgroup with a limit): a scan
// of 1000 worker records made 1000 goroutines, and each grew its stack
// to reach openat through Resolve, 10% of a placement's CPU in
// runtime.newstack and copystack (pprof, BenchmarkPlace, 1000 workers).
func (s *Store) each(ctx context.Context, n int, fn func(i int)) {
	var next atomic.Int64
	work := func() {
		for ctx.Err() == nil {
			i := int(next.Add(1)) - 1
			if i >= n {
				return
			}
			fn(i)
		}
	}
	var wg sync.WaitGroup
	for range min(s.parallel, n) - 1 {
		wg.Go(work)
	}
	work() // the caller is one of them
	wg.Wait()
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
