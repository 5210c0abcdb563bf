package slowfs_test

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soma-hpc/soma/internal/testutil"
	"github.com/soma-hpc/soma/internal/tools/slowfs"
)

// mount mounts a slowfs without delay over a fresh backing folder and
// returns it and its backing folder; it is unmounted when t ends. It skips
// t (fails it under SOMA_REQUIRE=1) where this process cannot mount FUSE.
func mount(t *testing.T) (*slowfs.Mount, string) {
	t.Helper()
	err := slowfs.Available()
	testutil.Need(t, err == nil, "FUSE: "+errString(err))
	dir, backing := t.TempDir(), t.TempDir()
	m, err := slowfs.New(dir, backing, slowfs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unmount(t, m) })
	return m, backing
}

// unmount unmounts m, or if it is busy, reports that and detaches it, so
// that no dead mount outlives the test.
func unmount(t *testing.T, m *slowfs.Mount) {
	if err := m.Unmount(); err != nil {
		t.Error(err)
		if err := m.Detach(); err != nil {
			t.Error(err)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestCountsEachOperation checks that each system call on the mount
// reaches the filesystem as the requests a file server would see, once
// each, and that the kernel caches no name: a second stat of the same path
// walks it again, a LOOKUP per component (NFS with lookupcache=none).
func TestCountsEachOperation(t *testing.T) {
	m, backing := mount(t)
	p := func(rel string) string { return filepath.Join(m.Dir(), rel) }
	if err := os.MkdirAll(p("a/b/c"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p("a/b/c/f"), []byte("hi"), 0o644); err != nil {
		t.Fatal(err)
	}
	// LOOKUP: at least one per component of each path the call walks
	// (how many more depends on the kernel's path walk: a rename looks
	// its names up again once it holds the folders' locks).
	tests := []struct {
		name    string
		do      func() error
		kind    string
		lookups int64
	}{
		{"stat", func() error { _, err := os.Stat(p("a/b/c")); return err }, "GETATTR", 3},
		{"stat again", func() error { _, err := os.Stat(p("a/b/c")); return err }, "GETATTR", 3},
		{"link", func() error { return os.Link(p("a/b/c/f"), p("a/b/c/g")) }, "LINK", 8},
		{"rename", func() error { return os.Rename(p("a/b/c/g"), p("a/b/c/h")) }, "RENAME", 8},
		{"unlink", func() error { return os.Remove(p("a/b/c/h")) }, "UNLINK", 4},
		{"mkdir", func() error { return os.Mkdir(p("a/d"), 0o755) }, "MKDIR", 2},
		{"create", func() error { return os.WriteFile(p("a/d/e"), nil, 0o644) }, "CREATE", 3},
		{"fsync", func() error {
			f, err := os.OpenFile(p("a/d/e"), os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			return f.Sync()
		}, "FSYNC", 3},
		// Reads and writes reach the filesystem too (no FUSE passthrough).
		{"write", func() error { return os.WriteFile(p("a/d/e"), []byte("x"), 0o644) }, "WRITE", 3},
		{"read", func() error { _, err := os.ReadFile(p("a/d/e")); return err }, "READ", 3},
		{"readdir", func() error { _, err := os.ReadDir(p("a/b")); return err }, "OPENDIR", 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m.Reset()
			if err := tc.do(); err != nil {
				t.Fatal(err)
			}
			got := m.Counts()
			if got[tc.kind] != 1 {
				t.Errorf("%s: %s = %d, want 1 (all: %v)", tc.name, tc.kind, got[tc.kind], got)
			}
			if got["LOOKUP"] < tc.lookups {
				t.Errorf("%s: LOOKUP = %d, want at least %d: the kernel cached a name (all: %v)", tc.name, got["LOOKUP"], tc.lookups, got)
			}
		})
	}
	// A loopback: what the mount shows is in the backing folder.
	if b, err := os.ReadFile(filepath.Join(backing, "a/b/c/f")); err != nil || string(b) != "hi" {
		t.Errorf("backing a/b/c/f = %q, %v; want \"hi\"", b, err)
	}
}

// TestCountsAreServed checks the control socket scripts/slowfs.sh reads:
// the counts it answers are the mount's, and a reset starts them from zero.
func TestCountsAreServed(t *testing.T) {
	m, _ := mount(t)
	sock := filepath.Join(t.TempDir(), "ctl")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: m.Handler()}
	go srv.Serve(ln)
	defer srv.Close()

	if err := os.Mkdir(filepath.Join(m.Dir(), "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	got, err := slowfs.Fetch(ctx, sock, true)
	if err != nil {
		t.Fatal(err)
	}
	if got["MKDIR"] != 1 {
		t.Errorf("Fetch: MKDIR = %d, want 1 (all: %v)", got["MKDIR"], got)
	}
	got, err = slowfs.Fetch(ctx, sock, false)
	if err != nil {
		t.Fatal(err)
	}
	if got["MKDIR"] != 0 {
		t.Errorf("Fetch after reset: MKDIR = %d, want 0 (all: %v)", got["MKDIR"], got)
	}
	if _, err := slowfs.Fetch(ctx, filepath.Join(t.TempDir(), "none"), false); err == nil {
		t.Error("Fetch of a missing socket: no error")
	}
}

func TestCountsArithmetic(t *testing.T) {
	after := slowfs.Counts{"LOOKUP": 10, "READ": 5, "FSYNC": 2, "RELEASE": 3}
	before := slowfs.Counts{"LOOKUP": 4, "READ": 5}
	d := after.Sub(before)
	if want := (slowfs.Counts{"LOOKUP": 6, "FSYNC": 2, "RELEASE": 3}); len(d) != len(want) || d["LOOKUP"] != 6 || d["FSYNC"] != 2 || d["RELEASE"] != 3 {
		t.Errorf("Sub = %v, want %v", d, want)
	}
	if got := d.Metadata(); got != 8 {
		t.Errorf("Metadata() = %d, want 8 (LOOKUP and FSYNC; RELEASE is not metadata)", got)
	}
}

func TestNewRefusesNegativeDelay(t *testing.T) {
	err := slowfs.Available()
	testutil.Need(t, err == nil, "FUSE: "+errString(err))
	if _, err := slowfs.New(t.TempDir(), t.TempDir(), slowfs.Options{Delay: -1}); err == nil {
		t.Error("New with a negative delay: no error")
	}
}

// A mount with a file open in it cannot be unmounted (EBUSY), but can be
// detached, after which it is gone from the mount table: what cleanups
// do so that a failed test leaves no dead mount behind.
func TestDetachBusy(t *testing.T) {
	err := slowfs.Available()
	testutil.Need(t, err == nil, "FUSE: "+errString(err))
	dir := t.TempDir()
	m, err := slowfs.New(dir, t.TempDir(), slowfs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "open"))
	if err != nil {
		m.Detach()
		t.Fatal(err)
	}
	defer f.Close()
	if err := m.Unmount(); err == nil {
		t.Error("Unmount with a file open: no error, want EBUSY")
	}
	if err := m.Detach(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), " "+dir+" ") {
		t.Errorf("%s still mounted after Detach", dir)
	}
	if err := m.Unmount(); err != nil {
		t.Errorf("Unmount after Detach = %v, want nil (nothing left to do)", err)
	}
}
