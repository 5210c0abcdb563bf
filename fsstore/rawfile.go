package fsstore

import (
	"errors"
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
func readAllRaw(fd int, b []byte) ([]byte, error) { return readSized(fd, b, -1) }

// readSized reads fd into b until its end, or until it holds size bytes
// (size < 0: to the end), for a file that is never written once it has
// a name (a record, a blob), whose size the caller has just read with
// fstat on fd: a read that would only find the end is not made. Bug
// (issue 18, in round trips): every record read ended with a read that
// returned 0, and on a filesystem without attribute caching (NFS with
// noac, FUSE) each read(2) first asks the server for the file's size: a
// GETATTR for nothing, 1 of the 6 file-server operations of a record
// read.
func readSized(fd int, b []byte, size int64) ([]byte, error) {
	for size < 0 || int64(len(b)) < size {
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
	return b, nil
}

// fsync is fsync(2), retried on EINTR. It is the ordinary system call,
// which enters the scheduler's syscall state, so a blocked fsync gives up
// its P. (It was a raw system call that kept its P while fsyncs were
// quick, for ~7% less CPU on a local disk; but on NFS or Lustre a slow
// server blocks an fsync for seconds, and a blocked raw call holds up the
// garbage collector's stop-the-world and with it the heartbeats of every
// trial of the process, which can then go stale and be retried elsewhere:
// issue 13, item 9.)
func fsync(fd int) error {
	for {
		if err := unix.Fsync(fd); !errors.Is(err, unix.EINTR) {
			return err
		}
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

// renameat is renameat(2), retried on EINTR.
func renameat(fromDir int, from string, toDir int, to string) error {
	for {
		if err := unix.Renameat(fromDir, from, toDir, to); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// A record's read stays open, fstat, read: its size and mtime come from
// the file server, never from the attributes the client holds. Tried
// (issue 18): one pread, then statx(AT_STATX_DONT_SYNC), to save the
// fstat's GETATTR where nothing is cached. It read truncated records on
// internal/tools/slowfs (fsstore's TestKillWriterNeverTears, 1 run in 4):
// a client can hold one file's attributes for another (go-fuse's loopback
// tells files apart by inode number and birth time, which a reused inode
// number repeats within a clock tick), and only a GETATTR on the open
// file says what it holds. modeCached below is kept: Probe takes only
// presence and type from it, which such a mix-up cannot change (the
// type is part of what a node is keyed by).

// modeCached fills st.Mode of the file fd (O_PATH will do) from the
// attributes the client holds (statx with AT_STATX_DONT_SYNC: no round
// trip), else by fstat. Only for the mode, which a file keeps for life
// (soma never chmods a record; a rebind is a new file): the attributes
// held are those of this very file, brought by the lookup that found it
// (a LOOKUP on NFS and FUSE, whose reply carries them), however old the
// rest of them may be. Issue 18: the GETATTR of each Probe.
func modeCached(fd int, st *unix.Stat_t) error {
	var stx unix.Statx_t
	const want = unix.STATX_TYPE | unix.STATX_MODE
	for {
		err := unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW|unix.AT_STATX_DONT_SYNC, want, &stx)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err == nil && stx.Mask&want == want {
			st.Mode = uint32(stx.Mode)
			return nil
		}
		return fstatRaw(fd, st)
	}
}
