// Package admin holds the commands that change a soma store (a folder,
// or for gc and rm a bucket too) rather than look at it: creating a study without running a trial (soma init) and
// collecting garbage (soma gc: temp files left by dead writers,
// unreferenced blobs, and packing the records of ended trials).
package admin

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/s3store"
	"github.com/soma-hpc/soma/study"
)

// InitResult says what Init did.
type InitResult struct {
	Root    string
	Study   string
	Created bool // false: the study existed with the same spec
	Params  int
	Limit   int
}

// Init creates the store at root if needed, and the study name in it
// from spec, without running a trial. A study that exists with the same
// spec is left as it is (Created false); one with a different spec is a
// *study.SpecMismatchError that shows the difference. Safe to run from
// many processes at once: the study is created by claim.
func Init(ctx context.Context, root, name string, spec *study.Spec) (InitResult, error) {
	if err := study.ValidateName(name); err != nil {
		return InitResult{}, err
	}
	s, err := fsstore.Open(root, fsstore.Options{Create: true})
	if err != nil {
		return InitResult{}, err
	}
	defer s.Close()
	_, err = study.Open(ctx, s, name, nil, study.Options{})
	existed := err == nil
	if err != nil && !errors.Is(err, study.ErrNoStudy) {
		return InitResult{}, err
	}
	st, err := study.Open(ctx, s, name, spec, study.Options{})
	if err != nil {
		return InitResult{}, err
	}
	return InitResult{Root: s.Root(), Study: name, Created: !existed, Params: st.Space().Len(), Limit: st.Limit()}, nil
}

// Store is what GC and Remove need of a store: a folder
// (*fsstore.Store) or a bucket (*s3store.Store), as rootstore.Store
// hands either over. The two implement GC, RemoveTree and OpenBlob with
// the same contract, so nothing here learns which one it has.
type Store interface {
	study.Store
	// Root is the folder's absolute path, or s3://bucket/prefix.
	Root() string
	Unbind(ctx context.Context, name string) error
	List(ctx context.Context, prefix string) ([]string, error)
	RemoveTree(ctx context.Context, prefix string) error
	GC(ctx context.Context, o fsstore.GCOptions) (fsstore.GCReport, error)
	OpenBlob(ctx context.Context, d fsstore.Digest) (io.ReadCloser, error)
}

var (
	_ Store = (*fsstore.Store)(nil)
	_ Store = (*s3store.Store)(nil)
)

// GCOptions configure GC.
type GCOptions struct {
	// DryRun reports what would be removed and changes nothing (it does
	// not pack either).
	DryRun bool
	// OlderThan: temp files and unreferenced blobs younger than this, in
	// file-server time, are kept (a writer puts a blob before it binds a
	// name to it, up to study.BlobReuse before; on a bucket, a Put leaves
	// a blob up to s3store.RefreshAfter older than that). Zero means one
	// hour; below study.MinGCAge is refused.
	OlderThan time.Duration
	// KeepBlobs skips blob collection: only temp files are removed.
	KeepBlobs bool
	// NoPack skips packing the ended trials of each study.
	NoPack bool
}

// GCResult says what GC did (or would do, with DryRun).
type GCResult struct {
	fsstore.GCReport
	// Packed is what packing did, per study.
	Packed map[string]study.PackReport `json:"packed"`
	// Referenced counts the digests kept because something other than a
	// name's own digest mentions them (record meta, pack contents).
	Referenced int `json:"referenced"`
	// BlobsSkipped, when not empty, says why no blob was collected;
	// Corrupt then lists the unreadable records (store paths) that stop it.
	BlobsSkipped string   `json:"blobs_skipped,omitempty"`
	Corrupt      []string `json:"corrupt,omitempty"`
}

// leafKind reports whether records of kind (meta "kind") point at blobs
// known to mention no other blob: a trial's curve, a study's spec, a
// point claim, a study's watcher role (the empty curve). Any other blob
// bound to a name is read and every digest in it kept.
func leafKind(kind string) bool {
	switch kind {
	case "trial", "study", "point", "watch":
		return true
	}
	return false
}

// GC packs the ended trials of every study (unless NoPack or DryRun),
// then removes temp files older than OlderThan and, unless KeepBlobs,
// blobs that nothing references. It is conservative: a blob is kept when
// a name points at it, when any record's meta or name mentions its
// digest, when a bound blob of a kind it does not know (a pack, say)
// mentions it, or when it is younger than OlderThan. A corrupt record
// might point at any blob, so with one anywhere in the store no blob is
// collected (BlobsSkipped says which), and the rest of GC still runs.
// Safe to run while trials run, on a folder or a bucket (whose GCs say
// why each is safe).
func GC(ctx context.Context, s Store, o GCOptions) (GCResult, error) {
	res := GCResult{Packed: map[string]study.PackReport{}}
	if o.OlderThan != 0 && o.OlderThan < study.MinGCAge {
		return res, fmt.Errorf("gc: keeping only what is younger than %s is unsafe while trials run: a trial runner binds a blob up to %s after storing it (give %s or more; the default, an hour, suits NFS, whose listings lag)", o.OlderThan, study.BlobReuse, study.MinGCAge)
	}
	if !o.NoPack && !o.DryRun {
		names, err := study.List(ctx, s)
		if err != nil {
			return res, err
		}
		for _, name := range names {
			st, err := study.Open(ctx, s, name, nil, study.Options{})
			if err != nil {
				return res, fmt.Errorf("pack %s: %w", name, err)
			}
			rep, err := st.Pack(ctx, study.PackOptions{})
			if err != nil {
				return res, fmt.Errorf("pack %s: %w", name, err)
			}
			res.Packed[name] = rep
		}
	}
	var refs func(context.Context, []fsstore.Bound) (func(fsstore.Digest) bool, error)
	if !o.KeepBlobs {
		// From the names of GC's own scan, which starts after GC reads
		// the server's time: fsstore's GC says why that order matters.
		refs = func(ctx context.Context, bound []fsstore.Bound) (func(fsstore.Digest) bool, error) {
			keep, err := referenced(ctx, s, bound)
			res.Referenced = len(keep)
			return func(d fsstore.Digest) bool { return keep[d] }, err
		}
	}
	rep, err := s.GC(ctx, fsstore.GCOptions{
		TempOlderThan: o.OlderThan,
		Blobs:         !o.KeepBlobs,
		Refs:          refs,
		DryRun:        o.DryRun,
	})
	res.GCReport = rep
	if err != nil && rep.CorruptRec > 0 {
		res.BlobsSkipped = err.Error()
		res.Corrupt = rep.CorruptPaths
		return res, nil
	}
	return res, err
}

// referenced returns the digests mentioned anywhere but as a name's own
// digest: in names, in meta values, and inside bound blobs whose kind is
// not a known leaf (read as a stream, so a big blob costs no memory).
func referenced(ctx context.Context, s Store, bound []fsstore.Bound) (map[fsstore.Digest]bool, error) {
	keep := make(map[fsstore.Digest]bool)
	var hs hexScanner
	hs.found = func(h []byte) {
		if d, err := fsstore.ParseDigest(fsstore.Algo + ":" + string(h)); err == nil {
			keep[d] = true
		}
	}
	add := func(text string) {
		hs.reset()
		for i := 0; i < len(text); i++ {
			hs.feed(text[i])
		}
		hs.feed(' ')
	}
	seen := make(map[fsstore.Digest]bool)
	for _, b := range bound {
		add(b.Name)
		for _, p := range b.Meta {
			add(p.Key)
			add(p.Value)
		}
		if leafKind(b.Meta.Value("kind")) || seen[b.Digest] {
			continue
		}
		seen[b.Digest] = true
		if err := scanBlob(ctx, s, b.Digest, &hs); err != nil {
			return nil, err
		}
	}
	return keep, nil
}

// scanBlob feeds blob d to hs. A blob that is missing or corrupt
// mentions nothing that can be trusted; the name still keeps it.
func scanBlob(ctx context.Context, s Store, d fsstore.Digest, hs *hexScanner) error {
	rc, err := s.OpenBlob(ctx, d)
	var ce *fsstore.CorruptError
	switch {
	case errors.Is(err, fsstore.ErrNotFound), errors.As(err, &ce):
		return nil
	case err != nil:
		return fmt.Errorf("gc: %w", err)
	}
	defer rc.Close()
	hs.reset()
	br := bufio.NewReaderSize(rc, 1<<16)
	for {
		c, err := br.ReadByte()
		if err == io.EOF {
			hs.feed(' ')
			return nil
		}
		if errors.As(err, &ce) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("gc: blob %s: %w", d, err)
		}
		hs.feed(c)
	}
}

// hexScanner finds runs of exactly 64 lowercase hex digits in a byte
// stream: the text form of a SHA-256 digest, with or without "sha256:".
type hexScanner struct {
	run   [64]byte
	n     int // length of the current run (may exceed 64)
	found func(h []byte)
}

func (h *hexScanner) reset() { h.n = 0 }

func (h *hexScanner) feed(c byte) {
	if '0' <= c && c <= '9' || 'a' <= c && c <= 'f' {
		if h.n < len(h.run) {
			h.run[h.n] = c
		}
		h.n++
		return
	}
	if h.n == len(h.run) {
		h.found(h.run[:])
	}
	h.n = 0
}
