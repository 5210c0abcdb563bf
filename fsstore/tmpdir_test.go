package fsstore

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestTempFolderPerStore: each Store (each process) makes its temp files
// in a folder of its own under tmp/, so that the processes of one node do
// not queue on one folder's lock for every create, link and unlink (issue
// 18: 8 soma-trial processes on the 1 ms FUSE harness waited 21-25 ms per
// temp-file create in a shared tmp/).
func TestTempFolderPerStore(t *testing.T) {
	ctx := context.Background()
	s1 := newStore(t)
	s2, err := Open(s1.Root(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := s1.Put(ctx, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	tempOf := func(s *Store, name string) string {
		t.Helper()
		var path string
		s.beforeLink = func(tmp string) error {
			// Where the file is, not only what the messages would say.
			if _, err := os.Lstat(tmp); err != nil {
				t.Errorf("temp file: %v", err)
			}
			path = tmp
			return nil
		}
		defer func() { s.beforeLink = nil }()
		if won, err := s.Claim(ctx, name, d, nil); err != nil || !won {
			t.Fatalf("Claim(%s) = %v, %v", name, won, err)
		}
		return path
	}
	p1, p1b, p2 := tempOf(s1, "a/0"), tempOf(s1, "a/1"), tempOf(s2, "a/2")
	tmp := filepath.Join(s1.Root(), "tmp")
	for _, p := range []string{p1, p1b, p2} {
		if dir := filepath.Dir(filepath.Dir(p)); dir != tmp {
			t.Errorf("temp file %s: want it in a folder of tmp/ (%s/<host>.<pid>.<random>/)", p, tmp)
		}
	}
	if filepath.Dir(p1) != filepath.Dir(p1b) {
		t.Errorf("one Store's temp files in two folders: %s, %s", p1, p1b)
	}
	if filepath.Dir(p1) == filepath.Dir(p2) {
		t.Errorf("two Stores share the temp folder %s", filepath.Dir(p1))
	}
	// Published, the temp names are gone: nothing but the folders stays.
	if n := countFiles(t, tmp); n != 0 {
		t.Errorf("%d files under tmp/ after three claims, want 0", n)
	}
}

// TestGCTempFolders: soma gc removes old temp files in every process's
// folder and directly in tmp/ (where soma made them before issue 18, and
// an older soma may still), removes the folders of processes that are
// gone once empty and idle for the grace, never follows a link, and a
// live Store whose folder it removed makes it again at its next write.
func TestGCTempFolders(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	tmp := filepath.Join(s.Root(), "tmp")
	old := time.Now().Add(-2 * time.Hour)
	mk := func(rel string, dir bool) string {
		t.Helper()
		p := filepath.Join(tmp, rel)
		var err error
		if dir {
			err = os.MkdirAll(p, 0o755)
		} else {
			err = os.WriteFile(p, []byte("left by a crash"), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	age := func(p string) {
		t.Helper()
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	// A dead process's folder with a leftover, aged with it.
	dead := mk("h.1.dead", true)
	age(mk("h.1.dead/h.1.7-aaaa", false))
	age(dead)
	// A dead process's empty folder.
	empty := mk("h.2.empty", true)
	age(empty)
	// A live process's folder: an old leftover and a fresh file.
	live := mk("h.3.live", true)
	age(mk("h.3.live/h.3.1-old", false))
	fresh := mk("h.3.live/h.3.2-fresh", false)
	age(live)
	// An old file in tmp/ itself (the layout before issue 18).
	age(mk("h.4.9-flat", false))
	// A link to a folder outside: never entered.
	outside := t.TempDir()
	bait := filepath.Join(outside, "bait")
	if err := os.WriteFile(bait, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	age(bait)
	if err := os.Symlink(outside, filepath.Join(tmp, "h.5.link")); err != nil {
		t.Fatal(err)
	}

	rep, err := s.GC(ctx, GCOptions{TempOlderThan: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if rep.TempFiles != 3 || rep.TempFolders != 2 {
		t.Errorf("GC = %+v; want 3 temp files (the dead one's, the live one's old one, the flat one) and 2 folders (dead, empty)", rep)
	}
	for _, p := range []string{dead, empty, filepath.Join(tmp, "h.4.9-flat"), filepath.Join(live, "h.3.1-old")} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s: %v; want it removed", p, err)
		}
	}
	for _, p := range []string{live, fresh, bait, filepath.Join(tmp, "h.5.link")} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s: %v; want it kept", p, err)
		}
	}
	// GC's own Now made this Store's folder: it is kept, and so is its
	// clock file.
	if countClocks(t, tmp) != 1 {
		t.Errorf("%d clock files, want 1 (the Store's, in its folder)", countClocks(t, tmp))
	}

	// A live Store whose folder went (gc after an idle grace, or a
	// person) makes it again at its next write.
	if err := os.RemoveAll(s.tmpPath()); err != nil {
		t.Fatal(err)
	}
	d, err := s.Put(ctx, []byte("after"))
	if err != nil {
		t.Fatalf("Put after its temp folder was removed: %v", err)
	}
	if won, err := s.Claim(ctx, "b/0", d, nil); err != nil || !won {
		t.Fatalf("Claim after its temp folder was removed = %v, %v", won, err)
	}
}

// TestCloseLeavesNoTemp: a Store that wrote and read the server's time
// leaves nothing under tmp/ once closed. Bug: Store had no Close, and
// every command that wrote or asked the time (a read-only `soma status`
// too) left its folder and clock file in tmp/ until GC's grace passed.
func TestCloseLeavesNoTemp(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	tmp := filepath.Join(s.Root(), "tmp")
	d, err := s.Put(ctx, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, "a/0", d, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Now(ctx); err != nil {
		t.Fatal(err)
	}
	if got := entries(t, tmp); len(got) != 1 {
		t.Fatalf("tmp/ before Close holds %v, want this Store's folder", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := entries(t, tmp); len(got) != 0 {
		t.Errorf("tmp/ after Close holds %v, want nothing", got)
	}

	t.Run("used after Close", func(t *testing.T) {
		// A straggler (or a caller after Close) still works: it makes
		// its folder and clock again, and a second Close removes them.
		if _, err := s.Now(ctx); err != nil {
			t.Fatalf("Now after Close: %v", err)
		}
		if _, err := s.Claim(ctx, "a/1", d, nil); err != nil {
			t.Fatalf("Claim after Close: %v", err)
		}
		if b, err := s.Resolve(ctx, "a/1"); err != nil || b.Digest != d {
			t.Fatalf("Resolve(a/1) = %v, %v", b, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if got := entries(t, tmp); len(got) != 0 {
			t.Errorf("tmp/ after the second Close holds %v, want nothing", got)
		}
	})

	t.Run("a file still in the folder", func(t *testing.T) {
		// A temp file of a write still running keeps the folder: rmdir
		// removes only an empty one, and Close says nothing (GC's job).
		if _, err := s.Now(ctx); err != nil {
			t.Fatal(err)
		}
		own := filepath.Join(tmp, s.tmpSub)
		if err := os.WriteFile(filepath.Join(own, "busy"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("Close with a file in its folder: %v", err)
		}
		if got := entries(t, own); len(got) != 1 || got[0] != "busy" {
			t.Errorf("own temp folder after Close holds %v, want only busy (the clock file removed)", got)
		}
	})

	t.Run("no temp folder made", func(t *testing.T) {
		s := newStore(t)
		if err := s.Close(); err != nil {
			t.Errorf("Close of a Store that wrote nothing: %v", err)
		}
	})
}

// entries lists dir's names (none for a missing dir).
func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}
