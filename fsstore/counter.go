package fsstore

import (
	"context"
	"sync/atomic"
	"time"
)

// Counter wraps a real Store and counts the operations that cost round
// trips, for the cost tests of the layers above ("finished makes zero blob
// fetches"). It forwards every call unchanged.
type Counter struct {
	S *Store

	Scans, Lists, Resolves, Stats, BlobGets, Puts, Claims, Binds, Touches atomic.Int64
	// Nows counts server-time probes (the clock file touched and read).
	Nows atomic.Int64
}

// NewCounter wraps s.
func NewCounter(s *Store) *Counter { return &Counter{S: s} }

// Reset sets every count to zero.
func (c *Counter) Reset() {
	for _, n := range []*atomic.Int64{&c.Scans, &c.Lists, &c.Resolves, &c.Stats, &c.BlobGets, &c.Puts, &c.Claims, &c.Binds, &c.Touches, &c.Nows} {
		n.Store(0)
	}
}

func (c *Counter) Root() string { return c.S.Root() }

func (c *Counter) Put(ctx context.Context, b []byte) (Digest, error) {
	c.Puts.Add(1)
	return c.S.Put(ctx, b)
}

func (c *Counter) Get(ctx context.Context, d Digest) ([]byte, error) {
	c.BlobGets.Add(1)
	return c.S.Get(ctx, d)
}

func (c *Counter) GetMany(ctx context.Context, ds []Digest) []Blob {
	c.BlobGets.Add(int64(len(ds)))
	return c.S.GetMany(ctx, ds)
}

func (c *Counter) Claim(ctx context.Context, name string, d Digest, meta Meta) (bool, error) {
	c.Claims.Add(1)
	return c.S.Claim(ctx, name, d, meta)
}

func (c *Counter) ClaimNew(ctx context.Context, name string, d Digest, meta Meta) (bool, error) {
	c.Claims.Add(1)
	return c.S.ClaimNew(ctx, name, d, meta)
}

func (c *Counter) ClaimEphemeral(ctx context.Context, name string, d Digest, meta Meta) (bool, error) {
	c.Claims.Add(1)
	return c.S.ClaimEphemeral(ctx, name, d, meta)
}

func (c *Counter) Bind(ctx context.Context, name string, d Digest, meta Meta) (Bound, error) {
	c.Binds.Add(1)
	return c.S.Bind(ctx, name, d, meta)
}

func (c *Counter) Seal(ctx context.Context, name string, d Digest, meta Meta) (Bound, error) {
	c.Binds.Add(1)
	return c.S.Seal(ctx, name, d, meta)
}

func (c *Counter) Probe(ctx context.Context, name string) (Presence, error) {
	c.Stats.Add(1)
	return c.S.Probe(ctx, name)
}

func (c *Counter) Resolve(ctx context.Context, name string) (Bound, error) {
	c.Resolves.Add(1)
	return c.S.Resolve(ctx, name)
}

func (c *Counter) ResolveMany(ctx context.Context, names []string) []Lookup {
	c.Resolves.Add(int64(len(names)))
	return c.S.ResolveMany(ctx, names)
}

func (c *Counter) Exists(ctx context.Context, name string) (bool, error) {
	c.Stats.Add(1)
	return c.S.Exists(ctx, name)
}

func (c *Counter) Scan(ctx context.Context, prefix string) ([]Bound, []*CorruptError, error) {
	c.Scans.Add(1)
	return c.S.Scan(ctx, prefix)
}

func (c *Counter) List(ctx context.Context, prefix string) ([]string, error) {
	c.Lists.Add(1)
	return c.S.List(ctx, prefix)
}

func (c *Counter) Children(ctx context.Context, prefix string) ([]string, error) {
	c.Lists.Add(1)
	return c.S.Children(ctx, prefix)
}

func (c *Counter) Unbind(ctx context.Context, name string) error { return c.S.Unbind(ctx, name) }

func (c *Counter) UnbindEphemeral(ctx context.Context, name string) error {
	return c.S.UnbindEphemeral(ctx, name)
}

func (c *Counter) Touch(ctx context.Context, name string) (time.Time, error) {
	c.Touches.Add(1)
	return c.S.Touch(ctx, name)
}

// TouchResolve counts as a Touch: one open, whose file is also read.
func (c *Counter) TouchResolve(ctx context.Context, name string) (Bound, error) {
	c.Touches.Add(1)
	return c.S.TouchResolve(ctx, name)
}

func (c *Counter) Now(ctx context.Context) (time.Time, error) {
	c.Nows.Add(1)
	return c.S.Now(ctx)
}

// Total is the sum of every count.
func (c *Counter) Total() int64 {
	var t int64
	for _, n := range []*atomic.Int64{&c.Scans, &c.Lists, &c.Resolves, &c.Stats, &c.BlobGets, &c.Puts, &c.Claims, &c.Binds, &c.Touches, &c.Nows} {
		t += n.Load()
	}
	return t
}
