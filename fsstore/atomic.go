package fsstore

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
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
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := filepath.Join(dir, "."+base+".tmp-"+hex.EncodeToString(rnd[:]))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
	if err != nil {
		return fmt.Errorf("fsstore: write %s: %w", path, err)
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if _, err := io.Copy(f, r); err != nil {
		return fmt.Errorf("fsstore: write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsstore: fsync %s: %w", path, err)
	}
	ok = true
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("fsstore: close %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("fsstore: rename %s: %w", path, err)
	}
	return syncDir(dir)
}
