//go:build !linux

package zarr

import (
	"fmt"
	"io/fs"
)

// fileIdentity names one version of a file by size and modification time
// (other systems: no inode or ctime through a portable API).
func fileIdentity(fi fs.FileInfo) string {
	return fmt.Sprintf("%d:%d", fi.Size(), fi.ModTime().UnixNano())
}
