package fsstore

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
)

// TestEachRunsEveryIndexOnce: each (ResolveMany's and GetMany's
// parallelism) runs every index exactly once, never more than the store's
// parallelism at a time, and for n of 0, 1 and more than the parallelism.
func TestEachRunsEveryIndexOnce(t *testing.T) {
	s := newStore(t)
	s.parallel = 4
	for _, n := range []int{0, 1, 3, 4, 5, 1000} {
		runs := make([]atomic.Int32, n)
		var now, most atomic.Int32
		var mu sync.Mutex
		s.each(context.Background(), n, func(i int) {
			c := now.Add(1)
			mu.Lock()
			most.Store(max(most.Load(), c))
			mu.Unlock()
			runs[i].Add(1)
			now.Add(-1)
		})
		for i := range runs {
			if got := runs[i].Load(); got != 1 {
				t.Fatalf("n=%d: index %d ran %d times, want 1", n, i, got)
			}
		}
		if m := most.Load(); m > 4 {
			t.Errorf("n=%d: %d at once, want at most the parallelism 4", n, m)
		}
	}
}

// TestEachStopsOnceCancelled: no index is started after ctx is done; those
// started finish.
func TestEachStopsOnceCancelled(t *testing.T) {
	s := newStore(t)
	s.parallel = 4
	ctx, cancel := context.WithCancel(context.Background())
	var after atomic.Int32
	var ran atomic.Int32
	s.each(ctx, 1000, func(i int) {
		if ctx.Err() != nil {
			after.Add(1)
		}
		if ran.Add(1) == 10 {
			cancel()
		}
	})
	// At most the goroutines already past their look at ctx (one each)
	// start an index after the cancel.
	if a := after.Load(); a > 4 {
		t.Errorf("%d indexes started after the cancel, want at most 4 (the workers mid-step)", a)
	}
	if r := ran.Load(); r >= 1000 {
		t.Errorf("all %d indexes ran after a cancel at the 10th", r)
	}
}
