package zarr

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/soma-hpc/soma/fsstore"
	"golang.org/x/sync/errgroup"
)

// Options configures Open and Create.
type Options struct {
	// Cache, if not nil, serves repeated chunk reads from node-local disk
	// and stores every chunk this Array decodes.
	Cache *Cache
	// Parallelism bounds how many chunks one call reads, decodes or
	// writes at once; 0 means GOMAXPROCS.
	Parallelism int
}

// Spec describes an array for Create.
type Spec struct {
	Format     Format  // V3 (the default when 0) or V2
	Shape      []int64 // may be 0 along the first dimension, to Append to
	ChunkShape []int64 // the regular grid; with sharding, the shard shape
	DataType   DataType
	// FillValue is what unwritten chunks read as: nil (zero), a bool, an
	// integer, a float, or "NaN", "Infinity", "-Infinity" for floats.
	FillValue any
	// Codecs in encoding order (array-to-array, one array-to-bytes,
	// bytes-to-bytes); empty means DefaultCodecs. A V2 array can use
	// bytes (either endian), a full transpose (order F), shuffle, zstd,
	// gzip and zlib.
	Codecs []Codec
	// DimensionNames, if set, has one name per dimension ("" for none).
	// V2 arrays keep them in .zattrs as xarray does (_ARRAY_DIMENSIONS).
	DimensionNames []string
	// Attributes is any JSON object; V2 arrays keep it in .zattrs.
	Attributes map[string]any
	// ChunkKeySeparator is "/" or "."; empty means "/" for V3 ("c/1/0")
	// and "." for V2 ("1.0").
	ChunkKeySeparator string
}

// Stats counts what one Array value did since Open or Create.
type Stats struct {
	ChunkReads    int64 // chunks whose encoded bytes were read from the folder (inner chunks count one each)
	MissingChunks int64 // chunks read as the fill value because no file exists
	BytesRead     int64 // encoded bytes read from chunk files
	Decoded       int64 // chunks (inner chunks, for shards) decoded
	CacheHits     int64 // chunks served from the Cache
	CacheMisses   int64 // chunks looked up in the Cache and not found
	ChunksWritten int64 // chunk or shard files written
	CacheErrors   int64 // cache reads or writes that failed (the read went on without the cache)
}

// Array is an open Zarr array in a folder. Reads may run concurrently
// with each other and with one writer; writes (WriteRegion, Append) are
// serialized within the Array. An Array keeps up to GOMAXPROCS+2
// chunk-sized scratch buffers for decoding. Between processes, several readers and
// one writer per array are safe: every file is replaced atomically, and
// Append writes chunks before the metadata that makes them visible.
// Concurrent writers of one array in different processes are not
// coordinated (the last write of a chunk wins).
type Array struct {
	path  string
	opts  Options
	state atomic.Pointer[arrayState]
	wmu   sync.Mutex

	chunkReads, missing, bytesRead, decoded, hits, misses, written, cacheErrs atomic.Int64
}

// arrayState is an immutable snapshot of the metadata and what is derived
// from it; Append swaps in a new one.
type arrayState struct {
	m     *meta
	full  *chain // decodes one stored chunk (a whole shard if sharded)
	plan  readPlan
	sig   [32]byte // decode signature, part of cache keys
	mpath string   // metadata file
}

// readPlan is the grid reads work in: stored chunks, or for sharded
// arrays the inner chunks, fetched by range from their shard.
type readPlan struct {
	chunk []int64
	chain *chain
	shard *shardingCodec
}

func newState(m *meta, dir string) (*arrayState, error) {
	full, err := buildChain(m.codecs, chunkRep{shape: m.chunks, dtype: m.dtype}, m.fill.b)
	if err != nil {
		return nil, err
	}
	st := &arrayState{m: m, full: full, plan: readPlan{chunk: m.chunks, chain: full}}
	if sc, ok := full.ab.(*shardingCodec); ok && len(full.aa) == 0 && len(full.bb) == 0 {
		st.plan = readPlan{chunk: sc.cfg.ChunkShape, chain: sc.inner, shard: sc}
	}
	h := sha256.New()
	codecs, _ := json.Marshal(m.codecs)
	fmt.Fprintf(h, "%v\x00%v\x00%s\x00%x", m.dtype, m.chunks, codecs, m.fill.b)
	h.Sum(st.sig[:0])
	if m.format == V2 {
		st.mpath = filepath.Join(dir, v2MetaName)
	} else {
		st.mpath = filepath.Join(dir, v3MetaName)
	}
	return st, nil
}

// withShape returns a copy of s with another shape (Append's next state).
func (s *arrayState) withShape(shape []int64) *arrayState {
	c := *s
	c.m = s.m.withShape(shape)
	return &c
}

// Open opens the array in the folder path: v3 if it holds zarr.json, v2
// if it holds .zarray. It reads only the metadata.
func Open(ctx context.Context, path string, opts Options) (*Array, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("zarr: open %s: %w", path, err)
	}
	a := &Array{path: abs, opts: opts}
	st, err := a.load()
	if err != nil {
		return nil, err
	}
	a.state.Store(st)
	return a, nil
}

// load reads and parses the metadata.
func (a *Array) load() (*arrayState, error) {
	v3b, err3 := os.ReadFile(filepath.Join(a.path, v3MetaName))
	v2b, err2 := os.ReadFile(filepath.Join(a.path, v2MetaName))
	var m *meta
	var mpath string
	switch {
	case err3 == nil && err2 == nil:
		return nil, fmt.Errorf("zarr: open %s: %w: both zarr.json and .zarray are present (remove the stale one)", a.path, ErrBadMetadata)
	case err3 == nil:
		mpath = filepath.Join(a.path, v3MetaName)
		if m, err3 = parseV3(v3b); err3 != nil {
			return nil, &MetadataError{Path: mpath, Err: err3}
		}
	case err2 == nil:
		mpath = filepath.Join(a.path, v2MetaName)
		attrs, aerr := os.ReadFile(filepath.Join(a.path, v2AttrName))
		if aerr != nil && !errors.Is(aerr, fs.ErrNotExist) {
			return nil, fmt.Errorf("zarr: open %s: %w", a.path, aerr)
		}
		if m, err2 = parseV2(v2b, attrs); err2 != nil {
			return nil, &MetadataError{Path: mpath, Err: err2}
		}
		m.dimNames = v2DimNames(m.attrs, len(m.shape))
	case noMeta(err3) && noMeta(err2):
		return nil, notArray(a.path)
	case !errors.Is(err3, fs.ErrNotExist):
		return nil, fmt.Errorf("zarr: open %s: %w", a.path, err3)
	default:
		return nil, fmt.Errorf("zarr: open %s: %w", a.path, err2)
	}
	st, err := newState(m, a.path)
	if err != nil {
		return nil, &MetadataError{Path: mpath, Err: err}
	}
	return st, nil
}

// v2DimNames reads xarray's _ARRAY_DIMENSIONS attribute, if well-formed.
func v2DimNames(attrs json.RawMessage, ndim int) []*string {
	if attrs == nil {
		return nil
	}
	var obj struct {
		Dims []*string `json:"_ARRAY_DIMENSIONS"`
	}
	if json.Unmarshal(attrs, &obj) != nil || len(obj.Dims) != ndim {
		return nil
	}
	return obj.Dims
}

// Refresh re-reads the metadata, to see rows another process appended.
func (a *Array) Refresh(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	st, err := a.load()
	if err != nil {
		return err
	}
	a.state.Store(st)
	return nil
}

// Create makes a new array in the folder path, which must not exist or be
// empty, and writes its metadata (last, with link(2), so that a
// concurrent Create of the same path fails with ErrExist). No chunk is
// written: the array reads as the fill value until written.
func Create(ctx context.Context, path string, spec Spec, opts Options) (*Array, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("zarr: create %s: %w", path, err)
	}
	m, err := spec.meta()
	if err != nil {
		return nil, fmt.Errorf("zarr: create %s: %w", abs, err)
	}
	st, err := newState(m, abs)
	if err != nil {
		return nil, fmt.Errorf("zarr: create %s: %w", abs, err)
	}
	for _, bc := range st.full.bb {
		if _, ok := bc.(*bloscCodec); ok {
			return nil, fmt.Errorf("zarr: create %s: blosc: %w (soma reads blosc but does not write it; use zstd with numcodecs.shuffle)", abs, ErrUnsupported)
		}
	}
	var doc []byte
	if m.format == V2 {
		doc, err = m.marshalV2()
	} else {
		doc, err = m.marshalV3()
	}
	if err != nil {
		return nil, fmt.Errorf("zarr: create %s: %w", abs, err)
	}
	if err := os.MkdirAll(abs, 0o777); err != nil {
		return nil, fmt.Errorf("zarr: create %s: %w", abs, err)
	}
	ents, err := os.ReadDir(abs)
	if err != nil {
		return nil, fmt.Errorf("zarr: create %s: %w", abs, err)
	}
	if len(ents) > 0 {
		return nil, fmt.Errorf("zarr: create %s: %w: the folder is not empty (choose a new path, or remove it first)", abs, ErrExist)
	}
	if m.format == V2 && m.attrs != nil {
		if err := fsstore.WriteFileAtomic(filepath.Join(abs, v2AttrName), bytes.NewReader(m.attrs)); err != nil {
			return nil, fmt.Errorf("zarr: create %s: %w", abs, err)
		}
	}
	if err := createExclusive(st.mpath, doc); err != nil {
		return nil, fmt.Errorf("zarr: create %s: %w", abs, err)
	}
	a := &Array{path: abs, opts: opts}
	a.state.Store(st)
	return a, nil
}

// createExclusive writes b to path only if path does not exist
// (fsstore.CreateExclusive: link(2) from a temp file, a lost reply settled
// by the link count); an existing path is ErrExist.
func createExclusive(path string, b []byte) error {
	err := fsstore.CreateExclusive(path, bytes.NewReader(b))
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s: %w", path, ErrExist)
	}
	return err
}

// meta validates the spec and builds metadata.
func (s Spec) meta() (*meta, error) {
	f := s.Format
	if f == 0 {
		f = V3
	}
	if f != V2 && f != V3 {
		return nil, fmt.Errorf("format %d is not 2 or 3", int(f))
	}
	if !s.DataType.valid() {
		return nil, fmt.Errorf("data type %v is not set or invalid (use e.g. zarr.Float32)", s.DataType)
	}
	m := &meta{format: f, dtype: s.DataType, shape: append([]int64{}, s.Shape...), chunks: append([]int64{}, s.ChunkShape...)}
	var err error
	if m.fill, err = fillFromGo(s.DataType, s.FillValue); err != nil {
		return nil, err
	}
	m.codecs = s.Codecs
	if len(m.codecs) == 0 {
		m.codecs = DefaultCodecs()
	}
	sep := s.ChunkKeySeparator
	if f == V3 {
		if sep == "" {
			sep = "/"
		}
		m.keys = keyEncoding{sep: sep}
	} else {
		if sep == "" {
			sep = "."
		}
		m.keys = keyEncoding{v2Style: true, sep: sep}
	}
	if sep != "/" && sep != "." {
		return nil, fmt.Errorf("chunk key separator %q is not \"/\" or \".\"", sep)
	}
	attrs := map[string]any{}
	for k, v := range s.Attributes {
		attrs[k] = v
	}
	if s.DimensionNames != nil {
		if len(s.DimensionNames) != len(s.Shape) {
			return nil, fmt.Errorf("%d dimension names for %d dimensions", len(s.DimensionNames), len(s.Shape))
		}
		m.dimNames = make([]*string, len(s.DimensionNames))
		for i, n := range s.DimensionNames {
			if n != "" {
				m.dimNames[i] = &n
			}
		}
		if f == V2 {
			attrs["_ARRAY_DIMENSIONS"] = m.dimNames
		}
	}
	if len(attrs) > 0 || s.Attributes != nil {
		if m.attrs, err = json.Marshal(attrs); err != nil {
			return nil, fmt.Errorf("attributes: %w", err)
		}
	}
	if err := m.validate(); err != nil {
		return nil, err
	}
	return m, nil
}

// Path returns the array's folder (absolute).
func (a *Array) Path() string { return a.path }

// Shape returns the array's shape as of the last Open, Create, Refresh or
// Append of this Array.
func (a *Array) Shape() []int64 { return slices.Clone(a.state.Load().m.shape) }

// ChunkShape returns the chunk (shard) shape of the regular grid.
func (a *Array) ChunkShape() []int64 { return slices.Clone(a.state.Load().m.chunks) }

// DataType returns the element type.
func (a *Array) DataType() DataType { return a.state.Load().m.dtype }

// Format returns V2 or V3.
func (a *Array) Format() Format { return a.state.Load().m.format }

// FillValue returns the fill value as a Go value of the data type's Go
// type (float32 for Float32, ...).
func (a *Array) FillValue() any {
	m := a.state.Load().m
	return goValue(m.dtype, m.fill.b)
}

// Stats returns the Array's counters.
func (a *Array) Stats() Stats {
	return Stats{ChunkReads: a.chunkReads.Load(), MissingChunks: a.missing.Load(), BytesRead: a.bytesRead.Load(),
		Decoded: a.decoded.Load(), CacheHits: a.hits.Load(), CacheMisses: a.misses.Load(), ChunksWritten: a.written.Load(),
		CacheErrors: a.cacheErrs.Load()}
}

func (a *Array) parallelism() int {
	if a.opts.Parallelism > 0 {
		return a.opts.Parallelism
	}
	return runtime.GOMAXPROCS(0)
}

func (a *Array) objPath(key string) string { return filepath.Join(a.path, filepath.FromSlash(key)) }

// ReadRows reads rows [start, stop) of the first dimension, all of every
// other dimension, into a new Data. It reads only the chunks that cover
// the range, decoding up to Parallelism of them at once. Missing chunks
// read as the fill value; a chunk that does not decode is an error naming
// it. A loop that reads many ranges should use ReadRegionInto with one
// Data: a fresh output buffer per call costs more than a cached read.
func (a *Array) ReadRows(ctx context.Context, start, stop int64) (*Data, error) {
	st := a.state.Load()
	if len(st.m.shape) == 0 {
		return nil, fmt.Errorf("zarr: array %s is 0-dimensional: use ReadRegion", a.path)
	}
	lo := make([]int64, len(st.m.shape))
	hi := slices.Clone(st.m.shape)
	lo[0], hi[0] = start, stop
	if start < 0 || start > stop || stop > st.m.shape[0] {
		return nil, fmt.Errorf("zarr: array %s: %w: rows [%d, %d) with %d rows (call Refresh to see rows appended by another process)", a.path, ErrOutOfRange, start, stop, st.m.shape[0])
	}
	return a.readRegion(ctx, st, lo, hi)
}

// ReadRegion reads the box [start, stop) (per dimension) into a new Data.
func (a *Array) ReadRegion(ctx context.Context, start, stop []int64) (*Data, error) {
	return a.readRegion(ctx, a.state.Load(), start, stop)
}

func (a *Array) readRegion(ctx context.Context, st *arrayState, start, stop []int64) (*Data, error) {
	if err := checkRegion(st.m.shape, start, stop); err != nil {
		return nil, fmt.Errorf("zarr: array %s: %w", a.path, err)
	}
	shape := make([]int64, len(start))
	for i := range shape {
		shape[i] = stop[i] - start[i]
	}
	d := &Data{Type: st.m.dtype, Shape: shape, Bytes: make([]byte, prod(shape)*int64(st.m.dtype.Size()))}
	if err := a.readInto(ctx, st, d, start, true); err != nil {
		return nil, err
	}
	return d, nil
}

// ReadRegionInto reads the box that starts at start and has dst's shape
// into dst, whose type must be the array's. It lets a loop reuse one
// buffer.
func (a *Array) ReadRegionInto(ctx context.Context, start []int64, dst *Data) error {
	st := a.state.Load()
	if err := dst.check(); err != nil {
		return fmt.Errorf("zarr: array %s: read into: %w", a.path, err)
	}
	if dst.Type != st.m.dtype {
		return fmt.Errorf("zarr: array %s: read into %v data, the array holds %v", a.path, dst.Type, st.m.dtype)
	}
	if len(start) != len(dst.Shape) {
		return fmt.Errorf("zarr: array %s: %w: start %v and data shape %v differ in rank", a.path, ErrOutOfRange, start, dst.Shape)
	}
	stop := make([]int64, len(start))
	for i := range start {
		if addOverflows(max(start[i], 0), dst.Shape[i]) {
			return fmt.Errorf("zarr: array %s: %w: start %v + shape %v overflows", a.path, ErrOutOfRange, start, dst.Shape)
		}
		stop[i] = start[i] + dst.Shape[i]
	}
	if err := checkRegion(st.m.shape, start, stop); err != nil {
		return fmt.Errorf("zarr: array %s: %w", a.path, err)
	}
	return a.readInto(ctx, st, dst, start, false)
}

// part is the piece of one read chunk that a region needs.
type part struct {
	coord  []int64 // chunk coordinates in the read grid
	srcOff []int64 // box origin inside the chunk
	dstOff []int64 // box origin inside the output
	count  []int64 // box extent
}

// parts lists the chunk pieces covering [start, start+shape) of a grid.
func parts(start, shape, chunk []int64) []part {
	n := len(start)
	per := make([][]span, n)
	total := 1
	for i := range n {
		per[i] = spans(start[i], start[i]+shape[i], chunk[i])
		total *= len(per[i])
	}
	if total == 0 {
		return nil
	}
	out := make([]part, 0, total)
	idx := make([]int, n)
	for {
		p := part{coord: make([]int64, n), srcOff: make([]int64, n), dstOff: make([]int64, n), count: make([]int64, n)}
		for i := range n {
			s := per[i][idx[i]]
			p.coord[i], p.srcOff[i], p.dstOff[i], p.count[i] = s.Chunk, s.Lo, s.Off, s.Hi-s.Lo
		}
		out = append(out, p)
		i := n - 1
		for ; i >= 0; i-- {
			idx[i]++
			if idx[i] < len(per[i]) {
				break
			}
			idx[i] = 0
		}
		if i < 0 {
			return out
		}
	}
}

// readOp is one read call: the output and a memo of shard indexes.
type readOp struct {
	a     *Array
	st    *arrayState
	out   *Data
	fresh bool // out.Bytes is zeroed

	mu     sync.Mutex
	shards map[string][]uint64 // key + identity -> parsed index
}

func (a *Array) readInto(ctx context.Context, st *arrayState, out *Data, start []int64, fresh bool) error {
	ps := parts(start, out.Shape, st.plan.chunk)
	if len(start) == 0 {
		ps = []part{{}}
	}
	op := &readOp{a: a, st: st, out: out, fresh: fresh}
	if len(ps) == 1 {
		return op.read(ctx, ps[0])
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(a.parallelism())
	for _, p := range ps {
		if gctx.Err() != nil {
			break
		}
		g.Go(func() error { return op.read(gctx, p) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return ctx.Err()
}

// chunkErr wraps err for the chunk key (and inner chunk k >= 0).
func (a *Array) chunkErr(op, key string, inner int64, err error) error {
	if inner >= 0 {
		key = fmt.Sprintf("%s[%d]", key, inner)
	}
	return &ChunkError{Array: a.path, Key: key, Op: op, Err: err}
}

// read fills one part of the output.
func (op *readOp) read(ctx context.Context, p part) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	a, st, out := op.a, op.st, op.out
	es := int64(st.m.dtype.Size())
	plan := st.plan
	chunkBytes := plan.chain.rep.nbytes()

	// Where the chunk lives: its own file, or inner chunk k of a shard.
	inner := int64(-1)
	fileCoord := p.coord
	if plan.shard != nil {
		fileCoord = make([]int64, len(p.coord))
		inner = 0
		for i, c := range p.coord {
			fileCoord[i] = c / plan.shard.perShard[i]
			inner = inner*plan.shard.perShard[i] + c%plan.shard.perShard[i]
		}
	}
	key := st.m.keys.key(fileCoord)
	f, err := os.Open(a.objPath(key))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			a.missing.Add(1)
			op.fill(p)
			return nil
		}
		return a.chunkErr("read", key, -1, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return a.chunkErr("read", key, -1, err)
	}
	if !fi.Mode().IsRegular() {
		return a.chunkErr("read", key, -1, corruptf("%s is not a regular file", a.objPath(key)))
	}

	srcContig, srcStart := contiguous(plan.chunk, p.srcOff, p.count)
	dstContig, dstStart := contiguous(out.Shape, p.dstOff, p.count)
	n := prod(p.count) * es
	whole := slices.Equal(p.count, plan.chunk)

	var ck CacheKey
	cache := a.opts.Cache
	if cache != nil {
		ck = chunkCacheKey(a.path, st.sig, key, inner, fileIdentity(fi))
		var hit bool
		if srcContig && dstContig {
			hit, err = cache.Get(ctx, ck, srcStart*es, out.Bytes[dstStart*es:dstStart*es+n])
		} else {
			buf := plan.chain.getBuf(chunkBytes)
			if hit, err = cache.Get(ctx, ck, 0, buf); hit {
				copyBox(out.Bytes, out.Shape, p.dstOff, buf, plan.chunk, p.srcOff, p.count, int(es))
			}
			plan.chain.putBuf(buf)
		}
		if err := a.cacheFailed(ctx, err); err != nil {
			return err
		}
		if hit {
			a.hits.Add(1)
			return nil
		}
		a.misses.Add(1)
	}

	enc, release, err := op.encoded(f, fi.Size(), key, inner)
	if err != nil {
		return err
	}
	defer release()
	if enc == nil { // empty inner chunk of a shard
		op.fill(p)
		return nil
	}

	var dec []byte
	if whole && dstContig {
		dec = out.Bytes[dstStart*es : dstStart*es+chunkBytes : dstStart*es+chunkBytes]
	} else {
		dec = plan.chain.getBuf(chunkBytes)
		defer plan.chain.putBuf(dec)
	}
	// Without a cache to fill, a part that ends early in the chunk needs
	// only a prefix of it (rows [a, b) need the first b rows). Streaming
	// zstd is about 1.3x slower per byte than DecodeAll, so it pays below
	// three quarters of the chunk.
	if need := lastElement(plan.chunk, p.srcOff, p.count) + 1; cache == nil && !whole && need*es*4 <= chunkBytes*3 && plan.chain.prefixable() {
		if err := plan.chain.decodePrefix(dec[:need*es], enc); err != nil {
			return a.chunkErr("decode", key, inner, err)
		}
		a.decoded.Add(1)
		copyBox(out.Bytes, out.Shape, p.dstOff, dec[:need*es], plan.chunk, p.srcOff, p.count, int(es))
		return nil
	}
	if err := plan.chain.decode(dec, enc); err != nil {
		return a.chunkErr("decode", key, inner, err)
	}
	a.decoded.Add(1)
	if !(whole && dstContig) {
		copyBox(out.Bytes, out.Shape, p.dstOff, dec, plan.chunk, p.srcOff, p.count, int(es))
	}
	if cache != nil {
		if err := a.cacheFailed(ctx, cache.Put(ctx, ck, dec)); err != nil {
			return err
		}
	}
	return nil
}

// cacheFailed records a cache error and lets the read go on from the
// array's files: the cache only saves work, so a full or broken local
// disk slows reads down but does not fail them (Stats.CacheErrors counts
// it). A canceled context is returned.
func (a *Array) cacheFailed(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	a.cacheErrs.Add(1)
	return nil
}

// fill writes the fill value into the part (nothing to do for a zero fill
// into fresh memory).
func (op *readOp) fill(p part) {
	m := op.st.m
	if op.fresh && m.fill.isZero() {
		return
	}
	fillBox(op.out.Bytes, op.out.Shape, p.dstOff, p.count, m.fill.b)
}

// encoded returns the stored bytes of the chunk in f: the whole file, or
// for inner chunk k >= 0 of a shard its byte range (nil if empty).
func (op *readOp) encoded(f *os.File, size int64, key string, inner int64) ([]byte, func(), error) {
	a, st := op.a, op.st
	nop := func() {}
	if inner < 0 {
		if size > st.plan.chain.encodedBound() {
			return nil, nop, a.chunkErr("read", key, -1, corruptf("file of %d bytes is larger than any encoding of this chunk (%d)", size, st.plan.chain.encodedBound()))
		}
		buf := st.plan.chain.getBuf(size)
		if _, err := io.ReadFull(f, buf); err != nil {
			st.plan.chain.putBuf(buf)
			return nil, nop, a.chunkErr("read", key, -1, fmt.Errorf("%w: %v (the file changed or is truncated)", ErrCorrupt, err))
		}
		a.chunkReads.Add(1)
		a.bytesRead.Add(size)
		return buf, func() { st.plan.chain.putBuf(buf) }, nil
	}
	idx, err := op.shardIndex(f, size, key)
	if err != nil {
		return nil, nop, err
	}
	off, nb := idx[2*inner], idx[2*inner+1]
	if off == emptyEntry && nb == emptyEntry {
		return nil, nop, nil
	}
	if int64(nb) > st.plan.chain.encodedBound() {
		return nil, nop, a.chunkErr("read", key, inner, corruptf("inner chunk of %d bytes is larger than any encoding of it", nb))
	}
	buf := make([]byte, nb)
	if _, err := f.ReadAt(buf, int64(off)); err != nil {
		return nil, nop, a.chunkErr("read", key, inner, fmt.Errorf("%w: %v", ErrCorrupt, err))
	}
	a.chunkReads.Add(1)
	a.bytesRead.Add(int64(nb))
	return buf, nop, nil
}

// shardIndex reads and parses the index of the shard open in f, once per
// read call and file version.
func (op *readOp) shardIndex(f *os.File, size int64, key string) ([]uint64, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, op.a.chunkErr("read", key, -1, err)
	}
	memo := key + "\x00" + fileIdentity(fi)
	op.mu.Lock()
	idx, ok := op.shards[memo]
	op.mu.Unlock()
	if ok {
		return idx, nil
	}
	sc := op.st.plan.shard
	if size < sc.indexSize {
		return nil, op.a.chunkErr("read", key, -1, corruptf("shard of %d bytes is shorter than its %d-byte index", size, sc.indexSize))
	}
	at := size - sc.indexSize
	if sc.atStart {
		at = 0
	}
	b := make([]byte, sc.indexSize)
	if _, err := f.ReadAt(b, at); err != nil {
		return nil, op.a.chunkErr("read", key, -1, fmt.Errorf("%w: shard index: %v", ErrCorrupt, err))
	}
	op.a.bytesRead.Add(sc.indexSize)
	if idx, err = sc.parseIndex(b, size); err != nil {
		return nil, op.a.chunkErr("read", key, -1, err)
	}
	op.mu.Lock()
	if op.shards == nil {
		op.shards = map[string][]uint64{}
	}
	op.shards[memo] = idx
	op.mu.Unlock()
	return idx, nil
}

// WriteRegion writes d into the box that starts at start and has d's
// shape, which must lie inside the array. Chunks the box covers whole are
// encoded from d; partly covered ones are read, modified and rewritten.
// Each chunk file is replaced atomically, so a concurrent reader sees the
// old or the new chunk, never a mix; a crash leaves some chunks new and
// some old.
func (a *Array) WriteRegion(ctx context.Context, start []int64, d *Data) error {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	st := a.state.Load()
	if err := a.checkWrite(st, d); err != nil {
		return err
	}
	if len(start) != len(d.Shape) {
		return fmt.Errorf("zarr: array %s: write: %w: start %v and data shape %v differ in rank", a.path, ErrOutOfRange, start, d.Shape)
	}
	stop := make([]int64, len(start))
	for i := range start {
		if addOverflows(max(start[i], 0), d.Shape[i]) {
			return fmt.Errorf("zarr: array %s: write: %w: start %v + shape %v overflows", a.path, ErrOutOfRange, start, d.Shape)
		}
		stop[i] = start[i] + d.Shape[i]
	}
	if err := checkRegion(st.m.shape, start, stop); err != nil {
		return fmt.Errorf("zarr: array %s: write: %w", a.path, err)
	}
	return a.writeRegion(ctx, st, start, d)
}

func (a *Array) checkWrite(st *arrayState, d *Data) error {
	if err := d.check(); err != nil {
		return fmt.Errorf("zarr: array %s: write: %w", a.path, err)
	}
	if d.Type != st.m.dtype {
		return fmt.Errorf("zarr: array %s: write %v data into a %v array (convert it first)", a.path, d.Type, st.m.dtype)
	}
	for _, bc := range st.full.bb {
		if _, ok := bc.(*bloscCodec); ok {
			return fmt.Errorf("zarr: array %s: write: blosc: %w (soma reads blosc arrays but does not write them; copy the data into a zstd array)", a.path, ErrUnsupported)
		}
	}
	return nil
}

// Append adds rows along the first dimension: rows.Shape[1:] must equal
// the array's. It rewrites only the last chunk row if it is partial and
// writes new chunks for the rest, then replaces the metadata with the new
// shape, atomically. A reader never sees a shape whose chunks are not yet
// written; after a crash the array keeps its old shape (rows written past
// it are invisible and overwritten by the next Append). Cache entries of
// the rewritten chunks become unreachable (their files change) and this
// Array removes them.
func (a *Array) Append(ctx context.Context, rows *Data) error {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	st := a.state.Load()
	if len(st.m.shape) == 0 {
		return fmt.Errorf("zarr: array %s is 0-dimensional: nothing to append to", a.path)
	}
	if err := a.checkWrite(st, rows); err != nil {
		return err
	}
	if len(rows.Shape) != len(st.m.shape) || !slices.Equal(rows.Shape[1:], st.m.shape[1:]) {
		return fmt.Errorf("zarr: array %s: append rows of shape %v to shape %v (every dimension but the first must match)", a.path, rows.Shape, st.m.shape)
	}
	if rows.Shape[0] == 0 {
		return nil
	}
	old := st.m.shape[0]
	if addOverflows(old, rows.Shape[0]) {
		return fmt.Errorf("zarr: array %s: append: %w: %d + %d rows overflows", a.path, ErrOutOfRange, old, rows.Shape[0])
	}
	shape := slices.Clone(st.m.shape)
	shape[0] += rows.Shape[0]
	if _, err := numElements(shape); err != nil {
		return fmt.Errorf("zarr: array %s: append: %w", a.path, err)
	}
	next := st.withShape(shape)
	start := make([]int64, len(shape))
	start[0] = old
	if err := a.writeRegion(ctx, next, start, rows); err != nil {
		return err
	}
	if err := a.writeMeta(next.m, next.mpath); err != nil {
		return err
	}
	a.state.Store(next)
	return nil
}

// writeMeta replaces the metadata document atomically.
func (a *Array) writeMeta(m *meta, path string) error {
	var doc []byte
	var err error
	if m.format == V2 {
		doc, err = m.marshalV2()
	} else {
		doc, err = m.marshalV3()
	}
	if err != nil {
		return fmt.Errorf("zarr: array %s: metadata: %w", a.path, err)
	}
	if err := fsstore.WriteFileAtomic(path, bytes.NewReader(doc)); err != nil {
		return fmt.Errorf("zarr: array %s: metadata: %w", a.path, err)
	}
	return nil
}

// writeRegion writes d at start into the stored chunks of st (whose shape
// may already include appended rows).
func (a *Array) writeRegion(ctx context.Context, st *arrayState, start []int64, d *Data) error {
	ps := parts(start, d.Shape, st.m.chunks)
	if len(start) == 0 {
		ps = []part{{}}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(a.parallelism())
	for _, p := range ps {
		if gctx.Err() != nil {
			break
		}
		g.Go(func() error { return a.writeChunk(gctx, st, p, d) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return ctx.Err()
}

// writeChunk encodes and stores one chunk: the part p of d (p.dstOff is
// the origin in d, p.srcOff in the chunk).
func (a *Array) writeChunk(ctx context.Context, st *arrayState, p part, d *Data) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m := st.m
	es := m.dtype.Size()
	key := m.keys.key(p.coord)
	path := a.objPath(key)
	buf := make([]byte, st.full.rep.nbytes())
	extent := make([]int64, len(m.chunks)) // the chunk's part inside the array
	covers, overhang := true, false
	for i, c := range m.chunks {
		extent[i] = min(c, m.shape[i]-p.coord[i]*c)
		if p.srcOff[i] != 0 || p.count[i] != extent[i] {
			covers = false
		}
		if extent[i] < c {
			overhang = true
		}
	}
	oldID := ""
	if !covers {
		enc, id, err := a.readWhole(path)
		if err != nil {
			return a.chunkErr("read-modify-write", key, -1, err)
		}
		oldID = id
		if enc == nil {
			fillPattern(buf, m.fill.b)
		} else if err := st.full.decode(buf, enc); err != nil {
			return a.chunkErr("read-modify-write", key, -1, fmt.Errorf("%w (the old chunk cannot be decoded; write the whole chunk, or delete its file, to replace it)", err))
		}
	} else if overhang {
		fillPattern(buf, m.fill.b)
	}
	if a.opts.Cache != nil && oldID == "" {
		if fi, err := os.Stat(path); err == nil {
			oldID = fileIdentity(fi)
		}
	}
	if overhang && !covers {
		// Keep the overhang at the fill value, even if a crashed Append
		// left rows there.
		zero := make([]int64, len(extent))
		for i := range extent {
			if extent[i] < m.chunks[i] {
				off := slices.Clone(zero)
				off[i] = extent[i]
				cnt := slices.Clone(m.chunks)
				cnt[i] = m.chunks[i] - extent[i]
				fillBox(buf, m.chunks, off, cnt, m.fill.b)
			}
		}
	}
	copyBox(buf, m.chunks, p.srcOff, d.Bytes, d.Shape, p.dstOff, p.count, es)
	enc, err := st.full.encode(buf)
	if err != nil {
		return a.chunkErr("encode", key, -1, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o777); err != nil {
		return a.chunkErr("write", key, -1, err)
	}
	if err := fsstore.WriteFileAtomic(path, bytes.NewReader(enc)); err != nil {
		return a.chunkErr("write", key, -1, err)
	}
	a.written.Add(1)
	if c := a.opts.Cache; c != nil && oldID != "" {
		var keys []CacheKey
		if st.plan.shard != nil {
			for k := range st.plan.shard.n {
				keys = append(keys, chunkCacheKey(a.path, st.sig, key, k, oldID))
			}
		} else {
			keys = append(keys, chunkCacheKey(a.path, st.sig, key, -1, oldID))
		}
		// The old entries can no longer be hit (their file is gone);
		// removing them only frees space early.
		if err := a.cacheFailed(ctx, c.Remove(ctx, keys...)); err != nil {
			return err
		}
	}
	return nil
}

// readWhole returns a stored chunk file and its identity; nil if absent.
func (a *Array) readWhole(path string) ([]byte, string, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, "", nil
		}
		return nil, "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, "", err
	}
	a.chunkReads.Add(1)
	a.bytesRead.Add(int64(len(b)))
	return b, fileIdentity(fi), nil
}

// notArray says why path, which holds neither zarr.json nor .zarray, is
// not an array: it does not exist, it is a v2 group, or it is a folder
// without zarr metadata. The error wraps ErrNotArray (and
// fs.ErrNotExist for a missing path). (A group folder and a missing path
// both said "not a zarr array (no zarr.json or .zarray in it)"; issue 16.)
func notArray(path string) error {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return missingError{path}
	case err != nil:
		return fmt.Errorf("zarr: open %s: %w", path, err)
	case !fi.IsDir():
		return fmt.Errorf("zarr: open %s: %w: a file, not a folder (an array is a folder holding zarr.json or .zarray)", path, ErrNotArray)
	}
	if _, err := os.Stat(filepath.Join(path, ".zgroup")); err == nil {
		hint := "open an array inside it"
		if kids := childArrays(path, 3); len(kids) > 0 {
			hint += ", e.g. " + strings.Join(kids, ", ")
		}
		return fmt.Errorf("zarr: open %s: %w: a zarr v2 group (.zgroup), not an array (%s)", path, ErrNotArray, hint)
	}
	return fmt.Errorf("zarr: open %s: %w (a folder with no zarr.json or .zarray in it)", path, ErrNotArray)
}

// missingError: nothing at the path. It is ErrNotArray and fs.ErrNotExist.
type missingError struct{ path string }

func (e missingError) Error() string {
	return fmt.Sprintf("zarr: open %s: %v: nothing at this path", e.path, ErrNotArray)
}

func (e missingError) Is(target error) bool { return target == ErrNotArray || target == fs.ErrNotExist }

// noMeta reports whether a metadata file's read failed because it is not
// there: missing, or its folder is a file (ENOTDIR).
func noMeta(err error) bool { return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) }

// childArrays returns up to n paths of arrays directly inside folder dir.
func childArrays(dir string, n int) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if len(out) == n {
			break
		}
		if !e.IsDir() {
			continue
		}
		for _, m := range []string{v3MetaName, v2MetaName} {
			if _, err := os.Stat(filepath.Join(dir, e.Name(), m)); err == nil {
				out = append(out, filepath.Join(dir, e.Name()))
				break
			}
		}
	}
	return out
}
