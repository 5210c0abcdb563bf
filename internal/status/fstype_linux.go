//go:build linux

package status

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// DetectFS returns the filesystem path lives on, from statfs(2)'s f_type.
func DetectFS(path string) (FS, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return FS{}, fmt.Errorf("statfs %s: %w", path, err)
	}
	return fsByMagic(int64(st.Type)), nil
}
