package study

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/internal/testutil"
)

func TestClaimedTrialIsNotClaimableTwice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := recStore(t)
	spec := recSpec(t, recContinuous, "minimize", "random", "none", 5)
	a := recOpen(t, st, "s", spec, 0)
	b := recOpen(t, st, "s", nil, 0)
	run, err := a.Take(ctx, 2, recWho)
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Take(ctx, 2, Who{Host: "other", PID: 2})
	var te *TakenError
	if !errors.As(err, &te) || !errors.Is(err, ErrTaken) || te.State != StateRunning || te.Who != recWho {
		t.Fatalf("second Take(2) = %v, want *TakenError running by %v", err, recWho)
	}
	// The loser moves on: Next skips the taken trial.
	got, err := b.Next(ctx, Who{Host: "other", PID: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got.Number() != 0 {
		t.Errorf("Next = trial %d, want 0", got.Number())
	}
	if err := run.Finish(ctx, StateDone, 3, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Take(ctx, 2, recWho); !errors.As(err, &te) || te.State != StateDone {
		t.Errorf("Take(done trial) = %v, want TakenError done", err)
	}
	if _, err := a.Take(ctx, 5, recWho); !errors.Is(err, ErrBudgetReached) {
		t.Errorf("Take(5) of budget 5 = %v, want ErrBudgetReached", err)
	}
}

// Many goroutines, each with its own Study (no shared cache), race for
// every trial of the budget; each trial is run exactly once.
func TestConcurrentNextExactlyOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := recStore(t)
	spec := recSpec(t, recContinuous, "minimize", "random", "none", 40)
	recOpen(t, st, "s", spec, 0)
	var mu sync.Mutex
	ran := map[int]int{}
	var wg sync.WaitGroup
	for w := range 6 {
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
				if err := run.Finish(ctx, StateDone, 1, ""); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	for n := range 40 {
		if ran[n] != 1 {
			t.Errorf("trial %d ran %d times, want 1", n, ran[n])
		}
	}
}

func TestRunLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := recStore(t)
	s := recOpen(t, st, "s", recSpec(t, recContinuous, "maximize", "random", "none", 3), 0)
	run, err := s.Next(ctx, recWho)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := NewRandomSampler(7).Ask(s.Space(), 0, History{})
	if !run.Point().Equal(want) || run.PointText() != s.Space().FormatPoint(want) {
		t.Errorf("Point = %s, want %s", run.PointText(), s.Space().FormatPoint(want))
	}
	if err := run.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	for i, v := range []float64{0.5, 0.25, 0.75} {
		if prune, err := run.Report(ctx, int64(i), v); err != nil || prune {
			t.Fatalf("Report(%d) = %v, %v", i, prune, err)
		}
	}
	if _, err := run.Report(ctx, 1, 0.1); err == nil {
		t.Error("Report of a step that goes back succeeded")
	}
	if _, err := run.Report(ctx, 9, math.NaN()); err == nil {
		t.Error("Report(NaN) succeeded")
	}
	// Watchable while drawn.
	snap, err := s.Curves(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := snap.Trials[0]
	if r.State != StateRunning || len(r.Curve) != 3 || r.LastStep != 2 || r.Value != 0.75 || r.Beat != 4 || r.Who != recWho {
		t.Errorf("running record = %+v", r)
	}
	if r.Start.IsZero() || r.Time.Before(r.Start) {
		t.Errorf("Start %v, Time %v", r.Start, r.Time)
	}
	if err := run.Finish(ctx, StateDone, math.Inf(1), ""); err == nil {
		t.Error("Finish(done, +Inf) succeeded")
	}
	if err := run.Finish(ctx, StateDone, 0.9, "converged"); err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{run.Heartbeat(ctx), run.Finish(ctx, StateDone, 1, "")} {
		if !errors.Is(err, ErrFinished) {
			t.Errorf("after Finish: %v, want ErrFinished", err)
		}
	}
	snap, err = s.Curves(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r = snap.Trials[0]
	if r.State != StateDone || r.Score != 0.9 || r.Reason != "converged" || len(r.Curve) != 3 || r.Curve[2] != (Step{2, 0.75}) {
		t.Errorf("done record = %+v", r)
	}
}

func TestPrunedIsNotFinished(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := recStore(t)
	s := recOpen(t, st, "s", recSpec(t, recContinuous, "minimize", "random", "none", 3), 0)
	scores := []struct {
		state State
		score float64
	}{{StateDone, 5}, {StatePruned, math.NaN()}, {StateDone, 3}}
	for _, sc := range scores {
		run, err := s.Next(ctx, recWho)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := run.Report(ctx, 0, 1); err != nil { // 1 beats both done scores
			t.Fatal(err)
		}
		if err := run.Finish(ctx, sc.state, sc.score, ""); err != nil {
			t.Fatal(err)
		}
	}
	fin, err := s.Finished(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(fin) != 2 || fin[0].Number != 0 || fin[1].Number != 2 {
		t.Errorf("Finished = %+v, want trials 0 and 2", fin)
	}
	h, err := s.History(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Trials) != 3 || h.Trials[1].State != StatePruned || !h.Trials[1].HasScore || h.Trials[1].Score != 1 || h.Trials[1].LastStep != 0 {
		t.Errorf("History = %+v, want trial 1 pruned at step 0 with score 1", h.Trials)
	}
	best, err := s.Best(ctx)
	if err != nil || best.Number != 2 {
		t.Errorf("Best = trial %d, %v; want 2 (the pruned trial's 1 is not comparable)", best.Number, err)
	}
}

func TestRetries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := recStore(t)
	spec := recSpec(t, recContinuous, "minimize", "random", "none", 1)
	spec.MaxRetries = 2
	s := recOpen(t, st, "s", spec, 0)
	var point string
	// interrupted (always retried), failed, failed, failed: the trial is
	// failed after MaxRetries retries of failures.
	for i, state := range []State{StateInterrupted, StateFailed, StateFailed, StateFailed} {
		run, err := s.Next(ctx, recWho)
		if err != nil {
			t.Fatalf("attempt %d: %v", i, err)
		}
		if run.Number() != 0 || run.Attempt() != i {
			t.Fatalf("Next = %d/%d, want 0/%d", run.Number(), run.Attempt(), i)
		}
		if i == 0 {
			point = run.PointText()
		} else if run.PointText() != point {
			t.Errorf("retry point %s, want the same %s", run.PointText(), point)
		}
		if err := run.Finish(ctx, state, 0, "exit status 1"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Next(ctx, recWho); !errors.Is(err, ErrBudgetReached) {
		t.Fatalf("Next = %v, want ErrBudgetReached", err)
	}
	all, corrupt, err := s.Attempts(ctx, true)
	if err != nil || len(corrupt) > 0 {
		t.Fatal(err, corrupt)
	}
	if len(all) != 4 || all[3].State != StateFailed || all[3].Failures != 2 || all[0].State != StateInterrupted || all[2].Reason != "exit status 1" {
		t.Errorf("Attempts = %+v", all)
	}
}

// waitStale waits until trial n's latest attempt (running, and not
// beaten since it was written) is stale to a Study that opens study name
// now: older than grace in the file server's time (a local disk here:
// the server is this kernel). Each poll opens a fresh Study, so that the
// caller's own Studies learn nothing from the wait.
//
// It used to sleep 1.5 grace, a guess at how long the server's clock
// takes to pass the lease; on a loaded machine the looks after it could
// still run first. Polling waits as long as it takes, and no longer.
func waitStale(t testing.TB, st Store, name string, grace time.Duration, n int) {
	t.Helper()
	ctx := context.Background()
	testutil.WaitFor(t, time.Minute, grace/10, fmt.Sprintf("trial %d stale", n), func() (bool, error) {
		snap, err := recOpen(t, st, name, nil, grace).Trials(ctx)
		if err != nil {
			return false, err
		}
		r, ok := snap.Trial(n)
		return ok && r.State == StateStale, nil
	})
}

// A stale attempt is retried exactly once even when many processes see it
// stale at the same moment, and its late report changes nothing.
func TestStaleRetriedExactlyOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := recStore(t)
	const grace = 300 * time.Millisecond
	s := recOpen(t, st, "s", recSpec(t, recContinuous, "minimize", "random", "none", 1), grace)
	dead, err := s.Next(ctx, recWho)
	if err != nil {
		t.Fatal(err)
	}
	waitStale(t, st, "s", grace, 0)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var won []*Run
	start := make(chan struct{})
	for w := range 8 {
		wg.Go(func() {
			o := recOpen(t, st, "s", nil, grace)
			<-start
			run, err := o.Next(ctx, Who{Host: "h", PID: 100 + w})
			if errors.Is(err, ErrNoWork) {
				return
			}
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			won = append(won, run)
			mu.Unlock()
		})
	}
	close(start)
	wg.Wait()
	if len(won) != 1 {
		t.Fatalf("%d processes retried the stale attempt, want 1", len(won))
	}
	retry := won[0]
	if retry.Number() != 0 || retry.Attempt() != 1 || retry.PointText() != dead.PointText() {
		t.Errorf("retry = %d/%d %s, want 0/1 with the same point", retry.Number(), retry.Attempt(), retry.PointText())
	}
	// The superseded runner learns it from its heartbeat, and its late
	// reports change nothing.
	if err := dead.Heartbeat(ctx); !errors.Is(err, ErrSuperseded) {
		t.Errorf("Heartbeat of superseded attempt = %v, want ErrSuperseded", err)
	}
	if err := retry.Finish(ctx, StateDone, 5, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := dead.Report(ctx, 0, -100); !errors.Is(err, ErrSuperseded) {
		t.Errorf("Report of superseded attempt = %v, want ErrSuperseded", err)
	}
	if err := dead.Finish(ctx, StateDone, -100, ""); !errors.Is(err, ErrSuperseded) {
		t.Errorf("Finish of superseded attempt = %v, want ErrSuperseded", err)
	}
	for _, reader := range []*Study{s, recOpen(t, st, "s", nil, grace)} {
		best, err := reader.Best(ctx)
		if err != nil || best.Score != 5 || best.Attempt != 1 {
			t.Errorf("Best = %+v, %v; want attempt 1 with score 5", best, err)
		}
	}
}

// A late finish that lands before the superseding attempt is claimed (in
// the store's order) is a real result, whatever the superseding side saw:
// the retry adopts it instead of running the trial again.
func TestStaleAttemptFinishingAsItIsRetried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const grace = 200 * time.Millisecond
	for _, finishFirst := range []bool{true, false} {
		st := recStore(t)
		s := recOpen(t, st, "s", recSpec(t, recContinuous, "minimize", "random", "none", 1), grace)
		slow, err := s.Next(ctx, recWho)
		if err != nil {
			t.Fatal(err)
		}
		waitStale(t, st, "s", grace, 0)
		o := recOpen(t, st, "s", nil, grace)
		snap, err := o.Trials(ctx)
		if err != nil {
			t.Fatal(err)
		}
		stale := snap.Trials[0]
		if stale.State != StateStale {
			t.Fatalf("state %s, want stale", stale.State)
		}
		if finishFirst {
			if err := slow.Finish(ctx, StateDone, 7, ""); err != nil {
				t.Fatalf("Finish before the retry: %v", err)
			}
			_, err := o.retry(ctx, 0, stale.Attempt, &stale, Who{Host: "o"})
			var te *TakenError
			if !errors.As(err, &te) || te.State != StateDone {
				t.Fatalf("retry of a trial that finished meanwhile = %v, want TakenError done", err)
			}
			r, err := recOpen(t, st, "s", nil, grace).Best(ctx)
			if err != nil || r.Attempt != 1 || r.AdoptedFrom != 0 || r.Score != 7 {
				t.Errorf("Best = %+v, %v; want attempt 1 adopted from 0 with score 7", r, err)
			}
		} else {
			run, err := o.retry(ctx, 0, stale.Attempt, &stale, Who{Host: "o"})
			if err != nil {
				t.Fatal(err)
			}
			if err := slow.Finish(ctx, StateDone, 7, ""); !errors.Is(err, ErrSuperseded) {
				t.Errorf("Finish after the retry = %v, want ErrSuperseded", err)
			}
			if err := run.Finish(ctx, StateDone, 8, ""); err != nil {
				t.Fatal(err)
			}
			r, err := recOpen(t, st, "s", nil, grace).Best(ctx)
			if err != nil || r.Attempt != 1 || r.Score != 8 {
				t.Errorf("Best = %+v, %v; want attempt 1 with score 8", r, err)
			}
		}
	}
}

// Heartbeats keep an attempt alive past the grace period.
func TestHeartbeatKeepsLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := recStore(t)
	const grace = 2 * time.Second
	s := recOpen(t, st, "s", recSpec(t, recContinuous, "minimize", "random", "none", 1), grace)
	run, err := s.Next(ctx, recWho)
	if err != nil {
		t.Fatal(err)
	}
	o := recOpen(t, st, "s", nil, grace)
	// The sleeps are the behaviour under test: the lease must run out
	// (1.5 grace since the claim) while the heartbeats renew it. Only
	// the time from the last beat to o's look below decides, so the
	// margin against a stalled machine is a whole grace, 2 s. (It was 1 s grace with a beat every 125 ms: 12
	// record writes, each slow under -race on 2 shared CPUs, for no
	// more coverage than 6.)
	for start := time.Now(); time.Since(start) < grace+grace/2; {
		time.Sleep(grace / 4)
		if err := run.Heartbeat(ctx); err != nil {
			t.Fatal(err)
		}
	}
	_, err = o.Next(ctx, Who{Host: "o"})
	var nw *NoWorkError
	if !errors.Is(err, ErrNoWork) || !errors.As(err, &nw) {
		t.Fatalf("Next while the only trial beats = %v, want ErrNoWork", err)
	}
	if nw.Running != 1 || nw.Ended != 0 || nw.RetryAfter > grace {
		t.Errorf("NoWorkError = %+v, want 1 running, RetryAfter ≤ %v", nw, grace)
	}
}

// Two machines never evaluate the same point of a discrete space.
func TestDiscretePointsAreNotRepeated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := recStore(t)
	// 3 × 2 = 6 points; the random sampler collides on so few.
	spec := recSpec(t, []string{"opt=choice:adam,sgd,rms", "layers=int:1:2"}, "minimize", "random", "none", 100)
	s := recOpen(t, st, "s", spec, 0)
	if s.Limit() != 6 {
		t.Fatalf("Limit = %d, want 6 (the space's size)", s.Limit())
	}
	seen := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			o := recOpen(t, st, "s", nil, 0)
			for {
				run, err := o.Next(ctx, Who{Host: "h", PID: w})
				if errors.Is(err, ErrBudgetReached) || errors.Is(err, ErrNoWork) || errors.Is(err, ErrSpaceExhausted) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				seen[run.PointText()]++
				mu.Unlock()
				if err := run.Finish(ctx, StateDone, 0, ""); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if len(seen) != 6 {
		t.Errorf("%d distinct points evaluated, want all 6: %v", len(seen), seen)
	}
	for p, n := range seen {
		if n != 1 {
			t.Errorf("point %s evaluated %d times", p, n)
		}
	}
	snap, err := s.Trials(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range snap.Trials {
		if r.State != StateDone {
			t.Errorf("trial %d is %s", r.Number, r.State)
		}
	}
}

// The same alternatives are computed by every process: re-asking is
// deterministic.
func TestProposeIsDeterministic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := recStore(t)
	spec := recSpec(t, []string{"opt=choice:a,b,c,d", "k=int:0:3"}, "minimize", "random", "none", 16)
	s := recOpen(t, st, "s", spec, 0)
	// Hold the first proposal of trial 3 for trial 9.
	p0, sub, err := s.propose(ctx, 3, 0, History{})
	if err != nil || sub != 0 {
		t.Fatal(sub, err)
	}
	d, _ := s.blobForEmpty(ctx)
	meta := fsstore.Meta{{Key: keyKind, Value: kindPoint}, {Key: keyTrial, Value: "9"}}
	if ok, err := st.Claim(ctx, s.pointName(p0), d, meta); !ok || err != nil {
		t.Fatal(ok, err)
	}
	var got []string
	for range 2 {
		o := recOpen(t, st, "s", nil, 0)
		p, sub, err := o.propose(ctx, 3, 0, History{})
		if err != nil || sub == 0 || p.Equal(p0) {
			t.Fatalf("propose = %v, sub %d, %v; want an alternative", o.Space().FormatPoint(p), sub, err)
		}
		got = append(got, o.Space().FormatPoint(p))
	}
	if got[0] != got[1] {
		t.Errorf("alternatives differ between processes: %v", got)
	}
}
