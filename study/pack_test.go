package study

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/soma-hpc/soma/fsstore"
)

// recordKey is everything a reader reports of a record, comparable.
func recordKey(r Record) string {
	return fmt.Sprintf("%d/%d %s %s %v/%v %v/%v %d %d %d %v %d %d %d %s",
		r.Number, r.Attempt, r.State, r.PointText, r.Score, r.HasScore, r.Value, r.HasValue,
		r.LastStep, r.Beat, r.Failures, r.Who, r.Start.UnixNano(), r.Time.UnixNano(), r.AdoptedFrom, r.blob)
}

// samePackedAndUnpacked checks that a fresh reader with packs and one
// that ignores them see the same study.
func samePackedAndUnpacked(t *testing.T, st Store, name string) {
	t.Helper()
	ctx := context.Background()
	packed := recOpen(t, st, name, nil, 0)
	plain := recOpen(t, st, name, nil, 0)
	plain.noPacks = true
	a, err := packed.Trials(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := plain.Trials(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Trials) != len(b.Trials) {
		t.Fatalf("with packs %d trials, without %d", len(a.Trials), len(b.Trials))
	}
	for i := range a.Trials {
		if ka, kb := recordKey(a.Trials[i]), recordKey(b.Trials[i]); ka != kb {
			t.Errorf("with packs:    %s\nwithout packs: %s", ka, kb)
		}
	}
	if len(a.Corrupt) != 0 || len(b.Corrupt) != 0 {
		t.Errorf("corrupt: %v / %v", a.Corrupt, b.Corrupt)
	}
	ca, _, err := packed.Attempts(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	cb, _, err := plain.Attempts(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(ca) != len(cb) {
		t.Fatalf("Attempts: with packs %d, without %d", len(ca), len(cb))
	}
	for i := range ca {
		if recordKey(ca[i]) != recordKey(cb[i]) || fmt.Sprint(ca[i].Curve) != fmt.Sprint(cb[i].Curve) {
			t.Errorf("attempt with packs %s, without %s", recordKey(ca[i]), recordKey(cb[i]))
		}
	}
}

func TestPackReadsLikeFolders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := recStore(t)
	spec := recSpec(t, recContinuous, "minimize", "random", "none", 60)
	spec.MaxRetries = 1
	s := recOpen(t, st, "s", spec, 0)
	var running []*Run
	for i := range 50 {
		run, err := s.Take(ctx, i, Who{Host: "h w", PID: i, Job: "7_%1"}) // odd text survives packing
		if err != nil {
			t.Fatal(err)
		}
		if _, err := run.Report(ctx, 0, float64(i)); err != nil {
			t.Fatal(err)
		}
		switch i % 5 {
		case 0:
			running = append(running, run)
			continue
		case 1:
			err = run.Finish(ctx, StatePruned, 1, "pruned at 0")
		case 2:
			err = run.Finish(ctx, StateFailed, 0, "boom") // retried once below
		default:
			err = run.Finish(ctx, StateDone, float64(i), "")
		}
		if err != nil {
			t.Fatal(err)
		}
		if i%10 == 2 {
			retry, err := s.Take(ctx, i, recWho)
			if err != nil {
				t.Fatal(err)
			}
			if err := retry.Finish(ctx, StateFailed, 0, "boom again"); err != nil {
				t.Fatal(err)
			}
		}
		if i%8 == 0 {
			if _, err := s.Pack(ctx, PackOptions{MinRecords: 3, MergeFanIn: 2}); err != nil {
				t.Fatal(err)
			}
		}
	}
	rep, err := s.Pack(ctx, PackOptions{MinRecords: 1, MergeFanIn: 2})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Packs == 0 || rep.Packs > 6 {
		t.Errorf("Pack: %+v, want a few packs", rep)
	}
	samePackedAndUnpacked(t, st, "s")
	// Packed trials stay claimed.
	if _, err := s.Take(ctx, 3, recWho); !errors.Is(err, ErrTaken) {
		t.Errorf("Take(packed trial) = %v, want ErrTaken", err)
	}
	o := recOpen(t, st, "s", nil, 0)
	for {
		run, err := o.Next(ctx, recWho)
		if errors.Is(err, ErrNoWork) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if run.Number() < 50 && (run.Number()%10 != 7 || run.Attempt() != 1) {
			t.Errorf("Next handed out trial %d attempt %d, which ended or runs", run.Number(), run.Attempt())
		}
		if err := run.Finish(ctx, StateDone, 0, ""); err != nil {
			t.Fatal(err)
		}
	}
	for _, run := range running {
		if err := run.Finish(ctx, StateDone, 0, ""); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := o.Next(ctx, recWho); !errors.Is(err, ErrBudgetReached) {
		t.Errorf("Next = %v, want ErrBudgetReached", err)
	}
	samePackedAndUnpacked(t, st, "s")
}

// Packing while trials run, from several processes' worth of Study values
// at once, changes nothing a reader sees.
func TestPackRacingRunningTrials(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := recStore(t)
	const budget = 80
	recOpen(t, st, "s", recSpec(t, recContinuous, "minimize", "random", "none", budget), 0)
	var wg sync.WaitGroup
	var mu sync.Mutex
	ran := map[int]int{}
	for w := range 4 {
		wg.Go(func() {
			s := recOpen(t, st, "s", nil, 0)
			for {
				run, err := s.Next(ctx, Who{Host: "h", PID: w})
				if errors.Is(err, ErrBudgetReached) || errors.Is(err, ErrNoWork) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				ran[run.Number()]++
				mu.Unlock()
				if err := run.Finish(ctx, StateDone, float64(run.Number()), ""); err != nil {
					t.Error(err)
				}
				if _, err := s.Pack(ctx, PackOptions{MinRecords: 4, MergeFanIn: 3}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	for n := range budget {
		if ran[n] != 1 {
			t.Errorf("trial %d ran %d times", n, ran[n])
		}
	}
	samePackedAndUnpacked(t, st, "s")
}

// A reader of a packed study opens the packs, not the trials.
func TestPackCost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const n = 300
	st, s := benchStudy(t, n)
	rep, err := s.Pack(ctx, PackOptions{MinRecords: 100})
	if err != nil || rep.Packed != n {
		t.Fatalf("Pack = %+v, %v", rep, err)
	}
	c := fsstore.NewCounter(st)
	r := recOpen(t, c, "s", nil, 0)
	c.Reset()
	snap, err := r.Trials(ctx)
	if err != nil || len(snap.Trials) != n {
		t.Fatalf("Trials: %d, %v", len(snap.Trials), err)
	}
	if got := c.Resolves.Load(); got != int64(rep.Packs) {
		t.Errorf("packed Trials opened %d records, want %d (the packs)", got, rep.Packs)
	}
	if got := c.BlobGets.Load(); got != int64(rep.Packs) {
		t.Errorf("packed Trials fetched %d blobs, want %d (the packs)", got, rep.Packs)
	}
}

func TestCorruptPackIsReportedAndSkipped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := recStore(t)
	s := fillStudy(t, st, "s", 6)
	if _, err := s.Pack(ctx, PackOptions{MinRecords: 1}); err != nil {
		t.Fatal(err)
	}
	d, _ := st.Put(ctx, []byte("soma-study-pack 1 s\nnot a record\n"))
	// Named like a pack (corrupt), and not (foreign: not read at all).
	for _, name := range []string{"study/s/pack/0123456789abcdef0123456789abcdef", "study/s/pack/bad"} {
		if _, err := st.Bind(ctx, name, d, fsstore.Meta{{Key: keyKind, Value: kindPack}}); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := recOpen(t, st, "s", nil, 0).Trials(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Trials) != 6 || len(snap.Corrupt) != 1 || !strings.Contains(snap.Corrupt[0].Error(), "0123456789abcdef") {
		t.Errorf("Trials %d, Corrupt %v; want 6 and the bad pack", len(snap.Trials), snap.Corrupt)
	}
	if got := foreignNames(snap.Foreign); !slices.Equal(got, []string{"study/s/pack/bad"}) {
		t.Errorf("Foreign = %q, want the stray file in the pack folder", got)
	}
}

// Pack with Own (soma-trial's end of loop) packs the trials this process
// ended and nothing else, without reading the other processes' trials;
// each process packing its share leaves a study that reads the same
// packed and unpacked.
func TestPackOwn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := recStore(t)
	const budget = 200
	recOpen(t, st, "s", recSpec(t, recContinuous, "minimize", "random", "none", budget), 0)
	c := fsstore.NewCounter(st)
	a, b := recOpen(t, c, "s", nil, 0), recOpen(t, st, "s", nil, 0)
	mine := map[*Study]int{}
	for i := 0; ; i++ {
		s := a
		if i%3 != 0 { // b runs two of every three
			s = b
		}
		if !runOneDone(t, s) {
			break
		}
		mine[s]++
	}
	c.Reset()
	rep, err := a.Pack(ctx, PackOptions{Own: true, MinRecords: 10})
	if err != nil || rep.Packed != mine[a] {
		t.Fatalf("a: Pack(Own) = %+v, %v; want its %d trials packed", rep, err, mine[a])
	}
	if got := c.Resolves.Load(); got != 0 {
		t.Errorf("Pack(Own) read %d records, want none (the store has no pack yet)", got)
	}
	if rep, err := b.Pack(ctx, PackOptions{Own: true, MinRecords: 10}); err != nil || rep.Packed != mine[b] || rep.Packs != 2 {
		t.Fatalf("b: Pack(Own) = %+v, %v; want its %d trials in a second pack", rep, err, mine[b])
	}
	samePackedAndUnpacked(t, st, "s")
}

// Pack with Running, which soma-trial calls after each trial (issue 18),
// does nothing at all (no file-server call) for a process alone on its
// study, nor before it has ended 16 trials since its last pack; once
// another process shares the study, it packs its own ended trials every
// 16, so that the other reads one pack instead of each record.
func TestPackRunning(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := recStore(t)
	recOpen(t, st, "s", recSpec(t, recContinuous, "minimize", "random", "none", 200), 0)
	c := fsstore.NewCounter(st)
	a := recOpen(t, c, "s", nil, 0)
	packs := func(s *Study) int {
		t.Helper()
		c.Reset()
		rep, err := s.Pack(ctx, PackOptions{Running: true})
		if err != nil {
			t.Fatal(err)
		}
		return rep.Packed
	}
	quiet := func(what string) {
		t.Helper()
		for _, n := range []*atomic.Int64{&c.Scans, &c.Lists, &c.Resolves, &c.Stats, &c.BlobGets, &c.Puts, &c.Claims, &c.Binds, &c.Touches, &c.Nows} {
			if n.Load() != 0 {
				t.Fatalf("%s: Pack(Running) called the store, want no call", what)
			}
		}
	}
	for i := range 40 {
		runOneDone(t, a)
		if n := packs(a); n != 0 {
			t.Fatalf("alone, after trial %d: Pack(Running) packed %d trials, want none", i, n)
		}
		quiet("alone")
	}
	// Another process joins and runs 20 trials; a learns of them.
	b := recOpen(t, st, "s", nil, 0)
	for range 20 {
		runOneDone(t, b)
	}
	if _, err := a.snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	// a has ended 40 trials since it packed last (never): the next
	// Pack packs them; then nothing until 16 more.
	if n := packs(a); n != 40 {
		t.Fatalf("shared: Pack(Running) packed %d trials, want a's 40", n)
	}
	for i := range 16 {
		runOneDone(t, a)
		n := packs(a)
		switch {
		case i < 15 && n != 0:
			t.Fatalf("shared, %d trials after a pack: packed %d, want none before 16", i+1, n)
		case i < 15:
			quiet("shared, before 16 trials")
		case n != 16:
			t.Fatalf("shared, 16 trials after a pack: packed %d, want 16", n)
		}
	}
	samePackedAndUnpacked(t, st, "s")
}
