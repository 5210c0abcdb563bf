package fsstore

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// countClocks counts the clock files (Now) in the folder tmp.
func countClocks(t *testing.T, tmp string) int {
	t.Helper()
	n := 0
	// Each Store's clock file is in its own folder under tmp/ (tmpDir).
	err := filepath.WalkDir(tmp, func(p string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !e.IsDir() && strings.Contains(e.Name(), ".clock-") {
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestNowTouchesOneClockFile: Now reads the server's time from one file
// per Store, made once and touched at every call, instead of a new
// fsynced file per call (issue 15: one journal commit per placement).
func TestNowTouchesOneClockFile(t *testing.T) {
	ctx := t.Context()
	s := newStore(t)
	d, err := s.Put(ctx, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	var last time.Time
	for i := range 20 {
		// The server's now is never before the time it stamped on a
		// record written just before.
		b, err := s.Bind(ctx, "clock/probe", d, nil)
		if err != nil {
			t.Fatal(err)
		}
		now, err := s.Now(ctx)
		if err != nil {
			t.Fatalf("Now #%d: %v", i, err)
		}
		if now.Before(b.Time) || now.Before(last) {
			t.Fatalf("Now #%d = %v; want >= the record's %v and the last Now %v", i, now, b.Time, last)
		}
		last = now
	}
	if got := countFiles(t, s.tmp); got != 1 {
		t.Errorf("%d files in tmp/ after 20 Nows, want 1 (the clock file)", got)
	}
	if got := countClocks(t, s.tmp); got != 1 {
		t.Errorf("%d clock files, want 1", got)
	}
	// A second Store (another process, on another machine) has its own.
	s2, err := Open(s.Root(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Now(ctx); err != nil {
		t.Fatal(err)
	}
	if got := countClocks(t, s.tmp); got != 2 {
		t.Errorf("%d clock files after a second Store's Now, want 2", got)
	}
}

// TestNowAfterClockRemoved: GC (after an idle grace) or a person may
// remove the clock file, or all of tmp/, under an open Store; Now still
// answers, and GC leaves a clock file in use alone.
func TestNowAfterClockRemoved(t *testing.T) {
	ctx := t.Context()
	s := newStore(t)
	if _, err := s.Now(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // coarse kernel timestamps
	rep, err := s.GC(ctx, GCOptions{TempOlderThan: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if rep.TempFiles != 0 || countClocks(t, s.tmp) != 1 {
		t.Errorf("GC removed %d temp files, %d clock files left; want 0 and 1 (GC's own Now touched it)", rep.TempFiles, countClocks(t, s.tmp))
	}
	if err := os.RemoveAll(filepath.Join(s.Root(), "tmp")); err != nil {
		t.Fatal(err)
	}
	t0, err := s.Now(ctx)
	if err != nil {
		t.Fatalf("Now after tmp/ was removed: %v", err)
	}
	d, err := s.Put(ctx, []byte("after"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Bind(ctx, "after", d, nil)
	if err != nil {
		t.Fatal(err)
	}
	t1, err := s.Now(ctx)
	if err != nil || t1.Before(b.Time) || t1.Before(t0) {
		t.Errorf("Now = %v, %v; want >= %v and %v", t1, err, b.Time, t0)
	}
}
