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

	"golang.org/x/sys/unix"
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
//
// The walk never descends into a link: a link (or special file) with a
// valid name is listed as a name, and reading it reports it as foreign
// (a *CorruptError wrapping ErrForeign, with its path), so Scan returns
// it among the corrupt records.
func (s *Store) List(ctx context.Context, prefix string) ([]string, error) {
	if err := ValidatePrefix(prefix); err != nil {
		return nil, fmt.Errorf("scan: %w", err)
	}
	prefix = strings.TrimSuffix(prefix, "/")
	rel := "names"
	if prefix != "" {
		rel += "/" + prefix
	}
	fd, err := s.openBeneath(rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESTALE):
		return nil, nil
	case (errors.Is(err, syscall.ENOTDIR) || isForeign(err)) && prefix != "":
		return []string{prefix}, nil // a leaf (or a link: Resolve says so)
	case isForeign(err):
		return nil, fmt.Errorf("scan: %w", s.foreign("", Digest{}, rel))
	case err != nil:
		return nil, fmt.Errorf("scan %s: %w", prefix, err)
	}
	var names []string
	// walk lists the open folder fd (the name prefix name) and closes it.
	var walk func(fd int, dir, name string) error
	walk = func(fd int, dir, name string) error {
		f := os.NewFile(uintptr(fd), dir)
		defer f.Close()
		if err := ctx.Err(); err != nil {
			return err
		}
		entries, err := f.ReadDir(-1)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESTALE) {
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
			if !e.IsDir() {
				names = append(names, child) // a record, or foreign
				continue
			}
			cfd, err := openatRetry(fd, seg, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			switch {
			case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESTALE):
				continue // removed since the listing
			case errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.ELOOP):
				names = append(names, child) // replaced since the listing: Resolve says by what
				continue
			case err != nil:
				return fmt.Errorf("scan %s: %w", prefix, err)
			}
			if err := walk(cfd, filepath.Join(dir, seg), child); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(fd, filepath.Join(s.root, filepath.FromSlash(rel)), prefix); err != nil {
		return nil, err
	}
	slices.Sort(names)
	return names, nil
}

// Children returns the segments directly below prefix (bound leaves and
// folders of deeper names alike), sorted: one directory read. It is how a
// layer above finds, say, the trial numbers of a study without opening
// any record. A link among them is listed (reading it says foreign); a
// link at prefix or above it is not followed: a *CorruptError wrapping
// ErrForeign.
func (s *Store) Children(ctx context.Context, prefix string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := ValidatePrefix(prefix); err != nil {
		return nil, fmt.Errorf("children: %w", err)
	}
	rel := "names"
	if p := strings.TrimSuffix(prefix, "/"); p != "" {
		rel += "/" + p
	}
	if names, ok := s.childrenKept(rel); ok {
		return names, nil
	}
	fd, err := s.openBeneath(rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESTALE) || errors.Is(err, syscall.ENOTDIR):
		return nil, nil
	case isForeign(err):
		return nil, fmt.Errorf("children %s: %w", prefix, s.foreign(strings.TrimSuffix(prefix, "/"), Digest{}, rel))
	case err != nil:
		return nil, fmt.Errorf("children %s: %w", prefix, err)
	}
	f := os.NewFile(uintptr(fd), filepath.Join(s.root, filepath.FromSlash(rel)))
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESTALE) {
			return nil, nil
		}
		return nil, fmt.Errorf("children %s: %w", prefix, err)
	}
	return segments(names), nil
}

// childrenKept lists the folder rel through the descriptor that reads
// keep of it (upDirs: a study's trial folder, once a record in it was
// read), opening "." in it: no lookup of each component of its path, each
// a round trip on NFS without a lookup cache. Bug (issue 18, in round
// trips): Next lists the trial folder each time it finds a number taken
// that its last look had free (learnTaken), and each listing walked
// names/study/<s>/trial again: with 8 processes on
// internal/tools/slowfs, 16 listings a process, 4 LOOKUPs each. ok false:
// rel is not kept, or was removed (an empty listing of a folder no
// longer in the tree: dirAlive); the caller lists it by its path.
func (s *Store) childrenKept(rel string) ([]string, bool) {
	ufd, ok := s.fds.up.kept(rel)
	if !ok {
		return nil, false
	}
	fd, err := openatRetry(ufd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, false
	}
	f := os.NewFile(uintptr(fd), filepath.Join(s.root, filepath.FromSlash(rel)))
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil || len(names) == 0 && !dirAlive(fd) {
		// Removed, or unreadable: the path says which.
		s.fds.up.drop(rel, ufd)
		return nil, false
	}
	return segments(names), true
}

// segments returns the names that are valid name segments, sorted.
func segments(names []string) []string {
	out := make([]string, 0, len(names))
	for _, n := range names {
		if validateSegment(n) == nil {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
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
