//go:build linux

package zarr

import (
	"fmt"
	"io/fs"
	"syscall"
)

// fileIdentity names one version of a file: device, inode, size, and the
// modification and change times the file system stamped. Chunk writers
// that replace files (soma, zarr-python's DirectoryStore) create a new
// inode each time, and rename sets the ctime, so a rewritten chunk gets a
// new identity even when its size is unchanged.
func fileIdentity(fi fs.FileInfo) string {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return fmt.Sprintf("%d:%d:%d:%d.%d:%d.%d", st.Dev, st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec)
	}
	return fmt.Sprintf("%d:%d", fi.Size(), fi.ModTime().UnixNano())
}
