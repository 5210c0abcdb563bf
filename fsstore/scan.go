package fsstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// Scan returns every name bound under prefix ("" for all; "a/b" means
// "a/b" itself and everything below "a/b/"), with digest, meta and time,
// sorted by name. It walks the folders once and reads the records with
// bounded parallelism; it reads no blobs. Records that cannot be parsed
// are returned in corrupt, and the scan goes on.
//
// A listing is a view: on NFS it may miss names created in the last
// 30–60 s. Work is found by known names (Resolve), never by Scan alone.
func (s *Store) Scan(ctx context.Context, prefix string) (bound []Bound, corrupt []*CorruptError, err error) {
	names, err := s.List(ctx, prefix)
	if err != nil {
		return nil, nil, err
	}
	return s.readNames(ctx, names)
}

// readNames resolves names in parallel and splits the results.
func (s *Store) readNames(ctx context.Context, names []string) ([]Bound, []*CorruptError, error) {
	res := s.ResolveMany(ctx, names)
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	bound := make([]Bound, 0, len(res))
	var corrupt []*CorruptError
	for _, r := range res {
		var ce *CorruptError
		switch {
		case r.Err == nil:
			bound = append(bound, r.Bound)
		case errors.As(r.Err, &ce):
			corrupt = append(corrupt, ce)
		case errors.Is(r.Err, ErrNotFound):
			// Unbound between the listing and the read.
		default:
			return nil, nil, fmt.Errorf("scan: %w", r.Err)
		}
	}
	return bound, corrupt, nil
}

// List returns the bound names under prefix, sorted, without reading any
// record: one walk of the folders. Files that are not valid names
// (editor droppings, ".nfsXXXX" silly renames) are skipped.
func (s *Store) List(ctx context.Context, prefix string) ([]string, error) {
	if err := ValidatePrefix(prefix); err != nil {
		return nil, fmt.Errorf("scan: %w", err)
	}
	prefix = strings.TrimSuffix(prefix, "/")
	start := s.names
	if prefix != "" {
		start = s.namePath(prefix)
	}
	var names []string
	var walk func(dir, name string) error
	walk = func(dir, name string) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESTALE) {
				return nil
			}
			if errors.Is(err, syscall.ENOTDIR) && name != "" {
				names = append(names, name)
				return nil
			}
			return fmt.Errorf("scan %s: %w", prefix, err)
		}
		for _, e := range entries {
			seg := e.Name()
			if validateSegment(seg) != nil {
				continue
			}
			child := seg
			if name != "" {
				child = name + "/" + seg
			}
			if e.IsDir() {
				if err := walk(filepath.Join(dir, seg), child); err != nil {
					return err
				}
				continue
			}
			if e.Type().IsRegular() {
				names = append(names, child)
			}
		}
		return nil
	}
	if err := walk(start, prefix); err != nil {
		return nil, err
	}
	slices.Sort(names)
	return names, nil
}

// Children returns the segments directly below prefix (bound leaves and
// folders of deeper names alike), sorted: one directory read. It is how a
// layer above finds, say, the trial numbers of a study without opening
// any record.
func (s *Store) Children(ctx context.Context, prefix string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := ValidatePrefix(prefix); err != nil {
		return nil, fmt.Errorf("children: %w", err)
	}
	dir := s.names
	if p := strings.TrimSuffix(prefix, "/"); p != "" {
		dir = s.namePath(p)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESTALE) || errors.Is(err, syscall.ENOTDIR) {
			return nil, nil
		}
		return nil, fmt.Errorf("children %s: %w", prefix, err)
	}
	out := make([]string, 0, len(entries))
	for _, e := range entries {
		if validateSegment(e.Name()) == nil {
			out = append(out, e.Name())
		}
	}
	slices.Sort(out)
	return out, nil
}

// Lookup is one result of ResolveMany.
type Lookup struct {
	Bound Bound
	Err   error // nil, ErrNotFound, a *CorruptError, or another error
}

// ResolveMany resolves many names with bounded parallelism; the result has
// one entry per name, in order.
func (s *Store) ResolveMany(ctx context.Context, names []string) []Lookup {
	out := make([]Lookup, len(names))
	s.each(ctx, len(names), func(i int) {
		b, err := s.Resolve(ctx, names[i])
		out[i] = Lookup{Bound: b, Err: err}
	})
	return out
}
