package fsstore

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// CreateExclusive: the first writer wins, whole; every other gets
// fs.ErrExist; no temp file is left.
func TestCreateExclusive(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "zarr.json")
	const n = 16
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			errs[i] = CreateExclusive(path, strings.NewReader(strings.Repeat(string(rune('a'+i)), 1000)))
		})
	}
	wg.Wait()
	won := -1
	for i, err := range errs {
		switch {
		case err == nil && won < 0:
			won = i
		case err == nil:
			t.Errorf("writers %d and %d both created it", won, i)
		case !errors.Is(err, fs.ErrExist):
			t.Errorf("writer %d: %v, want fs.ErrExist", i, err)
		}
	}
	if won < 0 {
		t.Fatal("no writer created it")
	}
	b, err := os.ReadFile(path)
	if err != nil || string(b) != strings.Repeat(string(rune('a'+won)), 1000) {
		t.Errorf("content %.20q..., %v; want the winner's", b, err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("%d entries in the folder, want the file alone (no temp left)", len(ents))
	}
}

// settleLink: a link count of 2 on the temp file is our link, whatever
// link(2) said (NFS: a lost reply, then EEXIST from the retry).
func TestSettleLink(t *testing.T) {
	for _, tc := range []struct {
		err   error
		nlink uint64
		made  bool
		fails bool
	}{
		{fs.ErrExist, 2, true, false},
		{fs.ErrExist, 1, false, false},
		{fs.ErrExist, 0, false, false},
		{fs.ErrPermission, 2, true, false},
		{fs.ErrPermission, 1, false, true},
	} {
		made, err := settleLink(tc.err, tc.nlink)
		if made != tc.made || (err != nil) != tc.fails {
			t.Errorf("settleLink(%v, %d) = %v, %v; want %v, error %v", tc.err, tc.nlink, made, err, tc.made, tc.fails)
		}
	}
}
