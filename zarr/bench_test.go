package zarr

import (
	"context"
	"encoding/binary"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
)

// The benchmark of issue 7: a 200 000 x 256 float32 array in 4096-row
// chunks, zstd level 3, with and without byte shuffle, in the v2 format.
// scripts/bench-zarr.sh makes the arrays with zarr-python and points
// ZARR_BENCH_DIR at them (noshuffle.zarr, shuffle.zarr), and runs the same
// reads with zarr-python for the side-by-side table. Without it, the
// benchmarks build a smaller array of the same layout themselves.
const (
	benchCols      = 256
	benchChunkRows = 4096
	benchReadRows  = 1000
	benchAppend    = 10000
)

var benchVariants = []string{"noshuffle", "shuffle"}

// benchArray returns the path of the named benchmark array.
func benchArray(b *testing.B, variant string) string {
	b.Helper()
	if dir := os.Getenv("ZARR_BENCH_DIR"); dir != "" {
		return filepath.Join(dir, variant+".zarr")
	}
	path := filepath.Join(b.TempDir(), variant+".zarr")
	rows := int64(10 * benchChunkRows)
	a := mustCreate(b, path, benchSpec(variant, rows), Options{})
	if err := a.WriteRegion(context.Background(), []int64{0, 0}, benchData(b, 0, rows)); err != nil {
		b.Fatal(err)
	}
	return path
}

func benchSpec(variant string, rows int64) Spec {
	codecs := []Codec{BytesCodec(false), ZstdCodec(3, false)}
	if variant == "shuffle" {
		codecs = []Codec{BytesCodec(false), ShuffleCodec(4), ZstdCodec(3, false)}
	}
	return Spec{Format: V2, Shape: []int64{rows, benchCols}, ChunkShape: []int64{benchChunkRows, benchCols}, DataType: Float32, Codecs: codecs}
}

// benchData is normally distributed data at half precision (the low 13
// mantissa bits zero), like features stored from fp16 models; it is what
// the script's zarr-python arrays hold too.
func benchData(b *testing.B, seed uint64, rows int64) *Data {
	b.Helper()
	r := rand.New(rand.NewPCG(seed, 3))
	d := &Data{Type: Float32, Shape: []int64{rows, benchCols}, Bytes: make([]byte, rows*benchCols*4)}
	for i := 0; i < len(d.Bytes); i += 4 {
		u := math.Float32bits(float32(r.NormFloat64())) &^ (1<<13 - 1)
		binary.LittleEndian.PutUint32(d.Bytes[i:], u)
	}
	return d
}

// reportLatency adds p50 and p90 of ds to the benchmark's output.
func reportLatency(b *testing.B, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(ds[len(ds)*9/10].Microseconds())/1000, "p90-ms")
}

func randomStarts(rows int64, n int) []int64 {
	r := rand.New(rand.NewPCG(7, 7))
	out := make([]int64, n)
	for i := range out {
		out[i] = r.Int64N(rows - benchReadRows + 1)
	}
	return out
}

// BenchmarkRandomRows: one op is one read of 1000 random consecutive
// rows; "nocache" is without the chunk cache (the page cache is warm
// after the first pass), "cached" has every chunk in a warm chunk cache,
// and "cached-into" also reuses the output buffer (ReadRegionInto).
func BenchmarkRandomRows(b *testing.B) {
	ctx := context.Background()
	for _, variant := range benchVariants {
		for _, mode := range []string{"nocache", "cached", "cached-into"} {
			b.Run(variant+"/"+mode, func(b *testing.B) {
				path := benchArray(b, variant)
				var opts Options
				cached := mode != "nocache"
				if cached {
					c, err := OpenCache(b.TempDir(), CacheOptions{})
					if err != nil {
						b.Fatal(err)
					}
					defer c.Close()
					opts.Cache = c
				}
				a, err := Open(ctx, path, opts)
				if err != nil {
					b.Fatal(err)
				}
				rows := a.Shape()[0]
				if cached {
					if _, err := a.ReadRows(ctx, 0, rows); err != nil { // warm the cache
						b.Fatal(err)
					}
				}
				starts := randomStarts(rows, 1000)
				b.SetBytes(benchReadRows * benchCols * 4)
				dst, _ := NewData(Float32, []int64{benchReadRows, benchCols})
				var lat []time.Duration
				i := 0
				for b.Loop() {
					s := starts[i%len(starts)]
					i++
					t0 := time.Now()
					var err error
					if mode == "cached-into" {
						err = a.ReadRegionInto(ctx, []int64{s, 0}, dst)
					} else {
						_, err = a.ReadRows(ctx, s, s+benchReadRows)
					}
					if err != nil {
						b.Fatal(err)
					}
					lat = append(lat, time.Since(t0))
				}
				reportLatency(b, lat)
			})
		}
	}
}

// reportCPU reports the process's CPU time (user + system, all threads)
// per op from now to the end of b's loop, as "cpu-ms/op": on a machine
// shared with other work it measures cost where wall time measures load.
// It returns the function to call after the loop.
func reportCPU(b *testing.B) func() {
	start := processCPU()
	return func() {
		b.ReportMetric(float64((processCPU()-start).Microseconds())/1000/float64(b.N), "cpu-ms/op")
	}
}

// BenchmarkScan: one op reads the whole array, decoding on all cores;
// "alloc" returns a new buffer each time (like z[:]), "into" reuses one.
func BenchmarkScan(b *testing.B) {
	ctx := context.Background()
	for _, variant := range benchVariants {
		for _, mode := range []string{"alloc", "into"} {
			b.Run(variant+"/"+mode, func(b *testing.B) {
				a, err := Open(ctx, benchArray(b, variant), Options{})
				if err != nil {
					b.Fatal(err)
				}
				shape := a.Shape()
				b.SetBytes(prod(shape) * 4)
				dst, _ := NewData(Float32, shape)
				scan := func() {
					if mode == "alloc" {
						if _, err := a.ReadRows(ctx, 0, shape[0]); err != nil {
							b.Fatal(err)
						}
					} else if err := a.ReadRegionInto(ctx, []int64{0, 0}, dst); err != nil {
						b.Fatal(err)
					}
				}
				scan() // see limitZstdParallel: "into" measures a buffer already in use
				done := reportCPU(b)
				for b.Loop() {
					scan()
				}
				done()
				b.ReportMetric(float64(runtime.GOMAXPROCS(0)), "cores")
			})
		}
	}
}

// BenchmarkAppend: one op appends 10 000 rows to a 200 000-row array
// whose last chunk is partial (the first op rewrites it; later ops
// continue from wherever the previous one ended).
func BenchmarkAppend(b *testing.B) {
	ctx := context.Background()
	for _, variant := range benchVariants {
		b.Run(variant, func(b *testing.B) {
			const rows = 200000
			path := filepath.Join(b.TempDir(), "append.zarr")
			a := mustCreate(b, path, benchSpec(variant, rows), Options{})
			last := int64(rows / benchChunkRows * benchChunkRows)
			if err := a.WriteRegion(ctx, []int64{last, 0}, benchData(b, 1, rows-last)); err != nil {
				b.Fatal(err)
			}
			add := benchData(b, 2, benchAppend)
			b.SetBytes(benchAppend * benchCols * 4)
			var lat []time.Duration
			for b.Loop() {
				t0 := time.Now()
				if err := a.Append(ctx, add); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			reportLatency(b, lat)
		})
	}
}

// chunkFiles reads every chunk file of the array at path into memory.
func chunkFiles(b *testing.B, path string) [][]byte {
	b.Helper()
	a, err := Open(context.Background(), path, Options{})
	if err != nil {
		b.Fatal(err)
	}
	var out [][]byte
	for i := range gridShape(a.Shape(), a.ChunkShape())[0] {
		buf, err := os.ReadFile(filepath.Join(path, strconv.FormatInt(i, 10)+".0"))
		if err != nil {
			b.Fatal(err)
		}
		out = append(out, buf)
	}
	return out
}

// BenchmarkLimitZstd is the decode limit: klauspost zstd decoding every
// chunk of the array on one core (no shuffle, no copies).
func BenchmarkLimitZstd(b *testing.B) {
	for _, variant := range benchVariants {
		b.Run(variant, func(b *testing.B) {
			files := chunkFiles(b, benchArray(b, variant))
			dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(false))
			if err != nil {
				b.Fatal(err)
			}
			defer dec.Close()
			out := make([]byte, 0, benchChunkRows*benchCols*4)
			var n int64
			for _, f := range files {
				d, err := dec.DecodeAll(f, out[:0])
				if err != nil {
					b.Fatal(err)
				}
				n += int64(len(d))
			}
			b.SetBytes(n)
			for b.Loop() {
				for _, f := range files {
					if _, err := dec.DecodeAll(f, out[:0]); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// BenchmarkLimitZstdParallel is the decode limit of a parallel scan:
// klauspost zstd decoding every chunk of the array (already in memory)
// on as many goroutines as BenchmarkScan uses (GOMAXPROCS), each with its
// own decoder and output buffer. BenchmarkScan does this plus reading
// the files, checking and placing the chunks (and, for "shuffle", the
// unshuffle); bench-zarr.sh prints the two side by side.
//
// Each chunk is decoded into its place in one buffer for the whole
// array, as a scan must: "into" reuses that buffer (the limit of
// BenchmarkScan's "into"), "alloc" allocates a new one each op (the
// limit of "alloc", which returns a new array as z[:] does). "hot"
// decodes every chunk into one 4 MiB buffer per goroutine that stays in
// the CPU cache: the plain decode, which a scan must also write out to
// the whole array (on bench-zarr.sh's arrays it costs about the same CPU
// as "into"). "files" is "into" that also reads each chunk file, into a
// reused buffer per goroutine, as a scan must: the limit of a scan from
// the page cache.
func BenchmarkLimitZstdParallel(b *testing.B) {
	for _, variant := range benchVariants {
		for _, mode := range []string{"alloc", "into", "hot", "files"} {
			b.Run(variant+"/"+mode, func(b *testing.B) { limitZstdParallel(b, variant, mode) })
		}
	}
}

func limitZstdParallel(b *testing.B, variant, mode string) {
	path := benchArray(b, variant)
	files := chunkFiles(b, path)
	workers := runtime.GOMAXPROCS(0)
	srcs := make([][]byte, workers)
	for i := range srcs {
		srcs[i] = make([]byte, 0, benchChunkRows*benchCols*4+1<<20)
	}
	decs := make([]*zstd.Decoder, workers)
	outs := make([][]byte, workers)
	for i := range decs {
		d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(false))
		if err != nil {
			b.Fatal(err)
		}
		defer d.Close()
		decs[i], outs[i] = d, make([]byte, 0, benchChunkRows*benchCols*4)
	}
	var n int64
	for _, f := range files {
		d, err := decs[0].DecodeAll(f, outs[0][:0])
		if err != nil {
			b.Fatal(err)
		}
		n += int64(len(d))
	}
	b.SetBytes(n)
	const chunk = benchChunkRows * benchCols * 4
	whole := make([]byte, n)
	decode := func() {
		if mode == "alloc" {
			whole = make([]byte, n)
		}
		var next atomic.Int64
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := next.Add(1) - 1; i < int64(len(files)); i = next.Add(1) - 1 {
					out := outs[w][:0]
					if mode != "hot" {
						out = whole[i*chunk : i*chunk : min(n, (i+1)*chunk)]
					}
					src := files[i]
					if mode == "files" {
						var err error
						if src, err = readInto(filepath.Join(path, strconv.FormatInt(i, 10)+".0"), srcs[w]); err != nil {
							b.Error(err)
							return
						}
					}
					if _, err := decs[w].DecodeAll(src, out); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	// One op before the clock starts, here and in BenchmarkScan:
	// "into" is a loop that reuses a buffer, and the first op that
	// writes a fresh 200 MB buffer pays its page faults, which on
	// this VM cost more than the decode (the first op of a scan 1.4 s
	// of CPU, the next ones 0.37-0.40 s). Counted in one op of three,
	// that alone made the scan read as 2.2x the limit, whose buffer
	// happened to be memory the earlier benchmarks had faulted in.
	// "alloc" pays the faults in every op, on both sides.
	decode()
	done := reportCPU(b)
	for b.Loop() {
		decode()
	}
	done()
	b.ReportMetric(float64(workers), "cores")
}

// readInto reads the file at path into buf's memory (growing it if
// needed) and returns the bytes.
func readInto(path string, buf []byte) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if int64(cap(buf)) < fi.Size() {
		buf = make([]byte, fi.Size())
	}
	buf = buf[:fi.Size()]
	_, err = io.ReadFull(f, buf)
	return buf, err
}

// BenchmarkLimitReadFiles is the storage limit: a plain read of every
// chunk file (page cache warm after the first op).
func BenchmarkLimitReadFiles(b *testing.B) {
	for _, variant := range benchVariants {
		b.Run(variant, func(b *testing.B) {
			path := benchArray(b, variant)
			files := chunkFiles(b, path)
			var n int64
			for _, f := range files {
				n += int64(len(f))
			}
			b.SetBytes(n)
			for b.Loop() {
				for i := range files {
					if _, err := os.ReadFile(filepath.Join(path, strconv.Itoa(i)+".0")); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// BenchmarkLimitCachedBytes is the floor for a warm cache read: the same
// random 1000-row reads as BenchmarkRandomRows/cached, done as plain
// preads of the rows' bytes from the cache's entry files.
func BenchmarkLimitCachedBytes(b *testing.B) {
	ctx := context.Background()
	for _, variant := range benchVariants {
		b.Run(variant, func(b *testing.B) {
			c, err := OpenCache(b.TempDir(), CacheOptions{})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			a, err := Open(ctx, benchArray(b, variant), Options{Cache: c})
			if err != nil {
				b.Fatal(err)
			}
			rows := a.Shape()[0]
			if _, err := a.ReadRows(ctx, 0, rows); err != nil {
				b.Fatal(err)
			}
			st := a.state.Load()
			entry := func(chunk int64) string {
				key := st.m.keys.key([]int64{chunk, 0})
				fi, err := os.Stat(a.objPath(key))
				if err != nil {
					b.Fatal(err)
				}
				return c.entryPath(chunkCacheKey(a.path, st.sig, key, -1, fileIdentity(fi)))
			}
			paths := map[int64]string{}
			for k := range gridShape(a.Shape(), a.ChunkShape())[0] {
				paths[k] = entry(k)
			}
			starts := randomStarts(rows, 1000)
			out := make([]byte, benchReadRows*benchCols*4)
			b.SetBytes(int64(len(out)))
			i := 0
			for b.Loop() {
				s := starts[i%len(starts)]
				i++
				for _, sp := range spans(s, s+benchReadRows, benchChunkRows) {
					f, err := os.Open(paths[sp.Chunk])
					if err != nil {
						b.Fatal(err)
					}
					const row = benchCols * 4
					if _, err := f.ReadAt(out[sp.Off*row:(sp.Off+sp.Hi-sp.Lo)*row], cacheHeaderLen+sp.Lo*row); err != nil {
						b.Fatal(err)
					}
					f.Close()
				}
			}
		})
	}
}
