package trialrun

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/soma-hpc/soma/fsstore"
)

func TestLocalWorkers(t *testing.T) {
	dir := t.TempDir()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{
		fmt.Sprintf("%d.0", os.Getpid()),      // alive
		fmt.Sprintf("%d.1", os.Getpid()),      // alive, another worker
		fmt.Sprintf("%d.0", dead.Process.Pid), // exited
		"x.0", "",
	} {
		if name != "" {
			os.WriteFile(filepath.Join(dir, name), nil, 0o666)
		}
	}
	if got := localWorkers(dir); got != 2 {
		t.Errorf("localWorkers = %d, want 2 (this process's two workers)", got)
	}
	if got := localWorkers(filepath.Join(dir, "missing")); got != 0 {
		t.Errorf("localWorkers of a missing folder = %d, want 0", got)
	}
	// One registry per study folder and study, under $TMPDIR.
	a, b := registryDir("/scratch/r", "s"), registryDir("/scratch/r", "t")
	if a == b || a != registryDir("/scratch/r/", "s") || filepath.Dir(a) != os.TempDir() {
		t.Errorf("registryDir: %q, %q", a, b)
	}
}

// removeIfEmpty removes the folder of a trial that ended for good only
// if nothing at all is in it, and never a link (nor what it points at).
func TestRemoveIfEmpty(t *testing.T) {
	base := t.TempDir()
	mk := func(name string, files ...string) {
		d := filepath.Join(base, name)
		if err := os.MkdirAll(d, 0o777); err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if err := os.WriteFile(filepath.Join(d, f), nil, 0o666); err != nil {
				t.Fatal(err)
			}
		}
	}
	mk("empty")
	mk("file", "ckpt")
	mk("hidden", ".lock")
	mk("sub")
	mk("sub/inner")
	mk("target")
	if err := os.Symlink(filepath.Join(base, "target"), filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	b, err := fsstore.OpenBeneath(base)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l := &loop{workDir: b}
	for _, c := range []struct {
		name string
		kept bool
	}{
		{"empty", false},
		{"file", true},
		{"hidden", true},
		{"sub", true},
		{"link", true}, // a link to an empty folder: not removed, not followed
		{"missing", false},
	} {
		l.removeIfEmpty(filepath.Join(base, c.name))
		_, err := os.Lstat(filepath.Join(base, c.name))
		if kept := err == nil; kept != c.kept {
			t.Errorf("%s after removeIfEmpty: kept %v (%v), want kept %v", c.name, kept, err, c.kept)
		}
	}
	if _, err := os.Stat(filepath.Join(base, "target")); err != nil {
		t.Errorf("the link's target: %v, want it kept", err)
	}
}
