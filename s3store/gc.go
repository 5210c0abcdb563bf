package s3store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/soma-hpc/soma/fsstore"
)

// RefreshAfter is the age past which a Put of bytes already stored
// rewrites their blob to make it young again; a younger one is left as
// it is (a HEAD instead of an upload). A GC's grace G must exceed the
// longest time a writer takes from the start of its Put to its Bind, W,
// plus RefreshAfter (see GC): soma gc refuses a G under a minute, and
// study binds within study.BlobReuse (10 s) of its Put, so 10 + 10 s
// leave 40 s for the round trips.
const RefreshAfter = 10 * time.Second

// Times of the GC lock (tmp/gc-<hex>, see GC). A GC sends no DELETE of a
// blob more than gcLockHold after it took the blob's lock (by its own
// monotonic clock), and a writer that meets a lock older than gcLockDead
// (by the server's times) takes it for one left by a GC that died, and
// goes on.
const (
	gcLockHold = 10 * time.Second
	gcLockDead = 3 * gcLockHold
	lockPoll   = 50 * time.Millisecond
	putTries   = 10
)

func (s *Store) gcLockKey(d fsstore.Digest) string { return s.key("tmp/gc-" + d.Hex()) }

// putBlob stores b, whose digest is d, so that when it returns the blob
// exists, its Last-Modified is at least the server's time when putBlob
// began less RefreshAfter, and no GC that could still remove it has
// decided to (the writer's half of the argument in GC).
//
// A conditional PUT (If-None-Match: *) that succeeds has stored the bytes
// anew. A 412 says the blob exists, but not since when: S3 has no way
// to touch an object, and the 412 leaves its Last-Modified as it was.
// Bug (issue 17): Put stopped at the 412, so a blob stored long ago and
// Put again by a writer about to bind it kept its old time, and a GC
// between the Put and the Bind removed it: a record pointing at nothing.
// Now, after a 412: HEAD the blob; if it is older than RefreshAfter, PUT
// the same bytes without condition (content-addressed: identical bytes,
// a new Last-Modified); then wait while a GC holds the blob's lock, and
// HEAD the blob again, storing it anew if a GC removed it meanwhile.
// Four round trips instead of one (five when it rewrites), for bytes
// already stored only.
func (s *Store) putBlob(ctx context.Context, d fsstore.Digest, b []byte) error {
	key := s.blobKey(d)
	var last error
	for try := range putTries {
		if try > 0 {
			if err := sleep(ctx, backoff(try)); err != nil {
				return err
			}
		}
		_, err := s.put(ctx, key, b, putOptions{ifNoneMatch: true})
		switch {
		case err == nil:
			return nil
		case errors.Is(err, errConflict):
			// Another writer is storing the same bytes: look again.
			last = err
			continue
		case !errors.Is(err, errPrecondition):
			return err
		}
		again, err := s.refresh(ctx, d, key, b)
		if err != nil || !again {
			return err
		}
		last = fmt.Errorf("%s was removed by a GC while being stored again", s.url(key))
	}
	return fmt.Errorf("gave up after %d tries: %w", putTries, last)
}

// refresh makes the existing blob d young if it is old, then settles
// with any GC deciding on it; again is true when the blob is gone and
// must be stored anew.
func (s *Store) refresh(ctx context.Context, d fsstore.Digest, key string, b []byte) (again bool, err error) {
	o, err := s.head(ctx, key)
	switch {
	case errors.Is(err, fsstore.ErrNotFound):
		return true, nil // removed since the 412
	case err != nil:
		return false, err
	}
	// Without a Date the age is unknown: refreshed, to be safe.
	if o.date.IsZero() || o.date.Sub(o.modified) >= s.refreshAfter {
		if _, err := s.put(ctx, key, b, putOptions{}); err != nil {
			return false, err
		}
	}
	lock := s.gcLockKey(d)
	waiting := time.Now()
	for {
		l, err := s.head(ctx, lock)
		if errors.Is(err, fsstore.ErrNotFound) {
			break
		}
		if err != nil {
			return false, err
		}
		// Left by a GC that died, by the server's times; or, if the
		// server sends no Date, by how long this has waited.
		if !l.date.IsZero() && l.date.Sub(l.modified) >= gcLockDead || time.Since(waiting) >= gcLockDead {
			break
		}
		if s.lockWait != nil {
			s.lockWait(d)
		}
		if err := sleep(ctx, lockPoll); err != nil {
			return false, err
		}
	}
	switch _, err := s.head(ctx, key); {
	case errors.Is(err, fsstore.ErrNotFound):
		return true, nil // the GC that held the lock removed it
	case err != nil:
		return false, err
	}
	return false, nil
}

// GC removes stale objects under tmp/ and, with opts.Blobs, blobs that
// nothing refers to, as fsstore's GC does in a folder: the same options
// (TempOlderThan, Blobs, Refs, DryRun; its test seams are fsstore's own)
// and the same report. While any record is corrupt no blob is removed.
// Safe to run while other processes use the store, given the writers'
// rule W below. Errors name the root.
//
// Temp objects. Every process leaves its clock probe
// (tmp/<host>.<pid>.clock-<hex>, rewritten at each Now), and a GC that
// died its locks: those whose Last-Modified is older than the grace G,
// by the server's time, are removed. A live process's probe is young
// while it asks the time (a study running trials asks every few
// seconds: its serverClock re-probes after 10 s at most); one left
// older than G by a process that stopped asking is removed, which costs
// it nothing: Now's PUT is unconditional and stores the probe anew, and
// only the Date of its reply is read.
//
// Why a blob a writer is about to bind is never removed. S3 has no
// rename, so fsstore's move-aside-and-look-again cannot be done; a
// per-blob lock takes its place. W: a writer Binds a name to d within W
// of the start of its Put(d) (study: study.BlobReuse plus round trips),
// and G > W + RefreshAfter (soma gc refuses G under a minute). GC:
//
//  1. reads the server's time S (Now), then lists and reads every
//     name: R, the digests they and Refs refer to;
//  2. lists the blobs; one not in R whose Last-Modified m < S - G is a
//     candidate. For each: PUT tmp/gc-<hex> with If-None-Match: * (the
//     lock; a 412 means another GC decides, and it is kept), HEAD the
//     blob, and DELETE it only if still m < S - G and gcLockHold has
//     not passed; then DELETE the lock, unless the blob's DELETE may
//     still be in flight (a lost reply), when the lock is left to age.
//
// A writer's Put (putBlob): a conditional PUT; on 412, HEAD the blob
// (reply time h, age h - m), and if the age is RefreshAfter or more PUT
// the bytes again unconditionally (Last-Modified becomes that PUT's
// time); then HEAD the lock, waiting while it is there and younger than
// gcLockDead; then HEAD the blob again and store it anew if it is gone.
//
// Suppose GC removes blob b (lock at L, HEAD at H, DELETE at D, unlock
// at U) while a name N is bound to it by a writer whose Put began at T_p
// and whose Bind lands at T_b <= T_p + W. S3's listings are strongly
// consistent, so the scan, which started after S, would have listed N
// if T_b < S: T_b >= S, and T_p >= S - W. If the writer's conditional
// PUT created b, it did so after D (the blob existed at H, and only the
// lock holder deletes) and N refers to the new object, or before H, and
// then H read m >= T_p > S - G. Otherwise the writer's last HEAD of the
// lock, at c, found none. If c > U > D, its HEAD of the blob after c
// found it gone and stored it anew, or found it stored anew. If c < L,
// GC's HEAD at H > c read a Last-Modified at least what the writer left
// (it never decreases while the key exists, and only GC under the lock
// deletes it): at least T_p - RefreshAfter >= S - W - RefreshAfter > S
// - G, so GC kept b. Either way, a contradiction. A GC that takes the
// lock after the writer's Put returned reads the same Last-Modified,
// and the same bound holds.
//
// Server times here are whole seconds, and a Date may lag the clock
// that stamps Last-Modified (versitygw's HTTP layer refreshes its Date
// once a second: seen 1-2 s behind under load). A lagging S makes GC
// keep more; a lagging h makes a writer refresh later, by the lag,
// which the 40 s between G's minute and W + RefreshAfter absorb.
//
// What this does not cover: a GC whose DELETE is delayed in flight
// (sent, then held by the network or the server) for more than
// gcLockDead - gcLockHold (20 s) past the death of the GC that sent it;
// a GC that lives leaves its lock in place when a DELETE's reply is
// lost.
func (s *Store) GC(ctx context.Context, opts fsstore.GCOptions) (fsstore.GCReport, error) {
	var rep fsstore.GCReport
	if opts.TempOlderThan <= 0 {
		opts.TempOlderThan = time.Hour
	}
	now, err := s.Now(ctx)
	if err != nil {
		return rep, fmt.Errorf("gc %s: %w", s.root, err)
	}
	cutoff := now.Add(-opts.TempOlderThan)
	var stale []string
	err = s.listObjects(ctx, s.key("tmp/"), func(key string, modified time.Time, size int64) {
		if modified.Before(cutoff) {
			rep.TempFiles++
			rep.TempBytes += size
			stale = append(stale, key)
		}
	})
	if err != nil {
		return rep, fmt.Errorf("gc %s: %w", s.root, err)
	}
	if !opts.DryRun {
		if err := s.deleteKeys(ctx, stale); err != nil {
			return rep, fmt.Errorf("gc %s: %w", s.root, err)
		}
	}
	if !opts.Blobs {
		return rep, nil
	}
	// S (now) was read before the scan starts: see the argument above.
	bound, corrupt, err := s.Scan(ctx, "")
	if err != nil {
		return rep, fmt.Errorf("gc %s: %w", s.root, err)
	}
	if len(corrupt) > 0 {
		rep.CorruptRec = len(corrupt)
		for _, ce := range corrupt {
			rep.CorruptPaths = append(rep.CorruptPaths, ce.Path)
		}
		return rep, fmt.Errorf("gc %s: %d corrupt records (first: %v); fix or remove them before collecting blobs", s.root, len(corrupt), corrupt[0])
	}
	live := make(map[fsstore.Digest]bool, len(bound))
	for _, b := range bound {
		live[b.Digest] = true
	}
	keep := func(fsstore.Digest) bool { return false }
	if opts.Refs != nil {
		if keep, err = opts.Refs(ctx, bound); err != nil {
			return rep, err
		}
	}
	type candidate struct {
		d    fsstore.Digest
		key  string
		size int64
	}
	var cands []candidate
	base := s.key("blobs/" + fsstore.Algo + "/")
	err = s.listObjects(ctx, base, func(key string, modified time.Time, size int64) {
		sub, leaf, _ := strings.Cut(strings.TrimPrefix(key, base), "/")
		d, perr := fsstore.ParseDigest(fsstore.Algo + ":" + sub + leaf)
		if perr != nil || s.blobKey(d) != key {
			return // not a blob of ours
		}
		if live[d] || keep(d) || !modified.Before(cutoff) {
			rep.BlobsKept++
			return
		}
		cands = append(cands, candidate{d, key, size})
	})
	if err != nil {
		return rep, fmt.Errorf("gc %s: %w", s.root, err)
	}
	if opts.DryRun {
		for _, c := range cands {
			rep.Blobs++
			rep.BlobBytes += c.size
		}
		return rep, nil
	}
	var mu sync.Mutex
	var first error
	s.each(ctx, len(cands), func(i int) {
		c := cands[i]
		removed, size, err := s.removeBlob(ctx, c.d, c.key, cutoff)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil:
			rep.BlobsKept++
			if first == nil {
				first = err
			}
		case removed:
			rep.Blobs++
			rep.BlobBytes += size
		default:
			rep.BlobsKept++
		}
	})
	if err := ctx.Err(); err != nil {
		return rep, err
	}
	if first != nil {
		return rep, fmt.Errorf("gc %s: %w", s.root, first)
	}
	return rep, nil
}

// removeBlob removes blob d (at key) under its lock, unless a Put made
// it younger than cutoff since GC listed it. See GC.
func (s *Store) removeBlob(ctx context.Context, d fsstore.Digest, key string, cutoff time.Time) (bool, int64, error) {
	lock := s.gcLockKey(d)
	_, err := s.put(ctx, lock, []byte(s.id+"gc\n"), putOptions{ifNoneMatch: true, noRetry: true})
	switch {
	case errors.Is(err, errPrecondition), errors.Is(err, errConflict):
		return false, 0, nil // another GC decides on it
	case err != nil:
		// The lock may have been written: it ages out with tmp/.
		return false, 0, err
	}
	took := time.Now()
	release := true
	defer func() {
		if release {
			_, _ = s.client.DeleteObject(context.WithoutCancel(ctx), &s3.DeleteObjectInput{Bucket: &s.bucket, Key: &lock})
		}
	}()
	o, err := s.head(ctx, key)
	switch {
	case errors.Is(err, fsstore.ErrNotFound):
		return false, 0, nil
	case err != nil:
		return false, 0, err
	case !o.modified.Before(cutoff):
		return false, 0, nil // Put again since the listing
	}
	if s.gcBeforeDelete != nil {
		s.gcBeforeDelete(d)
	}
	if time.Since(took) > gcLockHold {
		return false, 0, nil // writers may have stopped waiting
	}
	_, err = s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: &key}, func(o *s3.Options) { o.Retryer = aws.NopRetryer{} })
	if err != nil {
		// A DELETE whose reply was lost may land later: the lock stays,
		// so writers wait for it to age (gcLockDead).
		release = definite(err)
		return false, 0, s.explain("delete", key, err)
	}
	return true, o.size, nil
}

// deleteKeys deletes keys, at most Options.Parallelism at once, and
// returns the first error.
func (s *Store) deleteKeys(ctx context.Context, keys []string) error {
	var mu sync.Mutex
	var first error
	s.each(ctx, len(keys), func(i int) {
		_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: &keys[i]})
		if err != nil {
			mu.Lock()
			if first == nil {
				first = s.explain("delete", keys[i], err)
			}
			mu.Unlock()
		}
	})
	if first != nil {
		return first
	}
	return ctx.Err()
}

// listObjects calls fn for each key under prefix with its Last-Modified
// and size, page after page.
func (s *Store) listObjects(ctx context.Context, prefix string, fn func(key string, modified time.Time, size int64)) error {
	p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: &prefix})
	for p.HasMorePages() {
		if err := ctx.Err(); err != nil {
			return err
		}
		page, err := p.NextPage(ctx)
		if err != nil {
			return s.explain("list", prefix, err)
		}
		for _, o := range page.Contents {
			if o.Key == nil || o.LastModified == nil {
				continue
			}
			fn(*o.Key, *o.LastModified, aws.ToInt64(o.Size))
		}
	}
	return nil
}

// RemoveTree removes every name under prefix for good (soma rm), as
// fsstore's RemoveTree does: prefix must name a folder of names (at
// least two segments, "study/s"). One listing, then a DELETE per name,
// at most Options.Parallelism at once. A name under prefix bound again
// while it runs (a runner still writing) may survive. Blobs stay until
// GC finds nothing refers to them. Not atomic: callers remove the record
// that makes the tree meaningful first (a study's spec).
func (s *Store) RemoveTree(ctx context.Context, prefix string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	prefix = strings.TrimSuffix(prefix, "/")
	if err := fsstore.ValidatePrefix(prefix); err != nil {
		return fmt.Errorf("remove: %w", err)
	}
	if !strings.Contains(prefix, "/") {
		return fmt.Errorf("remove %q: want a folder below the top (such as study/NAME)", prefix)
	}
	names, err := s.List(ctx, prefix)
	if err != nil {
		return fmt.Errorf("remove %s: %w", prefix, err)
	}
	keys := make([]string, len(names))
	for i, n := range names {
		keys[i] = s.nameKey(n)
	}
	if err := s.deleteKeys(ctx, keys); err != nil {
		return fmt.Errorf("remove %s: %w", prefix, err)
	}
	return nil
}

// OpenBlob streams blob d. The digest is checked as the bytes go by: the
// Read that reaches the end returns a *fsstore.CorruptError instead of
// io.EOF if they did not match, as fsstore's OpenBlob does. A missing
// blob is fsstore.ErrNotFound.
func (s *Store) OpenBlob(ctx context.Context, d fsstore.Digest) (io.ReadCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	key := s.blobKey(d)
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &key})
	if err != nil {
		return nil, fmt.Errorf("open blob %s: %w", d, s.explain("get", key, err))
	}
	return &verifyReader{rc: out.Body, h: sha256.New(), d: d, url: s.url(key)}, nil
}

type verifyReader struct {
	rc  io.ReadCloser
	h   hash.Hash
	d   fsstore.Digest
	url string
}

func (v *verifyReader) Read(p []byte) (int, error) {
	n, err := v.rc.Read(p)
	v.h.Write(p[:n])
	if err == io.EOF {
		if hex.EncodeToString(v.h.Sum(nil)) != v.d.Hex() {
			return n, &fsstore.CorruptError{Digest: v.d, Path: v.url, Err: fsstore.ErrDigestMismatch}
		}
	}
	return n, err
}

func (v *verifyReader) Close() error { return v.rc.Close() }
