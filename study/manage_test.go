package study

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/soma-hpc/soma/fsstore"
)

// finish runs n trials of s through Next, each done with score 1.
func finish(t *testing.T, s *Study, n int) {
	t.Helper()
	ctx := context.Background()
	for range n {
		run, err := s.Next(ctx, recWho)
		if err != nil {
			t.Fatal(err)
		}
		if err := run.Finish(ctx, StateDone, 1, ""); err != nil {
			t.Fatal(err)
		}
	}
}

// A Study opened before soma extend sees the new budget at its next look
// (Next) and when asked for a trial past the old one (Take); a new Open
// sees it at once; the budget as created stays readable.
func TestExtendSeenWithoutReopening(t *testing.T) {
	ctx := context.Background()
	st := recStore(t)
	s := recOpen(t, st, "s", recSpec(t, recContinuous, "minimize", "random", "none", 2), 0)
	finish(t, s, 2)
	if _, err := s.Next(ctx, recWho); !errors.Is(err, ErrBudgetReached) {
		t.Fatalf("Next at the budget = %v, want ErrBudgetReached", err)
	}
	if _, err := s.Take(ctx, 3, recWho); !errors.Is(err, ErrBudgetReached) || !strings.Contains(err.Error(), "soma extend ROOT --study s --budget 4") {
		t.Errorf("Take(3) past the budget = %v, want ErrBudgetReached naming soma extend", err)
	}
	ext, err := Extend(ctx, st, "s", 5, recWho)
	if err != nil || ext.From != 2 || ext.To != 5 || ext.Version.Number != 1 || ext.Claimed != 2 || ext.Version.Time.IsZero() {
		t.Fatalf("Extend = %+v, %v", ext, err)
	}
	run, err := s.Take(ctx, 3, recWho)
	if err != nil {
		t.Fatalf("Take(3) after extend: %v", err)
	}
	run.Finish(ctx, StateDone, 1, "")
	run, err = s.Next(ctx, recWho)
	if err != nil || run.Number() != 2 {
		t.Fatalf("Next after extend = %v, %v; want trial 2", run, err)
	}
	run.Finish(ctx, StateDone, 1, "")
	finish(t, s, 1)
	if _, err := s.Next(ctx, recWho); !errors.Is(err, ErrBudgetReached) {
		t.Errorf("Next after 5 trials = %v, want ErrBudgetReached", err)
	}
	r := recOpen(t, st, "s", nil, 0)
	if r.Limit() != 5 || r.Spec().Budget != 5 || r.CreatedBudget() != 2 || len(r.Versions()) != 1 {
		t.Errorf("reopened: limit %d, spec budget %d, created %d, versions %v", r.Limit(), r.Spec().Budget, r.CreatedBudget(), r.Versions())
	}
	// The same budget writes nothing; a lower one than claimed is refused.
	if ext, err := Extend(ctx, st, "s", 5, recWho); err != nil || !ext.Unchanged {
		t.Errorf("Extend to the same = %+v, %v; want Unchanged", ext, err)
	}
	if _, err := Extend(ctx, st, "s", 4, recWho); !errors.Is(err, ErrBelowClaimed) {
		t.Errorf("Extend below the claimed = %v, want ErrBelowClaimed", err)
	}
	if _, err := Extend(ctx, st, "nope", 4, recWho); !errors.Is(err, ErrNoStudy) {
		t.Errorf("Extend of no study = %v, want ErrNoStudy", err)
	}
}

// Lowering is allowed down to the trials claimed, and the runners stop
// claiming past it; a trial claimed past it meanwhile (a runner that had
// not looked yet) is still the study's, not foreign.
func TestExtendLowers(t *testing.T) {
	ctx := context.Background()
	st := recStore(t)
	s := recOpen(t, st, "s", recSpec(t, recContinuous, "minimize", "random", "none", 10), 0)
	finish(t, s, 3)
	late := recOpen(t, st, "s", nil, 0) // has not looked since
	if _, err := Extend(ctx, st, "s", 2, recWho); !errors.Is(err, ErrBelowClaimed) || !strings.Contains(err.Error(), "the lowest budget now is 3") {
		t.Errorf("Extend to 2 with 3 claimed = %v", err)
	}
	if ext, err := Extend(ctx, st, "s", 4, recWho); err != nil || ext.To != 4 {
		t.Fatalf("Extend to 4 = %+v, %v", ext, err)
	}
	// A runner's next look that reads the store (with random, sobol and
	// grid, Next reuses a look for a few seconds; this one reads).
	if _, err := s.Trials(ctx); err != nil || s.Limit() != 4 {
		t.Fatalf("limit %d after extend to 4 and a look, %v", s.Limit(), err)
	}
	finish(t, s, 1)
	if _, err := s.Next(ctx, recWho); !errors.Is(err, ErrBudgetReached) {
		t.Errorf("Next after 4 = %v, want ErrBudgetReached", err)
	}
	// late claims trial 4 with the limit it read at Open (10): the race
	// the lowering cannot close without a lock.
	run, err := late.claimAttempt(ctx, 4, 0, mustPoint(t, late, "x=0,y=0"), 0, recWho)
	if err != nil {
		t.Fatal(err)
	}
	run.Finish(ctx, StateDone, 1, "")
	snap, err := recOpen(t, st, "s", nil, 0).Trials(ctx)
	if err != nil || len(snap.Trials) != 5 || len(snap.Foreign) != 0 {
		t.Errorf("after a trial claimed past the lowered budget: %d trials, foreign %v, %v; want 5 and none", len(snap.Trials), snap.Foreign, err)
	}
}

func mustPoint(t *testing.T, s *Study, text string) Point {
	t.Helper()
	p, err := s.Space().ParsePoint(text)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A change record that is not what extend writes (a spec with another
// space, by hand or by a newer tool) is reported and never applied: the
// budget stays, and a later change still counts.
func TestChangeThatChangesMoreIsRefused(t *testing.T) {
	ctx := context.Background()
	st := recStore(t)
	s := recOpen(t, st, "s", recSpec(t, recContinuous, "minimize", "random", "none", 3), 0)
	other := recSpec(t, []string{"x=float:-5:6", "y=float:0:1"}, "minimize", "random", "none", 9)
	d, err := st.Put(ctx, other.Canonical())
	if err != nil {
		t.Fatal(err)
	}
	meta := fsstore.Meta{{Key: keyKind, Value: kindVersion}, {Key: keyVersion, Value: strconv.Itoa(RecordVersion)}, {Key: keyBudget, Value: "9"}}
	if _, err := st.Claim(ctx, "study/s/change/1", d, meta); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Trials(ctx); err != nil {
		t.Fatal(err)
	}
	if s.Limit() != 3 {
		t.Errorf("limit %d after a change of the space, want 3 (not applied)", s.Limit())
	}
	p := s.Problems()
	if len(p) != 1 || !strings.Contains(p[0].Error(), "study/s/change/1") || !strings.Contains(p[0].Error(), "changes more than the budget (budget: 3 → 9; param.x.high: 5 → 6)") {
		t.Errorf("Problems() = %v, want the change named and why", p)
	}
	if ext, err := Extend(ctx, st, "s", 7, recWho); err != nil || ext.Version.Number != 2 {
		t.Fatalf("Extend after it = %+v, %v", ext, err)
	}
	if _, err := s.Trials(ctx); err != nil || s.Limit() != 7 {
		t.Errorf("limit %d after the next extend, want 7 (%v)", s.Limit(), err)
	}
}

// Enqueued points run first, in order, each once, also across two Study
// values (two processes' views); a retry of a queued trial keeps its
// point; Enqueue refuses a point twice and writes nothing for a bad batch.
func TestEnqueueOrderAndRetry(t *testing.T) {
	ctx := context.Background()
	st := recStore(t)
	// tpe: every Next reads the store (random would reuse a look).
	spec := recSpec(t, recContinuous, "minimize", "tpe", "none", 8)
	a := recOpen(t, st, "s", spec, 0)
	b := recOpen(t, st, "s", nil, 0)
	if _, err := Enqueue(ctx, st, "s", []string{"x=1,y=0.5", "x=9,y=0"}); err == nil || !strings.Contains(err.Error(), `point 2: study: point "x=9,y=0": param "x": 9 is outside [-5, 5]`) {
		t.Errorf("Enqueue of a bad point = %v", err)
	}
	res, err := Enqueue(ctx, st, "s", []string{"x=1,y=0.5", "y=0.25, x=-2", "x=3,y=0"})
	if err != nil || res.Change != 1 || len(res.Points) != 3 || res.Waiting != 3 || res.Limit != 8 {
		t.Fatalf("Enqueue = %+v, %v", res, err)
	}
	if _, err := Enqueue(ctx, st, "s", []string{"x=3,y=0"}); err == nil || !strings.Contains(err.Error(), "already enqueued (1.2)") {
		t.Errorf("Enqueue twice = %v", err)
	}
	// a takes the first, b the second; a's runner dies (interrupted).
	r1, err := a.Next(ctx, recWho)
	if err != nil || r1.PointText() != "x=1,y=0.5" {
		t.Fatalf("a.Next = %v, %v", r1, err)
	}
	r2, err := b.Next(ctx, recWho)
	if err != nil || r2.PointText() != "x=-2,y=0.25" {
		t.Fatalf("b.Next = %v, %v", r2, err)
	}
	if err := r1.Finish(ctx, StateInterrupted, 0, "signal"); err != nil {
		t.Fatal(err)
	}
	r2.Finish(ctx, StateDone, 2, "")
	// The retry keeps the queued point; the third queued point comes next.
	r3, err := b.Next(ctx, recWho)
	if err != nil || r3.Number() != r1.Number() || r3.Attempt() != 1 || r3.PointText() != "x=1,y=0.5" {
		t.Fatalf("retry = trial %d attempt %d %s, %v; want trial %d attempt 1 with its queued point", r3.Number(), r3.Attempt(), r3.PointText(), err, r1.Number())
	}
	r3.Finish(ctx, StateDone, 1, "")
	r4, err := a.Next(ctx, recWho)
	if err != nil || r4.PointText() != "x=3,y=0" {
		t.Fatalf("a.Next = %v, %v; want the third queued point", r4, err)
	}
	r4.Finish(ctx, StateDone, 3, "")
	r5, err := b.Next(ctx, recWho)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"x=1,y=0.5", "x=-2,y=0.25", "x=3,y=0"} {
		if r5.PointText() == q {
			t.Errorf("a sampled trial got queued point %s again", q)
		}
	}
	q, taken, err := b.Queue(ctx)
	if err != nil || len(q) != 3 || !taken[q[0].ID] || !taken[q[1].ID] || !taken[q[2].ID] {
		t.Errorf("Queue = %v %v, %v; want 3, all taken", q, taken, err)
	}
}
