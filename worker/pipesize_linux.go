//go:build linux

package worker

import (
	"os"

	"golang.org/x/sys/unix"
)

// pipeSize is the capacity asked for the daemon's pipes. With Linux's
// default of 64 KiB a 100 MB array takes about 1500 writes, each a wake-up
// of the reader (pipe(7), "Pipe capacity"; 1 MiB is the default
// /proc/sys/fs/pipe-max-size an unprivileged process may ask for).
const pipeSize = 1 << 20

// growPipe asks for a larger pipe buffer. It is only a hint: a refusal
// (a lower pipe-max-size, the user's pipe quota) leaves the default,
// which is slower but correct, and is returned for the log.
func growPipe(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) {
		_, ferr = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, pipeSize)
	}); err != nil {
		return err
	}
	return ferr
}
