package trialrun

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/study"
)

// Bug (issue 13, item 2): soma followed links inside the root when it
// wrote. A trial's work folder, the study's work or log folder, or a
// worker's log file that is a link to a place outside the root is
// refused (fsstore.ErrForeign), and nothing is written there: neither
// the objective's output nor a folder.
func TestLinksInsideTheRootAreNotFollowed(t *testing.T) {
	tests := []struct {
		name string
		link string // below the root, made a link to the outside folder
		file bool   // the link points at a file outside, not a folder
	}{
		{"trial work folder", "work/s/0", false},
		{"study work folder", "work/s", false},
		{"study log folder", "logs/s", false},
		{"worker's stdout file", "logs/s/h.7.0.out", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			root, store, spec := newLoopStore(t, 1)
			out := t.TempDir()
			target := out
			if tc.file {
				target = filepath.Join(out, "f")
				if err := os.WriteFile(target, []byte("precious\n"), 0o666); err != nil {
					t.Fatal(err)
				}
			}
			link := filepath.Join(root, filepath.FromSlash(tc.link))
			if err := os.MkdirAll(filepath.Dir(link), 0o777); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, link); err != nil {
				t.Fatal(err)
			}
			st, err := study.Open(ctx, store, "s", spec, study.Options{})
			if err != nil {
				t.Fatal(err)
			}
			_, err = Run(ctx, st, root, Options{Argv: []string{"/bin/sh", "-c", "echo out; touch made-here; echo 1"}, Trial: -1, Who: study.Who{Host: "h", PID: 7}, Guard: self}, nil)
			if !errors.Is(err, fsstore.ErrForeign) {
				t.Errorf("Run = %v, want fsstore.ErrForeign", err)
			}
			ents, _ := os.ReadDir(out)
			if tc.file {
				if b, _ := os.ReadFile(target); string(b) != "precious\n" || len(ents) != 1 {
					t.Errorf("outside after Run: %q, %d entries; want it untouched", b, len(ents))
				}
			} else if len(ents) != 0 {
				t.Errorf("Run wrote outside the root: %v", ents)
			}
		})
	}
}
