package runlog

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/soma-hpc/soma/fsstore"
)

// newTestWriter opens worker 0 of pid 7 on nodeA in dir (made).
func newTestWriter(t *testing.T, dir string) *Writer {
	t.Helper()
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	b, err := fsstore.OpenBeneath(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	wl, err := Open(b, "nodeA", 7, 0)
	if err != nil {
		t.Fatal(err)
	}
	return wl
}

// Worker logs through their writer, read back by FindLog and CopyRange.
func TestWriterRanges(t *testing.T) {
	root := t.TempDir()
	dir := Dir(root, "s")
	wl := newTestWriter(t, dir)
	attempt := func(n, a int, out, errOut string, end bool) {
		t.Helper()
		if err := wl.Mark("start", n, a); err != nil {
			t.Fatal(err)
		}
		if _, err := wl.Out.WriteString(out); err != nil { // the objective's stdout
			t.Fatal(err)
		}
		if _, err := wl.Err.WriteString(errOut); err != nil { // its stderr
			t.Fatal(err)
		}
		if end {
			if err := wl.Mark("end", n, a); err != nil {
				t.Fatal(err)
			}
		}
	}
	attempt(0, 0, "zero\n0.5\n", "", true)
	attempt(3, 1, "three\n", "warning: three\n", true)
	attempt(4, 0, "four, end lost\n", "", false) // its end mark never written
	attempt(5, 0, "five, running\n", "still going\n", false)
	if err := wl.Close(); err != nil {
		t.Fatal(err)
	}
	// Another worker's index, with a torn last line, is read too.
	os.WriteFile(filepath.Join(dir, "nodeB.9.1.out"), []byte("b\n"), 0o666)
	os.WriteFile(filepath.Join(dir, "nodeB.9.1.idx"), []byte("start 9 0 0 0\nend 9 0 2 0\nstart 10 0 2"), 0o666)

	read := func(n, a int, stderr bool) (string, Attempt) {
		t.Helper()
		loc, ok, err := Find(root, "s", n, a)
		if err != nil || !ok {
			t.Fatalf("Find(%d, %d) = %v, %v", n, a, ok, err)
		}
		path, from, to := loc.Out, loc.OutStart, loc.OutEnd
		if stderr {
			path, from, to = loc.Err, loc.ErrStart, loc.ErrEnd
		}
		if !loc.Ended {
			to = -1
		}
		var b bytes.Buffer
		if _, err := CopyRange(path, from, to, &b); err != nil {
			t.Fatal(err)
		}
		return b.String(), loc
	}
	for _, tc := range []struct {
		n, a   int
		stderr bool
		want   string
		ended  bool
	}{
		{0, 0, false, "zero\n0.5\n", true},
		{0, 0, true, "", true},
		{3, 1, false, "three\n", true},
		{3, 1, true, "warning: three\n", true},
		{4, 0, false, "four, end lost\n", true}, // ends where the next attempt starts
		{5, 0, false, "five, running\n", false},
		{5, 0, true, "still going\n", false},
		{9, 0, false, "b\n", true},
	} {
		got, loc := read(tc.n, tc.a, tc.stderr)
		if got != tc.want || loc.Ended != tc.ended {
			t.Errorf("trial %d.%d stderr=%v: %q ended=%v, want %q ended=%v", tc.n, tc.a, tc.stderr, got, loc.Ended, tc.want, tc.ended)
		}
	}
	for _, na := range [][2]int{{1, 0}, {3, 0}, {10, 0}} {
		if _, ok, err := Find(root, "s", na[0], na[1]); ok || err != nil {
			t.Errorf("Find(%d, %d) = %v, %v; want not found (never started, or a torn line)", na[0], na[1], ok, err)
		}
	}
}

// An attempt's end mark waits for the next start mark; the last one is
// written when the worker's log closes.
func TestWriterLastEndOnClose(t *testing.T) {
	root := t.TempDir()
	dir := Dir(root, "s")
	wl := newTestWriter(t, dir)
	if err := wl.Mark("start", 2, 0); err != nil {
		t.Fatal(err)
	}
	wl.Out.WriteString("two\n")
	if err := wl.Mark("end", 2, 0); err != nil {
		t.Fatal(err)
	}
	wl.Out.WriteString("late output of a child it left behind\n")
	if err := wl.Close(); err != nil {
		t.Fatal(err)
	}
	loc, ok, err := Find(root, "s", 2, 0)
	if err != nil || !ok {
		t.Fatalf("FindLog = %v, %v", ok, err)
	}
	if !loc.Ended || loc.OutStart != 0 || loc.OutEnd != 4 {
		t.Fatalf("trial 2: ended %v, stdout [%d, %d), want ended [0, 4)", loc.Ended, loc.OutStart, loc.OutEnd)
	}
}

// The ends an attempt's objective left, as objective.Run read them
// (ended), are its end mark and the next attempt's start, without asking
// the files again (issue 18: each seek is a round trip on NFS). The ends
// given are used as they are: a file that grew past them without an
// attempt (nothing does, but it shows no seek was made) does not move
// the marks. Given none (ok false), the marks seek.
func TestWriterKnownEnds(t *testing.T) {
	root := t.TempDir()
	wl := newTestWriter(t, Dir(root, "s"))
	if err := wl.Mark("start", 0, 0); err != nil {
		t.Fatal(err)
	}
	wl.Out.WriteString("zero\n")
	wl.Ended(5, 0, true)
	wl.Out.WriteString("stray\n") // not seen: the ends are known
	if err := wl.Mark("end", 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := wl.Mark("start", 1, 0); err != nil {
		t.Fatal(err)
	}
	wl.Err.WriteString("one\n")
	wl.Ended(-1, 4, true) // stdout's end unknown: both are sought
	if err := wl.Mark("end", 1, 0); err != nil {
		t.Fatal(err)
	}
	if err := wl.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		n                                  int
		outStart, outEnd, errStart, errEnd int64
	}{
		{0, 0, 5, 0, 0},
		{1, 5, 11, 0, 4},
	} {
		loc, ok, err := Find(root, "s", c.n, 0)
		if err != nil || !ok {
			t.Fatalf("Find(%d) = %v, %v", c.n, ok, err)
		}
		got := [4]int64{loc.OutStart, loc.OutEnd, loc.ErrStart, loc.ErrEnd}
		if want := [4]int64{c.outStart, c.outEnd, c.errStart, c.errEnd}; got != want || !loc.Ended {
			t.Errorf("trial %d: ranges %v ended %v, want %v ended", c.n, got, loc.Ended, want)
		}
	}
}
