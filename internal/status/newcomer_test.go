package status

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soma-hpc/soma/fsstore"
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
