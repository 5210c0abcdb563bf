package worker

import (
	"bufio"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/soma-hpc/soma/fsstore"
)

// daemonScript is the Python side of the pipe: a real file in this
// package, compiled and unit-tested on its own (daemon_test.py), not a
// string constant (seed debt D-19).
//
//go:embed daemon.py
var daemonScript []byte

// Errors of a daemon call.
var (
	// ErrDaemonDied: the Python process exited (os._exit, a signal such
	// as SIGSEGV, the OOM killer) during a call.
	ErrDaemonDied = errors.New("worker: the Python daemon died")
	// ErrCancelled: the plan was cancelled (DELETE /plans/<id>, a client
	// that went away).
	ErrCancelled = errors.New("worker: plan cancelled")
	// ErrTimeout: the plan ran past its timeout.
	ErrTimeout = errors.New("worker: plan timed out")
)

// FilterError is a filter that raised: Python's message and traceback.
type FilterError struct {
	Node, Method string
	Message      string
	Traceback    string
}

func (e *FilterError) Error() string {
	if e.Node == "" {
		return "worker: python: " + e.Message
	}
	return fmt.Sprintf("worker: node %q: %s: %s", e.Node, e.Method, e.Message)
}

// writeDaemonScript writes daemon.py into dir under a name that carries
// its digest, so that several worker processes (and versions) sharing dir
// never see each other's half-written or different file.
func writeDaemonScript(dir string) (string, error) {
	d := fsstore.Sum(daemonScript)
	hex := strings.TrimPrefix(d.String(), fsstore.Algo+":")
	path := filepath.Join(dir, "daemon-"+hex[:16]+".py")
	if b, err := os.ReadFile(path); err == nil && string(b) == string(daemonScript) {
		return path, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("worker: daemon script folder: %w", err)
	}
	if err := fsstore.WriteFileAtomic(path, strings.NewReader(string(daemonScript))); err != nil {
		return "", fmt.Errorf("worker: write %s: %w", path, err)
	}
	return path, nil
}

// daemon is one running daemon.py. A daemon serves one plan at a time;
// the pool hands it out exclusively. Its fields are owned by that plan,
// except exited and waitErr, which the wait goroutine sets.
type daemon struct {
	key string
	cmd *exec.Cmd
	// log is the daemon's log file (its descriptors 1 and 2, for its
	// whole life), open here for reading: a plan's output is what was
	// written to it while the plan ran (logStart, logSince).
	log     *os.File
	logPath string
	in      io.WriteCloser
	out     *bufio.Reader
	hello   pipeHello
	grace   time.Duration

	broken  bool // a call failed in a way that leaves the pipe unusable
	exited  chan struct{}
	waitErr error
}

// daemonSpec is how to start a daemon.
type daemonSpec struct {
	python string   // the venv's interpreter
	script string   // path of daemon.py
	log    string   // path of its log file (made by daemon.py)
	env    []string // extra environment (CUDA_VISIBLE_DEVICES)
	grace  time.Duration
	logger *slog.Logger
}

// startDaemon starts a daemon and reads its hello. The process is not tied
// to ctx (it outlives the plan that started it, for warm reuse); ctx only
// bounds the start.
func startDaemon(ctx context.Context, key string, s daemonSpec) (*daemon, error) {
	cmd := exec.Command(s.python, "-B", s.script, "--log", s.log)
	cmd.Env = append(os.Environ(), s.env...)
	cmd.Stderr = &logWriter{logger: s.logger, prefix: "daemon"}
	// Its own process group: a terminal's ^C to soma-worker must not
	// interrupt the filters; cancel is the worker's decision.
	// Pdeathsig: a worker killed with SIGKILL takes its daemons along.
	// (Bug: they ran on under init, a torch filter training for another
	// minute with the node's CPUs or GPU after its worker was gone.) The
	// signal follows the thread that started the daemon; Go keeps its
	// threads unless a goroutine exits while locked to one, which
	// nothing here does (go-nvml's dlopen locks and unlocks).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 2 * time.Second
	// Our own pipes rather than StdinPipe/StdoutPipe, so that they can be
	// grown (growPipe) for large arrays.
	inR, in, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	out, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		in.Close()
		return nil, err
	}
	for _, f := range []*os.File{in, out} {
		if err := growPipe(f); err != nil && s.logger != nil {
			s.logger.Debug("pipe keeps its default size", "err", err)
		}
	}
	cmd.Stdin, cmd.Stdout = inR, outW
	err = cmd.Start()
	inR.Close() // the child has its copies
	outW.Close()
	if err != nil {
		in.Close()
		out.Close()
		return nil, fmt.Errorf("worker: start %s: %w", s.python, err)
	}
	d := &daemon{key: key, cmd: cmd, in: in, out: bufio.NewReaderSize(out, 1<<16), grace: s.grace, exited: make(chan struct{}), logPath: s.log}
	go func() {
		d.waitErr = cmd.Wait()
		out.Close() // ours, not exec's: reads after the exit see EOF, then nothing
		close(d.exited)
	}()
	type helloResult struct {
		r   pipeReply
		err error
	}
	ch := make(chan helloResult, 1)
	go func() {
		var r pipeReply
		_, err := readPipeFrame(d.out, &r)
		ch <- helloResult{r, err}
	}()
	select {
	case h := <-ch:
		if h.err != nil {
			d.discard()
			return nil, fmt.Errorf("worker: %s did not start daemon.py: %w (%s)", s.python, h.err, d.exitReason())
		}
		if h.r.Hello == nil || h.r.Hello.Protocol != pipeProtocol {
			d.discard()
			got := 0
			if h.r.Hello != nil {
				got = h.r.Hello.Protocol
			}
			return nil, fmt.Errorf("worker: daemon.py speaks pipe protocol %d, soma-worker speaks %d", got, pipeProtocol)
		}
		d.hello = *h.r.Hello
		// daemon.py made the log before its hello.
		if d.log, err = os.Open(s.log); err != nil {
			d.discard()
			return nil, fmt.Errorf("worker: daemon log: %w", err)
		}
		return d, nil
	case <-ctx.Done():
		d.discard()
		<-ch
		return nil, ctx.Err()
	}
}

// callResult is what one call read.
type callResult struct {
	r    pipeReply
	body []byte
	err  error
}

// call sends one request and returns the reply and its body. If ctx ends
// first, the daemon is interrupted (SIGINT, which daemon.py turns into a
// cancelled reply) and, if it has not answered within the grace, killed.
// A failed call that leaves the pipe unusable marks the daemon broken.
//
// The caller's goroutine does the pipe I/O itself and a context.AfterFunc
// watches ctx. (A goroutine per call did the I/O while the caller
// selected on it and ctx: one more goroutine start and hand-off a plan,
// which on a loaded 2-core node cost a warm no-op plan tens of µs.)
func (d *daemon) call(ctx context.Context, head any, body *pipeBody) (pipeReply, []byte, error) {
	if d.broken {
		return pipeReply{}, nil, fmt.Errorf("%w (earlier)", ErrDaemonDied)
	}
	w := &callWatch{d: d}
	stop := context.AfterFunc(ctx, w.interrupt)
	var res callResult
	if err := writePipeFrame(d.in, head, body); err != nil {
		res.err = err
	} else {
		res.body, res.err = readPipeFrame(d.out, &res.r)
	}
	if !stop() {
		// ctx ended during the call: it was interrupted.
		killed := w.finish()
		if !killed && res.err == nil && (res.r.Cancelled || res.r.OK) {
			// It stopped in time; the pipe is in step and the daemon
			// can serve again.
			return pipeReply{}, nil, context.Cause(ctx)
		}
		d.broken = true
		return pipeReply{}, nil, context.Cause(ctx)
	}
	if res.err != nil {
		d.broken = true
		d.kill()
		return pipeReply{}, nil, fmt.Errorf("%w: %s", ErrDaemonDied, d.exitReason())
	}
	return res.r, res.body, nil
}

// callWatch interrupts a call whose ctx ended: SIGINT at once, SIGKILL
// after the grace unless the call finished first.
type callWatch struct {
	d        *daemon
	mu       sync.Mutex
	finished bool
	kill     *time.Timer
}

// interrupt runs (in its own goroutine) when the call's ctx ends.
func (w *callWatch) interrupt() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.finished {
		return
	}
	_ = w.d.cmd.Process.Signal(syscall.SIGINT)
	w.kill = time.AfterFunc(w.d.grace, func() {
		// Not d.kill: the call's goroutine owns d.broken. The pipe
		// read then ends with the process.
		_ = w.d.cmd.Process.Kill()
	})
}

// finish ends the watch once the call returned and reports whether the
// daemon was (or is being) killed.
func (w *callWatch) finish() (killed bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.finished = true
	return w.kill != nil && !w.kill.Stop()
}

// kill ends the daemon (SIGKILL) and waits for it to exit.
func (d *daemon) kill() {
	d.broken = true
	_ = d.in.Close()
	_ = d.cmd.Process.Kill()
	<-d.exited
}

// discard ends d for good: the process, its log file and the handle on
// it. Whoever drops a daemon (the pool, a failed start) calls it; a failed
// call only kills (its plan still reads its output from the log).
func (d *daemon) discard() {
	d.kill()
	if d.log != nil {
		_ = d.log.Close()
	}
	if d.logPath != "" {
		_ = os.Remove(d.logPath)
	}
}

// maxDaemonLog is the size past which a daemon's log is emptied before
// the next plan (only the part a plan writes is ever read).
const maxDaemonLog = 16 << 20

// logStart returns where the next plan's output will begin in d's log,
// emptying the log first once it has grown past maxDaemonLog (no plan
// runs on d meanwhile; daemon.py writes with O_APPEND, so its next write
// lands at the new end).
func (d *daemon) logStart() int64 {
	st, err := d.log.Stat()
	if err != nil {
		return 0
	}
	if st.Size() > maxDaemonLog {
		if err := os.Truncate(d.logPath, 0); err == nil {
			return 0
		}
	}
	return st.Size()
}

// logSince returns the last n bytes of what d's log received after
// offset start ("" if nothing).
func (d *daemon) logSince(start, n int64) string {
	st, err := d.log.Stat()
	if err != nil || st.Size() <= start {
		return ""
	}
	off := max(start, st.Size()-n)
	b := make([]byte, st.Size()-off)
	k, err := d.log.ReadAt(b, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return ""
	}
	return string(b[:k])
}

// exitReason says how the process ended, for error messages; it waits
// briefly for the exit status, which arrives just after the pipe closes.
func (d *daemon) exitReason() string {
	select {
	case <-d.exited:
	case <-time.After(2 * time.Second):
		return "the pipe broke while the process still runs"
	}
	if d.waitErr == nil {
		return "exit status 0"
	}
	var ee *exec.ExitError
	if errors.As(d.waitErr, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "killed by signal " + ws.Signal().String()
		}
	}
	return d.waitErr.Error()
}

// logWriter turns a process's stderr into log lines.
type logWriter struct {
	mu     sync.Mutex
	logger *slog.Logger
	prefix string
	buf    []byte
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := strings.IndexByte(string(w.buf), '\n')
		if i < 0 {
			break
		}
		if w.logger != nil {
			w.logger.Info(w.prefix, "line", string(w.buf[:i]))
		}
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > 64<<10 {
		w.buf = w.buf[:0]
	}
	return len(p), nil
}
