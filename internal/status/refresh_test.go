package status

import (
	"context"
	"io"
	"path/filepath"
	"testing"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/study"
)

// Issue 19: soma status --watch on a polled filesystem refreshes every
// --interval, and each refresh must cost a bounded number of file-server
// operations: the trial folder listed, and the trials that have not
// ended read, never every trial of the study again (ended ones never
// change; the Viewer keeps them).
func TestRefreshCostIsBounded(t *testing.T) {
	ctx := context.Background()
	fs, err := fsstore.Open(filepath.Join(t.TempDir(), "root"), fsstore.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	spec, err := study.SpecFromFlags([]string{"x=float:0:1"}, "minimize", "random", "none", 100, 1)
	if err != nil {
		t.Fatal(err)
	}
	st, err := study.Open(ctx, fs, "s", spec, study.Options{})
	if err != nil {
		t.Fatal(err)
	}
	who := study.Who{Host: "h", PID: 1}
	const ended, running = 60, 3
	for i := range ended + running {
		run, err := st.Next(ctx, who)
		if err != nil {
			t.Fatal(err)
		}
		if i < ended {
			if err := run.Finish(ctx, study.StateDone, float64(i), ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	s := Wrap(fs)
	v := NewViewer(s, StatusOptions{Study: "s"})
	if err := v.Render(ctx, io.Discard); err != nil {
		t.Fatal(err)
	}
	first := s.Opened()
	for i := range 3 {
		if err := v.Render(ctx, io.Discard); err != nil {
			t.Fatal(err)
		}
		got := s.Opened()
		// The trial folder, the packs folder (the study's look and the
		// view's count), the workers folder; per running trial its
		// folder listed and its record read; the server-time probe when
		// it is due.
		const bound = 4 + 2*running + 1
		t.Logf("refresh %d: %s (the first view: %s)", i, got, first)
		if got.Total() > bound {
			t.Errorf("refresh %d of a study with %d ended and %d running trials opened %s, want at most %d", i, ended, running, got, bound)
		}
	}
}
