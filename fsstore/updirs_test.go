package fsstore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// A read of a name in a folder no write of this Store left open (another
// process's trial) goes through the folder two levels up, kept open
// (upDirs). If that folder is removed and made again meanwhile (a study
// removed and made anew by another process), the kept descriptor is of
// a removed folder, where every name is missing: the read must notice
// (dirAlive) and go by the path, finding what is bound now; and a link at
// the folder, or at a folder below the kept one, must still be refused.
func TestReadThroughKeptUpFolder(t *testing.T) {
	ctx := context.Background()
	d := Sum([]byte("x"))
	for _, tc := range []struct {
		name    string
		replace func(t *testing.T, w *Store, up, outside string)
		want    error // of Resolve("t/0/0"); nil: found, v=again
		probe   Presence
	}{
		{"kept", nil, nil, Present},
		{"made again with a record", func(t *testing.T, w *Store, up, _ string) {
			if err := os.RemoveAll(up); err != nil {
				t.Fatal(err)
			}
			if won, err := w.ClaimNew(ctx, "t/0/0", d, Meta{{"v", "again"}}); !won || err != nil {
				t.Fatalf("ClaimNew(t/0/0) = %v, %v", won, err)
			}
		}, nil, Present},
		{"removed", func(t *testing.T, _ *Store, up, _ string) {
			if err := os.RemoveAll(up); err != nil {
				t.Fatal(err)
			}
		}, ErrNotFound, Missing},
		{"a link in its place", func(t *testing.T, _ *Store, up, outside string) {
			if err := os.RemoveAll(up); err != nil {
				t.Fatal(err)
			}
			mkRecord(t, filepath.Join(outside, "0"), d)
			if err := os.Symlink(outside, up); err != nil {
				t.Fatal(err)
			}
		}, ErrForeign, Missing},
		{"a link below it", func(t *testing.T, _ *Store, up, outside string) {
			if err := os.RemoveAll(filepath.Join(up, "0")); err != nil {
				t.Fatal(err)
			}
			mkRecord(t, filepath.Join(outside, "0", "0"), d)
			if err := os.Symlink(filepath.Join(outside, "0"), filepath.Join(up, "0")); err != nil {
				t.Fatal(err)
			}
		}, ErrForeign, Missing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newStore(t) // the writer: another process
			defer w.closeFDs()
			if won, err := w.ClaimNew(ctx, "t/0/0", d, Meta{{"v", "again"}}); !won || err != nil {
				t.Fatalf("ClaimNew = %v, %v", won, err)
			}
			r, err := Open(w.Root(), Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer r.closeFDs()
			if b, err := r.Resolve(ctx, "t/0/0"); err != nil || metaV(b) != "again" {
				t.Fatalf("first Resolve(t/0/0) = %v, %v", b, err)
			}
			if _, ok := r.fds.up.fds["names/t"]; !ok {
				t.Fatalf("names/t not kept open after a read below it (upDirs)")
			}
			if tc.replace != nil {
				tc.replace(t, w, filepath.Join(w.names, "t"), t.TempDir())
			}
			b, err := r.Resolve(ctx, "t/0/0")
			switch {
			case tc.want == nil && (err != nil || metaV(b) != "again"):
				t.Errorf("Resolve(t/0/0) = %v, %v; want the record bound now (v=again)", b, err)
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Errorf("Resolve(t/0/0) = %v, %v; want %v", b, err, tc.want)
			}
			p, err := r.Probe(ctx, "t/0/0")
			if p != tc.probe || (tc.want == ErrForeign) != errors.Is(err, ErrForeign) {
				t.Errorf("Probe(t/0/0) = %v, %v; want %v", p, err, tc.probe)
			}
		})
	}
}

// mkRecord writes a record of d at path (outside the store), making its
// folder.
func mkRecord(t *testing.T, path string, d Digest) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, encodeRecord(d, Meta{{"v", "outside"}}), 0o644); err != nil {
		t.Fatal(err)
	}
}
