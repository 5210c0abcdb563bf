package trialrun

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/study"
)

// failingStore is a real store whose Bind of one trial's ended record
// fails once (a full disk, a lost file server), to test the loop's error
// path with records written in the background.
type failingStore struct {
	*fsstore.Store
	name   string
	failed atomic.Bool
}

func (f *failingStore) Bind(ctx context.Context, name string, d fsstore.Digest, meta fsstore.Meta) (fsstore.Bound, error) {
	if err := f.fail(name, meta); err != nil {
		return fsstore.Bound{}, err
	}
	return f.Store.Bind(ctx, name, d, meta)
}

// Seal writes a record that ends its trial (done): the one that fails.
func (f *failingStore) Seal(ctx context.Context, name string, d fsstore.Digest, meta fsstore.Meta) (fsstore.Bound, error) {
	if err := f.fail(name, meta); err != nil {
		return fsstore.Bound{}, err
	}
	return f.Store.Seal(ctx, name, d, meta)
}

func (f *failingStore) fail(name string, meta fsstore.Meta) error {
	if name == f.name && meta.Value("state") != "running" && f.failed.CompareAndSwap(false, true) {
		return errors.New("injected: no space left on device")
	}
	return nil
}

// A record that fails stops the loop with its error; the trial that ran
// meanwhile is recorded, and nothing else is left running.
func TestRecordErrorStopsTheLoopCleanly(t *testing.T) {
	ctx := context.Background()
	root := filepath.Join(t.TempDir(), "root")
	fs, err := fsstore.Open(root, fsstore.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	store := &failingStore{Store: fs, name: "study/s/trial/2/0"}
	spec, err := study.SpecFromFlags([]string{"x=float:0:1"}, "minimize", "random", "none", 8, 1)
	if err != nil {
		t.Fatal(err)
	}
	st, err := study.Open(ctx, store, "s", spec, study.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Run(ctx, st, root, Options{Argv: []string{"/bin/echo", "1"}, Trial: -1, Who: study.Who{Host: "h", PID: os.Getpid()}}, nil)
	if err == nil || !strings.Contains(err.Error(), "no space left") {
		t.Fatalf("Run = %v, want the record's error", err)
	}
	snap, err := st.Trials(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range snap.Trials {
		if r.State == study.StateRunning && r.Number != 2 {
			t.Errorf("trial %d left running (only trial 2, whose record failed, may be)", r.Number)
		}
	}
	if r, ok := snap.Trial(2); !ok || r.State != study.StateRunning {
		t.Errorf("trial 2 = %+v, want running (its result was never recorded; it goes stale and is retried)", r)
	}
}
