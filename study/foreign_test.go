package study

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/soma-hpc/soma/fsstore"
)

// foreignNames returns the names of errs that are *ForeignError values.
func foreignNames(errs []error) []string {
	var out []string
	for _, err := range errs {
		var fe *ForeignError
		if errors.As(err, &fe) {
			out = append(out, fe.Name)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Issue 13, item 1. Bug: with budget 45, a folder trial/46 holding a file
// "hello" was read like a trial of the study: its unreadable record was
// retried, so soma-trial ran "trial 46 (attempt 1)", and soma status said
// "46 of 45 ended · 46 done". Only the numbers the budget allows are
// claimed, retried or counted; any other name under trial/ is foreign,
// reported by name, never run.
func TestNamesOutsideTheBudgetAreForeign(t *testing.T) {
	t.Parallel()
	for _, sampler := range []string{"random", "tpe"} { // Next's two looks: probing (index samplers) and reading all
		t.Run(sampler, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			const budget = 3
			st := recStore(t)
			s := recOpen(t, st, "s", recSpec(t, recContinuous, "minimize", sampler, "none", budget), 0)
			d, err := st.Put(ctx, []byte("x"))
			if err != nil {
				t.Fatal(err)
			}
			// A well-formed record of an attempt that asks to be retried.
			retryable := fsstore.Meta{
				{Key: "kind", Value: "trial"}, {Key: "v", Value: "1"}, {Key: "state", Value: "interrupted"},
				{Key: "point", Value: "x=1,y=0.5"}, {Key: "dir", Value: "minimize"}, {Key: "step", Value: "-1"},
			}
			for _, name := range []string{"study/s/trial/3/0", "study/s/trial/4000/2", "study/s/trial/-3/0", "study/s/trial/007/0"} {
				if _, err := st.Bind(ctx, name, d, retryable); err != nil {
					t.Fatal(err)
				}
			}
			writeRaw(t, st, "study/s/trial/46/0", "hello\n") // the issue's
			writeRaw(t, st, "study/s/trial/abc", "a file, not a folder\n")
			writeRaw(t, st, "study/s/pack/notes.txt", "not a pack\n")
			writeRaw(t, st, "study/s/trial/1/x", "hello\n") // an attempt name that is not a number

			ran := map[int]int{}
			for {
				run, err := s.Next(ctx, recWho)
				if errors.Is(err, ErrBudgetReached) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				ran[run.Number()]++
				if len(ran) > budget+3 {
					t.Fatalf("Next ran %v, more than the budget", ran)
				}
				if err := run.Finish(ctx, StateDone, 1, ""); err != nil {
					t.Fatal(err)
				}
			}
			if want := map[int]int{0: 1, 1: 1, 2: 1}; !maps.Equal(ran, want) {
				t.Errorf("Next ran trials %v, want %v", ran, want)
			}
			wantForeign := []string{
				"study/s/pack/notes.txt", "study/s/trial/-3", "study/s/trial/007", "study/s/trial/1/x",
				"study/s/trial/3", "study/s/trial/4000", "study/s/trial/46", "study/s/trial/abc",
			}
			// What soma-trial warns of: the trial folder's own listing.
			var found []error
			for range 2 {
				found = append(found, s.Problems()...)
			}
			if got, want := foreignNames(found), slices.DeleteFunc(slices.Clone(wantForeign), func(n string) bool { return strings.Contains(n, "/1/") }); !slices.Equal(got, want) {
				t.Errorf("Problems() named %q, want %q", got, want)
			}
			if n := len(found); n != len(foreignNames(found)) {
				t.Errorf("Problems() returned %d problems for %d names, want each once: %v", n, len(foreignNames(found)), found)
			}

			// A fresh reader (a view) sees the same: 3 trials, the rest
			// foreign by name.
			r := recOpen(t, st, "s", nil, 0)
			snap, err := r.Trials(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var nums []int
			for _, rec := range snap.Trials {
				nums = append(nums, rec.Number)
			}
			if !slices.Equal(nums, []int{0, 1, 2}) || len(snap.Corrupt) != 0 {
				t.Errorf("Trials = trials %v, %d corrupt (%v); want [0 1 2], none", nums, len(snap.Corrupt), snap.Corrupt)
			}
			if got := foreignNames(snap.Foreign); !slices.Equal(got, wantForeign) {
				t.Errorf("Foreign = %q, want %q", got, wantForeign)
			}
			for _, err := range snap.Foreign {
				if !strings.Contains(err.Error(), "never run") {
					t.Errorf("foreign %v does not say what soma does with it", err)
				}
			}
			if _, err := r.Take(ctx, 46, recWho); !errors.Is(err, ErrBudgetReached) {
				t.Errorf("Take(46) = %v, want ErrBudgetReached", err)
			}
		})
	}
}

// A pack written while soma still ran trials past the budget (the bug
// above) holds their records: they are left out and reported, the rest of
// the pack is read.
func TestPackedTrialOutsideTheBudgetIsForeign(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := doneStudy(t, 3)
	s := recOpen(t, st, "s", nil, 0)
	snap, err := s.Trials(ctx)
	if err != nil {
		t.Fatal(err)
	}
	recs := slices.Clone(snap.Trials)
	past := recs[0]
	past.Number = 46
	if err := s.writePack(ctx, append(recs, past), 0); err != nil {
		t.Fatal(err)
	}
	r := recOpen(t, st, "s", nil, 0)
	snap, err = r.Trials(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Trials) != 3 || snap.Trials[2].Number != 2 || len(snap.Corrupt) != 0 {
		t.Errorf("Trials = %d records (last %d), %v corrupt; want trials 0 to 2", len(snap.Trials), snap.Trials[len(snap.Trials)-1].Number, snap.Corrupt)
	}
	if len(snap.Foreign) != 1 || !strings.Contains(snap.Foreign[0].Error(), "holds trial 46, outside the budget") {
		t.Errorf("Foreign = %v, want the pack's trial 46", snap.Foreign)
	}
	// Every look reports it, not only the one that read the pack.
	snap, err = r.Trials(ctx)
	if err != nil || len(snap.Foreign) != 1 {
		t.Errorf("second look: Foreign = %v, %v; want the pack's trial 46 again", snap.Foreign, err)
	}
}

// Bug: a trial folder with no attempt in it (a claim that died between
// making the folder and linking its attempt, a hand's mkdir, a stray file
// in it) counted as taken: its trial was never claimed, the budget never
// ended, and Next said "no claimable trial now, 0 running" forever.
func TestTrialFolderWithoutAttemptIsClaimed(t *testing.T) {
	t.Parallel()
	for _, sampler := range []string{"random", "tpe"} {
		t.Run(sampler, func(t *testing.T) {
			t.Parallel()
			st := recStore(t)
			s := recOpen(t, st, "s", recSpec(t, recContinuous, "minimize", sampler, "none", 3), 0)
			if err := os.MkdirAll(filepath.Join(st.Root(), "names", "study", "s", "trial", "1"), 0o777); err != nil {
				t.Fatal(err)
			}
			var ran []int
			for range 4 {
				run, err := s.Next(context.Background(), recWho)
				if errors.Is(err, ErrBudgetReached) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				ran = append(ran, run.Number())
				if err := run.Finish(context.Background(), StateDone, 1, ""); err != nil {
					t.Fatal(err)
				}
			}
			if slices.Sort(ran); !slices.Equal(ran, []int{0, 1, 2}) {
				t.Errorf("Next ran %v, want [0 1 2]", ran)
			}
		})
	}
}

// linkedStore is a real store that answers for one trial folder the way a
// store that follows no link inside its root answers when that folder is
// a link (issue 13, item 2): a look below it (Probe, Children) fails with
// a *fsstore.CorruptError naming the link's path.
type linkedStore struct {
	*fsstore.Store
	dir string // "study/s/trial/1"
}

func (l *linkedStore) refuse(op, name string) error {
	return fmt.Errorf("%s %s: %w", op, name, &fsstore.CorruptError{Name: l.dir, Path: filepath.Join(l.Root(), "names", l.dir), Err: errors.New("a symbolic link inside the store")})
}

func (l *linkedStore) Probe(ctx context.Context, name string) (fsstore.Presence, error) {
	if strings.HasPrefix(name, l.dir+"/") {
		return fsstore.Missing, l.refuse("probe", name)
	}
	return l.Store.Probe(ctx, name)
}

func (l *linkedStore) Children(ctx context.Context, prefix string) ([]string, error) {
	if strings.TrimSuffix(prefix, "/") == l.dir {
		return nil, l.refuse("children", prefix)
	}
	return l.Store.Children(ctx, prefix)
}

// A trial folder the store will not look into (a link) is one unreadable
// trial, reported with its path, as a damaged record is: it never fails
// the whole look (a view of the study, or Next's).
func TestTrialFolderTheStoreRefusesIsReported(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := doneStudy(t, 3)
	ls := &linkedStore{Store: st, dir: "study/s/trial/1"}
	for _, probe := range []bool{false, true} { // a view lists; Next probes
		s := recOpen(t, ls, "s", nil, 0)
		snap, err := s.look(ctx, lookFor{trials: true, probe: probe})
		if err != nil {
			t.Fatalf("look (probe %v) = %v, want trial 1 reported, not the look failed", probe, err)
		}
		var ce *fsstore.CorruptError
		if len(snap.Corrupt) != 1 || !errors.As(snap.Corrupt[0], &ce) || ce.Path != filepath.Join(st.Root(), "names", "study", "s", "trial", "1") {
			t.Errorf("look (probe %v): Corrupt = %v, want trial 1's folder, by path", probe, snap.Corrupt)
		}
		if len(snap.Trials) != 2 || snap.Trials[1].Number != 2 {
			t.Errorf("look (probe %v): %d trials, want 0 and 2", probe, len(snap.Trials))
		}
	}
}
