package fsstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// snapshot describes every file under dir (path, mode, size, mtime,
// content) so a test can tell that nothing there changed.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err != nil {
			fmt.Fprintf(&b, "%s: %v\n", p, err)
			return nil
		}
		info, _ := e.Info()
		fmt.Fprintf(&b, "%s %v %d %d", p, info.Mode(), info.Size(), info.ModTime().UnixNano())
		if info.Mode().IsRegular() {
			c, _ := os.ReadFile(p)
			fmt.Fprintf(&b, " %q", c)
		}
		b.WriteByte('\n')
		return nil
	})
	return b.String()
}

// A record file valid as soma's own, for planting outside the root: a
// store that follows a link would take it for a bound (and sealed) name.
func plantRecord(t *testing.T, path string) {
	t.Helper()
	d := Sum([]byte("outside"))
	if err := os.WriteFile(path, encodeRecord(d, Meta{{"state", "done"}}), 0o777); err != nil {
		t.Fatal(err)
	}
}

// Bug (issue 13, item 2): with names/study/s1/trial/46 a symbolic link to
// a folder outside the root, soma-trial wrote its record into that
// folder. No write follows a link inside the root (a folder on the way
// or the name itself): each is refused with ErrForeign naming the link,
// and nothing outside changes. Reads report the link as foreign with its
// path, scans do not descend into it, and GC then collects no blob. Run
// with openat2 and with the component-by-component fallback of kernels
// without it.
func TestNoFollow(t *testing.T) {
	for _, fallback := range []bool{false, true} {
		t.Run(fmt.Sprintf("fallback=%v", fallback), func(t *testing.T) {
			testNoFollow(t, fallback)
		})
	}
}

func testNoFollow(t *testing.T, fallback bool) {
	ctx := context.Background()
	// setup returns a store whose names/a/b is a link to a folder outside
	// (folder=true), or whose names/a/b/c is a link to a record file
	// outside (folder=false); and the outside folder.
	setup := func(t *testing.T, folder bool) (*Store, string) {
		t.Helper()
		s := newStore(t)
		s.fds.root.noOpenat2.Store(fallback)
		out := t.TempDir()
		plantRecord(t, filepath.Join(out, "c"))
		if err := os.MkdirAll(filepath.Join(s.names, "a"), 0o777); err != nil {
			t.Fatal(err)
		}
		link, target := filepath.Join(s.names, "a", "b"), out
		if !folder {
			if err := os.MkdirAll(filepath.Join(s.names, "a", "b"), 0o777); err != nil {
				t.Fatal(err)
			}
			link, target = filepath.Join(s.names, "a", "b", "c"), filepath.Join(out, "c")
		}
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		return s, out
	}
	d := Sum([]byte("x"))
	ops := []struct {
		name string
		do   func(s *Store, name string) error
		// replaces: at a linked leaf the op replaces the link itself
		// (rename(2) never follows its target) rather than fail.
		replaces bool
	}{
		{"claim", func(s *Store, n string) error { _, err := s.Claim(ctx, n, d, nil); return err }, false},
		{"claim a new name in it", func(s *Store, n string) error { _, err := s.Claim(ctx, n+"-new", d, nil); return err }, false},
		{"claim new", func(s *Store, n string) error { _, err := s.ClaimNew(ctx, n, d, nil); return err }, false},
		{"claim new: a new name in it", func(s *Store, n string) error { _, err := s.ClaimNew(ctx, n+"-new", d, nil); return err }, false},
		{"bind", func(s *Store, n string) error { _, err := s.Bind(ctx, n, d, nil); return err }, true},
		{"seal", func(s *Store, n string) error { _, err := s.Seal(ctx, n, d, nil); return err }, true},
		{"unbind", func(s *Store, n string) error { return s.Unbind(ctx, n) }, false},
		{"touch", func(s *Store, n string) error { _, err := s.Touch(ctx, n); return err }, false},
		{"touch resolve", func(s *Store, n string) error { _, err := s.TouchResolve(ctx, n); return err }, false},
		{"resolve", func(s *Store, n string) error { _, err := s.Resolve(ctx, n); return err }, false},
	}
	for _, folder := range []bool{true, false} {
		where := "linked leaf"
		if folder {
			where = "linked folder"
		}
		for _, op := range ops {
			t.Run(where+"/"+op.name, func(t *testing.T) {
				s, out := setup(t, folder)
				before := snapshot(t, out)
				name := "a/b/c"
				if strings.HasSuffix(op.name, "a new name in it") && !folder {
					t.Skip("a new name next to a linked leaf is an ordinary name")
				}
				err := op.do(s, name)
				if got := snapshot(t, out); got != before {
					t.Fatalf("%s wrote outside the root:\nbefore:\n%s\nafter:\n%s", op.name, before, got)
				}
				if op.replaces && !folder {
					if err != nil {
						t.Fatalf("%s over a linked leaf: %v, want the link replaced", op.name, err)
					}
					if st, err := os.Lstat(s.namePath(name)); err != nil || !st.Mode().IsRegular() {
						t.Fatalf("after %s the name is %v (%v), want a record file", op.name, st.Mode(), err)
					}
					return
				}
				var ce *CorruptError
				if !errors.Is(err, ErrForeign) || !errors.As(err, &ce) {
					t.Fatalf("%s = %v, want a *CorruptError wrapping ErrForeign", op.name, err)
				}
				wantPath := filepath.Join(s.names, "a", "b")
				if !folder {
					wantPath = filepath.Join(wantPath, "c")
				}
				if ce.Path != wantPath || !strings.Contains(err.Error(), wantPath) {
					t.Errorf("%s: path %q in %q, want %q", op.name, ce.Path, err, wantPath)
				}
			})
		}
		t.Run(where+"/scan reports it and does not descend", func(t *testing.T) {
			s, _ := setup(t, folder)
			bound, corrupt, err := s.Scan(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			if len(bound) != 0 {
				t.Errorf("Scan bound %v, want nothing (the only record is outside)", bound)
			}
			if len(corrupt) != 1 || !errors.Is(corrupt[0], ErrForeign) || !strings.HasPrefix(corrupt[0].Path, filepath.Join(s.names, "a", "b")) {
				t.Fatalf("Scan corrupt = %v, want the link reported as foreign", corrupt)
			}
			// Never Sealed through a link; and a linked folder is an error,
			// not Present: every name below it would look bound, and a
			// reader probing attempt after attempt would never end.
			p, err := s.Probe(ctx, "a/b/c")
			if folder && (!errors.Is(err, ErrForeign) || p != Missing) || !folder && (err != nil || p != Present) {
				t.Errorf("Probe = %v, %v; want Present for a linked leaf, ErrForeign for a linked folder", p, err)
			}
			if _, err := s.Children(ctx, "a/b"); folder && !errors.Is(err, ErrForeign) {
				t.Errorf("Children of a linked folder = %v, want ErrForeign", err)
			}
		})
		t.Run(where+"/gc collects no blob", func(t *testing.T) {
			s, _ := setup(t, folder)
			orphan, err := s.Put(ctx, []byte("nobody points here"))
			if err != nil {
				t.Fatal(err)
			}
			old := time.Now().Add(-2 * time.Hour)
			os.Chtimes(s.blobPath(orphan), old, old)
			rep, err := s.GC(ctx, GCOptions{Blobs: true})
			if err == nil || rep.CorruptRec != 1 || rep.Blobs != 0 {
				t.Errorf("GC = %+v, %v; want it to refuse blobs while a linked record exists", rep, err)
			}
			if ok, _ := s.Has(ctx, orphan); !ok {
				t.Errorf("GC removed a blob while a linked record exists")
			}
		})
	}

	t.Run("blobs", func(t *testing.T) {
		for _, where := range []string{"blobs/sha256", "blobs/sha256/xx", "blobs/sha256/xx/leaf"} {
			t.Run(where, func(t *testing.T) {
				s := newStore(t)
				s.fds.root.noOpenat2.Store(fallback)
				out := t.TempDir()
				b := []byte("blob under a link")
				d := Sum(b)
				h := d.Hex()
				var link string
				switch where {
				case "blobs/sha256":
					os.RemoveAll(s.blobs)
					link = s.blobs
				case "blobs/sha256/xx":
					link = filepath.Join(s.blobs, h[:2])
				default:
					os.MkdirAll(filepath.Join(s.blobs, h[:2]), 0o777)
					link = s.blobPath(d)
					os.WriteFile(filepath.Join(out, "blob"), b, 0o666)
					out = filepath.Join(out, "blob")
				}
				if err := os.Symlink(out, link); err != nil {
					t.Fatal(err)
				}
				before := snapshot(t, filepath.Dir(out))
				if _, err := s.Put(ctx, b); !errors.Is(err, ErrForeign) {
					t.Errorf("Put = %v, want ErrForeign", err)
				}
				if _, err := s.Get(ctx, d); !errors.Is(err, ErrForeign) {
					t.Errorf("Get = %v, want ErrForeign", err)
				}
				if got := snapshot(t, filepath.Dir(out)); got != before {
					t.Fatalf("Put wrote outside the root:\nbefore:\n%s\nafter:\n%s", before, got)
				}
			})
		}
	})

	t.Run("tmp", func(t *testing.T) {
		root := filepath.Join(t.TempDir(), "root")
		if _, err := Open(root, Options{Create: true}); err != nil {
			t.Fatal(err)
		}
		out := t.TempDir()
		os.RemoveAll(filepath.Join(root, "tmp"))
		if err := os.Symlink(out, filepath.Join(root, "tmp")); err != nil {
			t.Fatal(err)
		}
		s, err := Open(root, Options{})
		if err != nil {
			t.Fatal(err)
		}
		s.fds.root.noOpenat2.Store(fallback)
		_, err = s.Put(ctx, []byte("y"))
		if !errors.Is(err, ErrForeign) || !strings.Contains(err.Error(), filepath.Join(root, "tmp")) {
			t.Errorf("Put with tmp/ a link = %v, want ErrForeign naming tmp", err)
		}
		if ents, _ := os.ReadDir(out); len(ents) != 0 {
			t.Errorf("a temp file was written outside the root: %v", ents)
		}
	})
}

// The root itself may be a link (--root ~/scratch/x where scratch is a
// link): only links inside the root are refused.
func TestRootMayBeALink(t *testing.T) {
	ctx := context.Background()
	real := filepath.Join(t.TempDir(), "real")
	link := filepath.Join(t.TempDir(), "scratch")
	if err := os.MkdirAll(real, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	s, err := Open(filepath.Join(link), Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	d, err := s.Put(ctx, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	if won, err := s.Claim(ctx, "study/s/trial/0/0", d, nil); !won || err != nil {
		t.Fatalf("Claim through a linked root = %v, %v", won, err)
	}
	if _, err := s.Touch(ctx, "study/s/trial/0/0"); err != nil {
		t.Fatal(err)
	}
	names, err := s.List(ctx, "")
	if err != nil || !slices.Equal(names, []string{"study/s/trial/0/0"}) {
		t.Fatalf("List = %v, %v", names, err)
	}
	if _, err := os.Stat(filepath.Join(real, "names", "study", "s", "trial", "0", "0")); err != nil {
		t.Errorf("record not in the real folder: %v", err)
	}
}

// tmp/ removed by hand while a Store is open (its descriptor then names
// a removed folder): the next write makes it again, once, and goes on.
func TestTmpRemovedByHand(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	if _, err := s.Put(ctx, []byte("before")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(s.tmp); err != nil {
		t.Fatal(err)
	}
	d, err := s.Put(ctx, []byte("after"))
	if err != nil {
		t.Fatalf("Put after tmp/ was removed: %v", err)
	}
	if won, err := s.Claim(ctx, "a/0", d, nil); !won || err != nil {
		t.Fatalf("Claim after tmp/ was removed = %v, %v", won, err)
	}
	if st, err := os.Lstat(s.tmp); err != nil || !st.IsDir() {
		t.Errorf("tmp/ not made again: %v", err)
	}
}
