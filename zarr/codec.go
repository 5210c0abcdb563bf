package zarr

import (
	"bytes"
	"encoding/json"
	"fmt"
	"runtime"
	"unsafe"
)

// Codec is one step of a chunk's encoding as Zarr v3 metadata spells it:
// a registered name and its configuration. Spec.Codecs lists them in
// encoding order; Info reports them (for a v2 array, the v3 equivalent of
// its order, dtype byte order, filters and compressor). Build them with
// the constructors (ZstdCodec, ShuffleCodec, ...) rather than by hand.
type Codec struct {
	Name          string          `json:"name"`
	Configuration json.RawMessage `json:"configuration,omitempty"`
}

// String returns the codec as compact JSON.
func (c Codec) String() string {
	b, _ := json.Marshal(c)
	return string(b)
}

func mustCodec(name string, cfg any) Codec {
	if cfg == nil {
		return Codec{Name: name}
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		// Only a nested Codec with invalid raw JSON gets here; keep the
		// error as a configuration that Create will refuse, naming it.
		b, _ = json.Marshal("invalid configuration: " + err.Error())
	}
	return Codec{Name: name, Configuration: b}
}

// BytesCodec is the array-to-bytes codec that stores elements in C order
// with the given byte order (bigEndian false: little-endian).
func BytesCodec(bigEndian bool) Codec {
	e := "little"
	if bigEndian {
		e = "big"
	}
	return mustCodec("bytes", bytesConfig{Endian: e})
}

// TransposeCodec permutes the dimensions of each chunk before storing it:
// stored dimension i is chunk dimension order[i].
func TransposeCodec(order ...int) Codec {
	return mustCodec("transpose", transposeConfig{Order: append([]int{}, order...)})
}

// ZstdCodec compresses with Zstandard at the given level (-131072..22;
// soma's encoder maps levels onto four speeds, as klauspost/compress does).
// checksum adds the frame's XXH64 content checksum. Frames always carry
// their content size.
func ZstdCodec(level int, checksum bool) Codec {
	return mustCodec("zstd", zstdConfig{Level: &level, Checksum: checksum})
}

// GzipCodec compresses each chunk as one gzip member (RFC 1952), level 0-9.
func GzipCodec(level int) Codec {
	return mustCodec("gzip", gzipConfig{Level: level})
}

// CRC32CCodec appends a CRC-32C (Castagnoli) of the bytes, little-endian,
// and checks it on read.
func CRC32CCodec() Codec { return Codec{Name: "crc32c"} }

// ShuffleCodec is the byte shuffle (numcodecs.shuffle): byte b of every
// element is grouped together, which makes float data compress better.
// elementSize is normally the data type's size.
func ShuffleCodec(elementSize int) Codec {
	return mustCodec("numcodecs.shuffle", shuffleConfig{ElementSize: elementSize})
}

// ShardingCodec stores inner chunks of shape inner inside each chunk (the
// shard), encoded with codecs, followed (or, with indexAtStart, preceded)
// by an index encoded with indexCodecs (bytes, optionally crc32c).
func ShardingCodec(inner []int64, codecs, indexCodecs []Codec, indexAtStart bool) Codec {
	loc := "end"
	if indexAtStart {
		loc = "start"
	}
	return mustCodec("sharding_indexed", shardingConfig{
		ChunkShape:    append([]int64{}, inner...),
		Codecs:        append([]Codec{}, codecs...),
		IndexCodecs:   append([]Codec{}, indexCodecs...),
		IndexLocation: loc,
	})
}

// DefaultCodecs is what Create uses when Spec.Codecs is empty:
// little-endian bytes, then zstd level 3.
func DefaultCodecs() []Codec {
	return []Codec{BytesCodec(false), ZstdCodec(3, false)}
}

// UnmarshalJSON accepts the object form and, as spec 3.1 allows, a bare
// name string for a codec without configuration.
func (c *Codec) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*c = Codec{Name: s}
		return nil
	}
	var raw struct {
		Name           string          `json:"name"`
		Configuration  json.RawMessage `json:"configuration"`
		MustUnderstand *bool           `json:"must_understand"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return fmt.Errorf("codec %s: %w", b, err)
	}
	if raw.Name == "" {
		return fmt.Errorf("codec %s has no name", b)
	}
	cfg := raw.Configuration
	if string(bytes.TrimSpace(cfg)) == "null" {
		cfg = nil
	}
	*c = Codec{Name: raw.Name, Configuration: cfg}
	return nil
}

// chunkRep is the in-memory representation a codec sees: the shape and
// element type of a (possibly transposed) chunk.
type chunkRep struct {
	shape []int64
	dtype DataType
}

func (r chunkRep) nbytes() int64 { return prod(r.shape) * int64(r.dtype.Size()) }

// arrayCodec is an array-to-array codec (transpose).
type arrayCodec interface {
	resolve(in chunkRep) (chunkRep, error)
	encode(dst, src []byte, in chunkRep)
	decode(dst, src []byte, in chunkRep)
	spec() Codec
}

// arrayBytesCodec turns a chunk into bytes (bytes, sharding_indexed).
type arrayBytesCodec interface {
	encode(src []byte, rep chunkRep) ([]byte, error)
	// decode fills dst (exactly rep.nbytes() bytes) from src.
	decode(dst, src []byte, rep chunkRep) error
	maxEncodedLen(rep chunkRep) int64
	spec() Codec
}

// bytesCodec is a bytes-to-bytes codec (compressors, shuffle, crc32c).
type bytesCodec interface {
	encode(src []byte) ([]byte, error)
	// decode decodes src, appending to dst[:0] when it has room, and
	// returns the result, which may alias dst or src. It fails (with
	// ErrCorrupt) rather than produce more than cap(dst) bytes.
	decode(dst, src []byte) ([]byte, error)
	maxEncodedLen(n int64) int64
	spec() Codec
}

// chain is a resolved codec pipeline for one chunk representation: the
// codecs plus the representation each sees, and the size bounds used to
// refuse decompression bombs. It is safe for concurrent use.
type chain struct {
	aa     []arrayCodec
	ab     arrayBytesCodec
	bb     []bytesCodec
	reps   []chunkRep  // reps[i]: input of aa[i]; reps[len(aa)]: input of ab
	limits []int64     // limits[i]: most bytes bb[i] may decode to
	rep    chunkRep    // the decoded chunk
	fill   []byte      // one element; what empty inner chunks of a shard hold
	bound  int64       // most bytes an encoded chunk can take
	free   chan []byte // scratch buffers of bufSize bytes, kept across GCs
	bufSz  int64       // every scratch buffer's capacity: the largest size a step needs
}

// encodedBound returns the most bytes one encoded chunk can take.
func (c *chain) encodedBound() int64 { return c.bound }

// buildChain parses a codec list for chunks of rep. fill is the array's
// fill value (one element).
func buildChain(codecs []Codec, rep chunkRep, fill []byte) (*chain, error) {
	if len(codecs) == 0 {
		return nil, fmt.Errorf("%w: codecs is empty (it needs at least an array-to-bytes codec such as bytes)", ErrBadMetadata)
	}
	c := &chain{rep: rep, fill: fill, free: make(chan []byte, runtime.GOMAXPROCS(0)+2)}
	cur := rep
	stage := 0 // 0: array->array, 1: after array->bytes
	for i, spec := range codecs {
		kind, err := codecKind(spec.Name)
		if err != nil {
			return nil, fmt.Errorf("codec %d: %w", i, err)
		}
		switch kind {
		case kindArrayArray:
			if stage != 0 {
				return nil, fmt.Errorf("%w: codec %d (%s) is array-to-array but comes after the array-to-bytes codec", ErrBadMetadata, i, spec.Name)
			}
			ac, err := newArrayCodec(spec, cur)
			if err != nil {
				return nil, fmt.Errorf("codec %d (%s): %w", i, spec.Name, err)
			}
			c.reps = append(c.reps, cur)
			if cur, err = ac.resolve(cur); err != nil {
				return nil, fmt.Errorf("codec %d (%s): %w", i, spec.Name, err)
			}
			c.aa = append(c.aa, ac)
		case kindArrayBytes:
			if stage != 0 {
				return nil, fmt.Errorf("%w: codec %d (%s): only one array-to-bytes codec is allowed", ErrBadMetadata, i, spec.Name)
			}
			ab, err := newArrayBytesCodec(spec, cur, fill)
			if err != nil {
				return nil, fmt.Errorf("codec %d (%s): %w", i, spec.Name, err)
			}
			c.reps = append(c.reps, cur)
			c.ab = ab
			stage = 1
		case kindBytesBytes:
			if stage != 1 {
				return nil, fmt.Errorf("%w: codec %d (%s) is bytes-to-bytes but comes before the array-to-bytes codec", ErrBadMetadata, i, spec.Name)
			}
			bc, err := newBytesCodec(spec, rep.dtype)
			if err != nil {
				return nil, fmt.Errorf("codec %d (%s): %w", i, spec.Name, err)
			}
			c.bb = append(c.bb, bc)
		}
	}
	if c.ab == nil {
		return nil, fmt.Errorf("%w: codecs has no array-to-bytes codec (add {\"name\":\"bytes\",\"configuration\":{\"endian\":\"little\"}})", ErrBadMetadata)
	}
	bound := c.ab.maxEncodedLen(c.reps[len(c.aa)])
	for _, bc := range c.bb {
		c.limits = append(c.limits, bound)
		bound = bc.maxEncodedLen(bound)
	}
	c.bound = bound
	c.bufSz = max(bound, rep.nbytes(), c.reps[len(c.aa)].nbytes())
	for _, l := range c.limits {
		c.bufSz = max(c.bufSz, l)
	}
	// Now that bounds are known, let compressors size their decoders.
	for i, bc := range c.bb {
		if z, ok := bc.(*zstdCodec); ok {
			z.maxOut = c.limits[i]
		}
	}
	return c, nil
}

// specs returns the codec list in metadata form.
func (c *chain) specs() []Codec {
	var out []Codec
	for _, a := range c.aa {
		out = append(out, a.spec())
	}
	out = append(out, c.ab.spec())
	for _, b := range c.bb {
		out = append(out, b.spec())
	}
	return out
}

// getBuf returns a scratch buffer of length n. Buffers come from a small
// free list that, unlike a sync.Pool, survives garbage collections: a
// read allocates its output, which triggers GCs often enough that a pool
// would be empty on every call and each 4 MiB chunk would cost a fresh,
// page-faulted allocation. The list holds at most GOMAXPROCS+2 buffers
// per chain.
//
// Each buffer has apartSlack bytes of room beyond n, for getBufApart.
func (c *chain) getBuf(n int64) []byte {
	if n > c.bufSz {
		return make([]byte, n, n+apartSlack)
	}
	select {
	case b := <-c.free:
		return b[:n]
	default:
		return make([]byte, n, c.bufSz+apartSlack)
	}
}

// apartSlack is the room getBuf leaves so that getBufApart can place a
// buffer at any address modulo 4 KiB.
const apartSlack = 4096

// getBufApart returns a scratch buffer of length n that starts 2 KiB
// away from dst modulo 4 KiB, and the buffer to give back with putBuf.
//
// Why: unshuffle streams its source planes in and its elements out to
// dst; when source and destination start at the same offset in a 4 KiB
// page, as any two large Go allocations do (both page-aligned), the CPU
// keeps mistaking loads for reads of the stores just made (4K aliasing)
// and stalls: unshuffling a 4 MiB float32 chunk ran at 3.2 GB/s with the
// two buffers 0 bytes apart and at 30 GB/s 2 KiB apart
// (BenchmarkUnshuffleApart). A shuffled zstd scan spent 1.3x the CPU of
// the plain decode, most of the difference there.
func (c *chain) getBufApart(n int64, dst []byte) (view, whole []byte) {
	whole = c.getBuf(n)
	full := whole[:cap(whole)]
	if len(dst) == 0 || int64(cap(full)) < n+apartSlack {
		return whole, whole
	}
	d := uintptr(unsafe.Pointer(unsafe.SliceData(dst)))
	b := uintptr(unsafe.Pointer(unsafe.SliceData(full)))
	off := int64((d + apartSlack/2 - b) % apartSlack) // modular: 4096 divides 2^64
	return full[off : off+n : off+n], whole
}

// putBuf returns a buffer from getBuf to the free list.
func (c *chain) putBuf(b []byte) {
	if int64(cap(b)) != c.bufSz+apartSlack {
		return
	}
	select {
	case c.free <- b[:0]:
	default:
	}
}

// sameStart reports whether a and b start at the same address.
func sameStart(a, b []byte) bool {
	return len(a) > 0 && len(b) > 0 && unsafe.SliceData(a) == unsafe.SliceData(b)
}

// decode decodes one stored chunk into dst, which must be exactly
// c.rep.nbytes() long (little-endian, C order).
func (c *chain) decode(dst, src []byte) error {
	if int64(len(dst)) != c.rep.nbytes() {
		return fmt.Errorf("decode: destination has %d bytes, chunk needs %d", len(dst), c.rep.nbytes())
	}
	var bufs [][]byte
	defer func() {
		for _, b := range bufs {
			c.putBuf(b)
		}
	}()
	abRep := c.reps[len(c.aa)]
	_, plainBytes := c.ab.(*bytesArrayCodec)
	cur := src
	for i := len(c.bb) - 1; i >= 0; i-- {
		var out []byte
		if i == 0 && len(c.aa) == 0 && plainBytes && c.limits[0] == int64(len(dst)) {
			// The last step writes straight into dst.
			out = dst[:0:len(dst)]
		} else {
			b, whole := c.getBufApart(c.limits[i], dst)
			bufs = append(bufs, whole)
			out = b[:0:c.limits[i]]
		}
		res, err := c.bb[i].decode(out, cur)
		if err != nil {
			return err // bytes codecs name themselves ("zstd: ...")
		}
		cur = res
	}
	target := dst
	if len(c.aa) > 0 {
		target = c.getBuf(abRep.nbytes())
		bufs = append(bufs, target)
	}
	if err := c.ab.decode(target, cur, abRep); err != nil {
		return fmt.Errorf("%s: %w", c.ab.spec().Name, err)
	}
	for i := len(c.aa) - 1; i >= 0; i-- {
		out := dst
		if i > 0 {
			out = c.getBuf(c.reps[i].nbytes())
			bufs = append(bufs, out)
		}
		c.aa[i].decode(out, target, c.reps[i])
		target = out
	}
	return nil
}

// prefixable reports whether decodePrefix works for this chain: bytes
// then zstd, nothing else, so that the first n decoded bytes are the
// first n bytes of the chunk.
func (c *chain) prefixable() bool {
	if len(c.aa) != 0 || len(c.bb) != 1 {
		return false
	}
	if _, ok := c.ab.(*bytesArrayCodec); !ok {
		return false
	}
	_, ok := c.bb[0].(*zstdCodec)
	return ok
}

// decodePrefix decodes only the first len(dst) bytes of a chunk (a
// multiple of the element size); the chain must be prefixable.
func (c *chain) decodePrefix(dst, src []byte) error {
	if len(src) == 0 {
		return corruptf("zstd: empty input")
	}
	if err := c.bb[0].(*zstdCodec).decodePrefix(dst, src); err != nil {
		return err
	}
	if c.ab.(*bytesArrayCodec).big {
		swapBytes(dst, c.rep.dtype.Size())
	}
	return nil
}

// encode encodes one chunk (c.rep, little-endian, C order) for storage.
func (c *chain) encode(src []byte) ([]byte, error) {
	if int64(len(src)) != c.rep.nbytes() {
		return nil, fmt.Errorf("encode: chunk has %d bytes, needs %d", len(src), c.rep.nbytes())
	}
	cur := src
	for i, a := range c.aa {
		out := make([]byte, len(cur))
		a.encode(out, cur, c.reps[i])
		cur = out
	}
	b, err := c.ab.encode(cur, c.reps[len(c.aa)])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.ab.spec().Name, err)
	}
	for _, bc := range c.bb {
		if b, err = bc.encode(b); err != nil {
			return nil, fmt.Errorf("%s: %w", bc.spec().Name, err)
		}
	}
	return b, nil
}

type codecKindT int

const (
	kindArrayArray codecKindT = iota
	kindArrayBytes
	kindBytesBytes
)

func codecKind(name string) (codecKindT, error) {
	switch name {
	case "transpose":
		return kindArrayArray, nil
	case "bytes", "sharding_indexed":
		return kindArrayBytes, nil
	case "zstd", "gzip", "crc32c", "numcodecs.shuffle", "blosc", "numcodecs.zlib":
		return kindBytesBytes, nil
	}
	return 0, fmt.Errorf("codec %q: %w (soma knows bytes, transpose, zstd, gzip, crc32c, numcodecs.shuffle, numcodecs.zlib, blosc (read), sharding_indexed)", name, ErrUnsupported)
}

// decodeConfig strictly decodes a codec configuration into v.
func decodeConfig(c Codec, v any) error {
	cfg := c.Configuration
	if len(bytes.TrimSpace(cfg)) == 0 {
		cfg = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(cfg))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: configuration %s: %v", ErrBadMetadata, cfg, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: configuration %s has trailing data", ErrBadMetadata, cfg)
	}
	return nil
}

func newArrayCodec(c Codec, in chunkRep) (arrayCodec, error) {
	var cfg transposeConfig
	if err := decodeConfig(c, &cfg); err != nil {
		return nil, err
	}
	return newTranspose(cfg.Order, len(in.shape))
}

func newArrayBytesCodec(c Codec, in chunkRep, fill []byte) (arrayBytesCodec, error) {
	switch c.Name {
	case "bytes":
		var cfg bytesConfig
		if err := decodeConfig(c, &cfg); err != nil {
			return nil, err
		}
		switch cfg.Endian {
		case "little", "big":
		case "":
			if in.dtype.Size() > 1 {
				return nil, fmt.Errorf("%w: bytes codec needs \"endian\" for %v (add \"endian\": \"little\")", ErrBadMetadata, in.dtype)
			}
		default:
			return nil, fmt.Errorf("%w: bytes endian %q is not \"little\" or \"big\"", ErrBadMetadata, cfg.Endian)
		}
		return &bytesArrayCodec{big: cfg.Endian == "big" && in.dtype.Size() > 1, endian: cfg.Endian}, nil
	case "sharding_indexed":
		var cfg shardingConfig
		if err := decodeConfig(c, &cfg); err != nil {
			return nil, err
		}
		return newSharding(cfg, in, fill)
	}
	return nil, fmt.Errorf("codec %q: %w", c.Name, ErrUnsupported)
}

func newBytesCodec(c Codec, dtype DataType) (bytesCodec, error) {
	switch c.Name {
	case "zstd":
		var cfg zstdConfig
		if err := decodeConfig(c, &cfg); err != nil {
			return nil, err
		}
		return newZstd(cfg)
	case "gzip":
		var cfg gzipConfig
		if err := decodeConfig(c, &cfg); err != nil {
			return nil, err
		}
		if cfg.Level < 0 || cfg.Level > 9 {
			return nil, fmt.Errorf("%w: gzip level %d is not in 0..9", ErrBadMetadata, cfg.Level)
		}
		return &gzipCodec{level: cfg.Level}, nil
	case "numcodecs.zlib":
		var cfg gzipConfig
		if err := decodeConfig(c, &cfg); err != nil {
			return nil, err
		}
		if cfg.Level < 0 || cfg.Level > 9 {
			return nil, fmt.Errorf("%w: zlib level %d is not in 0..9", ErrBadMetadata, cfg.Level)
		}
		return &gzipCodec{level: cfg.Level, zlib: true}, nil
	case "crc32c":
		var cfg struct{}
		if err := decodeConfig(c, &cfg); err != nil {
			return nil, err
		}
		return newCRC32C(), nil
	case "numcodecs.shuffle":
		var cfg shuffleConfig
		if err := decodeConfig(c, &cfg); err != nil {
			return nil, err
		}
		if cfg.ElementSize < 1 || cfg.ElementSize > 1<<16 {
			return nil, fmt.Errorf("%w: shuffle elementsize %d is not in 1..65536", ErrBadMetadata, cfg.ElementSize)
		}
		return &shuffleCodec{es: cfg.ElementSize}, nil
	case "blosc":
		var cfg bloscConfig
		if err := decodeConfig(c, &cfg); err != nil {
			return nil, err
		}
		return newBlosc(cfg, dtype)
	}
	return nil, fmt.Errorf("codec %q: %w", c.Name, ErrUnsupported)
}

type bytesConfig struct {
	Endian string `json:"endian,omitempty"`
}

type transposeConfig struct {
	Order []int `json:"order"`
}

type shuffleConfig struct {
	ElementSize int `json:"elementsize"`
}

type gzipConfig struct {
	Level int `json:"level"`
}

// bytesArrayCodec is the "bytes" codec.
type bytesArrayCodec struct {
	big    bool
	endian string // as configured ("" allowed for one-byte types)
}

var _ arrayBytesCodec = (*bytesArrayCodec)(nil)

func (b *bytesArrayCodec) spec() Codec {
	if b.endian == "" {
		return Codec{Name: "bytes"}
	}
	return mustCodec("bytes", bytesConfig{Endian: b.endian})
}

func (b *bytesArrayCodec) maxEncodedLen(rep chunkRep) int64 { return rep.nbytes() }

func (b *bytesArrayCodec) encode(src []byte, rep chunkRep) ([]byte, error) {
	out := append([]byte(nil), src...)
	if b.big {
		swapBytes(out, rep.dtype.Size())
	}
	return out, nil
}

func (b *bytesArrayCodec) decode(dst, src []byte, rep chunkRep) error {
	if len(src) != len(dst) {
		return corruptf("chunk holds %d bytes, a chunk of shape %v and type %v has %d", len(src), rep.shape, rep.dtype, len(dst))
	}
	if !sameStart(dst, src) {
		copy(dst, src)
	}
	if b.big {
		swapBytes(dst, rep.dtype.Size())
	}
	return nil
}

// swapBytes reverses the byte order of every es-byte element of b.
func swapBytes(b []byte, es int) {
	switch es {
	case 2:
		for i := 0; i+1 < len(b); i += 2 {
			b[i], b[i+1] = b[i+1], b[i]
		}
	case 4:
		for i := 0; i+3 < len(b); i += 4 {
			b[i], b[i+1], b[i+2], b[i+3] = b[i+3], b[i+2], b[i+1], b[i]
		}
	case 8:
		for i := 0; i+7 < len(b); i += 8 {
			b[i], b[i+1], b[i+2], b[i+3], b[i+4], b[i+5], b[i+6], b[i+7] = b[i+7], b[i+6], b[i+5], b[i+4], b[i+3], b[i+2], b[i+1], b[i]
		}
	}
}

// transposeCodec is the "transpose" codec.
type transposeCodec struct {
	order []int
}

var _ arrayCodec = (*transposeCodec)(nil)

func newTranspose(order []int, ndim int) (*transposeCodec, error) {
	if len(order) != ndim {
		return nil, fmt.Errorf("%w: transpose order %v has %d entries, the chunk has %d dimensions", ErrBadMetadata, order, len(order), ndim)
	}
	seen := make([]bool, ndim)
	for _, o := range order {
		if o < 0 || o >= ndim || seen[o] {
			return nil, fmt.Errorf("%w: transpose order %v is not a permutation of 0..%d", ErrBadMetadata, order, ndim-1)
		}
		seen[o] = true
	}
	return &transposeCodec{order: append([]int(nil), order...)}, nil
}

func (t *transposeCodec) spec() Codec { return TransposeCodec(t.order...) }

func (t *transposeCodec) resolve(in chunkRep) (chunkRep, error) {
	out := chunkRep{shape: make([]int64, len(in.shape)), dtype: in.dtype}
	for i, o := range t.order {
		out.shape[i] = in.shape[o]
	}
	return out, nil
}

// permute walks B (the transposed array) in C order; for each element it
// calls fn with the linear indices in A and in B.
func (t *transposeCodec) permute(in chunkRep, fn func(a, b int64)) {
	n := len(in.shape)
	if n == 0 {
		fn(0, 0)
		return
	}
	as := strides(in.shape)
	bshape := make([]int64, n)
	bstride := make([]int64, n) // stride in A of B's dimension i
	for i, o := range t.order {
		bshape[i] = in.shape[o]
		bstride[i] = as[o]
	}
	total := prod(bshape)
	if total == 0 {
		return
	}
	idx := make([]int64, n)
	var a int64
	for b := int64(0); b < total; b++ {
		fn(a, b)
		for i := n - 1; i >= 0; i-- {
			idx[i]++
			a += bstride[i]
			if idx[i] < bshape[i] {
				break
			}
			a -= bstride[i] * bshape[i]
			idx[i] = 0
		}
	}
}

func (t *transposeCodec) encode(dst, src []byte, in chunkRep) {
	es := int64(in.dtype.Size())
	t.permute(in, func(a, b int64) { copy(dst[b*es:(b+1)*es], src[a*es:(a+1)*es]) })
}

func (t *transposeCodec) decode(dst, src []byte, in chunkRep) {
	es := int64(in.dtype.Size())
	t.permute(in, func(a, b int64) { copy(dst[a*es:(a+1)*es], src[b*es:(b+1)*es]) })
}
