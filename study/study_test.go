package study

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/soma-hpc/soma/fsstore"
)

// recStore returns a new store in a temp folder.
func recStore(t testing.TB) *fsstore.Store {
	t.Helper()
	st, err := fsstore.Open(filepath.Join(t.TempDir(), "root"), fsstore.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// recSpec builds a spec from flags, failing the test on error.
func recSpec(t testing.TB, params []string, dir, sampler, pruner string, budget int) *Spec {
	t.Helper()
	sp, err := SpecFromFlags(params, dir, sampler, pruner, budget, 7)
	if err != nil {
		t.Fatalf("SpecFromFlags: %v", err)
	}
	return sp
}

// recContinuous is a continuous space (no point dedup).
var recContinuous = []string{"x=float:-5:5", "y=float:0:1"}

func recOpen(t testing.TB, st Store, name string, spec *Spec, grace time.Duration) *Study {
	t.Helper()
	s, err := Open(context.Background(), st, name, spec, Options{Grace: grace})
	if err != nil {
		t.Fatalf("Open(%s): %v", name, err)
	}
	return s
}

var recWho = Who{Host: "testhost", PID: 1, Job: "99_1"}

func TestOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := recStore(t)
	spec := recSpec(t, recContinuous, "minimize", "random", "none", 10)

	t.Run("no study", func(t *testing.T) {
		_, err := Open(ctx, st, "absent", nil, Options{})
		if !errors.Is(err, ErrNoStudy) {
			t.Fatalf("Open(nil spec) = %v, want ErrNoStudy", err)
		}
	})
	t.Run("create then join", func(t *testing.T) {
		a := recOpen(t, st, "s", spec, 0)
		b := recOpen(t, st, "s", nil, 0)
		if string(b.Spec().Canonical()) != string(a.Spec().Canonical()) {
			t.Errorf("joined spec differs:\n%s\nwant\n%s", b.Spec().Canonical(), a.Spec().Canonical())
		}
		if b.Direction() != Minimize {
			t.Errorf("Direction() = %v, want minimize", b.Direction())
		}
		recOpen(t, st, "s", recSpec(t, recContinuous, "minimize", "random", "none", 10), 0)
	})
	t.Run("changed spec refused with diff", func(t *testing.T) {
		other := recSpec(t, []string{"x=float:-5:6", "y=float:0:1"}, "minimize", "random", "none", 20)
		_, err := Open(ctx, st, "s", other, Options{})
		var me *SpecMismatchError
		if !errors.As(err, &me) || !errors.Is(err, ErrSpecMismatch) {
			t.Fatalf("Open(changed spec) = %v, want *SpecMismatchError", err)
		}
		for _, want := range []string{"budget: 10 → 20", "param.x.high: 5 → 6"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not show %q", err, want)
			}
		}
	})
	t.Run("bad name", func(t *testing.T) {
		for _, name := range []string{"", "../x", "a/b", ".hidden", "sp ace"} {
			if _, err := Open(ctx, st, name, spec, Options{}); err == nil {
				t.Errorf("Open(%q) succeeded, want an error", name)
			}
		}
	})
}

func TestOpenConcurrentCreate(t *testing.T) {
	t.Parallel()
	st := recStore(t)
	spec := recSpec(t, recContinuous, "minimize", "random", "none", 10)
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			_, err := Open(context.Background(), st, "s", spec, Options{})
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Errorf("Open: %v", err)
		}
	}
}

// A typo is caught where it was typed, before anything is written.
func TestSpecTypoWritesNothing(t *testing.T) {
	t.Parallel()
	st := recStore(t)
	_, err := ParseSpec([]byte("direction = \"minimize\"\nbudgte = 10\n[param]\nx = \"float:0:1\"\n"))
	if err == nil {
		t.Fatal("ParseSpec accepted a typo")
	}
	if !strings.Contains(err.Error(), "budget") {
		t.Errorf("error %q does not suggest budget", err)
	}
	got, err := List(context.Background(), st)
	if err != nil || len(got) != 0 {
		t.Errorf("List = %v, %v; want nothing", got, err)
	}
}

func TestDirectionUnknownNeverGuesses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := recStore(t)
	s := recOpen(t, st, "nodir", recSpec(t, recContinuous, "", "random", "none", 3), 0)
	if s.Direction() != DirectionUnknown {
		t.Fatalf("Direction() = %v, want unknown", s.Direction())
	}
	run, err := s.Next(ctx, recWho)
	if err != nil {
		t.Fatal(err)
	}
	// Claimed and never reported: it still says which way it looked.
	snap, err := s.Trials(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := snap.Trials[0].Direction; got != DirectionUnknown {
		t.Errorf("claimed record direction = %v, want unknown", got)
	}
	if err := run.Finish(ctx, StateDone, 1.5, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Best(ctx); !errors.Is(err, ErrNoDirection) {
		t.Errorf("Best = %v, want ErrNoDirection", err)
	}
	b, err := st.Resolve(ctx, run.Name())
	if err != nil {
		t.Fatal(err)
	}
	if got := b.Meta.Value(keyDir); got != "unknown" {
		t.Errorf("record dir = %q, want unknown", got)
	}
}

func TestTwoStudiesOneRoot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := recStore(t)
	a := recOpen(t, st, "a", recSpec(t, recContinuous, "minimize", "random", "none", 2), 0)
	b := recOpen(t, st, "b", recSpec(t, []string{"z=int:0:100"}, "maximize", "random", "none", 3), 0)
	for _, s := range []*Study{a, b} {
		for runOneDone(t, s) {
		}
	}
	for _, tc := range []struct {
		s    *Study
		n    int
		best float64
	}{{a, 2, 0}, {b, 3, 2}} {
		snap, err := tc.s.Trials(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(snap.Trials) != tc.n {
			t.Errorf("study %s: %d trials, want %d", tc.s.Name(), len(snap.Trials), tc.n)
		}
		best, err := snap.Best()
		if err != nil || best.Score != tc.best {
			t.Errorf("study %s: Best = %v, %v; want score %v", tc.s.Name(), best.Score, err, tc.best)
		}
	}
	got, err := List(ctx, st)
	if err != nil || strings.Join(got, ",") != "a,b" {
		t.Errorf("List = %v, %v; want [a b]", got, err)
	}
}

// writeRaw puts a file straight into the store's names folder, as a stray
// tool or a damaged disk would.
// runOneDone claims s's next trial and finishes it done, its number as
// the score; false once the budget is reached.
func runOneDone(t testing.TB, s *Study) bool {
	t.Helper()
	ctx := context.Background()
	run, err := s.Next(ctx, recWho)
	if errors.Is(err, ErrBudgetReached) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Finish(ctx, StateDone, float64(run.Number()), ""); err != nil {
		t.Fatal(err)
	}
	return true
}

// doneStudy is a store holding study "s" (random sampler) with all n
// trials of its budget done.
func doneStudy(t *testing.T, n int) *fsstore.Store {
	t.Helper()
	st := recStore(t)
	s := recOpen(t, st, "s", recSpec(t, recContinuous, "minimize", "random", "none", n), 0)
	for range n {
		if !runOneDone(t, s) {
			t.Fatal("budget reached early")
		}
	}
	return st
}

func writeRaw(t *testing.T, st *fsstore.Store, name, content string) {
	t.Helper()
	p := filepath.Join(st.Root(), "names", filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o666); err != nil {
		t.Fatal(err)
	}
}

// replaceRaw replaces name's record file by a new file holding content.
func replaceRaw(t *testing.T, st *fsstore.Store, name, content string) {
	t.Helper()
	p := filepath.Join(st.Root(), "names", filepath.FromSlash(name))
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	writeRaw(t, st, name, content)
}

// A record that ended its trial is sealed: Next (random sampler) counts
// the trial ended from one stat, without reading it. Issue 13, item 7.
// Bug: so a sealed record damaged in place later (bit rot, a hand edit
// that keeps the file) stayed ended for Next, which never ran the trial
// again: soma-trial said "the budget is reached" while the views, which
// read every record, reported it corrupt and one trial short. Next now
// reads what it saw only sealed before it says the budget is reached
// (once: readable records are cached), and retries the unreadable one.
func TestSealedRecordDamagedInPlace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := doneStudy(t, 3)
	writeRaw(t, st, "study/s/trial/1/0", "soma-record 1\ndigest garbage\n")
	c := fsstore.NewCounter(st)
	r := recOpen(t, c, "s", nil, 0)
	run, err := r.Next(ctx, recWho)
	if err != nil {
		t.Fatalf("Next = %v, want the damaged trial 1 retried", err)
	}
	if run.Number() != 1 || run.Attempt() != 1 {
		t.Errorf("Next = trial %d attempt %d, want trial 1 attempt 1", run.Number(), run.Attempt())
	}
	problems := r.Problems()
	var ce *fsstore.CorruptError
	if len(problems) != 1 || !errors.As(problems[0], &ce) || ce.Name != "study/s/trial/1/0" || !strings.Contains(ce.Path, filepath.Join("names", "study", "s", "trial", "1", "0")) {
		t.Errorf("Problems() = %v, want the damaged record, with its path", problems)
	}
	if err := run.Finish(ctx, StateDone, 1, ""); err != nil {
		t.Fatal(err)
	}
	c.Reset()
	if _, err := r.Next(ctx, recWho); !errors.Is(err, ErrBudgetReached) {
		t.Errorf("Next after the retry = %v, want ErrBudgetReached", err)
	}
	if got := c.Resolves.Load(); got != 0 {
		t.Errorf("Next read %d records again, want none (each read once)", got)
	}
	snap, err := recOpen(t, st, "s", nil, 0).Trials(ctx)
	if err != nil || len(snap.Trials) != 3 || len(snap.Corrupt) != 0 {
		t.Fatalf("Trials: %d records, %d corrupt, %v; want 3 and none (the latest attempts)", len(snap.Trials), len(snap.Corrupt), err)
	}
}

// Two processes at the end of the budget both find the damaged sealed
// record: exactly one retries it.
func TestSealedRecordDamagedRetriedOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := doneStudy(t, 3)
	writeRaw(t, st, "study/s/trial/2/0", "garbage")
	a, b := recOpen(t, st, "s", nil, 0), recOpen(t, st, "s", nil, 0)
	ra, errA := a.Next(ctx, recWho)
	_, errB := b.Next(ctx, recWho)
	if errA != nil || ra.Number() != 2 || ra.Attempt() != 1 {
		t.Fatalf("first Next = %v, %v; want trial 2 attempt 1", ra, errA)
	}
	if !errors.Is(errB, ErrNoWork) {
		t.Errorf("second Next = %v, want ErrNoWork (trial 2 is retried elsewhere)", errB)
	}
	if err := ra.Finish(ctx, StateDone, 2, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Next(ctx, recWho); !errors.Is(err, ErrBudgetReached) {
		t.Errorf("Next once the retry ended = %v, want ErrBudgetReached", err)
	}
}

func TestForeignNamesAreNotTrials(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := recStore(t)
	s := recOpen(t, st, "s", recSpec(t, recContinuous, "minimize", "random", "none", 3), 0)
	d, err := st.Put(ctx, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	meta := fsstore.Meta{{Key: "kind", Value: "trial"}, {Key: "state", Value: "done"}, {Key: "score", Value: "-100"}}
	for _, name := range []string{
		"study/s/trial/abc/0", // not a number
		"study/s/trial/01/0",  // leading zero
		"study/s/trial/1/x",   // attempt not a number
		"study/s/trial/2/00",  // leading zero
		"study/s/notes",       // beside the trials
		"study/s/trial-backup/0/0",
		"study/orphan/trial/0/0", // a folder with no study record
		"other/study/s/trial/0/0",
		"study/s/trial/3/0/extra", // too deep (a folder where an attempt goes)
	} {
		if _, err := st.Bind(ctx, name, d, meta); err != nil {
			t.Fatalf("Bind(%s): %v", name, err)
		}
	}
	run, err := s.Next(ctx, recWho)
	if err != nil {
		t.Fatal(err)
	}
	if run.Number() != 0 {
		t.Errorf("Next took trial %d, want 0", run.Number())
	}
	if err := run.Finish(ctx, StateDone, 1, ""); err != nil {
		t.Fatal(err)
	}
	snap, err := s.Trials(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Trials) != 1 || snap.Trials[0].Score != 1 {
		t.Errorf("Trials = %+v, want trial 0 only", snap.Trials)
	}
	if len(snap.Foreign) < 4 {
		t.Errorf("Foreign = %v, want at least 4", snap.Foreign)
	}
	got, err := List(ctx, st)
	if err != nil || strings.Join(got, ",") != "s" {
		t.Errorf("List = %v, %v; want [s]", got, err)
	}
}

func TestCorruptRecordCountedAndRetried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := doneStudy(t, 3)
	// A fresh reader (the damaged trial is not cached as ended). The
	// damage is a new file (a torn copy, an editor's save): one damaged in
	// place keeps its sealed mode (TestSealedRecordDamagedInPlace).
	replaceRaw(t, st, "study/s/trial/1/0", "soma-record 1\ndigest garbage\n")
	r := recOpen(t, st, "s", nil, 0)
	snap, err := r.Trials(ctx)
	if err != nil {
		t.Fatalf("Trials: %v", err)
	}
	if len(snap.Trials) != 2 || len(snap.Corrupt) != 1 {
		t.Fatalf("Trials: %d records, %d corrupt; want 2 and 1", len(snap.Trials), len(snap.Corrupt))
	}
	var ce *fsstore.CorruptError
	if !errors.As(snap.Corrupt[0], &ce) {
		t.Errorf("Corrupt[0] = %v, want a *fsstore.CorruptError", snap.Corrupt[0])
	}
	// A record whose point is not of this space is refused whole.
	d, _ := st.Put(ctx, []byte("{}"))
	f := fields{state: StateDone, pointText: "x=1,q=2", dir: Minimize, score: -50, hasScore: true, step: -1, from: -1}
	if _, err := st.Bind(ctx, "study/s/trial/2/1", d, f.meta()); err != nil {
		t.Fatal(err)
	}
	r = recOpen(t, st, "s", nil, 0)
	snap, err = r.Trials(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var re *RecordError
	if len(snap.Corrupt) != 2 || !errors.As(snap.Corrupt[1], &re) {
		t.Fatalf("Corrupt = %v, want the damaged record and the foreign point", snap.Corrupt)
	}
	if best, err := snap.Best(); err != nil || best.Score != 0 {
		t.Errorf("Best = %v, %v; want trial 0 (score 0), not the foreign -50", best.Score, err)
	}
	// The unreadable trials are retried: attempt 1 of trial 1, attempt 2 of trial 2.
	for _, want := range [][2]int{{1, 1}, {2, 2}} {
		run, err := r.Next(ctx, recWho)
		if err != nil {
			t.Fatal(err)
		}
		if run.Number() != want[0] || run.Attempt() != want[1] {
			t.Errorf("Next = trial %d attempt %d, want %d/%d", run.Number(), run.Attempt(), want[0], want[1])
		}
		if err := run.Finish(ctx, StateDone, 10, ""); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.Next(ctx, recWho); !errors.Is(err, ErrBudgetReached) {
		t.Errorf("Next = %v, want ErrBudgetReached", err)
	}
}

// forEach runs every index exactly once on at most workers goroutines,
// and hands out no more work once its context is done.
func TestForEach(t *testing.T) {
	for _, c := range []struct{ n, workers int }{{0, 4}, {1, 16}, {5, 1}, {5, 0}, {100, 16}, {3, 16}} {
		var mu sync.Mutex
		seen := make([]int, c.n)
		running, most := 0, 0
		forEach(context.Background(), c.n, c.workers, func(i int) {
			mu.Lock()
			seen[i]++
			running++
			most = max(most, running)
			mu.Unlock()
			time.Sleep(time.Millisecond)
			mu.Lock()
			running--
			mu.Unlock()
		})
		for i, k := range seen {
			if k != 1 {
				t.Errorf("n=%d workers=%d: index %d ran %d times", c.n, c.workers, i, k)
			}
		}
		if most > max(1, c.workers) {
			t.Errorf("n=%d workers=%d: %d ran at once", c.n, c.workers, most)
		}
	}
	// Once ctx is done no worker starts another index: each may have
	// passed its look at ctx just before (one index each), no more.
	// (Counting all the indexes run after the 10th was flaky: the
	// goroutine that cancels can be descheduled between its count and its
	// cancel while the others run on.)
	ctx, cancel := context.WithCancel(context.Background())
	var ran, late atomic.Int64
	var done atomic.Bool
	forEach(ctx, 1000, 4, func(i int) {
		if done.Load() {
			late.Add(1)
		}
		if ran.Add(1) == 10 {
			cancel()
			done.Store(true)
		}
	})
	if k := late.Load(); k > 4 {
		t.Errorf("%d indexes started after the cancel, want at most one per worker (4)", k)
	}
	// A context done before the call: nothing runs.
	n := 0
	forEach(ctx, 10, 1, func(int) { n++ })
	forEach(ctx, 10, 4, func(int) { n++ })
	if n != 0 {
		t.Errorf("%d indexes ran with a done context, want 0", n)
	}
}
