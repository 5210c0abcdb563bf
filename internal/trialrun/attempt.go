package trialrun

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/soma-hpc/soma/internal/objective"
	"github.com/soma-hpc/soma/study"
)

// attempt is one claimed attempt while its objective runs (runOne): what
// its heartbeats and the objective's reports share.
type attempt struct {
	l    *loop
	run  *study.Run
	n, a int
	// stop tells the objective to stop (objective.Run); buffered, so that
	// a send never blocks.
	stop chan objective.Stop

	mu        sync.Mutex // held while the record is rewritten: Report and Heartbeat both do
	nextFlush time.Time  // guarded by mu; see report
}

// superseded tells the objective to stop because a newer attempt of the
// trial was claimed (this process lost its lease). It never blocks: a
// stop already pending is enough.
func (t *attempt) superseded() {
	select {
	case t.stop <- objective.Stop{Kind: objective.StopSuperseded}:
	default:
	}
}

// startBeats heartbeats the attempt every Study.HeartbeatInterval until
// the returned stop is called; stop returns once no heartbeat runs and
// none will start (an in-flight one is cancelled). A heartbeat that finds
// the attempt superseded stops the objective and the heartbeats; one that
// fails otherwise is logged once and retried at the next beat.
//
// Heartbeats run on a timer, not a goroutine waiting on a ticker: a
// goroutine per trial costs scheduler work on every trial.
func (t *attempt) startBeats(ctx context.Context) (stop func()) {
	hbCtx, hbCancel := context.WithCancel(ctx)
	var hbMu sync.Mutex // held while a beat runs; the timer is stopped under it
	hbStopped, warned := false, false
	var hbTimer *time.Timer
	beat := func() {
		hbMu.Lock()
		defer hbMu.Unlock()
		if hbStopped {
			return
		}
		t.mu.Lock()
		err := t.run.Flush(hbCtx) // a heartbeat, with the values not written yet
		t.mu.Unlock()
		switch {
		case err == nil, hbCtx.Err() != nil:
		case errors.Is(err, study.ErrSuperseded):
			t.l.logf("trial %d.%d: superseded by a newer attempt (this process lost its lease); stopping the objective", t.n, t.a)
			t.superseded()
			return
		case !warned:
			warned = true
			t.l.logf("trial %d.%d: heartbeat failed (will keep trying): %v", t.n, t.a, err)
		}
		hbTimer.Reset(t.l.st.HeartbeatInterval())
	}
	hbMu.Lock()
	hbTimer = time.AfterFunc(t.l.st.HeartbeatInterval(), beat)
	hbMu.Unlock()
	return func() {
		hbCancel() // an in-flight heartbeat returns at once
		hbMu.Lock()
		hbStopped = true
		hbTimer.Stop()
		hbMu.Unlock()
	}
}

// report takes one value the objective reported at step and returns
// whether the pruner says to stop the trial. A report that finds the
// attempt superseded stops the objective; other errors are logged, and
// the objective goes on.
//
// Reports are coalesced: each value joins the curve at once and the
// verdict is the pruner's on the curve so far, but the record (and its
// curve blob, which holds the whole curve) is rewritten only on the
// first report, by the heartbeats, and at most every flushEvery, or
// less often if a write takes more than 1/flushDuty of the time;
// Finish writes the whole curve. Writing it on every report cost 1.5-3
// ms each, growing with the curve (issue 13: 20000 reports, written
// by the objective in well under a second, took its trial 75 s).
func (t *attempt) report(ctx context.Context, step int64, value float64) bool {
	t.mu.Lock()
	err := t.run.Add(step, value)
	if now := time.Now(); err == nil && !now.Before(t.nextFlush) {
		err = t.run.Flush(ctx)
		t.nextFlush = time.Now().Add(max(flushEvery, flushDuty*time.Since(now)))
	}
	t.mu.Unlock()
	prune := false
	if err == nil {
		// Other trials' curves as read at most judgeAge ago.
		prune, err = t.run.Judge(ctx, judgeAge)
	}
	if t.l.o.Verbose {
		t.l.logf("trial %d.%d step %d value %g%s", t.n, t.a, step, value, map[bool]string{true: " -> prune"}[prune])
	}
	if errors.Is(err, study.ErrSuperseded) {
		t.superseded()
		return false
	}
	if err != nil {
		t.l.logf("trial %d.%d: report at step %d: %v", t.n, t.a, step, err)
	}
	return prune
}
