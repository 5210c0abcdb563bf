// Package objective runs one trial's objective: any program, given the
// point in its environment and arguments, reporting intermediate values
// and a final score over a file descriptor, and reading prune verdicts on
// another. It is the process half of soma-trial; the study half (claims,
// records, pruners) is package study.
//
// The contract with an objective (also in soma-trial --help and the README):
//
//   - The point arrives as SOMA_PARAMS (JSON), one SOMA_PARAM_<NAME> per
//     knob (name upper-cased, other characters than letters and digits
//     as '_'), and as {name} substitutions in the arguments. A knob absent
//     from the point (its condition is false) is in none of them; {name?}
//     substitutes its text, or nothing where it is absent. SOMA_STUDY,
//     SOMA_TRIAL, SOMA_ATTEMPT and SOMA_TRIAL_DIR (a per-trial folder) are
//     set too; {study}, {trial}, {attempt} and {trial_dir} substitute.
//   - On fd $SOMA_REPORT_FD (3) it may write lines "report <step> <value>"
//     and "final <score>"; after each report, one line "continue" or
//     "prune" is written to fd $SOMA_CONTROL_FD (4) for it to read (once
//     pruned, every later report gets "prune"; verdicts that no longer
//     fit in the pipe because it never reads them are dropped). Several
//     reports may go as one line, "reports <steps> <values>" (the base64
//     of n little-endian int64 steps, then of their n float64 values),
//     answered by one verdict.
//   - Without a "final" line, the last non-empty line of stdout must be the
//     score: a number alone on the line (for example "0.9312"). A study
//     with several objectives (Options.Metrics) takes one score per
//     metric, in order, on the final line or the last line of stdout
//     ("final 0.12 35.1", "0.12 35.1").
//   - A non-zero exit, no score, or a score that is NaN, infinite or not a
//     number fails the trial; stderr's tail is kept as the reason.
//   - The objective runs in its own process group, and its whole process
//     tree ends with its attempt (see guardArg): what it leaves running
//     when it exits gets LeftoverGrace (2 s) to end, then SIGTERM, then
//     SIGKILL 2 s later; prune, timeout and stop signals go to its
//     process group, and what is left after it exits ends the same way;
//     if soma-trial dies, even by SIGKILL, the whole tree is killed.
package objective

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Helper is soma_report.py, the dependency-free Python helper.
//
//go:embed soma_report.py
var Helper []byte

// Param is one knob's value as text. An Absent param (a conditional knob
// whose condition is false in this point) has no text: it is left out of
// the environment, {name?} substitutes "" for it, and {name} is an error.
type Param struct {
	Name, Text string
	Absent     bool
}

// Step is one intermediate value.
type Step struct {
	Step  int64
	Value float64
}

// Options describe one run of an objective.
type Options struct {
	Argv       []string // program and arguments; {name} placeholders are substituted
	Params     []Param
	ParamsJSON []byte
	Vars       map[string]string // study, trial, attempt, trial_dir: env SOMA_<UPPER> and {name}
	Env        []string          // base environment (nil: os.Environ())
	Dir        string            // working directory ("" = inherit)
	Stdout     io.Writer         // the objective's stdout is copied here (may be nil); an *os.File is its stdout itself
	Stderr     io.Writer         // and its stderr here (may be nil); an *os.File is its stderr itself
	Timeout    time.Duration     // 0: none
	// Grace is the time between the steps of stopping an objective:
	// prune verdict, SIGTERM, SIGKILL. Zero means 10 s.
	Grace time.Duration
	// OnReport is called for each intermediate value, in order; it returns
	// whether to prune. May be nil.
	OnReport func(step int64, value float64) (prune bool)
	// LastStepOnly keeps only the last report in Result.Curve: for a
	// caller that keeps the curve itself through OnReport (soma-trial's
	// study run). A second copy of a 100k-step curve, grown by append,
	// page-faulted in ~2000 fresh pages of soma-trial's memory.
	LastStepOnly bool
	// PythonPath, if set, is prepended to PYTHONPATH (where soma_report.py is).
	PythonPath string
	// Metrics names the objectives of a study with several (two or
	// more): the objective then reports one score per metric, in this
	// order, as "final <a> <b>" or as the last line of stdout, and a run
	// that gives fewer or more fails naming the metric. Nil or one name:
	// one score.
	Metrics []string
	// Guard is the executable that runs as the objective's guard: a
	// program that calls GuardMain first thing (soma-trial, or a test
	// binary from its TestMain), usually "/proc/self/exe", which stays the
	// running program's file even if it is replaced on disk meanwhile.
	// Required.
	Guard string
	// EndsKnown says that StdoutEnd and StderrEnd are the current sizes
	// of Stdout and Stderr (files), as the caller knows them because
	// nothing else writes them between runs (soma-trial's per-worker
	// logs: Result.StdoutEnd of the run before). The run's output starts
	// there, and no seek asks the file server for the files' ends: a
	// round trip each on NFS, two per trial (issue 18).
	EndsKnown            bool
	StdoutEnd, StderrEnd int64
}

// StopKind says why a running objective is asked to stop from outside.
type StopKind int

const (
	// StopSignal: soma-trial itself got a signal (Slurm's pre-timeout
	// USR1, preemption, scancel, Ctrl-C); the same signal is forwarded.
	StopSignal StopKind = iota + 1
	// StopSuperseded: another process took over this attempt.
	StopSuperseded
)

// Stop is a request to stop the objective.
type Stop struct {
	Kind   StopKind
	Signal syscall.Signal // for StopSignal
}

// Outcome is how a run ended.
type Outcome string

const (
	Done        Outcome = "done"
	Failed      Outcome = "failed"
	Pruned      Outcome = "pruned"
	Interrupted Outcome = "interrupted"
	Superseded  Outcome = "superseded"
)

// Result is what one run produced.
type Result struct {
	Outcome  Outcome
	Score    float64 // Done: the final score; Pruned: the last value
	HasScore bool
	// Scores holds one score per metric when Options.Metrics has several
	// (Done only); Score is then Scores[0].
	Scores   []float64
	Curve    []Step // the reports, in order (Options.LastStepOnly: the last one)
	PrunedAt int64  // the step at which it was pruned
	// Reason explains Failed (and says how other outcomes came about).
	Reason   string
	ExitCode int // -1 if killed by a signal
	// StderrTail is stderr's last 4 KiB. Where stderr is a file (the
	// logs), it is read back only for a Failed outcome, the one that
	// keeps it (issue 18: a read costs the file server a round trip);
	// empty otherwise.
	StderrTail string
	Duration   time.Duration
	Argv       []string // after substitution
	// StdoutEnd and StderrEnd are the sizes of Stdout and Stderr (files)
	// once the objective's tree has exited, as read for the last line
	// and the stderr tail: where the output ends, for the caller's log
	// index and the next run's EndsKnown. -1: not a file, or not known.
	StdoutEnd, StderrEnd int64
}

// ErrStart means the objective could not be started at all (not found,
// not executable): every trial would fail the same way, so the caller
// should stop rather than burn the budget.
var ErrStart = errors.New("objective: cannot start")

var placeholder = regexp.MustCompile(`\{([A-Za-z_][A-Za-z0-9_.\-]*)(\?)?\}`)

// Substitute replaces {name} in each argument by the parameter's text or
// one of vars, and {name?} likewise, or by "" where the parameter is
// absent. An unknown name, and {name} for an absent parameter, are errors
// naming it.
func Substitute(argv []string, params []Param, vars map[string]string) ([]string, error) {
	lookup := make(map[string]string, len(params)+len(vars))
	var known []string
	for k, v := range vars {
		lookup[k] = v
	}
	absent := map[string]bool{}
	for _, p := range params {
		lookup[p.Name] = p.Text
		known = append(known, p.Name)
		if p.Absent {
			absent[p.Name] = true
		}
	}
	out := make([]string, len(argv))
	for i, a := range argv {
		if !strings.Contains(a, "{") {
			out[i] = a // most arguments: no regexp run
			continue
		}
		var bad, gone string
		out[i] = placeholder.ReplaceAllStringFunc(a, func(m string) string {
			name, opt := strings.CutSuffix(m[1:len(m)-1], "?")
			v, ok := lookup[name]
			switch {
			case !ok:
				bad = name
				return m
			case absent[name] && !opt:
				gone = name
				return m
			}
			return v
		})
		if bad != "" {
			return nil, fmt.Errorf("objective: argument %q: {%s} is not a parameter (parameters: %s; also {study} {trial} {attempt} {trial_dir})", a, bad, strings.Join(known, ", "))
		}
		if gone != "" {
			return nil, fmt.Errorf("objective: argument %q: param %s is absent from this point (its condition is false); write {%s?} for an empty string where it is absent", a, gone, gone)
		}
	}
	return out, nil
}

// CheckArgs checks argv's placeholders before any trial runs, so that a
// mistake is one clear error rather than a failed trial per point: every
// {name} or {name?} must name one of params or vars, and a param that can
// be absent from a point (conditional maps it to its condition) must be
// written {name?}.
func CheckArgs(argv []string, params []string, conditional map[string]string, vars []string) error {
	for _, a := range argv {
		for _, m := range placeholder.FindAllStringSubmatch(a, -1) {
			name, opt := m[1], m[2] == "?"
			if !slices.Contains(params, name) && !slices.Contains(vars, name) {
				return fmt.Errorf("objective: argument %q: {%s} is not a parameter (parameters: %s; also {study} {trial} {attempt} {trial_dir})", a, name, strings.Join(params, ", "))
			}
			if when, ok := conditional[name]; ok && !opt {
				return fmt.Errorf("objective: argument %q: param %s is absent where its condition (%s) is false; write {%s?}, which is empty there", a, name, when, name)
			}
		}
	}
	return nil
}

// EnvName is the SOMA_PARAM_<NAME> variable for a knob.
func EnvName(knob string) string {
	b := []byte(strings.ToUpper(knob))
	for i, c := range b {
		if !('A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			b[i] = '_'
		}
	}
	return "SOMA_PARAM_" + string(b)
}

// Run runs the objective to its end and says how it ended. It returns an
// error only if the objective could not be started (wrapping ErrStart) or
// the pipes could not be made; everything the objective does wrong is a
// Failed result. ctx cancellation stops the objective like StopSignal
// with SIGTERM.
func Run(ctx context.Context, o Options, stop <-chan Stop) (res Result, err error) {
	start := time.Now()
	if o.Grace <= 0 {
		o.Grace = 10 * time.Second
	}
	argv, err := Substitute(o.Argv, o.Params, o.Vars)
	if err != nil {
		return Result{}, err
	}
	if len(argv) == 0 {
		return Result{}, fmt.Errorf("%w: no command given", ErrStart)
	}
	// The report pipe (the objective's fd 3) and the verdict pipe (its
	// fd 4): ordinary os.Pipe files. Ours are in Go's netpoller (a
	// goroutine reading reports parks there without holding a P); the
	// objective's ends are made blocking when they are handed to it.
	repR, childRep, err := os.Pipe()
	if err != nil {
		return Result{}, fmt.Errorf("objective: pipe: %w", err)
	}
	childCtl, ctlW, err := os.Pipe()
	if err != nil {
		repR.Close()
		childRep.Close()
		return Result{}, fmt.Errorf("objective: pipe: %w", err)
	}
	defer repR.Close()
	defer ctlW.Close()
	verdicts := verdictWriter{f: ctlW, dropped: new(atomic.Bool)}

	// Resolved here as exec.Command resolves it, so that a missing
	// program is ErrStart before anything runs.
	look := exec.Command(argv[0])
	if look.Err != nil {
		childRep.Close()
		childCtl.Close()
		return Result{}, fmt.Errorf("%w: %s: %w", ErrStart, argv[0], look.Err)
	}
	if o.Guard == "" {
		childRep.Close()
		childCtl.Close()
		return Result{}, errors.New("objective: Options.Guard is empty (set it to this program's executable, /proc/self/exe, and call objective.GuardMain first in main)")
	}
	last := &lastLine{}
	tail := &tailBuffer{max: 4096}
	// A file for stdout or stderr (soma-trial's logs) is the objective's
	// own: no pipe, no goroutine copying, no wakeups; the last line and
	// the stderr tail are read back from the file's end when it exits.
	// Another writer gets a pipe and a goroutine copying it.
	outW, outFile, outStart := direct(o.Stdout, last, o.EndsKnown, o.StdoutEnd)
	errW, errFile, errStart := direct(o.Stderr, tail, o.EndsKnown, o.StderrEnd)
	var copies sync.WaitGroup
	var copyFrom []*os.File // the read ends, closed once the run has ended
	defer func() {
		for _, r := range copyFrom {
			r.Close()
		}
	}()
	fileFor := func(w io.Writer, f *os.File) (*os.File, error) {
		if f != nil {
			return f, nil
		}
		r, pw, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("objective: pipe: %w", err)
		}
		copyFrom = append(copyFrom, r)
		copies.Go(func() { _, _ = io.Copy(w, r) })
		return pw, nil
	}
	stdout, err := fileFor(outW, outFile)
	if err != nil {
		childRep.Close()
		childCtl.Close()
		return Result{}, err
	}
	stderr, err := fileFor(errW, errFile)
	if err != nil {
		childRep.Close()
		childCtl.Close()
		return Result{}, err
	}
	closeChild := func() {
		childRep.Close()
		childCtl.Close()
		if stdout != outFile {
			stdout.Close()
		}
		if stderr != errFile {
			stderr.Close()
		}
	}
	stdin, err := devNull() // opened once, not once per trial
	if err != nil {
		closeChild()
		return Result{}, fmt.Errorf("objective: %w", err)
	}
	// Fd puts each descriptor in blocking mode, as the objective expects
	// them (the guard passes on the same open files).
	fds := []int{int(stdin.Fd()), int(stdout.Fd()), int(stderr.Fd()), int(childRep.Fd()), int(childCtl.Fd())}
	gr := guardRun{Path: look.Path, Argv: argv, Env: buildEnv(o), Dir: o.Dir}
	g, seq, replies, err := startGuarded(o.Guard, gr, fds)
	closeChild()
	if err != nil {
		return Result{}, err
	}
	clean := false
	defer func() { g.release(clean) }()

	res = Result{Argv: argv, ExitCode: -1, StdoutEnd: -1, StderrEnd: -1}
	reps := &reports{onReport: o.OnReport, lastOnly: o.LastStepOnly, verdicts: verdicts, pruneAt: make(chan int64, 1)}
	// One goroutine reads the reports; another reads the objective's exit
	// status from the guard, then waits for the guard, which ends once
	// nothing of the objective's tree is left (see guardArg). The report
	// pipe's end of file normally comes with that; if something outside
	// the guard's reach still holds fd 3 (the guard itself was killed),
	// the reports are read on until the pipe is idle for exitDrain.
	exited := make(chan exit, 1)
	guardDone := make(chan struct{})
	read := make(chan struct{})
	var draining atomic.Bool
	go func() {
		watch(repR, reps.line, reps.answer, verdicts.unread, &draining)
		close(read)
	}()
	go func() {
		defer close(guardDone)
		clean = followGuard(g, replies, exited)
		// What holds a stdout or stderr pipe now is outside the guard's
		// reach: it is not waited for beyond exitDrain.
		copied := make(chan struct{})
		go func() { copies.Wait(); close(copied) }()
		select {
		case <-copied:
		case <-time.After(exitDrain):
		}
		draining.Store(true)
		_ = repR.SetReadDeadline(time.Now().Add(exitDrain))
		<-read
	}()

	// Signals go through the guard, which sends them to the objective's
	// process group while it has not reaped the objective; SIGKILL
	// kills its whole tree. (A write after the guard's exit fails: nothing
	// is left to signal.)
	signal := func(sig syscall.Signal) {
		if sig == syscall.SIGKILL {
			g.command(seq, "kill", "")
			return
		}
		g.command(seq, "signal", strconv.Itoa(int(sig)))
	}
	why, reason, prunedAt, werr := o.await(ctx, exited, reps.pruneAt, stop, signal)
	if why == Pruned {
		res.PrunedAt = prunedAt
	}
	res.Duration = time.Since(start)
	// The attempt ends with the objective's whole tree (the guard gives
	// what it left running LeftoverGrace, then SIGTERM, then SIGKILL).
	<-guardDone
	if outFile != nil {
		res.StdoutEnd = readTail(outFile, outStart, last)
	}
	if errFile != nil {
		// stderr's tail is read back only for an outcome that keeps it
		// (Failed; see errTail); its end, for the log index, is the
		// descriptor's offset otherwise.
		res.StderrEnd = offsetEnd(errFile, errStart)
		defer func() {
			if res.Outcome == Failed || res.StderrEnd < 0 {
				res.StderrEnd = readTail(errFile, errStart, tail)
				res.StderrTail = tail.String()
			}
		}()
	}
	res.StderrTail = tail.String()
	if werr.err == nil && werr.ws.Exited() {
		res.ExitCode = werr.ws.ExitStatus()
	}
	reps.mu.Lock()
	defer reps.mu.Unlock()
	res.Curve = reps.curve
	if why != "" {
		res.Outcome, res.Reason = why, reason
		if why == Pruned && len(res.Curve) > 0 {
			res.Score, res.HasScore = res.Curve[len(res.Curve)-1].Value, true
		}
		return res, nil
	}
	// Killed by a stop signal that soma-trial did not send: Slurm signals
	// every process of a task at once (proctrack/cgroup on scancel and at
	// the time limit), so the objective may die before soma-trial's own
	// signal is handled. That is an interruption, not the objective's
	// fault. (Bug: it used to be recorded failed, using up a retry or
	// losing the trial with max_retries = 0.)
	if sig, ok := killedBy(werr); ok && isStopSignal(sig) {
		select {
		case s := <-stop:
			if s.Kind == StopSuperseded {
				res.Outcome, res.Reason = Superseded, "superseded by a newer attempt"
				return res, nil
			}
		case <-time.After(500 * time.Millisecond):
		}
		res.Outcome, res.Reason = Interrupted, "interrupted: the objective was killed by "+sig.String()
		return res, nil
	}
	o.score(&res, werr, reps, last)
	return res, nil
}

// followGuard reads the guard's replies to one run until the guard is
// done with it: the objective's exit status goes to exited (or, if the
// guard ended without one, an error saying so: the objective was killed
// with it). clean says whether the guard finished the run in order (its
// socket can serve the next run).
func followGuard(g *guardProc, replies <-chan guardReply, exited chan<- exit) (clean bool) {
	gotExit := false
	for r := range replies {
		switch r.verb {
		case "exit":
			if e, ok := parseExit(r.arg); ok && !gotExit {
				gotExit = true
				exited <- e
			}
		case "done":
			clean = gotExit
		}
	}
	if !gotExit {
		exited <- exit{err: fmt.Errorf("the objective's guard process ended without its status (%v); the objective was killed with it", g.gone())}
	}
	return clean
}

// startGuarded hands the objective (gr, with its descriptors fds) to a
// guard of the executable guard, and returns the guard, the run's number
// and its replies once the guard has said the objective started (its
// pid). An idle guard may have died since its last run (killed by hand):
// one more try, with a new one. Every error wraps ErrStart.
func startGuarded(guard string, gr guardRun, fds []int) (g *guardProc, seq uint64, replies <-chan guardReply, err error) {
	var first guardReply
	for try := 0; ; try++ {
		if try == 0 {
			g, err = takeGuard(guard)
		} else {
			g, err = startGuard(guard)
		}
		if err != nil {
			return nil, 0, nil, fmt.Errorf("%w: the guard %s: %w", ErrStart, guard, err)
		}
		seq, err = g.start(gr, fds)
		if err == nil {
			replies = g.replies(seq)
			var ok bool
			if first, ok = <-replies; ok {
				break
			}
		}
		g.release(false)
		if try == 1 {
			return nil, 0, nil, fmt.Errorf("%w: the guard %s did not start the objective (%v; a program that runs objectives calls objective.GuardMain first)", ErrStart, guard, g.gone())
		}
	}
	if first.verb != "pid" {
		for range replies { // up to its "done": the socket is the next run's
		}
		g.release(true)
		if first.verb == "error" {
			return nil, 0, nil, fmt.Errorf("%w: %w", ErrStart, execError(first.arg))
		}
		return nil, 0, nil, fmt.Errorf("%w: the guard %s said %q", ErrStart, guard, first.verb)
	}
	return g, seq, replies, nil
}

// await waits for the objective's exit, or for what ends it first: a
// prune (pruneAt), the timeout, a stop, ctx. Those ask it to stop with
// signal, escalating to SIGTERM and SIGKILL after a grace each (escalate);
// why and reason say which (empty: it exited on its own), prunedAt the
// step of a prune.
func (o Options) await(ctx context.Context, exited <-chan exit, pruneAt <-chan int64, stop <-chan Stop, signal func(syscall.Signal)) (why Outcome, reason string, prunedAt int64, werr exit) {
	var timeout <-chan time.Time
	if o.Timeout > 0 {
		t := time.NewTimer(o.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	// escalate asks the objective to stop: first (already done by the
	// caller), then SIGTERM after a grace, then SIGKILL after another.
	escalate := func(first syscall.Signal) exit {
		if first != 0 {
			signal(first)
		} else {
			select {
			case e := <-exited:
				return e
			case <-time.After(o.Grace):
			}
			signal(syscall.SIGTERM)
		}
		select {
		case e := <-exited:
			return e
		case <-time.After(o.Grace):
		}
		signal(syscall.SIGKILL)
		return <-exited
	}
	ctxDone := ctx.Done()
	select {
	case werr = <-exited:
	case step := <-pruneAt:
		why, prunedAt = Pruned, step
		reason = fmt.Sprintf("pruned at step %d", step)
		werr = escalate(0)
	case <-timeout:
		why, reason = Failed, fmt.Sprintf("timeout after %s", o.Timeout)
		werr = escalate(syscall.SIGTERM)
	case s := <-stop:
		if s.Kind == StopSuperseded {
			why, reason = Superseded, "superseded by a newer attempt"
			werr = escalate(syscall.SIGTERM)
		} else {
			why, reason = Interrupted, fmt.Sprintf("interrupted by %s", s.Signal)
			werr = escalate(s.Signal)
		}
	case <-ctxDone:
		why, reason = Interrupted, "interrupted: "+context.Cause(ctx).Error()
		werr = escalate(syscall.SIGTERM)
	}
	return why, reason, prunedAt, werr
}

// score judges an objective that exited on its own (no prune, timeout or
// stop): Done with its score, or Failed with why. r.mu is held.
func (o Options) score(res *Result, werr exit, r *reports, last *lastLine) {
	res.Outcome = Failed
	switch {
	case res.ExitCode != 0:
		res.Reason = exitReason(werr)
	case r.protoErr != "":
		res.Reason = "bad report line: " + r.protoErr
	case r.final != nil && len(o.Metrics) > 1:
		res.Reason = o.takeScores(res, r.finalFields, "the final line")
	case r.final != nil:
		if len(r.finalFields) > 1 {
			res.Reason = fmt.Sprintf("final gave %d values, but the study has one objective (write \"final <score>\")", len(r.finalFields))
			return
		}
		res.Score, res.HasScore = *r.final, true
	case len(o.Metrics) > 1:
		l := strings.TrimSpace(last.String())
		if l == "" {
			res.Reason = fmt.Sprintf("no scores: nothing on fd $SOMA_REPORT_FD and stdout is empty (print the %s scores as the last line, or use final())", strings.Join(o.Metrics, " "))
			return
		}
		res.Reason = o.takeScores(res, strings.Fields(l), "the last line of stdout")
	default:
		l := strings.TrimSpace(last.String())
		if l == "" {
			res.Reason = "no score: nothing on fd $SOMA_REPORT_FD and stdout is empty (print the score as the last line, or use final())"
			return
		}
		v, err := strconv.ParseFloat(l, 64)
		if err != nil {
			res.Reason = fmt.Sprintf("no score: the last line of stdout is %q, %s", truncate(l, 80), notNumber(err))
			return
		}
		res.Score, res.HasScore = v, true
	}
	if res.Reason != "" {
		return
	}
	if math.IsNaN(res.Score) || math.IsInf(res.Score, 0) {
		res.Reason = fmt.Sprintf("score is %v", res.Score)
		res.HasScore = false
		return
	}
	res.Outcome = Done
}

// exit is how the objective ended, as its guard saw it: a wait status,
// or err when the guard could not tell (it died).
type exit struct {
	ws  syscall.WaitStatus
	err error
}

// parseExit reads the wait status of the guard's "exit" message.
func parseExit(t string) (exit, bool) {
	n, err := strconv.ParseUint(strings.TrimSpace(t), 10, 32)
	if err != nil {
		return exit{}, false
	}
	return exit{ws: syscall.WaitStatus(n)}, true
}

func killedBy(e exit) (syscall.Signal, bool) {
	if e.err == nil && e.ws.Signaled() {
		return e.ws.Signal(), true
	}
	return 0, false
}

// isStopSignal reports whether sig is one a scheduler or a person sends
// to stop a job (as opposed to a crash: SIGSEGV, SIGABRT, or the
// OOM killer's SIGKILL, which count as failures).
func isStopSignal(sig syscall.Signal) bool {
	switch sig {
	case syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGQUIT:
		return true
	}
	return false
}

func exitReason(e exit) string {
	switch {
	case e.err != nil:
		return e.err.Error()
	case e.ws.Signaled():
		return "killed by " + e.ws.Signal().String()
	}
	return fmt.Sprintf("exit status %d", e.ws.ExitStatus())
}

// takeScores reads one score per metric from fields into res, or returns
// why it could not, naming the metric at fault.
func (o *Options) takeScores(res *Result, fields []string, where string) string {
	want := "write them in this order: " + strings.Join(o.Metrics, " ")
	if len(fields) < len(o.Metrics) {
		return fmt.Sprintf("no score for %s: %s has %d of the %d scores (%s)", o.Metrics[len(fields)], where, len(fields), len(o.Metrics), want)
	}
	if len(fields) > len(o.Metrics) {
		return fmt.Sprintf("%s has %d values for %d metrics (%s)", where, len(fields), len(o.Metrics), want)
	}
	scores := make([]float64, len(fields))
	for i, f := range fields {
		x, err := strconv.ParseFloat(f, 64)
		if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
			return fmt.Sprintf("score for %s is %q in %s, not a finite number", o.Metrics[i], truncate(f, 40), where)
		}
		scores[i] = x
	}
	res.Scores, res.Score, res.HasScore = scores, scores[0], true
	return ""
}

// parseLine reads one line of the report protocol.
func parseLine(s string) (kind string, step int64, val float64, err error) {
	f := strings.Fields(s)
	switch {
	case len(f) == 3 && f[0] == "report":
		step, err = strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return "", 0, 0, fmt.Errorf("%q: step is not an integer", truncate(s, 80))
		}
		val, err = strconv.ParseFloat(f[2], 64)
		if err != nil {
			return "", 0, 0, fmt.Errorf("%q: value is %s", truncate(s, 80), notNumber(err))
		}
		return "report", step, val, nil
	case len(f) >= 2 && f[0] == "final":
		// Several values are several objectives' scores; Run checks
		// their number against Options.Metrics.
		for _, t := range f[1:] {
			if _, err := strconv.ParseFloat(t, 64); err != nil {
				return "", 0, 0, fmt.Errorf("%q: score is %s", truncate(s, 80), notNumber(err))
			}
		}
		val, _ = strconv.ParseFloat(f[1], 64)
		return "final", 0, val, nil
	case len(f) == 0:
		return "", 0, 0, nil
	}
	return "", 0, 0, fmt.Errorf("%q: want \"report <step> <value>\", \"reports <steps> <values>\" or \"final <score>\"", truncate(s, 80))
}

// parseBatch reads a "reports <steps> <values>" line: the standard
// base64 of n little-endian int64 steps, then of their n little-endian
// float64 values (soma_report's report(..., wait=False) sends its held
// reports so: a float's text per step cost a fast Python loop more than
// its step, issue 13 item 8).
func parseBatch(s string) ([]Step, error) {
	f := strings.Fields(s)
	if len(f) != 3 || f[0] != "reports" {
		return nil, fmt.Errorf("%q: want \"reports <steps> <values>\" (two base64 fields)", truncate(s, 80))
	}
	steps, err := base64.StdEncoding.DecodeString(f[1])
	if err != nil {
		return nil, fmt.Errorf("%q: the steps are not base64: %v", truncate(s, 80), err)
	}
	vals, err := base64.StdEncoding.DecodeString(f[2])
	if err != nil {
		return nil, fmt.Errorf("%q: the values are not base64: %v", truncate(s, 80), err)
	}
	if len(steps) == 0 || len(steps)%8 != 0 || len(steps) != len(vals) {
		return nil, fmt.Errorf("%q: %d bytes of steps and %d of values, want 8 bytes each for the same number of reports", truncate(s, 80), len(steps), len(vals))
	}
	out := make([]Step, len(steps)/8)
	for i := range out {
		out[i] = Step{
			Step:  int64(binary.LittleEndian.Uint64(steps[8*i:])),
			Value: math.Float64frombits(binary.LittleEndian.Uint64(vals[8*i:])),
		}
	}
	return out, nil
}

// notNumber says why strconv.ParseFloat refused a score: "1e400" is a
// number out of float64's range, not "not a number" (issue 16).
func notNumber(err error) string {
	if errors.Is(err, strconv.ErrRange) {
		return "out of float64's range (±1.8e308)"
	}
	return "not a number"
}

func buildEnv(o Options) []string {
	env := o.Env
	if env == nil {
		env = os.Environ()
	}
	env = append([]string(nil), env...)
	env = append(env, "SOMA_PARAMS="+string(o.ParamsJSON), "SOMA_REPORT_FD=3", "SOMA_CONTROL_FD=4")
	for _, p := range o.Params {
		if !p.Absent {
			env = append(env, EnvName(p.Name)+"="+p.Text)
		}
	}
	for k, v := range o.Vars {
		env = append(env, "SOMA_"+strings.ToUpper(k)+"="+v)
	}
	if o.PythonPath != "" {
		pp := o.PythonPath
		for _, e := range env {
			if old, ok := strings.CutPrefix(e, "PYTHONPATH="); ok && old != "" {
				pp += ":" + old
			}
		}
		env = append(env, "PYTHONPATH="+pp)
	}
	return env
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

func multi(w io.Writer, extra io.Writer) io.Writer {
	if w == nil {
		return extra
	}
	return io.MultiWriter(w, extra)
}

// direct returns what the objective writes to: w itself if it is a file
// (with the file and its current end, where this run's output starts:
// end if known, else asked of the file), else w and capture together.
func direct(w, capture io.Writer, known bool, end int64) (io.Writer, *os.File, int64) {
	if f, ok := w.(*os.File); ok {
		if known && end >= 0 {
			return f, f, end
		}
		if end, err := f.Seek(0, io.SeekEnd); err == nil {
			return f, f, end
		}
	}
	return multi(w, capture), nil, 0
}

var devNullOnce = sync.OnceValues(func() (*os.File, error) { return os.Open(os.DevNull) })

// devNull is /dev/null, opened once for every objective's stdin.
func devNull() (*os.File, error) { return devNullOnce() }

// The ends of the objective's output files are learned from the
// descriptor it wrote through, which it shares with this process: each of
// its writes (O_APPEND: at the file's end) leaves the shared offset where
// it ended, and lseek(SEEK_CUR) reads the offset without asking the file
// server, where a stat is a GETATTR on NFS. Issue 18: the stats of both
// files after each attempt were 2 of a trial's 31 file-server operations
// (and a third came with the read of stdout's tail, which now proves the
// end it read up to instead).
//
// The offset misses only what reached a file another way: written
// through a descriptor of its own (an objective that opens /dev/stdout
// anew), or by a process that escaped the objective's tree after it
// exited. stdout is read up to its real end anyway (readTail), as its
// last line is the score. stderr is read back only when the outcome keeps
// its tail (Failed); otherwise its end goes only into the log index, where
// such bytes land in the next attempt's range, as an escaped process's
// output always did.

// offsetEnd returns f's offset (see above), or -1 if it is unknown or
// before start (something moved it back: ask the file instead).
func offsetEnd(f *os.File, start int64) int64 {
	end, err := f.Seek(0, io.SeekCurrent)
	if err != nil || end < start {
		return -1
	}
	return end
}

// tailSlack is how far past the offset readTail reads to prove it is the
// file's end.
const tailSlack = 4096

// readTail writes what f holds past start, up to its last 8 KiB, to w:
// enough for the last line (lastLine keeps 4 KiB of one). It returns f's
// size, -1 if unknown.
//
// Where the objective wrote through f (its offset is past start), one
// pread from the offset's last 8 KiB up to tailSlack past it reads the
// tail and proves the end: a read of a regular file that returns fewer
// bytes than asked stopped at its end. (os.File.ReadAt would read again
// to see io.EOF: one more GETATTR on NFS.) A file longer than that, or
// one the objective did not write through f, is stat'ed.
func readTail(f *os.File, start int64, w io.Writer) int64 {
	if end := offsetEnd(f, start); end > start {
		from := max(start, end-8192)
		b := make([]byte, end-from+tailSlack)
		k, err := preadOnce(f, b, from)
		if err == nil && k >= end-from && k < int64(len(b)) {
			_, _ = w.Write(b[:k])
			return from + k
		}
	}
	return statTail(f, start, w)
}

// preadOnce is one pread(2) of f into b at off.
func preadOnce(f *os.File, b []byte, off int64) (int64, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var k int
	var rerr error
	if err := rc.Read(func(fd uintptr) bool {
		for {
			k, rerr = syscall.Pread(int(fd), b, off)
			if rerr != syscall.EINTR {
				return true
			}
		}
	}); err != nil {
		return 0, err
	}
	return int64(k), rerr
}

// statTail is readTail by the file's size, as a stat gives it.
func statTail(f *os.File, start int64, w io.Writer) int64 {
	st, err := f.Stat()
	if err != nil {
		return -1
	}
	from := max(start, st.Size()-8192)
	if n := st.Size() - from; n > 0 {
		b := make([]byte, n)
		k, err := f.ReadAt(b, from)
		if err != nil && k == 0 {
			// Opened write-only: read it by name.
			if r, err := os.Open(f.Name()); err == nil {
				k, _ = r.ReadAt(b, from)
				r.Close()
			}
		}
		if k > 0 {
			_, _ = w.Write(b[:k])
		}
	}
	return st.Size()
}

// lastLine remembers the last non-empty line written to it.
type lastLine struct {
	mu      sync.Mutex
	last    []byte
	partial []byte
}

func (l *lastLine) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		if ln := bytes.TrimSpace(l.partial[:i]); len(ln) > 0 {
			l.last = append(l.last[:0], ln...)
		}
		l.partial = l.partial[i+1:]
	}
	if len(l.partial) > 4096 { // a huge line without newline: keep its end
		l.partial = l.partial[len(l.partial)-4096:]
	}
	return len(p), nil
}

func (l *lastLine) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ln := bytes.TrimSpace(l.partial); len(ln) > 0 {
		return string(ln)
	}
	return string(l.last)
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
