package fsstore

import (
	"errors"
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// The records' files are opened with raw file descriptors, not *os.File:
// os.OpenFile tries to add every file to Go's netpoller (on Linux: a
// fcntl to set O_NONBLOCK, an epoll_ctl that fails for a regular file,
// two fcntl to undo it) and sets a finalizer. A soma-trial writes two
// records and fsyncs two folders per trial, and reads the records of
// trials other processes ran: five extra syscalls per open, ~40 per
// trial, for nothing.

// openRaw opens path, retrying on EINTR (a signal during an open on NFS).
func openRaw(path string, flags int, mode uint32) (int, error) {
	for {
		fd, err := unix.Open(path, flags|unix.O_CLOEXEC, mode)
		if !errors.Is(err, unix.EINTR) {
			return fd, err
		}
	}
}

// fdWriter writes to a raw file descriptor, all of b or an error.
type fdWriter int

func (w fdWriter) Write(b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k, err := unix.Write(int(w), b[n:])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return n, err
		}
		n += k
	}
	return n, nil
}

// readAllRaw reads fd to its end into b (whose capacity is a size hint).
func readAllRaw(fd int, b []byte) ([]byte, error) {
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		k, err := unix.Read(fd, b[len(b):cap(b)])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return b, err
		}
		if k == 0 {
			return b, nil
		}
		b = b[:len(b)+k]
	}
}

// fsyncer is fsync(2) as a Store calls it (fsync); the zero value is
// ready.
//
// While fsyncs are quick it is a raw system call, one that keeps its P
// (Go's right to run code) rather than entering the scheduler's syscall
// state. Why: each entry into that state that finds sysmon (the runtime's
// monitor thread) asleep wakes it, and sysmon then wakes every 20 µs
// until it has had a millisecond with nothing to do, retaking the Ps of
// calls that block; a retake starts the millisecond over. A soma-trial
// fsyncs four times per trial, each a wait on the journal: measured with
// 8 processes on 2 CPUs and a trivial objective, sysmon woke 42 times per
// trial (the largest cost of a trial after the objective's fork and exec,
// ~0.2 ms of CPU); with raw fsyncs 21, and the whole run took 7% less CPU.
//
// A raw call that blocks has a price: its P runs nothing else meanwhile,
// and a garbage collection's stop-the-world waits for it. So it is used
// only with GOMAXPROCS >= 2 (another P runs the heartbeats and the signal
// handlers), and only while fsyncs are quick: the first one slower than
// 50 ms (a busy disk, an NFS server in trouble) switches the Store to the
// ordinary call for good.
type fsyncer struct {
	off  atomic.Bool
	slow time.Duration // 0: 50 ms; a seam for this package's tests
}

// fsync is fsync(2), retried on EINTR. A nil fsyncer makes the ordinary
// call.
func (f *fsyncer) fsync(fd int) error {
	if f == nil || f.off.Load() || runtime.GOMAXPROCS(0) < 2 {
		for {
			if err := unix.Fsync(fd); !errors.Is(err, unix.EINTR) {
				return err
			}
		}
	}
	start := time.Now()
	defer func() {
		slow := f.slow
		if slow == 0 {
			slow = 50 * time.Millisecond
		}
		if time.Since(start) > slow {
			f.off.Store(true)
		}
	}()
	for {
		_, _, e := unix.RawSyscall(unix.SYS_FSYNC, uintptr(fd), 0, 0)
		switch e {
		case 0:
			return nil
		case unix.EINTR:
			continue
		}
		return e
	}
}

func fstatRaw(fd int, st *unix.Stat_t) error {
	for {
		if err := unix.Fstat(fd, st); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

func mtime(st *unix.Stat_t) time.Time { return time.Unix(st.Mtim.Unix()) }

// renameRaw is rename(2), retried on EINTR.
func renameRaw(from, to string) error {
	for {
		if err := unix.Rename(from, to); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}
