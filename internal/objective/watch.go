package objective

import (
	"bytes"
	"errors"
	"os/exec"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// maxLine is the longest report line read; a longer one is a protocol
// error and is skipped to its end (the objective is never left blocked
// on a full pipe).
const maxLine = 1 << 20

// exitLook is how often watch looks whether the objective has exited
// while the report pipe stays open: only when something else holds its
// fd 3 (a grandchild it left behind, which soma-trial waits for at most
// exitDrain), so the look costs nothing in the usual case.
const (
	exitLook  = 250 * time.Millisecond
	exitDrain = 2 * time.Second
)

// chunks are watch's read buffers, kept between trials: a fresh 16 KiB
// per trial was zeroed and page-faulted in for a few bytes of reports.
const chunkSize = 16 << 10

var chunks = sync.Pool{New: func() any { return new([chunkSize]byte) }}

// pipe makes a pipe whose ends close on exec (the objective gets its
// ends through ExtraFiles, dup'ed to fd 3 and fd 4 in the child).
func pipe() (r, w int, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return -1, -1, err
	}
	return p[0], p[1], nil
}

// watch reads the report pipe fd (non-blocking) line by line, calling
// line for each, until every writer has closed it, and returns how the
// objective exited (cmd.Wait's error). The objective's exit normally
// closes the pipe's last writer; if a process it left behind still holds
// fd 3, watch notices the exit within exitLook and reads on for at most
// exitDrain. A last line without a newline counts.
//
// It is one goroutine in poll(2): the objective's whole run costs one
// thread wakeup per batch of reports and one at the end.
func watch(cmd *exec.Cmd, fd int, line func(string)) error {
	var (
		partial  []byte
		skipping bool // inside a line longer than maxLine
		exitedAt time.Time
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
				partial = append(partial, b[:i]...)
				line(string(partial))
			}
			partial, skipping = partial[:0], false
			b = b[i+1:]
		}
	}
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	var rawUntil time.Time // see rawPoll
	if runtime.GOMAXPROCS(0) >= 2 {
		rawUntil = time.Now().Add(rawPoll)
	}
	for {
		timeout := exitLook
		if !exitedAt.IsZero() {
			timeout = exitDrain - time.Since(exitedAt)
			if timeout <= 0 {
				break
			}
		}
		var n int
		var err error
		if left := time.Until(rawUntil); left > 0 {
			n, err = pollRaw(pfd, min(left, timeout))
			if n == 0 && err == nil {
				continue // on in the ordinary poll
			}
		} else {
			n, err = unix.Poll(pfd, int(timeout/time.Millisecond)+1)
		}
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || pfd[0].Revents&unix.POLLNVAL != 0 {
			break // cannot happen with our own open fd; wait for the exit
		}
		if n == 0 {
			if exitedAt.IsZero() && exited(cmd.Process.Pid) {
				exitedAt = time.Now()
			}
			continue
		}
		eof := false
		for {
			k, err := unix.Read(fd, chunk)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				// EAGAIN: all read for now. Anything else: the pipe is
				// unreadable; stop, rather than poll it in a loop.
				eof = !errors.Is(err, unix.EAGAIN)
				break
			}
			if k == 0 {
				eof = true
				break
			}
			feed(chunk[:k])
		}
		if eof {
			break
		}
	}
	if len(partial) > 0 && !skipping {
		line(string(partial))
	}
	err := cmd.Wait()
	if errors.Is(err, exec.ErrWaitDelay) {
		// It exited with status 0; something it left behind still holds
		// a stdout or stderr pipe (cmd.WaitDelay). Its output so far counts.
		err = nil
	}
	return err
}

// rawPoll is how long into an objective's run watch polls as a raw system
// call (pollRaw), with GOMAXPROCS >= 2.
//
// Why: a goroutine in an ordinary blocking call leaves its P in the
// scheduler's syscall state, and sysmon, the runtime's monitor thread,
// retakes such a P whenever no other P is idle, which sends sysmon back
// to waking every 20 µs (see fsstore's fsyncer). While a short objective
// runs, the runner is often busy on the other P (recording the last
// attempt, claiming the next): both busy, a retake. A raw call keeps its
// P, so there is nothing to retake. Measured with 8 processes on 2 CPUs and /bin/echo as the
// objective, on top of raw fsyncs, in five shuffled rounds: CPU per trial
// 2.70 -> 2.51 ms (median), rate 0.82 -> 0.85 of the floor's; the count
// of sysmon's wakeups moved less than its noise (17-21 per trial either
// way), so the gain is mostly the retakes' handoffs. Past rawPoll the
// ordinary call takes over: a long run then costs sysmon nothing (its P
// is retaken once and the process sleeps), and the P is not held from
// the rest of the process for long.
const rawPoll = 5 * time.Millisecond

// pollRaw is ppoll(2) on fds for at most d, as a raw system call.
func pollRaw(fds []unix.PollFd, d time.Duration) (int, error) {
	ts := unix.NsecToTimespec(int64(d))
	n, _, e := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&fds[0])), uintptr(len(fds)),
		uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// exited reports whether process pid (a child) has exited, without
// reaping it: cmd.Wait does that.
func exited(pid int) bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	return err != nil || info.Signo != 0
}
