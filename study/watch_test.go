package study

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/internal/testutil"
)

// The watcher role (issue 19): one holder at a time; released, it is
// taken at once; stale, it is taken by the next that looks, and the old
// holder learns it lost the role at its next refresh.
func TestWatcherRole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := recStore(t)
	spec := recSpec(t, recContinuous, "minimize", "random", "none", 3)
	// The lease is real time: the holder that stops refreshing must go
	// stale (waited for below, by polling), and the live ones must not
	// between two calls. 2 s, not 0.5 s: a 2-CPU machine running several
	// test binaries under -race can stall a goroutine that long.
	const grace = 2 * time.Second
	a := recOpen(t, st, "s", spec, grace) // two processes' views of the study
	b := recOpen(t, st, "s", nil, grace)
	whoA, whoB := Who{Host: "a", PID: 1}, Who{Host: "b", PID: 2, Job: "7_1"}

	if _, found, err := b.Watching(ctx); err != nil || found {
		t.Fatalf("Watching before anyone watched = found %v, %v; want none", found, err)
	}
	wa, err := a.Watch(ctx, whoA)
	if err != nil {
		t.Fatal(err)
	}
	var we *WatchedError
	if _, err := b.Watch(ctx, whoB); !errors.As(err, &we) || !errors.Is(err, ErrWatched) || we.Who != whoA || we.Watcher != 0 {
		t.Fatalf("second Watch = %v, want *WatchedError by %v at watch/0", err, whoA)
	}
	if err := wa.Refresh(ctx); err != nil {
		t.Fatalf("Refresh of the live holder = %v", err)
	}

	t.Log("released: taken at once")
	if err := wa.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if s, _, err := b.Watching(ctx); err != nil || s.Live || !s.Released {
		t.Fatalf("Watching after Release = %+v, %v; want released, not live", s, err)
	}
	wb, err := b.Watch(ctx, whoB)
	if err != nil {
		t.Fatalf("Watch after the holder released = %v", err)
	}
	if wb.Number() != 1 {
		t.Errorf("the new holder's record = watch/%d, want watch/1", wb.Number())
	}
	if s, _, err := a.Watching(ctx); err != nil || !s.Live || s.Who != whoB || s.Number != 1 {
		t.Fatalf("Watching = %+v, %v; want %v live at watch/1", s, err, whoB)
	}

	t.Log("stale: taken by the next that looks")
	testutil.WaitFor(t, time.Minute, grace/5, "the silent holder going stale", func() (bool, error) {
		s, _, err := a.Watching(ctx)
		return err == nil && !s.Live, err
	})
	wa2, err := a.Watch(ctx, whoA)
	if err != nil {
		t.Fatalf("Watch over a stale holder = %v", err)
	}
	if wa2.Number() != 2 {
		t.Errorf("the new holder's record = watch/%d, want watch/2", wa2.Number())
	}
	if err := wb.Refresh(ctx); !errors.Is(err, ErrSuperseded) {
		t.Errorf("Refresh of the holder taken over = %v, want ErrSuperseded", err)
	}
	if err := wb.Release(ctx); err != nil {
		t.Errorf("Release of a lost role = %v, want nil (nothing to do)", err)
	}
	if s, _, err := b.Watching(ctx); err != nil || !s.Live || s.Who != whoA || s.Number != 2 {
		t.Errorf("Watching = %+v, %v; want %v live at watch/2 (the lost holder's Release writes nothing)", s, err, whoA)
	}
}

// A watch record that cannot be read does not hold the role: its holder
// is replaced by the next that looks.
func TestWatcherCorruptRecordIsReplaced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := recStore(t)
	spec := recSpec(t, recContinuous, "minimize", "random", "none", 3)
	s := recOpen(t, st, "s", spec, time.Hour)
	d, err := st.Put(ctx, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Claim(ctx, "study/s/watch/0", d, fsstore.Meta{{Key: "kind", Value: "something else"}}); err != nil {
		t.Fatal(err)
	}
	w, err := s.Watch(ctx, recWho)
	if err != nil || w.Number() != 1 {
		t.Fatalf("Watch over a foreign watch/0 = %v, %v; want watch/1", w, err)
	}
}

// Each look at the watcher costs a bounded number of store operations:
// after the first (which lists the watch folder), a stat and a read.
func TestWatchingCost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := fsstore.NewCounter(recStore(t))
	spec := recSpec(t, recContinuous, "minimize", "random", "none", 3)
	a := recOpen(t, c, "s", spec, time.Hour)
	if _, err := a.Watch(ctx, recWho); err != nil {
		t.Fatal(err)
	}
	b := recOpen(t, c, "s", nil, time.Hour)
	if _, _, err := b.Watching(ctx); err != nil {
		t.Fatal(err)
	}
	c.Reset()
	const looks = 10
	for range looks {
		if _, err := b.Watch(ctx, Who{Host: "b", PID: 2}); !errors.Is(err, ErrWatched) {
			t.Fatalf("Watch = %v, want ErrWatched", err)
		}
	}
	if got := c.Total(); got > 3*looks {
		t.Errorf("%d looks at a live watcher cost %d operations (lists %d, stats %d, reads %d, time probes %d); want at most 3 each", looks, got, c.Lists.Load(), c.Stats.Load(), c.Resolves.Load(), c.Nows.Load())
	}
	if c.Lists.Load() != 0 {
		t.Errorf("%d listings after the first look, want 0", c.Lists.Load())
	}
}

// Issue 19. Bug: a Next after a wait longer than relistAfter (a waiting
// soma-trial's) found its quick look too old, so that look listed the
// trial folder and read the running trials, and then Next looked a
// second time: two listings and reads for every look at the end of a
// study.
func TestNextAfterAWaitLooksOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := fsstore.NewCounter(recStore(t))
	spec := recSpec(t, recContinuous, "minimize", "random", "none", 2)
	holder := recOpen(t, c.S, "s", spec, time.Hour)
	for range 2 {
		if _, err := holder.Next(ctx, recWho); err != nil {
			t.Fatal(err)
		}
	}
	s := recOpen(t, c, "s", nil, time.Hour)
	if _, err := s.Next(ctx, recWho); !errors.Is(err, ErrNoWork) {
		t.Fatalf("Next = %v, want ErrNoWork", err)
	}
	s.mu.Lock()
	s.last.at = s.last.at.Add(-time.Hour) // as after a long wait
	s.mu.Unlock()
	c.Reset()
	if _, err := s.Next(ctx, recWho); !errors.Is(err, ErrNoWork) {
		t.Fatalf("Next = %v, want ErrNoWork", err)
	}
	// One look: the packs and the trial folder listed, each running
	// trial's next attempt probed and its record read.
	if got := c.Lists.Load(); got != 2 {
		t.Errorf("a Next after a wait listed %d times, want 2 (the packs and the trials, once)", got)
	}
	if got := c.Resolves.Load(); got != 2 {
		t.Errorf("a Next after a wait read %d records, want 2 (the running trials, once)", got)
	}
}
