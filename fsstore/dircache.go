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
}

// take returns the cached descriptor of the folder rel, removing it from
// the cache, or false.
func (c *dirCache) take(rel string) (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fd, ok := c.fds[rel]
	if ok {
		delete(c.fds, rel)
		for i, r := range c.order {
			if r == rel {
				c.order = append(c.order[:i], c.order[i+1:]...)
				break
			}
		}
	}
	return fd, ok
}

// put caches fd as the folder rel, closing the oldest cached one beyond
// c.max; if rel is cached already, it closes fd instead.
func (c *dirCache) put(rel string, fd int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.fds[rel]; ok {
		unix.Close(fd)
		return
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
	}
}

// closeAll closes every cached descriptor.
func (c *dirCache) closeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, fd := range c.fds {
		unix.Close(fd)
	}
	c.fds, c.order = nil, nil
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
