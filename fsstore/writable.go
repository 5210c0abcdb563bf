package fsstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// notWritable explains a write refused in folder dir (err: EACCES, EPERM
// or EROFS): who owns the folder, with what mode, and who this process
// is, so that the fix (chmod, another --root, the right account) is
// plain. Other errors are returned as they are. (A read-only root said
// only "server time: fsstore: temp file …: permission denied"; issue 16.)
func notWritable(dir string, err error) error {
	switch {
	case errors.Is(err, syscall.EROFS):
		return fmt.Errorf("fsstore: %s is on a read-only filesystem (give a --root on a writable one): %w", dir, err)
	case !errors.Is(err, fs.ErrPermission):
		return err
	}
	owner := "?"
	mode := "?"
	if fi, serr := os.Stat(dir); serr == nil {
		mode = fi.Mode().String()
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			owner = userName(int(st.Uid))
		}
	}
	return fmt.Errorf("fsstore: %s is not writable by %s (it is owned by %s, mode %s; make it writable, or give another root): %w",
		dir, userName(os.Geteuid()), owner, mode, err)
}

// userName is "name (uid N)", or "uid N" when the name is unknown.
func userName(uid int) string {
	id := strconv.Itoa(uid)
	if u, err := user.LookupId(id); err == nil && u.Username != "" {
		return u.Username + " (uid " + id + ")"
	}
	return "uid " + id
}

// notWritableTemp is notWritable for a temp file path in tmp/.
func notWritableTemp(path string, err error) error {
	if e := notWritable(filepath.Dir(path), err); e != err {
		return e
	}
	return fmt.Errorf("fsstore: temp file %s: %w", path, err)
}
