package trialrun

import (
	"context"
	"math"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/internal/testutil"
	"github.com/soma-hpc/soma/study"
)

// holdTrials claims every trial of st's budget as another process would
// and keeps them beating until the returned function finishes them all.
func holdTrials(t *testing.T, st *study.Study) (finish func()) {
	t.Helper()
	ctx := context.Background()
	var runs []*study.Run
	for range st.Limit() {
		run, err := st.Next(ctx, study.Who{Host: "elsewhere", PID: 1})
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, run)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(st.HeartbeatInterval())
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				for _, r := range runs {
					_ = r.Heartbeat(ctx)
				}
			}
		}
	})
	return func() {
		close(stop)
		wg.Wait()
		for _, r := range runs {
			if err := r.Finish(ctx, study.StateDone, 1, ""); err != nil {
				t.Error(err)
			}
		}
	}
}

// Issue 19: at the end of a study every soma-trial with nothing to claim
// waited for the last trials, each looking at the study every 2 s
// whatever the lease (~18 file-server operations a second each on a
// FUSE mount). Now the first keeps watch and looks at most every
// heartbeat interval (a fifth of the lease), at a bounded cost per look,
// and a second one stops at once. The watcher's operations are counted
// on a counting wrapper around the real store.
func TestOneWaiterLooksAtTheLeasesPace(t *testing.T) {
	ctx := context.Background()
	root, store, spec := newLoopStore(t, 2)
	const grace = time.Second
	holder, err := study.Open(ctx, store, "s", spec, study.Options{Grace: grace})
	if err != nil {
		t.Fatal(err)
	}
	finish := holdTrials(t, holder)

	other, err := fsstore.Open(root, fsstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	count := fsstore.NewCounter(other)
	st, err := study.Open(ctx, count, "s", nil, study.Options{Grace: grace})
	if err != nil {
		t.Fatal(err)
	}
	// Three workers: only one of them waits (the others end), or the
	// bound below would be three times over.
	o := Options{Argv: []string{"/bin/echo", "1"}, Trial: -1, Parallel: 3, Who: study.Who{Host: "h", PID: os.Getpid()}, Guard: self}
	count.Reset()
	start := time.Now()
	type result struct {
		sum Summary
		err error
	}
	done := make(chan result, 1)
	go func() {
		sum, err := Run(ctx, st, root, o, nil)
		done <- result{sum, err}
	}()
	// Wait until it holds the role, then start a second one: it stops at
	// once.
	testutil.WaitFor(t, time.Minute, 20*time.Millisecond, "the first waiter taking the watcher role", func() (bool, error) {
		w, _, err := holder.Watching(ctx)
		return err == nil && w.Live && w.Who.PID == os.Getpid(), nil
	})
	st2, err := study.Open(ctx, store, "s", nil, study.Options{Grace: grace})
	if err != nil {
		t.Fatal(err)
	}
	o2 := o
	o2.Who.Host = "h2"
	sum2, err := Run(ctx, st2, root, o2, nil)
	if err != nil || sum2.Stopped != "watched" || sum2.Ran != 0 {
		t.Errorf("the second waiter: %+v, %v; want it stopped at once, watched", sum2, err)
	}

	const window = 3 * time.Second
	time.Sleep(window - time.Since(start)) // the waiter's pace is what is measured
	finish()
	res := <-done
	elapsed := time.Since(start)
	if res.err != nil || res.sum.Stopped != "budget" {
		t.Fatalf("the watcher: %+v, %v; want it stopped when the budget is reached", res.sum, res.err)
	}
	ops := count.Total()
	// The bound: looks every heartbeat interval (after a backoff from
	// 10 ms: ceil(log2(interval/10ms)) looks more), each a listing of
	// the trial folder and, per running trial, two stats and a read, plus
	// a server-time probe; the role's refresh (a write and a stat) every
	// interval; and a fixed part: the other workers' first looks, the
	// role taken and released, the last look and the end's checks.
	iv := st.HeartbeatInterval()
	looks := elapsed.Seconds()/iv.Seconds() + math.Ceil(math.Log2(float64(iv/(10*time.Millisecond)))) + 2
	perLook := 2 + 3*float64(st.Limit()) + 1
	bound := looks*perLook + 2*(elapsed.Seconds()/iv.Seconds()+1) + 30
	t.Logf("the waiting process: %d operations in %s (%.1f/s; bound %.0f = %.1f/s with a %s lease): lists %d, stats %d, reads %d, claims %d, writes %d, puts %d, time probes %d",
		ops, elapsed.Round(time.Millisecond), float64(ops)/elapsed.Seconds(), bound, bound/elapsed.Seconds(), grace,
		count.Lists.Load(), count.Stats.Load(), count.Resolves.Load(), count.Claims.Load(), count.Binds.Load(), count.Puts.Load(), count.Nows.Load())
	if float64(ops) > bound {
		t.Errorf("the waiting process made %d store operations in %s, want at most %.0f (it looks at most every %s)", ops, elapsed, bound, iv)
	}
}
