package zarr

import (
	"bytes"
	"context"
	"crypto/sha256"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func openTestCache(t *testing.T, limit int64) *Cache {
	t.Helper()
	c, err := OpenCache(t.TempDir(), CacheOptions{MaxBytes: limit})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestCacheKeyPathAgrees is the regression test for the original's D-31:
// its cache hashed the hex form of a key on the write path but not on the
// read path, so no entry was ever found. Here one function maps keys to
// files, a key read back from a file name is the same key, and a Get
// finds what a Put stored.
func TestCacheKeyPathAgrees(t *testing.T) {
	ctx := context.Background()
	c := openTestCache(t, 1<<20)
	for i := range 20 {
		k := CacheKey(sha256.Sum256([]byte{byte(i)}))
		t.Run(k.String()[:8], func(t *testing.T) {
			p, err := ParseCacheKey(k.String())
			if err != nil || p != k {
				t.Fatalf("ParseCacheKey(%s) = %v, %v, want the key back", k, p, err)
			}
			var u CacheKey
			if txt, _ := k.MarshalText(); u.UnmarshalText(txt) != nil || u != k {
				t.Fatalf("text round trip gave %v", u)
			}
			data := bytes.Repeat([]byte{byte(i)}, 100+i)
			if err := c.Put(ctx, k, data); err != nil {
				t.Fatal(err)
			}
			path := c.entryPath(k)
			if _, err := os.Stat(path); err != nil {
				t.Fatalf("Put did not create %s: %v", path, err)
			}
			rel, _ := filepath.Rel(filepath.Join(c.Dir(), "entries"), path)
			fromDisk, err := ParseCacheKey(strings.ReplaceAll(filepath.ToSlash(rel), "/", ""))
			if err != nil || fromDisk != k {
				t.Fatalf("file %s names key %v (%v), want %v", rel, fromDisk, err, k)
			}
			got := make([]byte, len(data))
			hit, err := c.Get(ctx, k, 0, got)
			if err != nil || !hit || !bytes.Equal(got, data) {
				t.Fatalf("Get after Put = %v, %v, equal %v; want a hit with the same bytes", hit, err, bytes.Equal(got, data))
			}
			part := make([]byte, 10)
			if hit, err := c.Get(ctx, k, 50, part); err != nil || !hit || !bytes.Equal(part, data[50:60]) {
				t.Fatalf("Get(off 50) = %v, %v", hit, err)
			}
		})
	}
	for _, bad := range []string{"", "00", strings.Repeat("G", 64), strings.Repeat("AB", 32), strings.Repeat("ab", 33)} {
		if _, err := ParseCacheKey(bad); err == nil {
			t.Errorf("ParseCacheKey(%q) = nil error", bad)
		}
	}
	if s := c.Stats(); s.Hits != 40 || s.Puts != 20 || s.Misses != 0 {
		t.Errorf("Stats() = %+v, want 40 hits, 20 puts, 0 misses", s)
	}
}

// TestArrayReadsThroughCache reads what was just cached, from a second
// Array value, and counts chunk reads from the array folder: none.
func TestArrayReadsThroughCache(t *testing.T) {
	ctx := context.Background()
	le := BytesCodec(false)
	for _, cc := range []struct {
		name   string
		codecs []Codec
		units  int64 // read units for rows [2, 14) of 16 rows
	}{
		{"plain", []Codec{le, ShuffleCodec(4), ZstdCodec(3, false)}, 4},
		{"sharded", []Codec{ShardingCodec([]int64{2, 6}, []Codec{le, ZstdCodec(1, false)}, []Codec{le, CRC32CCodec()}, false)}, 6},
	} {
		t.Run(cc.name, func(t *testing.T) {
			c := openTestCache(t, 1<<20)
			path := filepath.Join(t.TempDir(), "a.zarr")
			a := mustCreate(t, path, Spec{Shape: []int64{16, 6}, ChunkShape: []int64{4, 6}, DataType: Float32, Codecs: cc.codecs}, Options{})
			want := genData(t, Float32, []int64{16, 6}, 5)
			if err := a.WriteRegion(ctx, []int64{0, 0}, want); err != nil {
				t.Fatal(err)
			}
			first, err := Open(ctx, path, Options{Cache: c})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := first.ReadRows(ctx, 2, 14); err != nil {
				t.Fatal(err)
			}
			if s := first.Stats(); s.ChunkReads != cc.units || s.CacheMisses != cc.units || s.Decoded != cc.units || s.CacheHits != 0 {
				t.Errorf("first read: Stats() = %+v, want %d chunk reads, misses and decodes", s, cc.units)
			}
			second, err := Open(ctx, path, Options{Cache: c})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range [][2]int64{{2, 14}, {3, 5}, {4, 8}} {
				got, err := second.ReadRows(ctx, r[0], r[1])
				if err != nil {
					t.Fatal(err)
				}
				if w := region(want, []int64{r[0], 0}, []int64{r[1] - r[0], 6}); !bytes.Equal(got.Bytes, w.Bytes) {
					t.Errorf("cached ReadRows(%d, %d) differs from the data", r[0], r[1])
				}
			}
			box, err := second.ReadRegion(ctx, []int64{5, 1}, []int64{11, 4})
			if err != nil {
				t.Fatal(err)
			}
			if w := region(want, []int64{5, 1}, []int64{6, 3}); !bytes.Equal(box.Bytes, w.Bytes) {
				t.Errorf("cached ReadRegion box differs from the data")
			}
			if s := second.Stats(); s.ChunkReads != 0 || s.BytesRead != 0 || s.Decoded != 0 || s.CacheMisses != 0 {
				t.Errorf("second read: Stats() = %+v, want every chunk from the cache and no bytes from the array", s)
			}
		})
	}
}

func cacheEntries(t *testing.T, c *Cache) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(filepath.Join(c.Dir(), "entries"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.HasPrefix(d.Name(), ".") {
			n++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCacheInvalidatedByAppend: Append rewrites the partial last chunk;
// the next read must see the new rows (not the cached old chunk), and the
// old entry is removed.
func TestCacheInvalidatedByAppend(t *testing.T) {
	ctx := context.Background()
	for _, format := range []Format{V2, V3} {
		t.Run(format.String(), func(t *testing.T) {
			c := openTestCache(t, 1<<20)
			path := filepath.Join(t.TempDir(), "a.zarr")
			a := mustCreate(t, path, Spec{Format: format, Shape: []int64{0, 3}, ChunkShape: []int64{4, 3}, DataType: Int32, FillValue: -7}, Options{Cache: c})
			if err := a.Append(ctx, appendRows(t, 0, 6, 3)); err != nil {
				t.Fatal(err)
			}
			other, err := Open(ctx, path, Options{Cache: c}) // another reader of the same cache
			if err != nil {
				t.Fatal(err)
			}
			if _, err := a.ReadRows(ctx, 0, 6); err != nil {
				t.Fatal(err)
			}
			if n := cacheEntries(t, c); n != 2 {
				t.Fatalf("%d cache entries after reading 2 chunks, want 2", n)
			}
			if err := a.Append(ctx, appendRows(t, 6, 1, 3)); err != nil {
				t.Fatal(err)
			}
			if n := cacheEntries(t, c); n != 1 {
				t.Errorf("%d cache entries after Append rewrote chunk 1, want 1 (its old entry removed)", n)
			}
			for _, r := range []*Array{a, other} {
				if err := r.Refresh(ctx); err != nil {
					t.Fatal(err)
				}
				got, err := r.ReadRows(ctx, 0, 7)
				if err != nil {
					t.Fatal(err)
				}
				if w := appendRows(t, 0, 7, 3); !bytes.Equal(got.Bytes, w.Bytes) {
					v, _ := Values[int32](got)
					t.Errorf("rows after Append = %v, want the appended row 6", v)
				}
			}
		})
	}
}

// TestCacheEvictsLeastRecentlyUsed fills a small cache past its limit and
// checks that the entry read most recently survives and the oldest go.
func TestCacheEvictsLeastRecentlyUsed(t *testing.T) {
	ctx := context.Background()
	const size = 1000
	entry := int64(cacheHeaderLen + size)
	c := openTestCache(t, 4*entry+entry/2)
	keys := make([]CacheKey, 6)
	base := time.Now().Add(-time.Hour)
	for i := range 4 {
		keys[i] = CacheKey(sha256.Sum256([]byte("k" + strconv.Itoa(i))))
		if err := c.Put(ctx, keys[i], bytes.Repeat([]byte{byte(i)}, size)); err != nil {
			t.Fatal(err)
		}
		tm := base.Add(time.Duration(i) * time.Minute)
		if err := os.Chtimes(c.entryPath(keys[i]), tm, tm); err != nil {
			t.Fatal(err)
		}
	}
	// Reading key 0 makes it the most recent.
	if hit, err := c.Get(ctx, keys[0], 0, make([]byte, size)); !hit || err != nil {
		t.Fatalf("Get(key 0) = %v, %v", hit, err)
	}
	keys[4] = CacheKey(sha256.Sum256([]byte("k4")))
	if err := c.Put(ctx, keys[4], bytes.Repeat([]byte{4}, size)); err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, false, false, true, true} {
		_, err := os.Stat(c.entryPath(keys[i]))
		if got := err == nil; got != want {
			t.Errorf("entry %d present = %v, want %v", i, got, want)
		}
	}
	if s := c.Stats(); s.Evictions != 2 {
		t.Errorf("Stats().Evictions = %d, want 2", s.Evictions)
	}
	usage, err := c.Usage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if usage != 3*entry || readLedger(t, c) != 3*entry {
		t.Errorf("Usage() = %d, ledger %d, want %d", usage, readLedger(t, c), 3*entry)
	}
	// An entry larger than the whole cache is not stored.
	keys[5] = CacheKey(sha256.Sum256([]byte("k5")))
	if err := c.Put(ctx, keys[5], make([]byte, 5*entry)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(c.entryPath(keys[5])); err == nil || c.Stats().Skipped != 1 {
		t.Errorf("an entry over the limit was stored (skipped %d)", c.Stats().Skipped)
	}
}

// TestCacheCorruptEntries damages entries: each Get is a miss, counted
// corrupt, and the entry is removed.
func TestCacheCorruptEntries(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name   string
		damage func([]byte) []byte
	}{
		{"truncated", func(b []byte) []byte { return b[:len(b)-1] }},
		{"header only", func(b []byte) []byte { return b[:cacheHeaderLen] }},
		{"short header", func(b []byte) []byte { return b[:10] }},
		{"bad magic", func(b []byte) []byte { c := bytes.Clone(b); c[0] = 'X'; return c }},
		{"other key", func(b []byte) []byte { c := bytes.Clone(b); c[20] ^= 1; return c }},
		{"longer", func(b []byte) []byte { return append(bytes.Clone(b), 0) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := openTestCache(t, 1<<20)
			k := CacheKey(sha256.Sum256([]byte(tc.name)))
			if err := c.Put(ctx, k, bytes.Repeat([]byte{7}, 64)); err != nil {
				t.Fatal(err)
			}
			p := c.entryPath(k)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			writeTestFile(t, p, tc.damage(b))
			hit, err := c.Get(ctx, k, 0, make([]byte, 64))
			if hit || err != nil {
				t.Fatalf("Get of a damaged entry = %v, %v, want a miss", hit, err)
			}
			if _, err := os.Stat(p); err == nil {
				t.Errorf("the damaged entry is still there")
			}
			if s := c.Stats(); s.Corrupt != 1 {
				t.Errorf("Stats().Corrupt = %d, want 1", s.Corrupt)
			}
		})
	}
	// Asking for more than an entry holds is also treated as damage.
	c := openTestCache(t, 1<<20)
	k := CacheKey{1}
	if err := c.Put(ctx, k, make([]byte, 8)); err != nil {
		t.Fatal(err)
	}
	if hit, err := c.Get(ctx, k, 4, make([]byte, 8)); hit || err != nil {
		t.Errorf("Get past the end = %v, %v, want a miss", hit, err)
	}
}

// TestCacheTempFileRule: a recount removes the temp files of dead
// writers on this host at once, those it cannot check (another host, an
// older name format) after staleTempAge, and the ledger temp files older
// soma left; it counts a live writer's temp file at its reserved size.
func TestCacheTempFileRule(t *testing.T) {
	dir := t.TempDir()
	c, err := OpenCache(dir, CacheOptions{MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	done := exec.Command("true")
	if err := done.Run(); err != nil {
		t.Fatal(err)
	}
	dead := done.Process.Pid
	sub := filepath.Join(c.Dir(), "entries", "ab")
	if err := os.MkdirAll(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	base := strings.Repeat("c", 62)
	old := time.Now().Add(-staleTempAge - time.Minute)
	files := []struct {
		name string
		age  time.Time
		kept bool
	}{
		{tempName(base, thisHost(), dead, 5000, "01"), time.Now(), false},
		{tempName(base, thisHost(), os.Getpid(), 5000, "02"), time.Now(), true},
		{tempName(base, "other-node.example", dead, 7000, "03"), time.Now(), true},
		{tempName(base, "other-node.example", dead, 7000, "04"), old, false},
		{"." + base + ".tmp-0123456789abcdef", time.Now(), true},
		{"." + base + ".tmp-fedcba9876543210", old, false},
	}
	for _, f := range files {
		p := filepath.Join(sub, f.name)
		writeTestFile(t, p, []byte("partial"))
		if err := os.Chtimes(p, f.age, f.age); err != nil {
			t.Fatal(err)
		}
	}
	ledgerTemp := filepath.Join(c.Dir(), ".usage.tmp-0123456789abcdef")
	writeTestFile(t, ledgerTemp, []byte("{"))
	u, err := c.Usage(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if got := fileExists(filepath.Join(sub, f.name)); got != f.kept {
			t.Errorf("%s: exists = %v, want %v", f.name, got, f.kept)
		}
	}
	if fileExists(ledgerTemp) {
		t.Errorf("the old ledger temp file was kept")
	}
	if want := int64(5000 + 7000 + len("partial")); u != want {
		t.Errorf("Usage() = %d, want %d (live temp files at their reserved size)", u, want)
	}
}

func TestParseTempName(t *testing.T) {
	tests := []struct {
		name, host string
		pid        int
		size       int64
		ok         bool
	}{
		{tempName("abc", "node-01.cluster", 42, 1234, "ff00"), "node-01.cluster", 42, 1234, true},
		{tempName("abc", "h", 1, 0, "0"), "h", 1, 0, true},
		{".abc.tmp-0123456789abcdef", "", 0, 0, false},
		{".abc.tmp-h-x-12-00", "", 0, 0, false},
		{".usage", "", 0, 0, false},
	}
	for _, tc := range tests {
		host, pid, size, ok := parseTempName(tc.name)
		if host != tc.host || pid != tc.pid || size != tc.size || ok != tc.ok {
			t.Errorf("parseTempName(%q) = %q, %d, %d, %v; want %q, %d, %d, %v", tc.name, host, pid, size, ok, tc.host, tc.pid, tc.size, tc.ok)
		}
	}
}

func TestParseCacheSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
	}{
		{"1048576", 1 << 20}, {"4G", 4 << 30}, {"4GiB", 4 << 30}, {"4gb", 4 << 30}, {"512M", 512 << 20},
		{"64k", 64 << 10}, {" 2T ", 2 << 40}, {"100B", 100},
		{"", 0}, {"0", 0}, {"-1G", 0}, {"1.5G", 0}, {"4X", 0}, {"G", 0}, {"9999999999T", 0}, {"4 GiBs", 0},
	}
	for _, tc := range tests {
		got, err := ParseCacheSize(tc.in)
		if got != tc.want || (err == nil) != (tc.want > 0) {
			t.Errorf("ParseCacheSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestDefaultCacheDir(t *testing.T) {
	t.Setenv("SOMA_ZARR_CACHE", "/x/y")
	if got := DefaultCacheDir(); got != "/x/y" {
		t.Errorf("DefaultCacheDir() = %q with SOMA_ZARR_CACHE, want /x/y", got)
	}
	t.Setenv("SOMA_ZARR_CACHE", "")
	t.Setenv("SLURM_TMPDIR", "/local/job1")
	if got := DefaultCacheDir(); !strings.HasPrefix(got, "/local/job1/soma-zarr-cache-") {
		t.Errorf("DefaultCacheDir() = %q with SLURM_TMPDIR, want under it", got)
	}
	t.Setenv("SLURM_TMPDIR", "")
	t.Setenv("TMPDIR", "/scratch/t")
	if got := DefaultCacheDir(); !strings.HasPrefix(got, "/scratch/t/soma-zarr-cache-") {
		t.Errorf("DefaultCacheDir() = %q with TMPDIR, want under it", got)
	}
}

func TestOpenCacheRefuses(t *testing.T) {
	if _, err := OpenCache(t.TempDir(), CacheOptions{MaxBytes: -1}); err == nil {
		t.Errorf("OpenCache(MaxBytes -1) = nil error")
	}
	f := filepath.Join(t.TempDir(), "file")
	writeTestFile(t, f, []byte("x"))
	if _, err := OpenCache(f, CacheOptions{}); err == nil {
		t.Errorf("OpenCache(a file) = nil error")
	}
}

// TestBrokenCacheDoesNotFailReads replaces the cache folder with a file:
// reads go on from the array and count the cache errors.
func TestBrokenCacheDoesNotFailReads(t *testing.T) {
	ctx := context.Background()
	c := openTestCache(t, 1<<20)
	path := filepath.Join(t.TempDir(), "a.zarr")
	a := mustCreate(t, path, Spec{Shape: []int64{8, 2}, ChunkShape: []int64{4, 2}, DataType: Int16}, Options{Cache: c})
	want := genData(t, Int16, []int64{8, 2}, 1)
	if err := a.WriteRegion(ctx, []int64{0, 0}, want); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(c.Dir()); err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, c.Dir(), []byte("not a folder"))
	got, err := a.ReadRows(ctx, 0, 8)
	if err != nil {
		t.Fatalf("ReadRows with a broken cache: %v", err)
	}
	if !bytes.Equal(got.Bytes, want.Bytes) {
		t.Errorf("ReadRows with a broken cache returned other data")
	}
	if s := a.Stats(); s.CacheErrors == 0 {
		t.Errorf("Stats().CacheErrors = 0, want the failed cache writes counted")
	}
}
