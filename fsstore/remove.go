package fsstore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// RemoveTree removes every name under prefix, and the folders that held
// them, for good (soma rm). prefix must name a folder of names (at least
// two segments, "study/s"): the store's own folders are never removed.
// Removal is through an os.Root at the names folder, so a link inside the
// tree is removed as a link and never followed out of the store. A name
// under prefix bound again while it runs (a runner still writing) may
// survive; nothing else is touched. Blobs stay until GC finds nothing
// refers to them.
//
// It is not atomic: a reader during the removal sees part of the tree.
// Callers remove the record that makes the tree meaningful first (a
// study's spec).
func (s *Store) RemoveTree(ctx context.Context, prefix string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	prefix = strings.TrimSuffix(prefix, "/")
	if err := ValidatePrefix(prefix); err != nil {
		return fmt.Errorf("remove: %w", err)
	}
	if !strings.Contains(prefix, "/") {
		return fmt.Errorf("remove %q: want a folder below the top (such as study/NAME)", prefix)
	}
	r, err := os.OpenRoot(s.names)
	if err != nil {
		return fmt.Errorf("remove %s: %w", prefix, err)
	}
	defer r.Close()
	if err := r.RemoveAll(filepath.FromSlash(prefix)); err != nil {
		return fmt.Errorf("remove %s: %w", prefix, err)
	}
	// The dircache may hold folders of the tree open: close them now
	// rather than hold removed folders (a write into one would fail with
	// ENOENT and open the path again anyway; TestRemoveTree).
	s.dropDirs(prefix)
	return nil
}

// dropDirs closes the cached folders at and below the name prefix.
func (s *Store) dropDirs(prefix string) {
	rel := "names/" + prefix
	c := &s.fds.dirs
	c.mu.Lock()
	defer c.mu.Unlock()
	keep := c.order[:0]
	for _, r := range c.order {
		if r == rel || strings.HasPrefix(r, rel+"/") {
			unix.Close(c.fds[r])
			delete(c.fds, r)
			continue
		}
		keep = append(keep, r)
	}
	c.order = keep
}
