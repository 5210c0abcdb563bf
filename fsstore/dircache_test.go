package fsstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// A bind after a claim uses the folder the claim left open (dirCache).
// If that folder was removed meanwhile (by hand, or on another machine),
// the bind must land in the folder now at the name's path, made anew if
// need be, and never follow a link found there: a stale descriptor must
// not lose a record nor write outside the store.
func TestBindAfterFolderRemoved(t *testing.T) {
	ctx := context.Background()
	d := Sum([]byte("x"))
	for _, tc := range []struct {
		name    string
		replace func(t *testing.T, dir, outside string)
		foreign bool
	}{
		{"removed", func(t *testing.T, dir, _ string) {}, false},
		{"made again", func(t *testing.T, dir, _ string) {
			if err := os.Mkdir(dir, 0o777); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"a link in its place", func(t *testing.T, dir, outside string) {
			if err := os.Symlink(outside, dir); err != nil {
				t.Fatal(err)
			}
		}, true},
	} {
		for _, seal := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/seal=%v", tc.name, seal), func(t *testing.T) {
				s := newStore(t)
				outside := t.TempDir()
				if won, err := s.ClaimNew(ctx, "t/0/0", d, Meta{{"v", "claim"}}); !won || err != nil {
					t.Fatalf("ClaimNew = %v, %v", won, err)
				}
				dir := filepath.Join(s.names, "t", "0")
				if err := os.RemoveAll(dir); err != nil {
					t.Fatal(err)
				}
				tc.replace(t, dir, outside)
				bind := s.Bind
				if seal {
					bind = s.Seal
				}
				_, err := bind(ctx, "t/0/0", d, Meta{{"v", "result"}})
				if ents, _ := os.ReadDir(outside); len(ents) != 0 {
					t.Fatalf("bind wrote %d files outside the store", len(ents))
				}
				if tc.foreign {
					if !errors.Is(err, ErrForeign) {
						t.Fatalf("bind through a link = %v, want ErrForeign", err)
					}
					return
				}
				if err != nil {
					t.Fatalf("bind = %v, want the record written in the folder at the path", err)
				}
				b, err := s.Resolve(ctx, "t/0/0")
				if err != nil || b.Meta.Value("v") != "result" {
					t.Fatalf("Resolve = %v (v=%q), want the result's record", err, b.Meta.Value("v"))
				}
			})
		}
	}
}

// Binds to many folders keep at most dirCacheMax of them open, and every
// bind lands at its own name.
func TestDirCacheBounded(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	d := Sum([]byte("x"))
	const n = dirCacheMax + 10
	for i := range n {
		name := fmt.Sprintf("t/%d/0", i)
		if won, err := s.ClaimNew(ctx, name, d, nil); !won || err != nil {
			t.Fatalf("ClaimNew(%s) = %v, %v", name, won, err)
		}
	}
	for i := range n {
		name := fmt.Sprintf("t/%d/0", i)
		if _, err := s.Bind(ctx, name, d, Meta{{"i", fmt.Sprint(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	s.fds.dirs.mu.Lock()
	got, order := len(s.fds.dirs.fds), len(s.fds.dirs.order)
	s.fds.dirs.mu.Unlock()
	if got != dirCacheMax || order != dirCacheMax {
		t.Errorf("cached folders: %d (order %d), want %d", got, order, dirCacheMax)
	}
	for i := range n {
		b, err := s.Resolve(ctx, fmt.Sprintf("t/%d/0", i))
		if err != nil || b.Meta.Value("i") != fmt.Sprint(i) {
			t.Errorf("t/%d/0: %v, i=%q", i, err, b.Meta.Value("i"))
		}
	}
}

// ClaimNew makes a name's folder in a parent it keeps open (dirCache). If
// that parent was removed meanwhile, the claim must make the folder in
// the parent now at the path, and never through a link found there.
func TestClaimNewAfterParentRemoved(t *testing.T) {
	ctx := context.Background()
	d := Sum([]byte("x"))
	for _, tc := range []struct {
		name    string
		replace func(t *testing.T, dir, outside string)
		foreign bool
	}{
		{"removed", func(t *testing.T, dir, _ string) {}, false},
		{"made again", func(t *testing.T, dir, _ string) {
			if err := os.Mkdir(dir, 0o777); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"a link in its place", func(t *testing.T, dir, outside string) {
			if err := os.Symlink(outside, dir); err != nil {
				t.Fatal(err)
			}
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			outside := t.TempDir()
			if won, err := s.ClaimNew(ctx, "s/trial/0/0", d, nil); !won || err != nil {
				t.Fatalf("ClaimNew = %v, %v", won, err)
			}
			dir := filepath.Join(s.names, "s", "trial")
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
			tc.replace(t, dir, outside)
			won, err := s.ClaimNew(ctx, "s/trial/1/0", d, nil)
			if ents, _ := os.ReadDir(outside); len(ents) != 0 {
				t.Fatalf("ClaimNew wrote %d entries outside the store", len(ents))
			}
			if tc.foreign {
				if !errors.Is(err, ErrForeign) {
					t.Fatalf("ClaimNew through a link = %v, %v; want ErrForeign", won, err)
				}
				return
			}
			if !won || err != nil {
				t.Fatalf("ClaimNew = %v, %v; want won in the folder at the path", won, err)
			}
			if _, err := s.Resolve(ctx, "s/trial/1/0"); err != nil {
				t.Fatalf("Resolve = %v, want the claim", err)
			}
		})
	}
}

// Reads of a name whose folder a write left open (openName: Probe and
// Resolve relative to the cached folder) must see what is at the name's
// path now. Bug this guards against (issue 18's cut of the retry look to
// one lookup): in a removed folder every name is missing, so a cached
// descriptor of it would report a record bound since in the folder made
// anew as not found, unless the read notices the folder is gone
// (dirAlive) and goes by the path; and a link at the path must still be
// refused.
func TestReadAfterFolderRemoved(t *testing.T) {
	ctx := context.Background()
	d := Sum([]byte("x"))
	for _, tc := range []struct {
		name    string
		replace func(t *testing.T, s *Store, dir, outside string)
		want    error // of Resolve("t/0/1"); nil: found
		probe   Presence
	}{
		{"made again with a record", func(t *testing.T, s *Store, dir, _ string) {
			// Another process (a Store of its own) makes the folder anew
			// and binds the retry in it.
			other, err := Open(s.Root(), Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer other.closeFDs()
			if won, err := other.ClaimNew(ctx, "t/0/1", d, Meta{{"v", "retry"}}); !won || err != nil {
				t.Fatalf("ClaimNew(t/0/1) = %v, %v", won, err)
			}
		}, nil, Present},
		{"removed", func(t *testing.T, s *Store, dir, _ string) {}, ErrNotFound, Missing},
		{"a link in its place", func(t *testing.T, s *Store, dir, outside string) {
			if err := os.WriteFile(filepath.Join(outside, "1"), encodeRecord(d, Meta{{"v", "outside"}}), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(outside, dir); err != nil {
				t.Fatal(err)
			}
		}, ErrForeign, Missing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			outside := t.TempDir()
			if won, err := s.ClaimNew(ctx, "t/0/0", d, Meta{{"v", "claim"}}); !won || err != nil {
				t.Fatalf("ClaimNew = %v, %v", won, err)
			}
			dir := filepath.Join(s.names, "t", "0")
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
			tc.replace(t, s, dir, outside)
			b, err := s.Resolve(ctx, "t/0/1")
			switch {
			case tc.want == nil && err != nil:
				t.Errorf("Resolve(t/0/1) = %v, want the record bound in the folder made anew", err)
			case tc.want == nil && metaV(b) != "retry":
				t.Errorf("Resolve(t/0/1) meta = %v, want v=retry", b.Meta)
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Errorf("Resolve(t/0/1) = %v, %v; want %v", b, err, tc.want)
			}
			p, err := s.Probe(ctx, "t/0/1")
			if p != tc.probe || (tc.want == ErrForeign) != errors.Is(err, ErrForeign) {
				t.Errorf("Probe(t/0/1) = %v, %v; want %v", p, err, tc.probe)
			}
		})
	}
}

// A link at a name in a cached folder is refused by Resolve and reported
// Present by Probe, as by the path (openName opens the leaf O_NOFOLLOW).
func TestReadLinkInCachedFolder(t *testing.T) {
	ctx := context.Background()
	d := Sum([]byte("x"))
	s := newStore(t)
	if won, err := s.ClaimNew(ctx, "t/0/0", d, Meta{{"v", "claim"}}); !won || err != nil {
		t.Fatalf("ClaimNew = %v, %v", won, err)
	}
	target := filepath.Join(t.TempDir(), "rec")
	if err := os.WriteFile(target, encodeRecord(d, Meta{{"v", "outside"}}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(s.names, "t", "0", "1")); err != nil {
		t.Fatal(err)
	}
	if b, err := s.Resolve(ctx, "t/0/1"); !errors.Is(err, ErrForeign) {
		t.Errorf("Resolve(link) = %v, %v; want ErrForeign", b, err)
	}
	if p, err := s.Probe(ctx, "t/0/1"); p != Present || err != nil {
		t.Errorf("Probe(link) = %v, %v; want Present, nil", p, err)
	}
}

// A Put of bytes already stored refreshes the blob through its cached
// folder; with the folder removed by hand, the bytes are stored anew.
func TestPutAfterBlobFolderRemoved(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	b := []byte("blob")
	d, err := s.Put(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, b); err != nil { // cached folder, blob there
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Dir(s.blobPath(d))); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, b); err != nil {
		t.Fatalf("Put after its folder was removed: %v", err)
	}
	if got, err := s.Get(ctx, d); err != nil || string(got) != "blob" {
		t.Errorf("Get = %q, %v; want \"blob\"", got, err)
	}
}

func metaV(b Bound) string {
	v, _ := b.Meta.Get("v")
	return v
}

// Children of a folder that reads keep open (upDirs: a study's trial
// folder) lists it through that descriptor, not by walking its path
// again (issue 18: Next lists the trial folder each time it finds a
// number taken, and on NFS without a lookup cache each component of the
// path is a round trip). So a folder renamed by hand after a read is
// still the one listed, as it is still the one read; one removed is
// noticed (its listing is empty and it is no longer in the tree), and the
// folder at the path, made anew, is listed.
func TestChildrenThroughKeptFolder(t *testing.T) {
	ctx := context.Background()
	d := Sum([]byte("x"))
	bind := func(t *testing.T, s *Store, names ...string) {
		t.Helper()
		for _, n := range names {
			if _, err := s.Bind(ctx, n, d, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	children := func(t *testing.T, s *Store, prefix string) string {
		t.Helper()
		kids, err := s.Children(ctx, prefix)
		if err != nil {
			t.Fatalf("Children(%s): %v", prefix, err)
		}
		return fmt.Sprint(kids)
	}
	// A reader with a Store of its own, as another process (the writer's
	// Store reads through the folders its writes left open instead).
	reader := func(t *testing.T, w *Store) *Store {
		t.Helper()
		s, err := Open(w.Root(), Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	t.Run("renamed", func(t *testing.T) {
		w := newStore(t)
		bind(t, w, "st/t/1/0", "st/t/2/0")
		s := reader(t, w)
		if _, err := s.Resolve(ctx, "st/t/1/0"); err != nil { // keeps names/st/t
			t.Fatal(err)
		}
		dir := filepath.Join(s.Root(), "names", "st", "t")
		if err := os.Rename(dir, dir+"-moved"); err != nil {
			t.Fatal(err)
		}
		if got, want := children(t, s, "st/t"), "[1 2]"; got != want {
			t.Errorf("Children(st/t) after the folder was renamed = %s, want %s (the kept folder, as reads see it)", got, want)
		}
	})
	t.Run("removed", func(t *testing.T) {
		w := newStore(t)
		bind(t, w, "st/t/1/0")
		s := reader(t, w)
		if _, err := s.Resolve(ctx, "st/t/1/0"); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(filepath.Join(s.Root(), "names", "st", "t")); err != nil {
			t.Fatal(err)
		}
		if got, want := children(t, s, "st/t"), "[]"; got != want {
			t.Errorf("Children(st/t) once removed = %s, want %s", got, want)
		}
		bind(t, w, "st/t/7/0")
		if got, want := children(t, s, "st/t"), "[7]"; got != want {
			t.Errorf("Children(st/t) once made anew = %s, want %s", got, want)
		}
	})
}
