// Package slowfs is a slow filesystem for measuring soma as if its folder
// were on NFS (issue 18): a FUSE loopback of a local folder that waits a
// configurable delay in every metadata operation, lets the kernel cache
// no attribute and no name (every timeout zero: NFS mounted with
// lookupcache=none and noac, the pessimistic case), and counts the
// operations that reach it, by kind.
//
// On NFS, Lustre or GPFS each metadata operation that reaches the server
// is a network round trip (0.2–2 ms, more when the metadata server is
// busy), so what a trial costs there is the number of operations it sends
// times the round trip, and the number is what a test can pin: a count is
// deterministic where a time is not. The counts are of FUSE requests, which
// is what the kernel sends after its own path walk and caches: a path of
// five components costs five LOOKUPs here, as it costs up to five LOOKUPs
// on NFS with lookupcache=none.
//
// The mount is a direct mount(2) by this process (go-fuse's DirectMount),
// so it needs root and /dev/fuse, and no fusermount.
package slowfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// ErrUnavailable means this process cannot mount a FUSE filesystem: it is
// not root, or the kernel has no /dev/fuse.
var ErrUnavailable = errors.New("slowfs: FUSE unavailable")

// Options configure a mount.
type Options struct {
	// Delay is waited in every metadata operation (see Metadata) before
	// it is done: the round trip to a file server. Zero waits nothing.
	Delay time.Duration
	// Trace, if set, gets one line per request: its kind, the path of
	// the node it is on (as learned from earlier replies) and the name
	// it names, if any. For finding where round trips come from.
	Trace io.Writer
}

// Available reports whether this process can mount a slowfs, and if not
// an error wrapping ErrUnavailable that says why and what to do.
func Available() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: not root (a direct FUSE mount needs root; run as root, or in a container with CAP_SYS_ADMIN)", ErrUnavailable)
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return fmt.Errorf("%w: no /dev/fuse (%v; load the fuse module: modprobe fuse, or give the container --device /dev/fuse)", ErrUnavailable, err)
	}
	return nil
}

// Metadata reports whether an operation of kind op is a metadata
// operation: one that is delayed and summed in Counts.Metadata. Not
// metadata: the data ones (READ, WRITE, and the like), which NFS batches
// and which soma's records are too small for to matter, and the ones the
// kernel sends without waiting or that cost an NFS client no round trip
// (FLUSH on each close, RELEASE, RELEASEDIR, FORGET). An fsync is
// metadata here: on NFS it is the COMMIT the server answers after its
// disk.
func Metadata(op string) bool {
	switch op {
	case "READ", "WRITE", "LSEEK", "IOCTL", "COPY_FILE_RANGE", "FLUSH", "RELEASE", "RELEASEDIR", "FORGET":
		return false
	}
	return true
}

// Counts is a snapshot of the operations a mount served, by kind (the
// FUSE request's name: LOOKUP, GETATTR, CREATE, ...).
type Counts map[string]int64

// Metadata returns the sum of the counts of metadata operations.
func (c Counts) Metadata() int64 {
	var n int64
	for op, k := range c {
		if Metadata(op) {
			n += k
		}
	}
	return n
}

// Sub returns c minus before, kind by kind, leaving out kinds at zero.
func (c Counts) Sub(before Counts) Counts {
	d := Counts{}
	for op, k := range c {
		if v := k - before[op]; v != 0 {
			d[op] = v
		}
	}
	return d
}

// Kinds returns the kinds in c, sorted.
func (c Counts) Kinds() []string {
	ks := make([]string, 0, len(c))
	for op := range c {
		ks = append(ks, op)
	}
	sort.Strings(ks)
	return ks
}

// counter counts operations by kind; it is safe for concurrent use.
type counter struct {
	mu sync.Mutex
	n  Counts
}

func (c *counter) add(op string) {
	c.mu.Lock()
	c.n[op]++
	c.mu.Unlock()
}

func (c *counter) snapshot(reset bool) Counts {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := make(Counts, len(c.n))
	for op, k := range c.n {
		s[op] = k
	}
	if reset {
		c.n = Counts{}
	}
	return s
}

// Mount is a mounted slowfs. Its methods are safe for concurrent use.
type Mount struct {
	dir    string
	server *fuse.Server
	count  *counter

	mu      sync.Mutex
	mounted bool
}

// New mounts a slowfs at dir that shows the folder backing, and returns
// when the mount is ready. The caller must call Unmount. Both folders
// must exist; backing should be on a local disk.
func New(dir, backing string, o Options) (*Mount, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	if o.Delay < 0 {
		return nil, fmt.Errorf("slowfs: delay %v is negative (give 0 or more, e.g. 1ms)", o.Delay)
	}
	root, err := newRoot(backing)
	if err != nil {
		return nil, fmt.Errorf("slowfs: backing folder %s: %w", backing, err)
	}
	// Zero timeouts: the kernel asks for every name and every attribute
	// each time (NFS with lookupcache=none,noac), so the counts are what a
	// client without caches sends, and nothing depends on how long ago
	// the last request was.
	var zero time.Duration
	opts := &fs.Options{
		EntryTimeout:    &zero,
		AttrTimeout:     &zero,
		NegativeTimeout: &zero,
		MountOptions: fuse.MountOptions{
			DirectMount: true,
			AllowOther:  true, // the objectives may run as another user
			FsName:      "slowfs:" + backing,
			Name:        "slowfs",
			// Linux asks a FUSE filesystem for security.capability
			// before the first write to each open file
			// (file_remove_privs), even after ENOSYS (measured: one
			// GETXATTR per record written); an NFS client sends none.
			// go-fuse answers it without asking the filesystem.
			IgnoreSecurityLabels: true,
		},
	}
	c := &counter{n: Counts{}}
	raw := &slowRaw{RawFileSystem: fs.NewNodeFS(root, opts), count: c, delay: o.Delay, trace: o.Trace}
	// go-fuse serves at most GOMAXPROCS requests at once (2 to 16 reader
	// goroutines, each handling its request before reading the next):
	// on this 2-CPU machine 2, so with a 1 ms delay the harness served
	// at most ~2000 operations a second, whoever sent them, and P
	// processes queued behind each other as on no NFS server (nfsd runs
	// 8 threads by default, clusters' servers far more). Its cap is read
	// once, here: raise GOMAXPROCS for NewServer only (the readers block
	// in read(2) and the delays sleep, so they need no CPUs).
	prev := runtime.GOMAXPROCS(serverThreads)
	server, err := fuse.NewServer(raw, dir, &opts.MountOptions)
	runtime.GOMAXPROCS(prev)
	if err != nil {
		return nil, fmt.Errorf("slowfs: mount %s: %w", dir, err)
	}
	go server.Serve()
	if err := server.WaitMount(); err != nil {
		server.Unmount()
		return nil, fmt.Errorf("slowfs: mount %s: %w", dir, err)
	}
	return &Mount{dir: dir, server: server, count: c, mounted: true}, nil
}

// serverThreads is how many operations the harness serves at once, as an
// NFS server's threads would (go-fuse's own cap, which it takes from
// GOMAXPROCS, is 16).
const serverThreads = 16

// Dir returns the folder the filesystem is mounted at.
func (m *Mount) Dir() string { return m.dir }

// Counts returns the operations served since the mount or the last Reset.
func (m *Mount) Counts() Counts { return m.count.snapshot(false) }

// Reset returns the operations served since the mount or the last Reset,
// and starts counting from zero.
func (m *Mount) Reset() Counts { return m.count.snapshot(true) }

// Unmount unmounts the filesystem and waits until its server has
// stopped. It fails while a process has a file open in the mount (EBUSY),
// and may be called again; once it has succeeded, it does nothing.
func (m *Mount) Unmount() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.mounted {
		return nil
	}
	if err := m.server.Unmount(); err != nil {
		return fmt.Errorf("slowfs: unmount %s: %w", m.dir, err)
	}
	m.server.Wait()
	m.mounted = false
	return nil
}

// Detach unmounts the filesystem lazily (umount2 with MNT_DETACH): it
// leaves the namespace at once, and the kernel lets it go when the last
// file open in it is closed. For cleanups after Unmount failed, so that
// no dead mount outlives its server (a test that failed with a store
// still open left such mounts behind).
func (m *Mount) Detach() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.mounted {
		return nil
	}
	if err := syscall.Unmount(m.dir, syscall.MNT_DETACH); err != nil {
		return fmt.Errorf("slowfs: detach %s: %w", m.dir, err)
	}
	m.mounted = false
	return nil
}
