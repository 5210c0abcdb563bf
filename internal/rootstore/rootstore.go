// Package rootstore opens the store a root names: a folder (package
// fsstore) or a bucket, s3://bucket/prefix (package s3store). What study,
// soma-trial and the views need of a store is the interface Store, which
// both implement; nothing above it learns which one it has (DESIGN.md,
// "On disk"; seed 004).
package rootstore

import (
	"context"
	"fmt"
	"io"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/s3store"
	"github.com/soma-hpc/soma/study"
)

// Store is a store as study, soma-trial, the views and soma gc and rm
// use it: study's own interface, Unbind (packing retires merged packs
// with it), Root for messages, and what the admin commands need (List,
// RemoveTree, GC, OpenBlob), which both stores implement with the same
// contract (s3store's GC says how it keeps blobs safe without rename).
type Store interface {
	study.Store
	Unbind(ctx context.Context, name string) error
	// Root is the folder's absolute path, or s3://bucket/prefix.
	Root() string
	List(ctx context.Context, prefix string) ([]string, error)
	RemoveTree(ctx context.Context, prefix string) error
	GC(ctx context.Context, o fsstore.GCOptions) (fsstore.GCReport, error)
	OpenBlob(ctx context.Context, d fsstore.Digest) (io.ReadCloser, error)
	// Close removes what the store made for this process alone (a
	// folder's temp folder and clock file): defer it after Open.
	Close() error
}

var (
	_ Store = (*fsstore.Store)(nil)
	_ Store = (*s3store.Store)(nil)
)

// Options configure Open.
type Options struct {
	// Create makes the store if the root holds none.
	Create bool
}

// IsBucket reports whether root names a bucket (s3://...).
func IsBucket(root string) bool { return s3store.IsRoot(root) }

// Open opens the store at root: s3://bucket/prefix with s3store (which
// first proves the endpoint enforces conditional writes), anything else
// as a folder with fsstore. Errors are the stores' own.
func Open(ctx context.Context, root string, o Options) (Store, error) {
	if IsBucket(root) {
		return s3store.Open(ctx, root, s3store.Options{Create: o.Create})
	}
	return fsstore.Open(root, fsstore.Options{Create: o.Create})
}

// Folder returns s's folder store, for the commands that work on files
// (worker registry, Slurm job records); ok false for a bucket.
func Folder(s Store) (f *fsstore.Store, ok bool) {
	f, ok = s.(*fsstore.Store)
	return f, ok
}

// NeedFolder is Folder for a command that has no bucket version: an
// error that names the command and the root for a bucket.
func NeedFolder(s Store, what string) (*fsstore.Store, error) {
	if f, ok := Folder(s); ok {
		return f, nil
	}
	return nil, fmt.Errorf("%s: %s is a bucket, and %s works on a study folder only (workers and Slurm jobs keep their records as files: give the folder they use)", what, s.Root(), what)
}
