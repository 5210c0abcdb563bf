package fsstore

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// WriteFileAtomic writes everything from r to path so that a reader sees
// the old file or the whole new one, never a part: a unique temp file in
// the same folder ("."+base+".tmp-<random>"), fsync and close (both
// checked), rename over path, fsync of the folder. It is the recipe of
// this package for files that live outside a Store (Zarr chunks and
// metadata, the chunk cache). The folder must exist.
func WriteFileAtomic(path string, r io.Reader) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := writeTempBeside(dir, base, path, r)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("fsstore: rename %s: %w", path, err)
	}
	return syncDir(dir)
}

// CreateExclusive writes everything from r to path only if path does not
// exist, so that a reader sees no file or the whole one: a unique temp
// file in the same folder, written, fsynced and closed, then link(2) to
// path, which fails if path exists, then an fsync of the folder. It is
// Store.Claim's recipe for files outside a Store (a Zarr array's
// metadata), including its answer to a lost reply (settleLink). A path
// that exists is an error wrapping fs.ErrExist. The folder must exist.
// (zarr had its own copy, which took EEXIST for "someone else" before
// looking at the link count, issue 16.)
func CreateExclusive(path string, r io.Reader) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := writeTempBeside(dir, base, path, r)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	made := true
	if err := os.Link(tmp, path); err != nil {
		var nlink uint64
		if fi, serr := os.Lstat(tmp); serr == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				nlink = uint64(st.Nlink)
			}
		}
		if made, err = settleLink(err, nlink); err != nil {
			return fmt.Errorf("fsstore: create %s: %w", path, err)
		}
	}
	if !made {
		return fmt.Errorf("fsstore: create %s: %w", path, fs.ErrExist)
	}
	return syncDir(dir)
}

// settleLink decides a link(2) from a unique temp file that did not
// return success: err is what link said, nlink the temp file's link count
// read afterwards (0 if it could not be read). A count of 2 means the link
// happened whatever link said (NFS lost its reply and the retry saw
// EEXIST, or the error came after the fact); otherwise EEXIST means
// someone else's file is there.
func settleLink(err error, nlink uint64) (made bool, _ error) {
	if nlink == 2 {
		return true, nil
	}
	if errors.Is(err, fs.ErrExist) {
		return false, nil
	}
	return false, err
}

// writeTempBeside writes everything from r to a new unique temp file in
// dir ("."+base+".tmp-<random>"), fsyncs and closes it (both checked),
// and returns its path; on an error nothing is left. path names the
// file it stands for, in errors.
func writeTempBeside(dir, base, path string, r io.Reader) (string, error) {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := filepath.Join(dir, "."+base+".tmp-"+hex.EncodeToString(rnd[:]))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
	if err != nil {
		return "", fmt.Errorf("fsstore: write %s: %w", path, err)
	}
	if _, err = io.Copy(f, r); err != nil {
		err = fmt.Errorf("fsstore: write %s: %w", path, err)
	} else if err = f.Sync(); err != nil {
		err = fmt.Errorf("fsstore: fsync %s: %w", path, err)
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("fsstore: close %s: %w", path, cerr)
	}
	if err != nil {
		os.Remove(tmp)
		return "", err
	}
	return tmp, nil
}
