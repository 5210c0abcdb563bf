package trialrun

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/internal/runlog"
	"github.com/soma-hpc/soma/internal/testutil"
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

// newLoopStore is a new store at root/ and the spec of a random-sampler
// study of budget trials, for the loop's tests.
func newLoopStore(t *testing.T, budget int) (string, *fsstore.Store, *study.Spec) {
	t.Helper()
	root := filepath.Join(t.TempDir(), "root")
	store, err := fsstore.Open(root, fsstore.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	spec, err := study.SpecFromFlags([]string{"x=float:0:1"}, "minimize", "random", "none", budget, 1)
	if err != nil {
		t.Fatal(err)
	}
	return root, store, spec
}

// A record that fails stops the loop with its error; the trial that ran
// meanwhile is recorded, and nothing else is left running.
func TestRecordErrorStopsTheLoopCleanly(t *testing.T) {
	ctx := context.Background()
	root, fs, spec := newLoopStore(t, 8)
	store := &failingStore{Store: fs, name: "study/s/trial/2/0"}
	st, err := study.Open(ctx, store, "s", spec, study.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Run(ctx, st, root, Options{Argv: []string{"/bin/echo", "1"}, Trial: -1, Who: study.Who{Host: "h", PID: os.Getpid()}, Guard: self}, nil)
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

// A worker whose trials are short claims the next trial while the current
// one runs (prefetchBelow). The claim it holds meanwhile keeps beating:
// if the current objective runs longer than the lease, no other process
// may take the held trial for a stale one.
func TestPrefetchedClaimKeepsBeating(t *testing.T) {
	ctx := context.Background()
	root, store, spec := newLoopStore(t, 3)
	const grace = 2 * time.Second // heartbeats every 400 ms
	st, err := study.Open(ctx, store, "s", spec, study.Options{Grace: grace})
	if err != nil {
		t.Fatal(err)
	}
	// Trial 0 is quick (so the worker prefetches), trial 1 runs until the
	// test releases it, after the lease of trial 2 (held meanwhile) has
	// run out. (It used to sleep 5 s while the test slept grace + 1.5 s
	// from the start: on a loaded machine trial 2 could be claimed late,
	// or trial 1 end before the look, and the test then proved nothing.)
	release := filepath.Join(t.TempDir(), "release")
	obj := []string{"/bin/sh", "-c", `if [ "$SOMA_TRIAL" = 1 ]; then while [ ! -e '` + release + `' ]; do sleep 0.05; done; fi; echo 1`}
	releaseTrial1 := func() {
		if err := os.WriteFile(release, nil, 0o644); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(releaseTrial1) // if the test stops early: no objective left waiting
	done := make(chan error, 1)
	go func() {
		_, err := Run(ctx, st, root, Options{prefetchBelow: 4 * time.Second, Argv: obj, Trial: -1, Who: study.Who{Host: "h", PID: os.Getpid()}, Guard: self}, nil)
		done <- err
	}()
	testutil.WaitFor(t, time.Minute, 50*time.Millisecond, "trial 2 claimed while trial 1 runs", func() (bool, error) {
		return store.Exists(ctx, "study/s/trial/2/0")
	})
	// This sleep is the behaviour under test: trial 2's claim is older
	// than its lease, so only its heartbeats (every grace/5) keep it.
	// The margin is half a grace past the lease; a beat delayed by a
	// stall of up to grace - grace/5 = 1.6 s is still in time.
	time.Sleep(grace + grace/2)
	// Another process, now: trial 2 is claimed (prefetched while trial 1
	// runs) and still beating, so there is nothing for it to take.
	other, err := study.Open(ctx, store, "s", nil, study.Options{Grace: grace})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := other.Trials(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := snap.Trial(2); !ok || r.State != study.StateRunning {
		t.Fatalf("trial 2 while trial 1 runs = %+v (found %v), want held: claimed and running", r, ok)
	}
	if run, err := other.Next(ctx, study.Who{Host: "other", PID: 1}); err == nil {
		t.Fatalf("another process took trial %d attempt %d while it was held", run.Number(), run.Attempt())
	} else if !errors.Is(err, study.ErrNoWork) {
		t.Fatalf("another process's Next = %v, want no work (all trials held)", err)
	}
	releaseTrial1()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	snap, err = other.Trials(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c := snap.Counts(); c[study.StateDone] != 3 {
		t.Fatalf("counts %v, want 3 done", c)
	}
	for _, r := range snap.Trials {
		if r.Attempt != 0 {
			t.Errorf("trial %d ended as attempt %d, want 0 (nothing retried)", r.Number, r.Attempt)
		}
	}
}

// A signal while a prefetched claim is held: the running trial and the
// held one are both recorded interrupted (to be retried), none is left
// running.
func TestSignalGivesBackThePrefetchedClaim(t *testing.T) {
	ctx := context.Background()
	root, store, spec := newLoopStore(t, 5)
	st, err := study.Open(ctx, store, "s", spec, study.Options{})
	if err != nil {
		t.Fatal(err)
	}
	obj := []string{"/bin/sh", "-c", `if [ "$SOMA_TRIAL" = 1 ]; then sleep 30; fi; echo 1`}
	sig := make(chan os.Signal, 1)
	done := make(chan error, 1)
	go func() {
		_, err := Run(ctx, st, root, Options{prefetchBelow: 4 * time.Second, Argv: obj, Trial: -1, Who: study.Who{Host: "h", PID: os.Getpid()}, Guard: self, KillGrace: time.Second}, sig)
		done <- err
	}()
	// Wait until trial 2 is held (claimed while trial 1 runs); within
	// trial 1's 30 s, or the signal would find it done.
	testutil.WaitFor(t, 20*time.Second, 50*time.Millisecond, "trial 2 claimed while trial 1 runs", func() (bool, error) {
		return store.Exists(ctx, "study/s/trial/2/0")
	})
	sig <- syscall.SIGUSR1
	if err := <-done; !errors.Is(err, ErrInterrupted) {
		t.Fatalf("Run = %v, want interrupted", err)
	}
	snap, err := st.Trials(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for n, want := range map[int]study.State{0: study.StateDone, 1: study.StateInterrupted, 2: study.StateInterrupted} {
		if r, ok := snap.Trial(n); !ok || r.State != want {
			t.Errorf("trial %d = %s (found %v), want %s", n, r.State, ok, want)
		}
	}
	if c := snap.Counts(); c[study.StateRunning] != 0 {
		t.Errorf("counts %v, want nothing left running", c)
	}
}

// Issue 13, item 7. Bug: a claimed trial whose log could not be opened
// (a read-only logs folder, ENOSPC) stopped the loop and stayed running
// until its lease expired. Now its attempt is recorded interrupted at
// once, with the reason, and the loop stops: a folder that stays broken
// costs one attempt per worker and start of soma-trial, never a loop, and
// no trial is failed for what was not its objective's fault. The log is
// made unopenable with a folder where its file goes (EISDIR): chmod does
// not stop root, and a read-only mount needs privileges.
func TestLogThatCannotBeOpenedGivesTheTrialBack(t *testing.T) {
	for _, parallel := range []int{1, 2} {
		t.Run(strconv.Itoa(parallel), func(t *testing.T) {
			ctx := context.Background()
			root, store, spec := newLoopStore(t, 4)
			st, err := study.Open(ctx, store, "s", spec, study.Options{})
			if err != nil {
				t.Fatal(err)
			}
			who := study.Who{Host: "h", PID: os.Getpid()}
			for w := range parallel {
				if err := os.MkdirAll(filepath.Join(runlog.Dir(root, "s"), fmt.Sprintf("h.%d.%d.out", who.PID, w)), 0o777); err != nil {
					t.Fatal(err)
				}
			}
			var log strings.Builder
			o := Options{Argv: []string{"/bin/echo", "1"}, Trial: -1, Parallel: parallel, Who: who, Log: &log, Guard: self}
			_, err = Run(ctx, st, root, o, nil)
			if err == nil || !strings.Contains(err.Error(), "is a directory") || !strings.Contains(err.Error(), "recorded interrupted") {
				t.Errorf("Run = %v, want the log's error, saying the attempt is recorded interrupted", err)
			}
			recs, _, err := st.Attempts(ctx, true)
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) != parallel {
				t.Errorf("%d attempts recorded, want %d (one per worker: the loop stops)", len(recs), parallel)
			}
			for _, r := range recs {
				if r.State != study.StateInterrupted || !strings.Contains(r.Reason, "is a directory") || r.Failures != 0 {
					t.Errorf("trial %d.%d = %s, %d failures, reason %q; want interrupted with the log's error, no failure counted", r.Number, r.Attempt, r.State, r.Failures, r.Reason)
				}
			}
			// Once the folder is fixed, the trials are run again at once
			// (no lease to wait for), and the budget ends.
			os.RemoveAll(runlog.Dir(root, "s"))
			sum, err := Run(ctx, st, root, o, nil)
			if err != nil || sum.Stopped != "budget" || sum.States["done"] != 4 {
				t.Fatalf("Run after the fix = %+v, %v; want 4 done, the budget reached", sum, err)
			}
		})
	}
}

// Issue 13: every report rewrote the attempt's record and a curve blob
// holding the whole curve so far (1.5-3 ms each, growing with the curve:
// 20000 reports took a trial 75 s). Reports are coalesced now, and the
// curve in the ended record's blob must still hold every one of them.
func TestManyReportsAllLandInTheCurve(t *testing.T) {
	testutil.NeedPython(t, "os")
	ctx := context.Background()
	root, store, spec := newLoopStore(t, 1)
	st, err := study.Open(ctx, store, "s", spec, study.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 100000
	obj := []string{testutil.Python(), "-c", `import os
w = os.fdopen(3, "w", buffering=1 << 16)
for i in range(` + strconv.Itoa(n) + `):
    w.write("report %d %r\n" % (i, 1.0 / (i + 1)))
w.write("final 0.5\n")
w.close()
`}
	if _, err := Run(ctx, st, root, Options{Argv: obj, Trial: -1, Who: study.Who{Host: "h", PID: os.Getpid()}, Guard: self}, nil); err != nil {
		t.Fatal(err)
	}
	other, err := study.Open(ctx, store, "s", nil, study.Options{})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := other.Curves(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r, ok := snap.Trial(0)
	if !ok || r.State != study.StateDone {
		t.Fatalf("trial 0 = %s (found %v), want done", r.State, ok)
	}
	if len(r.Curve) != n {
		t.Fatalf("the curve holds %d steps, want %d", len(r.Curve), n)
	}
	for i, s := range r.Curve {
		if s.Step != int64(i) || s.Value != 1.0/float64(i+1) {
			t.Fatalf("step %d of the curve = %+v, want {Step:%d Value:%v}", i, s, i, 1.0/float64(i+1))
		}
	}
}
