// Package trialrun is soma-trial's loop: join a study, claim trials one
// after another (or P at once), run the objective for each with package
// objective, feed its reports to the study's pruner, heartbeat while it
// runs, and record how it ended. cmd/soma-trial is its flags.
package trialrun

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/internal/objective"
	"github.com/soma-hpc/soma/internal/runlog"
	"github.com/soma-hpc/soma/study"
)

// Options configure a run of the loop.
type Options struct {
	Argv []string // the objective command, with {name} placeholders
	// Trial, if >= 0, runs exactly that trial number and stops.
	Trial int
	// MaxTrials caps how many trials this process runs (0: no cap).
	MaxTrials int
	// Parallel is how many objectives run at once in this process (>= 1).
	Parallel int
	// Timeout per trial (0: none); KillGrace between prune verdict,
	// SIGTERM and SIGKILL (0: 10 s).
	Timeout, KillGrace time.Duration
	// NoWait: when nothing is claimable but trials run elsewhere, exit
	// instead of waiting for them to end or go stale, and never take the
	// study's watcher role (see Run).
	NoWait bool
	Who    study.Who
	// Log gets one line per trial; Verbose adds starts and reports.
	Log     io.Writer
	Verbose bool
	// PythonPath holds soma_report.py; prepended to the objective's PYTHONPATH.
	PythonPath string
	// LogsCommand is how a user reads this study's logs, for messages:
	// "soma logs ROOT --local DIR" with a bucket root, whose logs are in
	// the local folder. Empty means "soma logs " + the root given to Run.
	LogsCommand string
	// Env is the objective's base environment (nil: this process's).
	Env []string
	// Guard is the executable that guards each objective's process tree
	// (objective.Options.Guard): soma-trial's "/proc/self/exe".
	Guard string

	// prefetchBelow replaces the constant in tests (0: prefetchBelow):
	// a race-built test binary as the guard makes even /bin/echo's
	// trials take longer than 250 ms on a busy machine.
	prefetchBelow time.Duration
}

// Summary says what the loop did and why it stopped.
type Summary struct {
	Ran         int            `json:"ran"`
	States      map[string]int `json:"states"`
	Stopped     string         `json:"stopped"` // budget, trial, max-trials, no-work, watched, interrupted, space-exhausted
	Interrupted bool           `json:"interrupted"`
	// Signal is the signal that interrupted the loop, if one did.
	Signal syscall.Signal `json:"-"`
}

// ErrInterrupted is returned when a signal stopped the loop; the attempts
// that were running are recorded interrupted and will be retried. Run's
// errors carry no "soma-trial:" prefix: the command adds it (it was
// printed twice, "soma-trial: soma-trial: interrupted by terminated";
// issue 16).
var ErrInterrupted = errors.New("interrupted")

// WorkDir is a trial's working folder, shared by its attempts so that a
// retry can resume from a checkpoint the interrupted attempt left there.
func WorkDir(root, studyName string, trial int) string {
	return filepath.Join(root, "work", studyName, strconv.Itoa(trial))
}

type loop struct {
	st    *study.Study
	root  string
	o     Options
	sig   <-chan os.Signal
	mu    sync.Mutex
	stops map[int]chan objective.Stop // running objectives by worker
	logs  map[int]*runlog.Writer      // per worker, opened on its first trial
	env   []string                    // the objectives' base environment, read once

	packing sync.Mutex  // held by the worker making a pack while the loop runs (packRunning)
	stopped atomic.Bool // a signal arrived
	signal  syscall.Signal
	taken   atomic.Int64
	active  atomic.Int64 // objectives running in this process
	sum     Summary
	logMu   sync.Mutex

	crowdMu    sync.Mutex // guards crowdAt, crowd (crowded)
	crowdAt    time.Time
	crowd      bool
	registry   string   // registryDir
	registered []string // this process's registry entries, removed at the end

	// The study's watcher role, once this process holds it (keepWatch),
	// and its refresh timer; waiter: a worker of this process waits for
	// the trials running elsewhere (at most one does).
	watchMu    sync.Mutex
	watch      *study.Watcher
	watchTimer *time.Timer
	watchLost  bool // a refresh found the role taken over
	waiter     bool // guarded by mu

	// How this process's first trials ended (sameFailure), under mu.
	firstFail  string // the first failure's last line of stderr, or reason
	firstFails int    // trials ended so far, if every one failed like that

	// The study's logs/<study> and work/<study> folders, opened once
	// without following links (fsstore.Beneath): an objective's output
	// and working folder never land outside the root through a link
	// inside it (issue 13, item 2).
	logDir, workDir *fsstore.Beneath
}

// Run runs the loop until the study's budget is reached, nothing is left
// to claim, Options.Trial or MaxTrials is done, or a signal arrives on
// sig (which is forwarded to the running objectives; their attempts are
// recorded interrupted and Run returns ErrInterrupted).
//
// The end of a study (issue 19): when nothing is claimable but trials
// still run elsewhere, at most one process of the study waits for them,
// to retry those that go stale: the one that holds the study's watcher
// role (study.Study.Watch), taken by the first process that finds
// nothing to claim and kept, refreshed like a trial's lease, until the
// budget is reached or the process stops. Every other process with
// nothing to claim stops at once (Summary.Stopped "watched"), freeing
// its allocation; with NoWait a process never waits nor watches
// ("no-work"). Within a process, only its last worker with nothing to
// claim waits (the others end), so a watcher retries stale trials one
// at a time. The waiting worker looks at the study (study.Study.Next:
// one listing of the trial folder and a read of each running trial)
// after 10 ms, then twice as long each time up to the heartbeat
// interval (a fifth of the lease): a stale trial cannot be seen sooner
// than the lease allows, so looking more often buys nothing but
// file-server load.
func Run(ctx context.Context, st *study.Study, root string, o Options, sig <-chan os.Signal) (Summary, error) {
	if o.Parallel < 1 {
		o.Parallel = 1
	}
	if o.Trial >= 0 {
		o.Parallel = 1
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if err := CheckArgs(o.Argv, st.Space()); err != nil {
		return Summary{}, err
	}
	l := &loop{st: st, root: root, o: o, sig: sig, stops: map[int]chan objective.Stop{}, logs: map[int]*runlog.Writer{}}
	l.sum.States = map[string]int{}
	if l.env = o.Env; l.env == nil {
		l.env = os.Environ() // once, not per trial
	}
	if err := l.openDirs(); err != nil {
		return l.sum, fmt.Errorf("the study's logs and work folders: %w", err)
	}
	defer l.logDir.Close()
	defer l.workDir.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go l.watchSignals(ctx)

	l.registry = registryDir(root, st.Name())
	defer func() {
		for _, wl := range l.logs {
			wl.Close()
		}
		for _, p := range l.registered {
			os.Remove(p)
		}
		if len(l.registered) > 0 {
			os.Remove(l.registry) // if no other worker is in it
		}
	}()
	var wg sync.WaitGroup
	errs := make([]error, o.Parallel)
	reasons := make([]string, o.Parallel)
	for w := range o.Parallel {
		wg.Go(func() { reasons[w], errs[w] = l.worker(ctx, w) })
	}
	wg.Wait()
	l.leaveWatch(ctx)
	if l.stopped.Load() {
		l.sum.Stopped, l.sum.Interrupted, l.sum.Signal = "interrupted", true, l.signal
		return l.sum, fmt.Errorf("%w by %s", ErrInterrupted, l.signal)
	}
	l.sum.Stopped = reasons[0]
	for _, r := range reasons {
		if r != "sibling" { // ended because another worker of this process waits or runs
			l.sum.Stopped = r
			break
		}
	}
	if err := errors.Join(errs...); err != nil {
		return l.sum, err
	}
	// Pack the trials this process ended so that views of a large study
	// read a few packs instead of one file per trial. Done once, at the end
	// of the loop, and only this process's own share (every array task
	// packs its own; none reads the others' trials for it). Safe when every
	// array task does it at once; a failure costs only speed, so it is a
	// warning.
	if rep, err := st.Pack(ctx, study.PackOptions{Own: true}); err != nil {
		l.logf("soma-trial: warning: packing ended trials failed (views stay correct, only slower): %v", err)
	} else if rep.Packed > 0 && o.Verbose {
		l.logf("soma-trial: packed %d ended trials (%d packs)", rep.Packed, rep.Packs)
	}
	return l.sum, nil
}

func (l *loop) watchSignals(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case s := <-l.sig:
		sys, _ := s.(syscall.Signal)
		if sys == 0 {
			sys = syscall.SIGTERM
		}
		l.mu.Lock()
		l.signal = sys
		l.stopped.Store(true)
		for _, c := range l.stops {
			select {
			case c <- objective.Stop{Kind: objective.StopSignal, Signal: sys}:
			default:
			}
		}
		l.mu.Unlock()
		l.logf("soma-trial: got %s: stopping the running objectives; their attempts will be retried", sys)
	}
}

func (l *loop) logf(format string, args ...any) {
	l.logMu.Lock()
	defer l.logMu.Unlock()
	fmt.Fprintf(l.o.Log, format+"\n", args...)
}

// worker claims and runs trials until there is nothing more to do.
//
// For samplers whose proposals do not depend on results (random, sobol,
// grid), it records the attempt that just ended while it claims and runs
// the next one: the record and the claim wait on fsyncs, and overlapping
// them with each other and with the next objective raised one process's
// rate from 255 to ~330 trials/s (a trivial objective; the floor, which
// does the same syscalls one after another, ~300). Only one objective
// runs at a time all the same. It costs CPU (two goroutines in syscalls
// at once: context switches per trial 33 -> 61), so it is skipped while
// this host runs more than twice as many workers of the study as it has
// CPUs (crowded; measured with 8 processes on 2 CPUs: 420 instead of 460
// trials/s with it). When
// its trials are short (prefetchBelow) it also claims the next trial while
// the current one runs, so that a trial's claim (two fsyncs) is off the
// path from one objective to the next: one process 240 -> 278 trials/s,
// two 269 -> 328 (journaled ext4, 2 CPUs). A history sampler (tpe) claims
// after recording, so that its next proposal knows the last result.
func (l *loop) worker(ctx context.Context, w int) (string, error) {
	var cs claimState
	pipeline := l.o.Trial < 0 && l.st.IndexSampler()
	var recording chan error // the last attempt's record, being written
	wait := func() error {
		if recording == nil {
			return nil
		}
		err := <-recording
		recording = nil
		return err
	}
	var next chan claimed // the next attempt, claimed while this one runs
	// take returns the next claim: the prefetched one, or a new one,
	// which may wait (or watch) only when nothing of this worker's is
	// still being recorded (mayWait).
	take := func(mayWait bool) claimed {
		if next == nil {
			return l.claim(ctx, &cs, mayWait)
		}
		c := <-next
		next = nil
		c.held.stop()
		return c
	}
	c := l.claim(ctx, &cs, true)
	var lastRun time.Duration
	below := l.o.prefetchBelow
	if below == 0 {
		below = prefetchBelow
	}
	for c.run != nil {
		if pipeline && lastRun > 0 && lastRun < below && !l.crowded() {
			next = make(chan claimed, 1)
			go func() { next <- l.claimHeld(ctx, &cs) }()
		}
		l.active.Add(1)
		started := time.Now()
		record, err := l.runOne(ctx, w, c.run)
		lastRun = time.Since(started)
		l.active.Add(-1)
		// The previous attempt's record was written while this one ran.
		if rerr := wait(); rerr != nil && err == nil {
			// Stopping on that error: record this one first, it ran.
			_ = record()
			err = rerr
		}
		switch {
		case err != nil:
			c = claimed{reason: "error"}
		case l.o.Trial >= 0:
			err = record()
			c = claimed{reason: "trial"}
		case pipeline && !l.crowded():
			recording = make(chan error, 1)
			go func() { recording <- record() }()
			c = take(false)
		default:
			if err = record(); err == nil {
				c = take(true)
			} else {
				c = claimed{reason: "error"}
			}
		}
		if next != nil {
			// Not taken (an error): the claim made meanwhile is given
			// back below like any other that is not to be run.
			c = take(false)
		}
		if err == nil && c.run == nil && c.reason == "no-work" {
			// The claim was made without waiting (take), maybe before
			// this attempt's record was written (prefetched while it
			// ran, or beside its record): it counted this process's own
			// last trial as running elsewhere. Ask again once that is
			// recorded, and wait (or watch) now if nothing is claimable.
			// (Bug: a --no-wait runner that ended the budget's last
			// trial stopped with "nothing claimable now" instead of "the
			// budget is reached"; one that had just retried a damaged
			// record did so too.)
			if err = wait(); err == nil {
				c = l.claim(ctx, &cs, true)
			}
		}
		if c.run != nil && (err != nil || l.stopped.Load()) {
			// Claimed while the last one ran or was recorded, and not to
			// be run: give it back at once rather than let it go stale.
			why := "soma-trial stopped on an error before starting it"
			if err == nil {
				l.mu.Lock()
				why = fmt.Sprintf("interrupted by %s before it started", l.signal)
				l.mu.Unlock()
			}
			_ = c.run.Finish(context.WithoutCancel(ctx), study.StateInterrupted, math.NaN(), why)
			c = claimed{reason: "interrupted"}
		}
		if err != nil {
			_ = wait()
			return "error", err
		}
	}
	if err := wait(); err != nil {
		return "error", err
	}
	return c.reason, c.err
}

// flushEvery, flushDuty and judgeAge coalesce an objective's reports
// (runOne): the record is rewritten at most every flushEvery, and at most
// 1/flushDuty of the time when the curve grows long (its blob holds the
// whole curve); verdicts compare with the other trials' curves as read at
// most judgeAge ago.
const (
	flushEvery = time.Second
	flushDuty  = 50
	judgeAge   = time.Second
)

// prefetchBelow: a worker whose last objective ran shorter than this
// claims its next trial while the current one runs (index samplers, and
// not while the host is crowded), taking the claim's two fsyncs off the
// path from one trial to the next. Only for short trials: a claim held
// while a long objective runs would look running without running, and at
// the end of a budget would keep a trial from an idle worker for as long.
const prefetchBelow = 250 * time.Millisecond

// claimHeld claims like claim and keeps the claimed attempt's heartbeat
// going until the worker takes it (claimed.held.stop), so that a claim
// that waits longer than expected for the objective before it never goes
// stale.
func (l *loop) claimHeld(ctx context.Context, cs *claimState) claimed {
	c := l.claim(ctx, cs, false)
	if c.run == nil {
		return c
	}
	h := &heldBeat{}
	run, iv := c.run, l.st.HeartbeatInterval()
	h.mu.Lock() // the first beat waits until h.timer is set
	defer h.mu.Unlock()
	h.timer = time.AfterFunc(iv, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.stopped {
			return
		}
		_ = run.Heartbeat(ctx) // superseded: the run that takes it finds out
		h.timer.Reset(iv)
	})
	c.held = h
	return c
}

// heldBeat is the heartbeat of a claim that waits to be run.
type heldBeat struct {
	mu      sync.Mutex
	stopped bool
	timer   *time.Timer
}

// stop ends the heartbeat (waiting for a beat in flight); nil is fine.
func (h *heldBeat) stop() {
	if h == nil {
		return
	}
	h.mu.Lock()
	h.stopped = true
	h.timer.Stop()
	h.mu.Unlock()
}

// claimed is what claim got: a run, or why there is none.
type claimed struct {
	run    *study.Run
	reason string // budget, trial, max-trials, no-work, watched, sibling, interrupted, space-exhausted, error
	err    error
	held   *heldBeat // a prefetched claim's heartbeat, until it is taken
}

// claimState is a worker's waiting state between claims.
type claimState struct {
	waiting bool // this worker is its process's waiter (loop.waiter)
	backoff time.Duration
}

// claim claims the worker's next trial. When every remaining trial runs
// elsewhere it returns "no-work" if NoWait or !mayWait (the caller asks
// again with mayWait once its own last attempt is recorded); else it
// waits for them to end or go stale if this worker is its process's
// last and the process holds the study's watcher role (see Run), and
// returns "sibling" or "watched" if not.
func (l *loop) claim(ctx context.Context, cs *claimState, mayWait bool) (c claimed) {
	defer func() {
		if c.run != nil || c.reason != "" {
			l.stopWaiting(cs)
		}
	}()
	for {
		if cs.backoff == 0 {
			cs.backoff = 10 * time.Millisecond
		}
		if l.stopped.Load() {
			return claimed{reason: "interrupted"}
		}
		if l.o.MaxTrials > 0 && l.taken.Add(1) > int64(l.o.MaxTrials) {
			return claimed{reason: "max-trials"}
		}
		var run *study.Run
		var err error
		if l.o.Trial >= 0 {
			run, err = l.st.Take(ctx, l.o.Trial, l.o.Who)
		} else {
			run, err = l.st.Next(ctx, l.o.Who)
		}
		if l.o.MaxTrials > 0 && err != nil {
			l.taken.Add(-1)
		}
		l.warnProblems()
		switch {
		case err == nil:
		case errors.Is(err, study.ErrBudgetReached):
			return claimed{reason: "budget"}
		case errors.Is(err, study.ErrSpaceExhausted):
			return claimed{reason: "space-exhausted"}
		case errors.Is(err, study.ErrTaken) && l.o.Trial >= 0:
			l.logf("soma-trial: %v", err)
			return claimed{reason: "trial"}
		case errors.Is(err, study.ErrNoWork):
			if l.o.NoWait || !mayWait {
				return claimed{reason: "no-work"}
			}
			first := !cs.waiting
			if !l.startWaiting(cs) {
				return claimed{reason: "sibling"}
			}
			watched, err := l.keepWatch(ctx)
			if err != nil {
				return claimed{reason: "error", err: err}
			}
			if watched != nil {
				l.logf("soma-trial: every remaining trial is running elsewhere, and %s; stopping to free this allocation", strings.TrimPrefix(watched.Error(), "study "+l.st.Name()+": "))
				return claimed{reason: "watched"}
			}
			iv := l.st.HeartbeatInterval()
			if first {
				l.logf("soma-trial: every remaining trial is running elsewhere; this process keeps watch, to retry any that go stale (it looks every %s at most; --no-wait to exit now)", iv)
			}
			// Back off from 10 ms: near the end of a budget the other
			// processes' last trials end within moments, and a fixed 2 s
			// sleep kept every process but one idle (measured at P=8:
			// 7.1 s instead of 5.3 s for 1000 trials). Up to the
			// heartbeat interval, a fifth of the lease: a trial whose
			// runner died is seen stale only once the lease has passed
			// since its last beat. (Bug, issue 19: every waiting process
			// looked every 2 s whatever the lease, ~18 file-server
			// operations a second each on a FUSE mount.)
			if !l.sleep(ctx, min(cs.backoff, iv)) {
				return claimed{reason: "interrupted"}
			}
			cs.backoff *= 2
			continue
		default:
			return claimed{reason: "error", err: err}
		}
		cs.backoff = 10 * time.Millisecond
		return claimed{run: run}
	}
}

// startWaiting makes the worker its process's waiter unless another
// worker of the process waits, or runs an objective (that one asks again
// when it ends). It reports whether the worker is the waiter.
func (l *loop) startWaiting(cs *claimState) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if cs.waiting {
		return true
	}
	if l.waiter || l.active.Load() > 0 {
		return false
	}
	l.waiter, cs.waiting = true, true
	return true
}

// stopWaiting ends the worker's turn as its process's waiter, if it has one.
func (l *loop) stopWaiting(cs *claimState) {
	if !cs.waiting {
		return
	}
	l.mu.Lock()
	l.waiter, cs.waiting = false, false
	l.mu.Unlock()
}

// keepWatch makes sure this process holds the study's watcher role,
// taking it if no live process does. It returns the *study.WatchedError
// that says who does, if another process holds it. Once taken, the role
// is refreshed every heartbeat interval until leaveWatch, or until a
// refresh finds it taken over (this process was seen stale).
func (l *loop) keepWatch(ctx context.Context) (*study.WatchedError, error) {
	l.watchMu.Lock()
	defer l.watchMu.Unlock()
	if l.watch != nil && !l.watchLost {
		return nil, nil
	}
	w, err := l.st.Watch(ctx, l.o.Who)
	var we *study.WatchedError
	if errors.As(err, &we) {
		return we, nil
	}
	if err != nil {
		return nil, fmt.Errorf("soma-trial: %w", err)
	}
	l.watch, l.watchLost = w, false
	iv := l.st.HeartbeatInterval()
	var refresh func()
	refresh = func() {
		err := w.Refresh(ctx)
		l.watchMu.Lock()
		defer l.watchMu.Unlock()
		if l.watch != w || l.watchTimer == nil {
			return // left (leaveWatch)
		}
		switch {
		case errors.Is(err, study.ErrSuperseded):
			l.watchLost = true
			l.logf("soma-trial: another process took over the watcher role (this one was seen stale)")
			return
		case err != nil && ctx.Err() == nil:
			l.logf("soma-trial: warning: refreshing the watcher role (will keep trying): %v", err)
		}
		l.watchTimer = time.AfterFunc(iv, refresh)
	}
	l.watchTimer = time.AfterFunc(iv, refresh)
	return nil, nil
}

// leaveWatch stops refreshing the watcher role and releases it, so that
// the next process that looks takes it at once.
func (l *loop) leaveWatch(ctx context.Context) {
	l.watchMu.Lock()
	w, lost := l.watch, l.watchLost
	if l.watchTimer != nil {
		l.watchTimer.Stop()
		l.watchTimer = nil
	}
	l.watchMu.Unlock()
	if w == nil || lost {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := w.Release(rctx); err != nil {
		l.logf("soma-trial: warning: %v (the next process takes the role once the lease has passed)", err)
	}
}

// warnProblems logs, once each, what the study's looks found wrong in
// its folder (study.Study.Problems): names that are not its records,
// which are never run, and records that cannot be read, which end
// nothing. (Bug: soma-trial passed over both in silence; with a trial's
// record corrupt it said only "the budget is reached".)
func (l *loop) warnProblems() {
	for _, p := range l.st.Problems() {
		var fe *study.ForeignError
		if errors.As(p, &fe) {
			l.logf("soma-trial: warning: %v", p)
			continue
		}
		l.logf("soma-trial: warning: %v (a record that cannot be read ends nothing: its trial is run again)", p)
	}
}

func (l *loop) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return !l.stopped.Load()
		case <-time.After(50 * time.Millisecond):
			if l.stopped.Load() {
				return false
			}
		}
	}
}

// runOne runs the objective of one claimed attempt and returns what
// records its end (the worker may call it while its next objective runs).
// An error means the objective could not run at all: the attempt is then
// recorded interrupted (giveBack, or here when the objective cannot
// start), so that it is retried, and the loop stops.
//
// Its steps: set up the attempt's work folder and log (setUp), let a
// signal reach the objective (stopChannel), heartbeat while the
// objective runs and feed its reports to the pruner (attempt), then
// mark the end of its output in the log (endLog).
func (l *loop) runOne(ctx context.Context, w int, run *study.Run) (record func() error, err error) {
	n, a := run.Number(), run.Attempt()
	su, err := l.setUp(ctx, w, run)
	if err != nil {
		return nil, err
	}
	stop, release := l.stopChannel(w)
	defer release()
	if l.o.Verbose {
		l.logf("trial %d.%d start %s", n, a, run.PointText())
	}
	t := &attempt{l: l, run: run, n: n, a: a, stop: stop}
	stopBeats := t.startBeats(ctx)
	res, err := objective.Run(ctx, l.objectiveOptions(run, su, func(step int64, value float64) bool {
		return t.report(ctx, step, value)
	}), stop)
	stopBeats()
	l.endLog(su.wl, n, a, res, err)
	if err != nil {
		// The objective cannot start (not found...): give the trial back
		// and stop, rather than fail every trial of the budget.
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer rcancel()
		_ = run.Finish(rctx, study.StateInterrupted, math.NaN(), err.Error())
		return nil, err
	}
	return func() error { return l.record(ctx, w, run, res, su.dir) }, nil
}

// trialSetup is what setUp prepared for one attempt's objective.
type trialSetup struct {
	params []objective.Param
	pj     []byte // the point as JSON
	dir    string // the trial's work folder
	wl     *runlog.Writer
}

// setUp prepares attempt run of worker w: its parameters, its work
// folder (made), and the worker's log, with the attempt's start marked
// in its index. When the folder or the log cannot be made, the attempt
// is given back (giveBack) and the error says the fix.
func (l *loop) setUp(ctx context.Context, w int, run *study.Run) (trialSetup, error) {
	name := l.st.Name()
	n, a := run.Number(), run.Attempt()
	kvs := run.Values()
	su := trialSetup{params: make([]objective.Param, len(kvs))}
	for i, kv := range kvs {
		su.params[i] = objective.Param{Name: kv.Name, Text: kv.Text, Absent: kv.Absent}
	}
	var err error
	if su.pj, err = run.PointJSON(); err != nil {
		return su, err
	}
	su.dir = WorkDir(l.root, name, n)
	if err := l.makeWorkDir(su.dir); err != nil {
		return su, l.giveBack(ctx, run, fmt.Errorf("trial folder: %w", err), "make the work folder writable")
	}
	if su.wl, err = l.workerLog(w); err != nil {
		return su, l.giveBack(ctx, run, fmt.Errorf("log: %w", err), "make "+runlog.Dir(l.root, name)+" writable, or free space")
	}
	if err := su.wl.Mark("start", n, a); err != nil {
		return su, l.giveBack(ctx, run, fmt.Errorf("log: %w", err), "make "+runlog.Dir(l.root, name)+" writable, or free space")
	}
	return su, nil
}

// stopChannel makes worker w's stop channel, which watchSignals sends
// to, holding a signal's stop at once if one came between the claim and
// now. release unregisters it; call it once the objective has returned.
func (l *loop) stopChannel(w int) (stop chan objective.Stop, release func()) {
	stop = make(chan objective.Stop, 2)
	l.mu.Lock()
	l.stops[w] = stop
	if l.stopped.Load() { // a signal came between the claim and now
		stop <- objective.Stop{Kind: objective.StopSignal, Signal: l.signal}
	}
	l.mu.Unlock()
	return stop, func() {
		l.mu.Lock()
		delete(l.stops, w)
		l.mu.Unlock()
	}
}

// objectiveOptions are the options objective.Run gets for attempt run,
// set up as su, with onReport taking its reports.
func (l *loop) objectiveOptions(run *study.Run, su trialSetup, onReport func(step int64, value float64) bool) objective.Options {
	n, a := run.Number(), run.Attempt()
	known, outEnd, errEnd := su.wl.Ends()
	return objective.Options{
		Argv:       l.o.Argv,
		Params:     su.params,
		ParamsJSON: su.pj,
		Vars: map[string]string{
			"study": l.st.Name(), "trial": strconv.Itoa(n), "attempt": strconv.Itoa(a), "trial_dir": su.dir,
		},
		Env:          l.env,
		Stdout:       su.wl.Out,
		Stderr:       su.wl.Err,
		EndsKnown:    known,
		StdoutEnd:    outEnd,
		StderrEnd:    errEnd,
		Timeout:      l.o.Timeout,
		Grace:        l.o.KillGrace,
		OnReport:     onReport,
		LastStepOnly: true, // run keeps the curve
		Metrics:      l.st.Spec().Metrics,
		PythonPath:   l.o.PythonPath,
		Guard:        l.o.Guard,
	}
}

// endLog marks the end of attempt n.a's output in worker log wl, given
// what objective.Run returned (runErr: the objective did not run). A log
// index that cannot be written is only warned about: the attempt's
// outcome is recorded anyway, and only soma logs' view of it suffers.
func (l *loop) endLog(wl *runlog.Writer, n, a int, res objective.Result, runErr error) {
	wl.Ended(res.StdoutEnd, res.StderrEnd, runErr == nil)
	if merr := wl.Mark("end", n, a); merr != nil {
		l.logf("soma-trial: warning: log index: %v (soma logs may show trial %d.%d's output up to a later attempt's)", merr, n, a)
	}
}

// giveBack ends a claimed attempt whose objective cannot be started
// because soma-trial itself cannot set it up (cause: its log files or its
// work folder cannot be made: a read-only folder, ENOSPC), and returns
// the error that stops the loop, saying what happened and the fix.
//
// The attempt is recorded interrupted at once, with cause as its reason.
// (Bug: it stayed running until its lease expired, so the trial sat idle
// for the grace period and soma status showed it running.) Interrupted,
// not failed: the objective never ran, so it is not its fault, and a
// failure would count against max_retries (default 0) and could end the
// trial for good, unrun, which would leave the budget a trial short of
// results. An interrupted attempt is retried without limit, and that
// cannot loop forever on a folder that stays read-only: the loop stops on
// this error instead of claiming again, so each start of soma-trial costs
// at most one attempt per worker.
func (l *loop) giveBack(ctx context.Context, run *study.Run, cause error, fix string) error {
	n, a := run.Number(), run.Attempt()
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer rcancel()
	reason := fmt.Sprintf("soma-trial could not start the objective: %v", cause)
	if ferr := run.Finish(rctx, study.StateInterrupted, math.NaN(), reason); ferr != nil {
		return fmt.Errorf("trial %s: %w (%s); recording it interrupted failed too, so it stays running until its lease expires: %w", trialLabel(n, a), cause, fix, ferr)
	}
	return fmt.Errorf("trial %s: %w (%s); the objective did not run, and the attempt is recorded interrupted, to be retried", trialLabel(n, a), cause, fix)
}

// record writes how an attempt ended, and its line in the log.
func (l *loop) record(ctx context.Context, w int, run *study.Run, res objective.Result, dir string) error {
	n, a := run.Number(), run.Attempt()
	// Record with a fresh context: a cancelled one must not lose the result.
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer rcancel()
	state, score, reason := study.StateDone, res.Score, res.Reason
	switch res.Outcome {
	case objective.Failed:
		state, score = study.StateFailed, math.NaN()
		if tail := strings.TrimSpace(res.StderrTail); tail != "" {
			reason += "\n" + tail
		}
	case objective.Pruned:
		state = study.StatePruned
		if !res.HasScore {
			score = math.NaN()
		}
	case objective.Interrupted:
		state, score = study.StateInterrupted, math.NaN()
	case objective.Superseded:
		l.note(n, a, shortPoint(run.Values()), "superseded", "", res.Duration)
		return nil
	}
	var ferr error
	if state == study.StateDone && len(res.Scores) > 1 {
		ferr = run.FinishScores(rctx, res.Scores, reason)
	} else {
		ferr = run.Finish(rctx, state, score, reason)
	}
	switch {
	case errors.Is(ferr, study.ErrSuperseded):
		l.note(n, a, shortPoint(run.Values()), "superseded", "result discarded: a newer attempt exists", res.Duration)
		return nil
	case ferr != nil:
		return fmt.Errorf("record trial %d.%d: %w", n, a, ferr)
	}
	if state == study.StateDone || state == study.StatePruned || state == study.StateFailed && l.st.Spec().MaxRetries == 0 {
		// Never run again: a folder the objective left empty goes. A
		// failure without retries is final too. (Bug: failed trials kept
		// their empty folders, though the README said only folders with
		// something in them stay; issue 16.) With retries a failure's
		// folder stays: its retry may already run in it.
		l.removeIfEmpty(dir)
	}
	detail := ""
	switch state {
	case study.StateDone:
		detail = "score " + strconv.FormatFloat(score, 'g', 6, 64)
		if len(res.Scores) > 1 {
			t := make([]string, len(res.Scores))
			for i, x := range res.Scores {
				t[i] = strconv.FormatFloat(x, 'g', 6, 64)
			}
			detail = "scores " + strings.Join(t, " ")
		}
	case study.StatePruned:
		detail = fmt.Sprintf("at step %d (value %.6g)", res.PrunedAt, score)
	default:
		detail = firstLine(res.Reason)
		// The last line of stderr, which the record keeps too, says why
		// more often than "exit status 1" (issue 16: a missing numpy
		// showed only in soma logs --stderr).
		if last := lastLine(res.StderrTail); state == study.StateFailed && last != "" {
			detail += ": " + last
		}
	}
	l.note(n, a, shortPoint(run.Values()), string(state), detail, res.Duration)
	if state == study.StateFailed {
		l.sameFailure(cmp.Or(lastLine(res.StderrTail), firstLine(res.Reason)))
	} else if state == study.StateDone || state == study.StatePruned {
		l.sameFailure("")
	}
	l.packRunning(rctx)
	return nil
}

// packRunning packs the trials this process ended, while the loop runs,
// where other processes share the study (study.PackOptions.Running: each
// of them then reads one pack rather than each record; nothing is done,
// and nothing read, otherwise). One worker at a time: another's attempt
// finds the pack being made and goes on. A failure costs only speed.
func (l *loop) packRunning(ctx context.Context) {
	if !l.packing.TryLock() {
		return
	}
	defer l.packing.Unlock()
	if _, err := l.st.Pack(ctx, study.PackOptions{Running: true}); err != nil {
		l.logf("soma-trial: warning: packing ended trials failed (views stay correct, only slower): %v", err)
	}
}

// sameFailures is how many of a process's first trials must fail the
// same way before sameFailure says so.
const sameFailures = 3

// sameFailure follows how this process's first trials end (why: the
// failure's key; "" for a trial that did not fail) and, once its first
// sameFailures trials have all failed the same way, says so on the log,
// once, loudly: an objective that cannot work (a python3 without numpy)
// otherwise fails the whole budget one quiet line at a time (issue 16).
func (l *loop) sameFailure(why string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.firstFails < 0: // decided: not all the same
		return
	case why == "" || l.firstFails > 0 && why != l.firstFail:
		l.firstFails = -1
		return
	}
	l.firstFail = why
	l.firstFails++
	if l.firstFails == sameFailures {
		l.logf("soma-trial: WARNING: the first %d trials all failed the same way: %s\n"+
			"soma-trial: WARNING: the objective may fail every trial; try it by hand, or see %s --study %s TRIAL --stderr",
			sameFailures, why, l.logsCommand(), l.st.Name())
	}
}

// lastLine is the last non-blank line of s, trimmed and cut to 200 bytes.
func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = strings.TrimSpace(s[i+1:])
	}
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// host is this host's name as it appears in log file names.
func (l *loop) host() string {
	if h := fsstore.SanitizeSegment(l.o.Who.Host); h != "" {
		return h
	}
	return "host"
}

// workerLog returns worker w's log files, opening them on first use.
func (l *loop) workerLog(w int) (*runlog.Writer, error) {
	l.mu.Lock()
	wl := l.logs[w]
	l.mu.Unlock()
	if wl != nil {
		return wl, nil
	}
	// Only worker w opens its own files: no race on l.logs[w].
	wl, err := runlog.Open(l.logDir, l.host(), l.o.Who.PID, w)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.logs[w] = wl
	l.mu.Unlock()
	if l.o.Trial < 0 && l.st.IndexSampler() {
		l.register(w) // for crowded
	}
	return wl, nil
}

// openDirs makes and opens the study's logs/<study> and work/<study>
// folders, following no link below the root: a link there is refused.
func (l *loop) openDirs() error {
	root, err := fsstore.OpenBeneath(l.root)
	if err != nil {
		return err
	}
	defer root.Close()
	if l.logDir, err = root.MkdirAll("logs/" + l.st.Name()); err != nil {
		return err
	}
	if l.workDir, err = root.MkdirAll("work/" + l.st.Name()); err != nil {
		l.logDir.Close()
		return err
	}
	return nil
}

// makeWorkDir makes a trial's working folder (one mkdirat): a retry
// finds it there, with whatever the earlier attempt left. It is made
// relative to work/<study> opened without following links (openDirs): a
// link at the trial's folder is refused (fsstore.ErrForeign), never
// entered. (The objective is then started in the folder by its path:
// exec has no fchdir, so a link swapped in between this check and the
// start would still be followed.)
func (l *loop) makeWorkDir(dir string) error {
	return l.workDir.Mkdir(filepath.Base(dir))
}

// removeIfEmpty removes the working folder of a trial that ended for
// good if its objective left it empty: one rmdir (unlinkat with
// AT_REMOVEDIR), which removes only an empty folder (ENOTEMPTY: kept)
// and never a link (ENOTDIR), relative to work/<study> opened without
// following links. So work/ holds only the folders with something in
// them.
//
// It replaces reusing such a folder for the worker's next trial (an
// open, two reads of the folder to see it empty, and a rename: four
// file-server operations per trial, against this rmdir and the next
// trial's mkdir; issue 13, item 9). A rename of the emptied folder to
// the next trial's name would save one, but only this rmdir tells that
// a folder is empty without a listing, and atomically: a file the
// objective left behind must never reach another trial (issue 18 asked).
func (l *loop) removeIfEmpty(dir string) {
	for {
		err := unix.Unlinkat(l.workDir.Fd(), filepath.Base(dir), unix.AT_REMOVEDIR)
		if !errors.Is(err, unix.EINTR) {
			return // removed, or kept: not empty, gone, not a folder
		}
	}
}

func (l *loop) note(n, a int, point, state, detail string, d time.Duration) {
	l.mu.Lock()
	l.sum.Ran++
	l.sum.States[state]++
	l.mu.Unlock()
	if detail != "" {
		detail = " " + detail
	}
	l.logf("trial %s %s %s%s (%s)", trialLabel(n, a), point, state, detail, d.Round(time.Millisecond))
}

// shortPoint is the point for a log line: floats to 4 significant digits
// (the record keeps them exact; soma best prints them exact).
// An absent conditional knob is left out, as from the point's text (it
// printed "mom=" as if its value were empty).
func shortPoint(kvs []study.KV) string {
	var b strings.Builder
	for _, kv := range kvs {
		if kv.Absent {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(kv.Name)
		b.WriteByte('=')
		text := kv.Text
		if strings.ContainsAny(text, ".eE") {
			if v, err := strconv.ParseFloat(text, 64); err == nil {
				text = strconv.FormatFloat(v, 'g', 4, 64)
			}
		}
		b.WriteString(text)
	}
	return b.String()
}

// StatesText is a Summary's states as "15 done, 9 pruned".
func (s Summary) StatesText() string {
	order := []string{"done", "pruned", "failed", "interrupted", "superseded"}
	var parts []string
	for _, k := range order {
		if n := s.States[k]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, k))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// trialLabel is "7", or "7 (attempt 2)" for a retry.
func trialLabel(n, a int) string {
	if a == 0 {
		return strconv.Itoa(n)
	}
	return fmt.Sprintf("%d (attempt %d)", n, a)
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// Ensure the store type satisfies what study consumes.
var _ study.Store = (*fsstore.Store)(nil)

// crowded reports whether this host runs more than twice as many workers
// of the study as it has CPUs (then the worker does not overlap its
// record with the next claim: that costs CPU the other workers need). It
// counts the live entries of the study's node-local worker registry, at
// most every 200 ms.
//
// Twice, not once: with the raw fsyncs and polls of the time (fsstore's
// fsyncer, objective's rawPoll; issue 13 removed the poll, so these
// numbers want re-measuring) overlapping got cheaper. Measured on 2 CPUs,
// journaled ext4, /bin/echo, shuffled rounds: 4 processes 336 -> 379
// trials/s with the overlap (floor 391); 6 processes 430 -> 412 and 8
// processes 425 -> 395 without it being better; on the journal-less disk
// at 4 processes no difference (290 / 293).
func (l *loop) crowded() bool {
	l.crowdMu.Lock()
	defer l.crowdMu.Unlock()
	if !l.crowdAt.IsZero() && time.Since(l.crowdAt) < 200*time.Millisecond {
		return l.crowd
	}
	l.crowdAt = time.Now()
	l.crowd = localWorkers(l.registry) > 2*runtime.NumCPU()
	return l.crowd
}

// registryDir is a node-local folder (under $TMPDIR) where each worker of
// this host running the study at root leaves an empty file <pid>.<worker>.
// Node-local, not in the study folder: counting the workers of a node
// must not list a shared folder five times a second from every process
// of a cluster.
func registryDir(root, studyName string) string {
	abs, err := filepath.Abs(root)
	if err != nil {
		abs = root
	}
	// FNV-1a, as hash/fnv computes it (it was written out by hand; the
	// value must not change: processes of one study on a node, of any
	// soma version, meet in this folder).
	h := fnv.New64a()
	h.Write([]byte(abs + "\x00" + studyName))
	return filepath.Join(os.TempDir(), fmt.Sprintf("soma-workers-%016x", h.Sum64()))
}

// register adds worker w to the registry (best effort: without it, the
// worker only overlaps its work more than it might).
func (l *loop) register(w int) {
	if os.MkdirAll(l.registry, 0o777) != nil {
		return
	}
	p := filepath.Join(l.registry, fmt.Sprintf("%d.%d", os.Getpid(), w))
	if f, err := os.Create(p); err == nil {
		f.Close()
		l.mu.Lock()
		l.registered = append(l.registered, p)
		l.mu.Unlock()
	}
}

// localWorkers counts the entries <pid>.<worker> in dir whose process is
// alive. A reused pid counts too: it only errs on the crowded side.
func localWorkers(dir string) int {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		pidText, _, _ := strings.Cut(e.Name(), ".")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid <= 0 {
			continue
		}
		if err := syscall.Kill(pid, 0); err == nil || errors.Is(err, syscall.EPERM) {
			n++
		}
	}
	return n
}

// logsCommand is Options.LogsCommand, or soma logs of the root.
func (l *loop) logsCommand() string {
	if l.o.LogsCommand != "" {
		return l.o.LogsCommand
	}
	return "soma logs " + l.root
}
