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
	entries, err := os.ReadDir(s.tmp)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return rep, fmt.Errorf("gc: %w", err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".nfs") || !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if err != nil || !info.ModTime().Before(cutoff) {
			continue
		}
		rep.TempFiles++
		rep.TempBytes += info.Size()
		if !opts.DryRun {
			os.Remove(filepath.Join(s.tmp, e.Name()))
		}
	}
	if !opts.Blobs {
		return rep, nil
	}
	bound, corrupt, err := s.Scan(ctx, "")
	if err != nil {
		return rep, fmt.Errorf("gc: %w", err)
	}
	// A corrupt record might point at any blob: refuse to guess.
	if len(corrupt) > 0 {
		rep.CorruptRec = len(corrupt)
		return rep, fmt.Errorf("gc: %d corrupt records (first: %v); fix or remove them before collecting blobs", len(corrupt), corrupt[0])
	}
	live := make(map[Digest]bool, len(bound))
	for _, b := range bound {
		live[b.Digest] = true
	}
	err = filepath.WalkDir(s.blobs, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if e.IsDir() || strings.HasPrefix(e.Name(), ".nfs") {
			return nil
		}
		rel, _ := filepath.Rel(s.blobs, p)
		d, perr := ParseDigest(Algo + ":" + strings.ReplaceAll(rel, string(filepath.Separator), ""))
		if perr != nil {
			return nil // not ours
		}
		info, ierr := e.Info()
		if ierr != nil {
			return nil
		}
		if live[d] || (opts.Keep != nil && opts.Keep(d)) || !info.ModTime().Before(cutoff) {
			rep.BlobsKept++
			return nil
		}
		rep.Blobs++
		rep.BlobBytes += info.Size()
		if !opts.DryRun {
			os.Remove(p)
		}
		return nil
	})
	if err != nil {
		return rep, fmt.Errorf("gc: %w", err)
	}
	return rep, nil
}
