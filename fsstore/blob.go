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
	"syscall"

	"golang.org/x/sync/errgroup"
)

func (s *Store) blobPath(d Digest) string {
	h := d.Hex()
	return filepath.Join(s.blobs, h[:2], h[2:])
}

// Put stores b and returns its digest. Putting bytes that are already
// stored succeeds and writes nothing: a blob is never overwritten.
func (s *Store) Put(ctx context.Context, b []byte) (Digest, error) {
	if err := ctx.Err(); err != nil {
		return Digest{}, err
	}
	d := Sum(b)
	if _, err := os.Lstat(s.blobPath(d)); err == nil {
		return d, nil
	}
	tmp, err := s.writeTemp(bytes.NewReader(b), nil)
	if err != nil {
		return Digest{}, fmt.Errorf("put: %w", err)
	}
	return d, s.publishBlob(tmp.path, d)
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
	return d, cw.n, s.publishBlob(tmp.path, d)
}

func (s *Store) publishBlob(tmp string, d Digest) error {
	defer os.Remove(tmp)
	dst := s.blobPath(d)
	err := os.Link(tmp, dst)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(dst), 0o777); err != nil {
			return fmt.Errorf("put %s: %w", d, err)
		}
		err = os.Link(tmp, dst)
	}
	// EEXIST: the same bytes are already there (or a writer raced us with
	// them); content addressing makes that success.
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("put %s: %w", d, err)
	}
	return syncDir(filepath.Dir(dst))
}

// Get returns the blob d, verifying its digest: ErrNotFound if it is not
// stored, a *CorruptError if its bytes do not match.
func (s *Store) Get(ctx context.Context, d Digest) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if d.IsZero() {
		return nil, fmt.Errorf("get: zero digest")
	}
	p := s.blobPath(d)
	b, err := os.ReadFile(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESTALE) {
			return nil, fmt.Errorf("get %s: %w", d, ErrNotFound)
		}
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
	_, err := os.Lstat(s.blobPath(d))
	if err == nil {
		return true, nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
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
	p := s.blobPath(d)
	f, err := os.Open(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESTALE) {
			return nil, fmt.Errorf("get %s: %w", d, ErrNotFound)
		}
		return nil, fmt.Errorf("get %s: %w", d, err)
	}
	return &verifyReader{f: f, h: sha256.New(), d: d, path: p}, nil
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
func (s *Store) each(ctx context.Context, n int, fn func(i int)) {
	var g errgroup.Group
	g.SetLimit(s.parallel)
	for i := range n {
		if ctx.Err() != nil {
			break
		}
		g.Go(func() error { fn(i); return nil })
	}
	g.Wait()
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
