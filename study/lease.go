package study

import (
	"context"
	"sync"
	"time"
)

// DefaultGrace is the default lease: a running attempt whose last
// heartbeat is older than this, in file-server time, is stale. It is well
// above the time GPFS may take to show another node's mtime ("a couple of
// minutes", IBM "Exceptions to Open Group standards"), which the content
// counter covers anyway.
const DefaultGrace = 5 * time.Minute

// serverClock estimates the file server's time. A probe (store.Now: write
// a temp file, read the mtime the server stamped) costs an fsync'd write,
// so it is not paid on every read: between probes the estimate advances by
// this process's monotonic clock, which measures elapsed time only and is
// never compared with another machine's clock. Every record this process
// writes is also a sample (Bind returns the server's mtime).
type serverClock struct {
	mu     sync.Mutex
	server time.Time // last sample of the server's time
	local  time.Time // time.Now() when it was taken (monotonic reading)
	maxAge time.Duration
}

func newServerClock(grace time.Duration) *serverClock {
	return &serverClock{maxAge: min(grace/8, 10*time.Second)}
}

// now returns the server's time, probing when the last sample is older
// than maxAge.
func (c *serverClock) now(ctx context.Context, st timeSource) (time.Time, error) {
	c.mu.Lock()
	if !c.server.IsZero() {
		if el := time.Since(c.local); el >= 0 && el < c.maxAge {
			t := c.server.Add(el)
			c.mu.Unlock()
			return t, nil
		}
	}
	c.mu.Unlock()
	t, err := st.Now(ctx)
	if err != nil {
		return time.Time{}, err
	}
	c.observe(t)
	return t, nil
}

// observe records a sample of the server's time.
func (c *serverClock) observe(t time.Time) {
	if t.IsZero() {
		return
	}
	c.mu.Lock()
	c.server, c.local = t, time.Now()
	c.mu.Unlock()
}

// beats remembers, per attempt, the last heartbeat counter this process
// saw and the server time at which it saw it change. On GPFS a record's
// mtime may lag for minutes on other nodes; a counter that moved is
// progress whatever the mtime says.
type beats struct {
	mu   sync.Mutex
	seen map[beatKey]beatSeen
}

type beatKey struct{ trial, attempt int }

type beatSeen struct {
	beat  int64
	since time.Time // zero until this process saw the counter change
}

// lastProgress returns the latest evidence that r's runner is alive: its
// record time, or when this process saw its counter move, whichever is
// later.
func (b *beats) lastProgress(r *Record, now time.Time) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.seen == nil {
		b.seen = make(map[beatKey]beatSeen)
	}
	k := beatKey{r.Number, r.Attempt}
	s, ok := b.seen[k]
	switch {
	case !ok:
		s = beatSeen{beat: r.Beat}
	case s.beat != r.Beat:
		s = beatSeen{beat: r.Beat, since: now}
	}
	b.seen[k] = s
	if s.since.After(r.Time) {
		return s.since
	}
	return r.Time
}

// forget drops the entries of a finished trial.
func (b *beats) forget(trial int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k := range b.seen {
		if k.trial == trial {
			delete(b.seen, k)
		}
	}
}
