package objective

import (
	"bytes"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// maxLine is the longest report line read; a longer one is a protocol
// error and is skipped to its end (the objective is never left blocked
// on a full pipe).
const maxLine = 1 << 20

// exitDrain is how long the report pipe is read on after the objective
// has exited while something else still holds its fd 3 (a process it
// left behind): what that process writes meanwhile counts, and then the
// run ends without it.
const exitDrain = 2 * time.Second

// batchWait is how long watch lets the reports of an objective that does
// not wait for verdicts pile up in the pipe between reads. A verdict then
// comes at most this much later (such an objective reads it later
// anyway), and the pipe (64 KiB, about 3000 reports) fills only if the
// objective writes more than 64 MB/s of reports; then it waits for us, as
// it would for any reader.
const batchWait = time.Millisecond

// chunks are watch's read buffers, kept between trials: a fresh 16 KiB
// per trial was zeroed and page-faulted in for a few bytes of reports.
const chunkSize = 16 << 10

var chunks = sync.Pool{New: func() any { return new([chunkSize]byte) }}

// watch reads the report pipe r line by line, calling line for each,
// until every writer has closed it or, once draining is set (the
// objective's guard has exited), the pipe stays idle for exitDrain, and
// returns. A last line without a newline counts.
//
// The drain's deadline moves on with every read: what the objective wrote
// before it exited is read however long line takes over it. (A fixed
// deadline set at the exit lost the reports still in the pipe when
// answering them took more than exitDrain.)
//
// r is an ordinary *os.File from os.Pipe: a read that waits parks the
// goroutine in Go's netpoller and gives its P back. (Until issue 13 this
// was a raw ppoll(2) in the first 5 ms of a run, which kept its P while
// blocked: it saved ~7% CPU per trivial trial on a local disk by sparing
// sysmon's retakes of the P, but a raw call that blocks holds up the GC's
// stop-the-world for as long as it blocks, and with it every heartbeat
// of the process; soma is for shared filesystems, where nothing may hold
// the runtime hostage. Robust before fast.)
//
// answered is called after the lines of each read: Run writes the
// verdicts of those lines then, in one write(2). An objective that waits
// for each verdict sends one report per read anyway; one that writes its
// reports without reading them got a write(2) per report (42% of
// soma-trial's CPU over 100k reports, before).
//
// busy says whether the objective has left verdicts unread (it reports
// without waiting for them): then watch waits batchWait after a read
// before the next one, so that the reports written meanwhile are read,
// parsed and answered together. Reading as they came cost soma-trial a
// wakeup of its reading goroutine, a read(2) and a write(2) per report
// (issue 13: 100k reports of a fast loop added 34-94% to its time on 2
// CPUs). An objective that waits for each verdict has read them all
// before it writes its next report, so it is never kept waiting. busy
// may be nil (never wait).
func watch(r *os.File, line func(string), answered func(), busy func() bool, draining *atomic.Bool) {
	var (
		partial  []byte
		skipping bool // inside a line longer than maxLine
		chunk    = chunks.Get().(*[chunkSize]byte)[:]
	)
	defer chunks.Put((*[chunkSize]byte)(chunk))
	feed := func(b []byte) {
		for len(b) > 0 {
			i := bytes.IndexByte(b, '\n')
			if i < 0 {
				if !skipping {
					partial = append(partial, b...)
					if len(partial) > maxLine {
						line(string(partial[:64]) + "... (a report line over 1 MiB)")
						partial, skipping = partial[:0], true
					}
				}
				return
			}
			if !skipping {
				if len(partial) == 0 {
					line(string(b[:i])) // the usual case: a whole line in one read
				} else {
					partial = append(partial, b[:i]...)
					line(string(partial))
				}
			}
			partial, skipping = partial[:0], false
			b = b[i+1:]
		}
	}
	for {
		k, err := r.Read(chunk)
		if k > 0 {
			feed(chunk[:k])
			// No wait inside a line, or when the read filled the chunk:
			// the objective is blocked writing a long line (a "reports"
			// batch of 87 KB does not fit the 64 KiB pipe), and a
			// batchWait per chunk held report(..., wait=False) up ~5 ms
			// per batch (+0.11 s over 100k reports, issue 13 item 8).
			midLine := len(partial) > 0 || skipping || k == len(chunk)
			wait := busy != nil && !midLine && busy()
			answered()
			if wait && !draining.Load() {
				time.Sleep(batchWait)
			}
			if draining.Load() {
				_ = r.SetReadDeadline(time.Now().Add(exitDrain))
			}
		}
		if err != nil {
			// io.EOF: every writer closed it. os.ErrDeadlineExceeded: the
			// objective exited exitDrain ago and a process it left behind
			// still holds fd 3. Anything else cannot happen with our own
			// pipe; stop rather than read it in a loop.
			break
		}
	}
	if len(partial) > 0 && !skipping {
		line(string(partial))
		answered()
	}
}

// verdictWriter writes verdicts to the control pipe (the objective's fd
// 4) without ever waiting: a verdict that does not fit because the
// objective never reads them (the pipe is full) or closed fd 4 is
// dropped, rather than stall the reports behind it. One non-blocking
// write(2) through the file's RawConn: an *os.File's own Write would
// park until the pipe drains.
// pipeBuf is PIPE_BUF on Linux: the most a write to a pipe writes
// atomically (pipe(7)).
const pipeBuf = 4096

type verdictWriter struct {
	f *os.File
	// dropped: the last write found the pipe full or closed.
	dropped *atomic.Bool
}

// unread says whether verdicts written before are still in the pipe (or
// were dropped): the objective is not waiting for each verdict. It is
// asked before the verdicts of a read are written, so an objective that
// waits for each verdict has read them all (it wrote its next report
// after), and unread is false for it.
func (v verdictWriter) unread() bool {
	if v.dropped.Load() {
		return true
	}
	rc, err := v.f.SyscallConn()
	if err != nil {
		return false
	}
	n := 0
	_ = rc.Control(func(fd uintptr) {
		// FIONREAD on either end of a pipe: the bytes in it (pipe(7)).
		n, err = unix.IoctlGetInt(int(fd), unix.TIOCINQ) // = FIONREAD
	})
	return err == nil && n > 0
}

// write writes b, whole verdict lines, as far as the pipe takes them, and
// drops the rest. Each write(2) is at most PIPE_BUF bytes cut at a line's
// end: a pipe writes that much all at once or not at all (pipe(7)), so a
// verdict is never cut in two by a full pipe.
func (v verdictWriter) write(b []byte) {
	rc, err := v.f.SyscallConn()
	if err != nil {
		return
	}
	v.dropped.Store(false)
	_ = rc.Write(func(fd uintptr) bool {
		for len(b) > 0 {
			n := len(b)
			if n > pipeBuf {
				n = bytes.LastIndexByte(b[:pipeBuf], '\n') + 1
			}
			_, err := unix.Write(int(fd), b[:n])
			switch {
			case errors.Is(err, unix.EINTR):
				continue
			case err != nil:
				v.dropped.Store(true)
				return true // dropped (EAGAIN: full; EPIPE: fd 4 closed)
			}
			b = b[n:]
		}
		return true
	})
}
