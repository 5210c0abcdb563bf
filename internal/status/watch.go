package status

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/internal/rootstore"
)

// Watch modes for WatchOptions.Mode.
const (
	WatchAuto   = "auto"   // inotify on local filesystems, polling on network ones
	WatchNotify = "notify" // inotify (fsnotify), whatever the filesystem
	WatchPoll   = "poll"   // re-read every Interval
)

// WatchOptions configure NewWatcher.
type WatchOptions struct {
	// Mode is WatchAuto (""), WatchNotify or WatchPoll.
	Mode string
	// Interval is the polling period (0: 5 s). With inotify the view is
	// also refreshed every 30 s or Interval, whichever is longer, so that
	// ages move and silent runners turn stale without any write.
	Interval time.Duration
	// Settle is how long a burst of changes is left to settle before a
	// refresh (0: 500 ms): 64 runners writing at once cause one refresh,
	// not 64.
	Settle time.Duration
	// IgnorePrefix: changes to temp files whose name starts with it are
	// not changes (a viewer's own server-time probes). See OwnTempPrefix.
	IgnorePrefix string
	// Warn is told once, in one line, when a process's temp folder cannot
	// be watched (full inotify tables): changes there then show only at
	// the full refresh. Nil: Method says it.
	Warn func(string)
}

// OwnTempPrefix returns the prefix of this process's temp folder in
// <root>/tmp and of the temp files in it: "<host>.<pid>." (fsstore's
// documented layout).
func OwnTempPrefix() string {
	host, _ := os.Hostname()
	return fsstore.SanitizeSegment(host) + "." + strconv.Itoa(os.Getpid()) + "."
}

// Watcher refreshes a view when the folder changes: through inotify
// where the root is on a local filesystem, and by polling where it is on
// a network filesystem (NFS, Lustre, GPFS...), on which inotify sees this
// machine's changes only, never another node's.
//
// Every write to a store starts as a new file in its process's folder
// under <root>/tmp (fsstore's atomic-write recipe), so an inotify watch
// on tmp/ and on each of those folders (added as they appear) sees every
// change to every study, however many trial folders there are. Bug
// (issue 18): when fsstore moved each process's temp files from tmp/
// into a folder of its own, the one watch on tmp/ saw only the folders
// made, and a watched view on a local disk refreshed every 30 s instead of
// at each change (TestWatchNotify).
type Watcher struct {
	root     string
	o        WatchOptions
	fs       FS
	notify   *fsnotify.Watcher
	fallback string // why inotify was not used when it was asked for
	// missed counts the temp folders that could not be watched, and
	// missedWhy says why the first could not.
	mu        sync.Mutex
	missed    int
	missedWhy string
	// add adds an inotify watch (w.notify.Add; tests inject failures).
	add func(string) error
}

// NewWatcher decides how to watch root (see Method) and sets it up.
// Close releases it.
func NewWatcher(root string, o WatchOptions) (*Watcher, error) {
	if o.Interval <= 0 {
		o.Interval = 5 * time.Second
	}
	if o.Settle <= 0 {
		o.Settle = 500 * time.Millisecond
	}
	w := &Watcher{root: root, o: o}
	if rootstore.IsBucket(root) {
		// A bucket is polled: no change of it is seen any other way.
		// (It said "statfs s3://...: no such file or directory".)
		w.fs = FS{Name: "an S3 bucket", Network: true}
		if o.Mode == WatchNotify {
			return nil, fmt.Errorf("%s is a bucket: it can only be polled (leave out the notify mode)", root)
		}
		return w, nil
	}
	fsys, err := DetectFS(root)
	if err != nil {
		return nil, err
	}
	w.fs = fsys
	switch o.Mode {
	case "", WatchAuto:
		if fsys.Network {
			return w, nil
		}
	case WatchPoll:
		return w, nil
	case WatchNotify:
	default:
		return nil, fmt.Errorf("watch mode %q: want auto, notify or poll", o.Mode)
	}
	nw, err := fsnotify.NewWatcher()
	if err != nil {
		w.fallback = fmt.Sprintf("inotify unavailable (%v)", err)
		return w, nil
	}
	tmp := filepath.Join(root, "tmp")
	if err := nw.Add(tmp); err != nil {
		nw.Close()
		w.fallback = fmt.Sprintf("cannot watch %s (%v)", tmp, err)
		return w, nil
	}
	w.notify = nw
	w.add = nw.Add
	// The processes' folders already there (fsstore's tmpDir). One that
	// cannot be watched (removed meanwhile by soma gc, or full inotify
	// tables) is left to the full refresh.
	if es, err := os.ReadDir(tmp); err == nil {
		for _, e := range es {
			w.watchTemp(filepath.Join(tmp, e.Name()), e.IsDir())
		}
	}
	return w, nil
}

// watchTemp adds a watch on path, a process's temp folder under tmp/, if
// it is a folder and not this process's own (whose files are its own
// probes: IgnorePrefix).
//
// One that went meanwhile (its process ended, or soma gc removed it) needs
// no watch. Any other failure (ENOSPC: the user's inotify watches are
// used up, fs.inotify.max_user_watches) is said once, through Warn and
// Method: it was ignored, and changes in that folder showed only at the
// 30 s refresh with nothing said.
func (w *Watcher) watchTemp(path string, dir bool) {
	if !dir || (w.o.IgnorePrefix != "" && strings.HasPrefix(filepath.Base(path), w.o.IgnorePrefix)) {
		return
	}
	err := w.add(path)
	if err == nil || errors.Is(err, fs.ErrNotExist) {
		return
	}
	why := err.Error()
	if errors.Is(err, syscall.ENOSPC) {
		why += " (inotify watches used up: raise fs.inotify.max_user_watches, or use --poll)"
	}
	w.mu.Lock()
	w.missed++
	first := w.missed == 1
	if first {
		w.missedWhy = why
	}
	w.mu.Unlock()
	if first && w.o.Warn != nil {
		w.o.Warn(fmt.Sprintf("cannot watch %s: %s; changes there show at the full refresh every %s", path, why, w.safety()))
	}
}

// missedCount returns how many temp folders could not be watched.
func (w *Watcher) missedCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.missed
}

// Notify reports whether the watcher uses inotify (false: polling).
func (w *Watcher) Notify() bool { return w.notify != nil }

// Method says, in one line, how changes are detected and why.
func (w *Watcher) Method() string {
	w.mu.Lock()
	missed, why := w.missed, w.missedWhy
	w.mu.Unlock()
	if w.notify != nil && missed > 0 {
		return fmt.Sprintf("watching with inotify: %s is on %s, a local filesystem (full refresh every %s); %d process folders not watched: %s", w.root, w.fs, w.safety(), missed, why)
	}
	if w.notify != nil {
		return fmt.Sprintf("watching with inotify: %s is on %s, a local filesystem (full refresh every %s)", w.root, w.fs, w.safety())
	}
	switch {
	case w.fallback != "":
		return fmt.Sprintf("polling every %s: %s", w.o.Interval, w.fallback)
	case w.o.Mode == WatchPoll:
		return fmt.Sprintf("polling every %s (--poll)", w.o.Interval)
	case w.fs.Network:
		return fmt.Sprintf("polling every %s: %s is on %s, where inotify sees no other machine's change", w.o.Interval, w.root, w.fs)
	}
	return fmt.Sprintf("polling every %s", w.o.Interval)
}

func (w *Watcher) safety() time.Duration { return max(30*time.Second, w.o.Interval) }

// Close releases the inotify watch, if any.
func (w *Watcher) Close() error {
	if w.notify != nil {
		return w.notify.Close()
	}
	return nil
}

// Run calls refresh once, then again after every change (or every
// Interval when polling), until ctx ends; then it returns nil. An error
// from refresh ends it and is returned.
func (w *Watcher) Run(ctx context.Context, refresh func(context.Context) error) error {
	if err := refresh(ctx); err != nil {
		return err
	}
	period := w.o.Interval
	var events <-chan fsnotify.Event
	var errs <-chan error
	if w.notify != nil {
		period = w.safety()
		events, errs = w.notify.Events, w.notify.Errors
	}
	tick := time.NewTicker(period)
	defer tick.Stop()
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	pending := false
	do := func() error {
		pending = false
		if err := refresh(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if w.o.IgnorePrefix != "" && strings.HasPrefix(filepath.Base(ev.Name), w.o.IgnorePrefix) {
				continue
			}
			if ev.Has(fsnotify.Create) && filepath.Dir(ev.Name) == filepath.Join(w.root, "tmp") {
				// A process's new temp folder: watch it at once, before
				// its first write lands (one before this reads as the
				// folder's own event, refreshed after Settle).
				fi, err := os.Lstat(ev.Name)
				w.watchTemp(ev.Name, err == nil && fi.IsDir())
			}
			if !pending {
				pending = true
				settle.Reset(w.o.Settle)
			}
		case _, ok := <-errs:
			// An overflowed queue lost events: refresh to be sure.
			if !ok {
				errs = nil
				continue
			}
			if !pending {
				pending = true
				settle.Reset(w.o.Settle)
			}
		case <-settle.C:
			if pending {
				if err := do(); err != nil {
					return err
				}
			}
		case <-tick.C:
			if err := do(); err != nil {
				return err
			}
		}
	}
}
