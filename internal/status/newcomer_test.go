package status

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/internal/studytest"
	"github.com/soma-hpc/soma/worker"
)

// Issue 16: soma status showed a retried trial as "0.1" and "3.1", which
// read as decimals. A retry names its attempt.
func TestTrialLabelDoesNotReadAsADecimal(t *testing.T) {
	tests := []struct {
		r          Row
		label, bst string
	}{
		{Row{Trial: 3}, "3", "3"},
		{Row{Trial: 3, Attempt: 1}, "3 (attempt 1)", "3, attempt 1"},
		{Row{Trial: 0, Attempt: 2}, "0 (attempt 2)", "0, attempt 2"},
	}
	for _, tc := range tests {
		if got := trialLabel(tc.r); got != tc.label {
			t.Errorf("trialLabel(%d.%d) = %q, want %q", tc.r.Trial, tc.r.Attempt, got, tc.label)
		}
		if got := bestLabel(tc.r); got != tc.bst {
			t.Errorf("bestLabel(%d.%d) = %q, want %q", tc.r.Trial, tc.r.Attempt, got, tc.bst)
		}
	}
}

// Issue 16: a root under a file said "stat ROOT: not a directory", and a
// store that lost its soma.json "not a soma store (no valid soma.json)",
// with no way back.
func TestOpenSaysWhatIsWrongWithTheRoot(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o666)
	root := filepath.Join(dir, "root")
	if _, err := fsstore.Open(root, fsstore.Options{Create: true}); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(root, "logs"), 0o777)
	os.Remove(filepath.Join(root, "soma.json"))
	tests := []struct {
		root, want string
	}{
		{filepath.Join(file, "root"), "a folder above it is a file (give the folder passed to soma-trial --root)"},
		{root, "has names/ and blobs/ but no soma.json: if it is a soma store that lost its soma.json, write it back (echo '"},
	}
	for _, tc := range tests {
		_, err := Open(tc.root)
		var re *RootError
		if !errors.As(err, &re) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%s) = %v, want a RootError with %q", tc.root, err, tc.want)
		}
	}
}

// Issue 16 (found while reproducing its read-only root): soma status of a
// root this process cannot write failed as a whole, "worker: list
// workers: server time: ... permission denied", though the studies are
// read with this machine's clock. As root (the tests' usual user) the
// view runs in a child as uid 65534 (setpriv), since root writes anyway.
func TestStatusOfARootItCannotWrite(t *testing.T) {
	if root := os.Getenv("SOMA_TEST_UNWRITABLE_ROOT"); root != "" {
		s, err := Open(root)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		if err := NewViewer(s, StatusOptions{Study: studytest.Main}).Render(context.Background(), &b); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), "cannot write a time probe") {
			t.Errorf("no clock warning:\n%s", b.String())
		}
		// With a worker registered, the registry is listed with this
		// machine's clock too. (Bug: it failed the whole view, "worker:
		// list workers: server time: ... permission denied".)
		if !strings.Contains(b.String(), "workers  1 alive, 0 dead") {
			t.Errorf("no workers section with the registered worker:\n%s", b.String())
		}
		return
	}
	f := fix(t)
	dir := t.TempDir()
	root := f.Copy(t, filepath.Join(dir, "ro"))
	fs, err := fsstore.Open(root, fsstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	id, err := worker.ParseWorkerID("node3")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := worker.Announce(context.Background(), fs, worker.WorkerRecord{ID: id, Address: "http://node3:7070", Slots: 1}, worker.RegistryOptions{}); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 {
		tmp := filepath.Join(root, "tmp")
		os.Chmod(tmp, 0o555)
		t.Cleanup(func() { os.Chmod(tmp, 0o755) })
		t.Setenv("SOMA_TEST_UNWRITABLE_ROOT", root)
		TestStatusOfARootItCannotWrite(t)
		return
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("running as root without setpriv: cannot make the root unwritable")
	}
	// The child must reach the root: t.TempDir's folders are 0700.
	for d := root; d != filepath.Dir(filepath.Dir(dir)); d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	c := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups",
		os.Args[0], "-test.run=^TestStatusOfARootItCannotWrite$", "-test.count=1")
	c.Env = append(os.Environ(), "SOMA_TEST_UNWRITABLE_ROOT="+root)
	c.Dir = "/"
	if out, err := c.CombinedOutput(); err != nil {
		t.Errorf("soma status as uid 65534 of a root it cannot write: %v\n%s", err, out)
	}
}
