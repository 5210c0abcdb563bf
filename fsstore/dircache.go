package fsstore

import (
	"sync"

	"golang.org/x/sys/unix"
)

// dirCacheMax bounds the name folders a Store keeps open (dirCache).
const dirCacheMax = 64

// dirCache keeps open the name folders that writes used last, so that the
// next write to the same folder skips opening it: a running attempt's
// heartbeats and its result, after its claim, all go to
// names/study/<s>/trial/<n>, and on NFS each open of that path is an
// open plus a lookup per component that the client has not cached.
// (Measured with scripts/bench-trial-ops.sh: one open per trial fewer.)
//
// A descriptor is either in the cache or taken by one write, never both,
// so none is closed while a write uses it. A cached folder stays the
// folder it was opened as, which was then reached without following
// links; if it is removed meanwhile (by hand, or on another machine), a
// write into it fails with ENOENT (ESTALE on NFS), and the write opens
// the folder again by its path (Store.bind). soma never renames or
// removes a name folder; one renamed by hand while a process writes
// would keep receiving that process's writes, as the store's root
// itself would.
type dirCache struct {
	max   int // the most kept open; zero means dirCacheMax
	mu    sync.Mutex
	fds   map[string]int
	order []string // cached folders, oldest first
	// written holds the cached folders that a rename into them (Bind)
	// put back, until they are taken again: see takeWritten.
	written map[string]bool
}

// take returns the cached descriptor of the folder rel, removing it from
// the cache, or false.
func (c *dirCache) take(rel string) (int, bool) {
	fd, ok, _ := c.takeWritten(rel)
	return fd, ok
}

// takeWritten is take that also says whether the descriptor was put back
// by putWritten, by the write that used it last: a rename into the folder
// succeeded then, so the folder was in the tree then.
func (c *dirCache) takeWritten(rel string) (fd int, ok, written bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fd, ok = c.fds[rel]
	if ok {
		written = c.written[rel]
		delete(c.written, rel)
		delete(c.fds, rel)
		for i, r := range c.order {
			if r == rel {
				c.order = append(c.order[:i], c.order[i+1:]...)
				break
			}
		}
	}
	return fd, ok, written
}

// putWritten is put for a folder that a rename into it has just
// succeeded in (Store.bind): the next takeWritten says so.
func (c *dirCache) putWritten(rel string, fd int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.putLocked(rel, fd) {
		if c.written == nil {
			c.written = make(map[string]bool)
		}
		c.written[rel] = true
	}
}

// put caches fd as the folder rel, closing the oldest cached one beyond
// c.max; if rel is cached already, it closes fd instead.
func (c *dirCache) put(rel string, fd int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.putLocked(rel, fd)
}

// putLocked is put with c.mu held; it reports whether fd was cached (and
// not closed because rel was cached already).
func (c *dirCache) putLocked(rel string, fd int) bool {
	if _, ok := c.fds[rel]; ok {
		unix.Close(fd)
		return false
	}
	if c.fds == nil {
		c.fds = make(map[string]int)
	}
	c.fds[rel] = fd
	c.order = append(c.order, rel)
	limit := c.max
	if limit == 0 {
		limit = dirCacheMax
	}
	if len(c.order) > limit {
		old := c.order[0]
		c.order = c.order[1:]
		unix.Close(c.fds[old])
		delete(c.fds, old)
		delete(c.written, old)
	}
	return true
}

// closeAll closes every cached descriptor.
func (c *dirCache) closeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, fd := range c.fds {
		unix.Close(fd)
	}
	c.fds, c.order, c.written = nil, nil, nil
}

// dirAlive reports whether the folder fd is still in the tree: false once
// it was removed (its link count is 0 on a local filesystem; NFS answers
// ESTALE). A lookup relative to a cached folder that finds nothing asks
// this before it believes it, since in a removed folder every name is
// missing.
func dirAlive(fd int) bool {
	var st unix.Stat_t
	if err := fstatRaw(fd, &st); err != nil {
		return false
	}
	return st.Nlink > 0
}

// upDirsMax bounds the folders upDirs keeps open (and the ones it set
// aside as removed): beyond it, reads walk their paths.
const upDirsMax = 64

// upDirs keeps open, for the Store's life, the folders two levels above
// the names that reads open (a study's trial folder,
// names/study/<s>/trial), so that reading or probing another trial's
// attempt (names/study/<s>/trial/<n>/<a>) looks up two components, not
// six: each a round trip on NFS without a lookup cache. Bug (issue 18):
// with 8 processes on internal/tools/slowfs, reading the others' records
// walked the whole path each time, most of a trial's 125 LOOKUPs.
//
// Unlike dirCache, a descriptor here is shared by any number of reads at
// once (openat on one descriptor is safe from many threads) and is
// never closed while the Store is open: a folder found removed is set
// aside (gone) and closed by Store.Close, so a descriptor in use is
// never closed and its number never reused under a read.
type upDirs struct {
	mu   sync.Mutex
	fds  map[string]int
	gone []int
}

// get returns the descriptor of folder rel, opening it with open if it
// is not kept yet; false if it cannot be opened or kept (the caller then
// walks the path, which reports why).
func (c *upDirs) get(rel string, open func() (int, error)) (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if fd, ok := c.fds[rel]; ok {
		return fd, true
	}
	if len(c.fds)+len(c.gone) >= upDirsMax {
		return -1, false
	}
	fd, err := open()
	if err != nil {
		return -1, false
	}
	if c.fds == nil {
		c.fds = make(map[string]int)
	}
	c.fds[rel] = fd
	return fd, true
}

// kept returns the descriptor of folder rel if it is kept, without
// opening it.
func (c *upDirs) kept(rel string) (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fd, ok := c.fds[rel]
	return fd, ok
}

// drop sets aside fd, found removed, as the folder rel: the next get
// opens rel again.
func (c *upDirs) drop(rel string, fd int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fds[rel] == fd {
		delete(c.fds, rel)
		c.gone = append(c.gone, fd)
	}
}

// closeAll closes every descriptor; no read may be in flight.
func (c *upDirs) closeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, fd := range c.fds {
		unix.Close(fd)
	}
	for _, fd := range c.gone {
		unix.Close(fd)
	}
	c.fds, c.gone = nil, nil
}
