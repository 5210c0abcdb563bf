package zarr

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gofrs/flock"
)

// CacheKey names one cached decoded chunk: the SHA-256 of everything that
// determines its bytes (see Array's use). It appears on disk as 64
// lowercase hex digits, and ParseCacheKey(k.String()) == k: the write path
// and the read path derive an entry's file from the key by the same
// function, Cache.entryPath.
type CacheKey [32]byte

// ParseCacheKey parses 64 lowercase hex digits.
func ParseCacheKey(s string) (CacheKey, error) {
	var k CacheKey
	if len(s) != 64 || strings.ToLower(s) != s {
		return k, fmt.Errorf("zarr: cache key %q is not 64 lowercase hex digits", s)
	}
	if _, err := hex.Decode(k[:], []byte(s)); err != nil {
		return k, fmt.Errorf("zarr: cache key %q: %w", s, err)
	}
	return k, nil
}

// String returns the key as 64 lowercase hex digits.
func (k CacheKey) String() string { return hex.EncodeToString(k[:]) }

// MarshalText returns String.
func (k CacheKey) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText parses as ParseCacheKey.
func (k *CacheKey) UnmarshalText(b []byte) error {
	v, err := ParseCacheKey(string(b))
	if err != nil {
		return err
	}
	*k = v
	return nil
}

// DefaultCacheBytes is the cache size limit when CacheOptions.MaxBytes is 0.
const DefaultCacheBytes = 8 << 30

// cacheFormat is the on-disk layout version; it is part of the folder name
// (<dir>/v1) and of every entry's header.
const cacheFormat = 1

// Entry header: magic, key, payload length (little-endian).
const (
	cacheMagic     = "SOMAZC01"
	cacheHeaderLen = 8 + 32 + 8
)

// CacheOptions configures OpenCache.
type CacheOptions struct {
	// MaxBytes bounds the bytes of all entries (headers included);
	// 0 means DefaultCacheBytes. An entry larger than MaxBytes is never
	// stored.
	MaxBytes int64
}

// CacheStats counts what one Cache value did since OpenCache.
type CacheStats struct {
	Hits, Misses, Puts, Evictions, Corrupt, Skipped int64
}

// Cache is a node-local, byte-accounted LRU of decoded chunks in a folder.
// Entries are immutable files written atomically (fsstore.WriteFileAtomic);
// recency is the file's mtime, refreshed on a hit.
//
// Several processes on one node may share the folder. MaxBytes is a hard
// bound on the bytes of entries and temp files in it, at every moment: a
// Put reserves its entry's size in a ledger (<dir>/v1/usage) under an
// exclusive flock (<dir>/v1/lock) before it writes anything, evicting the
// least recently used entries down to 7/8 of MaxBytes first when the
// reservation would not fit (and skipping the entry if the other
// processes' writes in flight leave no room). Still under the lock it
// creates the entry's temp file, whose name records the writer's host,
// pid and reserved size, so a recount (which holds the lock and counts
// each temp file at its reserved size) sees every reservation. The
// ledger never undercounts. (It used to add an entry's size after
// writing it, so concurrent writers overshot a 4 MiB limit by 8.4%.)
//
// A reader that opened an entry keeps reading it if another process
// evicts it (POSIX unlink semantics); a reader that finds it gone sees a
// miss. A writer killed mid-Put leaves its temp file; every recount (and
// so every OpenCache) removes the temp files of writers on this host
// whose process is gone, and any temp file untouched for staleTempAge.
//
// A Cache is safe for concurrent use. Close releases the lock file.
type Cache struct {
	dir   string // <root>/v1
	limit int64
	mu    sync.Mutex // orders this process's goroutines around the flock
	lock  *flock.Flock
	now   func() time.Time

	hits, misses, puts, evictions, corrupt, skipped atomic.Int64
}

// ParseCacheSize parses a cache size as `soma zarr cat --cache-size` and
// $SOMA_ZARR_CACHE_SIZE take it: a whole number of bytes, optionally
// followed by K, M, G or T (powers of 1024; "KiB", "KB" and "k" mean the
// same), e.g. "4G", "512MiB", "1048576". It must be positive.
func ParseCacheSize(s string) (int64, error) {
	bad := func(why string) (int64, error) {
		return 0, fmt.Errorf("zarr: cache size %q: %s (use e.g. 4G, 512M or a number of bytes)", s, why)
	}
	t := strings.TrimSpace(s)
	num := strings.TrimRight(t, "KMGTkmgtiIbB")
	unit := strings.ToUpper(strings.TrimSpace(t[len(num):]))
	num = strings.TrimSpace(num)
	shift := 0
	switch strings.TrimSuffix(strings.TrimSuffix(unit, "B"), "I") {
	case "":
		if unit != "" && unit != "B" {
			return bad("unknown unit")
		}
	case "K":
		shift = 10
	case "M":
		shift = 20
	case "G":
		shift = 30
	case "T":
		shift = 40
	default:
		return bad("unknown unit")
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return bad("not a whole number")
	}
	if n <= 0 {
		return bad("not positive")
	}
	if n > (1<<63-1)>>shift {
		return bad("too large")
	}
	return n << shift, nil
}

// DefaultCacheDir returns the folder soma uses for the chunk cache when
// none is given: $SOMA_ZARR_CACHE if set; else under Slurm's per-job local
// scratch ($SLURM_TMPDIR, set by many sites) or $TMPDIR (os.TempDir),
// in a per-user folder "soma-zarr-cache-<uid>".
func DefaultCacheDir() string {
	if d := os.Getenv("SOMA_ZARR_CACHE"); d != "" {
		return d
	}
	base := os.Getenv("SLURM_TMPDIR")
	if base == "" {
		base = os.TempDir()
	}
	return filepath.Join(base, "soma-zarr-cache-"+strconv.Itoa(os.Getuid()))
}

// OpenCache opens (creating if needed) the chunk cache in dir.
func OpenCache(dir string, opts CacheOptions) (*Cache, error) {
	if opts.MaxBytes < 0 {
		return nil, fmt.Errorf("zarr: cache %s: MaxBytes %d is negative (use 0 for the default %d)", dir, opts.MaxBytes, int64(DefaultCacheBytes))
	}
	if opts.MaxBytes == 0 {
		opts.MaxBytes = DefaultCacheBytes
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("zarr: cache %s: %w", dir, err)
	}
	v := filepath.Join(abs, "v"+strconv.Itoa(cacheFormat))
	if err := os.MkdirAll(filepath.Join(v, "entries"), 0o700); err != nil {
		return nil, fmt.Errorf("zarr: cache %s: %w (choose a writable local folder)", dir, err)
	}
	c := &Cache{dir: v, limit: opts.MaxBytes, lock: flock.New(filepath.Join(v, "lock")), now: time.Now}
	// Recount now: it removes what killed writers left and corrects the
	// ledger, so their reservations do not linger.
	if _, err := c.Usage(context.Background()); err != nil {
		c.lock.Close()
		return nil, fmt.Errorf("zarr: cache %s: %w", dir, err)
	}
	return c, nil
}

// staleTempAge is how long a temp file of a writer soma cannot check (on
// another host, or in an old name format) may go unmodified before a
// recount removes it. A writer rewrites nothing for this long only if it
// is gone: entries are at most 2 GiB and written in one go.
const staleTempAge = 10 * time.Minute

// tempName is the name of an entry's temp file while a Put writes it:
// ".<name>.tmp-<host>-<pid>-<reserved bytes>-<random>".
func tempName(base, host string, pid int, size int64, rnd string) string {
	return "." + base + ".tmp-" + host + "-" + strconv.Itoa(pid) + "-" + strconv.FormatInt(size, 10) + "-" + rnd
}

// parseTempName reverses tempName; ok is false for other "." files (such
// as fsstore.WriteFileAtomic's ".<name>.tmp-<random>" of older soma).
func parseTempName(name string) (host string, pid int, size int64, ok bool) {
	_, rest, found := strings.Cut(name, ".tmp-")
	if !found {
		return "", 0, 0, false
	}
	f := strings.Split(rest, "-")
	if len(f) < 4 {
		return "", 0, 0, false
	}
	n := len(f)
	pid, err1 := strconv.Atoi(f[n-3])
	size, err2 := strconv.ParseInt(f[n-2], 10, 64)
	if err1 != nil || err2 != nil || pid <= 0 || size < 0 {
		return "", 0, 0, false
	}
	return strings.Join(f[:n-3], "-"), pid, size, true
}

// processGone reports whether no live process pid exists on this host.
// A zombie (state Z or X in /proc/<pid>/stat: it has exited, and only its
// parent has not reaped it yet) is gone: it writes nothing more. kill(pid,
// 0) alone succeeds on a zombie, which kept a dead writer's temp files
// until staleTempAge (issue 16). When /proc does not show pid (mounted
// with hidepid, for another user's process) the signal's answer stands.
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command name, in parentheses that may hold
	// any character, ')' included: look after the last one.
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X')
}

var thisHost = sync.OnceValue(func() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "unknown"
	}
	return h
})

// Dir returns the cache's versioned folder.
func (c *Cache) Dir() string { return c.dir }

// MaxBytes returns the size limit.
func (c *Cache) MaxBytes() int64 { return c.limit }

// Stats returns counters of this Cache value (not of other processes).
func (c *Cache) Stats() CacheStats {
	return CacheStats{Hits: c.hits.Load(), Misses: c.misses.Load(), Puts: c.puts.Load(),
		Evictions: c.evictions.Load(), Corrupt: c.corrupt.Load(), Skipped: c.skipped.Load()}
}

// Close releases the lock file's descriptor. Entries stay on disk.
func (c *Cache) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lock.Close()
}

// entryPath is the one place that maps a key to a file; Get, Put, Remove
// and the recount all use it (the original cache hashed the hex form on
// one path and not the other, issue 7).
func (c *Cache) entryPath(k CacheKey) string {
	s := k.String()
	return filepath.Join(c.dir, "entries", s[:2], s[2:])
}

// Get copies len(p) bytes of entry k, starting at payload offset off, into
// p. It returns false (and no error) on a miss. An entry whose header does
// not match its key and size is counted corrupt, removed, and reported as
// a miss: the caller then reads from the source.
func (c *Cache) Get(ctx context.Context, k CacheKey, off int64, p []byte) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	path := c.entryPath(k)
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			c.misses.Add(1)
			return false, nil
		}
		return false, fmt.Errorf("zarr: cache get %s: %w", k, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false, fmt.Errorf("zarr: cache get %s: %w", k, err)
	}
	var hdr [cacheHeaderLen]byte
	if _, err := f.ReadAt(hdr[:], 0); err != nil {
		return c.dropCorrupt(ctx, k, "short header")
	}
	n := int64(binary.LittleEndian.Uint64(hdr[40:]))
	switch {
	case string(hdr[:8]) != cacheMagic:
		return c.dropCorrupt(ctx, k, "bad magic")
	case !bytes.Equal(hdr[8:40], k[:]):
		return c.dropCorrupt(ctx, k, "header names another key")
	case n < 0 || fi.Size() != cacheHeaderLen+n:
		return c.dropCorrupt(ctx, k, "size does not match header")
	case off < 0 || off > n || int64(len(p)) > n-off:
		return c.dropCorrupt(ctx, k, "entry shorter than requested")
	}
	if _, err := f.ReadAt(p, cacheHeaderLen+off); err != nil {
		return c.dropCorrupt(ctx, k, err.Error())
	}
	if now := c.now(); now.Sub(fi.ModTime()) > time.Second {
		// Recency for the LRU; losing a race with eviction is harmless.
		_ = os.Chtimes(path, now, now)
	}
	c.hits.Add(1)
	return true, nil
}

func (c *Cache) dropCorrupt(ctx context.Context, k CacheKey, why string) (bool, error) {
	c.corrupt.Add(1)
	c.misses.Add(1)
	if err := c.Remove(ctx, k); err != nil {
		return false, fmt.Errorf("zarr: cache entry %s is corrupt (%s) and could not be removed: %w", k, why, err)
	}
	return false, nil
}

// Put stores data as entry k unless an entry k exists (entries are
// immutable: the key names the content). It may evict older entries
// first. An entry larger than the limit is skipped.
func (c *Cache) Put(ctx context.Context, k CacheKey, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	size := int64(cacheHeaderLen + len(data))
	if size > c.limit {
		c.skipped.Add(1)
		return nil
	}
	path := c.entryPath(k)
	if _, err := os.Stat(path); err == nil {
		now := c.now()
		_ = os.Chtimes(path, now, now)
		return nil
	}
	dir, base := filepath.Split(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("zarr: cache put %s: %w", k, err)
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := filepath.Join(dir, tempName(base, thisHost(), os.Getpid(), size, hex.EncodeToString(rnd[:])))
	var f *os.File
	err := c.withLock(ctx, func(usage int64, known bool) (int64, error) {
		if !known {
			u, err := c.trimLocked(ctx, 0, false)
			if err != nil {
				return 0, err
			}
			usage = u
		}
		if usage+size > c.limit {
			u, err := c.trimLocked(ctx, max(c.limit-c.limit/8-size, 0), true)
			if err != nil {
				return 0, err
			}
			usage = u
			if usage+size > c.limit {
				return usage, nil // the others' writes in flight fill it
			}
		}
		var err error
		if f, err = os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600); err != nil {
			return usage, err
		}
		return usage + size, nil
	})
	if err != nil {
		return fmt.Errorf("zarr: cache put %s: %w", k, err)
	}
	if f == nil {
		c.skipped.Add(1)
		return nil
	}
	err = writeEntry(f, k, data)
	if err == nil {
		// The rename happens under the lock. (Bug: it happened outside,
		// and a recount under the lock that listed the temp name just
		// before the rename found it gone at its stat and counted
		// neither name: the ledger lost the entry, and later writers
		// filled the cache past its limit — 6.3% over a 4 MiB limit in
		// TestCacheLimitIsHardAcrossProcesses, one run in three.)
		err = c.withLock(ctx, func(usage int64, known bool) (int64, error) {
			if _, serr := os.Stat(path); serr == nil {
				// Another process stored the same key meanwhile: that
				// entry stays, and this reservation is given back.
				if rerr := os.Remove(tmp); rerr != nil {
					return usage, rerr
				}
				if !known {
					return c.trimLocked(ctx, 0, false)
				}
				return max(usage-size, 0), nil
			}
			return usage, os.Rename(tmp, path)
		})
	}
	if err != nil {
		_ = os.Remove(tmp)
		// Give the reservation back (a recount would too).
		_ = c.withLock(ctx, func(usage int64, known bool) (int64, error) {
			if !known {
				return c.trimLocked(ctx, 0, false)
			}
			return max(usage-size, 0), nil
		})
		return fmt.Errorf("zarr: cache put %s: %w (is the cache folder %s full?)", k, err, c.dir)
	}
	c.puts.Add(1)
	return nil
}

// writeEntry writes the entry to its temp file f, syncs and closes it;
// Put then renames it into place under the cache's lock.
func writeEntry(f *os.File, k CacheKey, data []byte) error {
	var hdr [cacheHeaderLen]byte
	copy(hdr[:8], cacheMagic)
	copy(hdr[8:40], k[:])
	binary.LittleEndian.PutUint64(hdr[40:], uint64(len(data)))
	_, err := f.Write(hdr[:])
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Remove deletes the given entries (missing ones are ignored).
func (c *Cache) Remove(ctx context.Context, keys ...CacheKey) error {
	if len(keys) == 0 {
		return nil
	}
	return c.withLock(ctx, func(usage int64, known bool) (int64, error) {
		for _, k := range keys {
			path := c.entryPath(k)
			fi, err := os.Lstat(path)
			if err != nil {
				continue
			}
			if err := os.Remove(path); err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					continue
				}
				return usage, fmt.Errorf("zarr: cache remove %s: %w", k, err)
			}
			usage -= fi.Size()
		}
		if !known || usage < 0 {
			return c.trimLocked(ctx, 0, false)
		}
		return usage, nil
	})
}

// Usage recounts the entries' bytes exactly (and corrects the ledger).
func (c *Cache) Usage(ctx context.Context) (int64, error) {
	var out int64
	err := c.withLock(ctx, func(int64, bool) (int64, error) {
		u, err := c.trimLocked(ctx, 0, false)
		out = u
		return u, err
	})
	return out, err
}

// Trim recounts and evicts least recently used entries until the cache
// holds at most target bytes (0 or less: only recount; over the limit:
// the limit).
func (c *Cache) Trim(ctx context.Context, target int64) error {
	return c.withLock(ctx, func(int64, bool) (int64, error) {
		if target > c.limit {
			target = c.limit
		}
		return c.trimLocked(ctx, target, target > 0)
	})
}

type ledger struct {
	Format int   `json:"format"`
	Bytes  int64 `json:"bytes"`
}

// withLock runs fn under the cache lock with the ledger's usage (known
// false if the ledger is missing or unreadable) and stores what fn
// returns as the new usage.
func (c *Cache) withLock(ctx context.Context, fn func(usage int64, known bool) (int64, error)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.lock.Lock(); err != nil {
		return fmt.Errorf("zarr: cache lock %s: %w", c.dir, err)
	}
	defer c.lock.Unlock()
	var l ledger
	known := false
	if b, err := os.ReadFile(filepath.Join(c.dir, "usage")); err == nil {
		if json.Unmarshal(b, &l) == nil && l.Format == cacheFormat && l.Bytes >= 0 {
			known = true
		}
	}
	usage, err := fn(l.Bytes, known)
	if err != nil {
		return err
	}
	// The ledger is rewritten in place, under the lock: no temp file to
	// leave behind (a killed process left a v1/.usage.tmp-* per kill). A
	// write torn by a crash leaves bytes that do not parse, and the next
	// holder of the lock recounts.
	b, _ := json.Marshal(ledger{Format: cacheFormat, Bytes: usage})
	lf, err := os.OpenFile(filepath.Join(c.dir, "usage"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("zarr: cache ledger: %w", err)
	}
	_, err = lf.WriteAt(b, 0)
	if err == nil {
		err = lf.Truncate(int64(len(b)))
	}
	if cerr := lf.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("zarr: cache ledger: %w", err)
	}
	return nil
}

type cacheEntry struct {
	path  string
	size  int64
	mtime time.Time
}

// trimLocked counts every entry and temp file (a temp file of a live
// writer at its reserved size, so the total covers the Puts in flight)
// and removes the temp files of dead writers. If evict is set and the
// total exceeds target, it removes the least recently used entries until
// it does not, or none is left. It returns the new total. The caller
// holds the lock.
func (c *Cache) trimLocked(ctx context.Context, target int64, evict bool) (int64, error) {
	root := filepath.Join(c.dir, "entries")
	subs, err := os.ReadDir(root)
	if err != nil {
		return 0, fmt.Errorf("zarr: cache scan %s: %w", root, err)
	}
	var entries []cacheEntry
	var total int64
	now := c.now()
	// Ledger temp files of older soma, which wrote the ledger with
	// WriteFileAtomic under this lock: any left now is a dead writer's.
	if old, _ := filepath.Glob(filepath.Join(c.dir, ".usage.tmp-*")); old != nil {
		for _, p := range old {
			_ = os.Remove(p)
		}
	}
	for _, sub := range subs {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if !sub.IsDir() || len(sub.Name()) != 2 {
			continue
		}
		dir := filepath.Join(root, sub.Name())
		files, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, f := range files {
			info, err := f.Info()
			if err != nil {
				continue
			}
			p := filepath.Join(dir, f.Name())
			if strings.HasPrefix(f.Name(), ".") {
				host, pid, reserved, ok := parseTempName(f.Name())
				if (ok && host == thisHost() && processGone(pid)) || now.Sub(info.ModTime()) > staleTempAge {
					if os.Remove(p) == nil || !fileExists(p) {
						continue
					}
				}
				total += max(info.Size(), reserved)
				continue
			}
			if k, err := ParseCacheKey(sub.Name() + f.Name()); err != nil || c.entryPath(k) != p {
				continue // not ours
			}
			entries = append(entries, cacheEntry{path: p, size: info.Size(), mtime: info.ModTime()})
			total += info.Size()
		}
	}
	if !evict || total <= target {
		return total, nil
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].mtime.Before(entries[j].mtime) })
	for _, e := range entries {
		if total <= target {
			break
		}
		if err := os.Remove(e.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return total, fmt.Errorf("zarr: cache evict %s: %w", e.path, err)
		}
		total -= e.size
		c.evictions.Add(1)
	}
	return total, nil
}

// chunkCacheKey derives the key of one decoded chunk from the array's
// folder, the decode signature (data type, chunk shape, codecs, fill), the
// chunk's store key, the inner chunk index for sharded arrays (-1 if not),
// and the identity of the file the encoded bytes come from. A rewritten
// chunk file has a new identity and so a new key: stale entries are never
// hit, only aged out.
func chunkCacheKey(array string, sig [32]byte, key string, inner int64, identity string) CacheKey {
	h := sha256.New()
	fmt.Fprintf(h, "soma-zarr-chunk-v%d\x00%s\x00%x\x00%s\x00%d\x00%s", cacheFormat, array, sig, key, inner, identity)
	var k CacheKey
	h.Sum(k[:0])
	return k
}

func fileExists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}
