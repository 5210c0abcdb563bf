package zarr

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"runtime"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zlib"
	"github.com/klauspost/compress/zstd"
)

type zstdConfig struct {
	Level    *int `json:"level"`
	Checksum bool `json:"checksum,omitempty"`
}

// zstdCodec is the "zstd" codec (zarr-extensions codecs/zstd). The encoder
// and decoder are created on first use and shared by all goroutines: both
// are safe for concurrent EncodeAll/DecodeAll.
type zstdCodec struct {
	level    int
	checksum bool
	maxOut   int64 // most bytes one frame may decode to (set by buildChain)

	encOnce sync.Once
	enc     *zstd.Encoder
	encErr  error
	decOnce sync.Once
	dec     *zstd.Decoder
	decErr  error
	streams sync.Pool // *zstd.Decoder for decodePrefix, synchronous (no goroutines)
}

var _ bytesCodec = (*zstdCodec)(nil)

func newZstd(cfg zstdConfig) (*zstdCodec, error) {
	if cfg.Level == nil {
		return nil, fmt.Errorf("%w: zstd configuration needs \"level\" (e.g. 3)", ErrBadMetadata)
	}
	if *cfg.Level < -131072 || *cfg.Level > 22 {
		return nil, fmt.Errorf("%w: zstd level %d is not in -131072..22", ErrBadMetadata, *cfg.Level)
	}
	return &zstdCodec{level: *cfg.Level, checksum: cfg.Checksum, maxOut: 1 << 30}, nil
}

func (z *zstdCodec) spec() Codec { return ZstdCodec(z.level, z.checksum) }

// maxEncodedLen follows ZSTD_COMPRESSBOUND plus frame header and checksum.
func (z *zstdCodec) maxEncodedLen(n int64) int64 { return n + n>>8 + 1<<10 }

func (z *zstdCodec) encoder() (*zstd.Encoder, error) {
	z.encOnce.Do(func() {
		lvl := zstd.EncoderLevelFromZstd(z.level)
		z.enc, z.encErr = zstd.NewWriter(nil,
			zstd.WithEncoderLevel(lvl),
			zstd.WithEncoderCRC(z.checksum),
			zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)),
			// Single-segment frames always carry Frame_Content_Size;
			// otherwise klauspost omits it below 256 bytes, and numcodecs
			// < 0.12 and other readers fail on frames without it
			// (zarr-spec.md §4, numcodecs#707).
			zstd.WithSingleSegment(true),
		)
	})
	return z.enc, z.encErr
}

// decoder bounds output by the capacity of the destination (cap limit),
// not WithDecoderMaxMemory: that also caps the window, which even tiny
// frames declare as at least 1 KiB.
func (z *zstdCodec) decoder() (*zstd.Decoder, error) {
	z.decOnce.Do(func() {
		win := uint64(max(z.maxOut, 16<<20))
		if win > zstd.MaxWindowSize {
			win = zstd.MaxWindowSize
		}
		z.dec, z.decErr = zstd.NewReader(nil,
			zstd.WithDecoderConcurrency(runtime.GOMAXPROCS(0)),
			zstd.WithDecoderMaxWindow(win),
			zstd.WithDecodeAllCapLimit(true),
			zstd.WithDecoderLowmem(false),
		)
	})
	return z.dec, z.decErr
}

// decodePrefix fills dst with the first len(dst) decoded bytes of src
// and stops there: a read that needs the first rows of a chunk does not
// pay for the rest. The frame's checksum, if any, is not reached.
func (z *zstdCodec) decodePrefix(dst, src []byte) error {
	d, _ := z.streams.Get().(*zstd.Decoder)
	if d == nil {
		win := uint64(max(z.maxOut, 16<<20))
		if win > zstd.MaxWindowSize {
			win = zstd.MaxWindowSize
		}
		var err error
		// Concurrency 1: a synchronous stream decoder that starts no
		// goroutines, so the pool may drop it without Close.
		if d, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(win), zstd.WithDecoderLowmem(false)); err != nil {
			return err
		}
	}
	defer z.streams.Put(d)
	if err := d.Reset(bytes.NewReader(src)); err != nil {
		return corruptf("zstd: %v", err)
	}
	if _, err := io.ReadFull(d, dst); err != nil {
		return corruptf("zstd: %v", err)
	}
	return nil
}

func (z *zstdCodec) encode(src []byte) ([]byte, error) {
	enc, err := z.encoder()
	if err != nil {
		return nil, err
	}
	return enc.EncodeAll(src, make([]byte, 0, len(src)/2+64)), nil
}

func (z *zstdCodec) decode(dst, src []byte) ([]byte, error) {
	dec, err := z.decoder()
	if err != nil {
		return nil, err
	}
	if len(src) == 0 {
		return nil, corruptf("zstd: empty input")
	}
	out, err := dec.DecodeAll(src, dst[:0])
	if err != nil {
		if errors.Is(err, zstd.ErrDecoderSizeExceeded) {
			return nil, corruptf("zstd: decodes to more than %d bytes", cap(dst))
		}
		return nil, corruptf("zstd: %v", err)
	}
	return out, nil
}

// gzipCodec is the "gzip" codec (RFC 1952 member) or, with zlib set,
// numcodecs' "zlib" (RFC 1950 stream).
type gzipCodec struct {
	level int
	zlib  bool
}

var _ bytesCodec = (*gzipCodec)(nil)

func (g *gzipCodec) spec() Codec {
	if g.zlib {
		return mustCodec("numcodecs.zlib", gzipConfig{Level: g.level})
	}
	return GzipCodec(g.level)
}

// maxEncodedLen: deflate stored blocks add 5 bytes per 16 KiB, plus
// header and trailer.
func (g *gzipCodec) maxEncodedLen(n int64) int64 { return n + 5*(n/16383+1) + 64 }

func (g *gzipCodec) encode(src []byte) ([]byte, error) {
	var buf bytes.Buffer
	buf.Grow(len(src)/2 + 64)
	var w io.WriteCloser
	var err error
	if g.zlib {
		w, err = zlib.NewWriterLevel(&buf, g.level)
	} else {
		w, err = gzip.NewWriterLevel(&buf, g.level)
	}
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(src); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func (g *gzipCodec) decode(dst, src []byte) ([]byte, error) {
	name := "gzip"
	var r io.Reader
	if g.zlib {
		name = "zlib"
		zr, err := zlib.NewReader(bytes.NewReader(src))
		if err != nil {
			return nil, corruptf("%s: %v", name, err)
		}
		defer zr.Close()
		r = zr
	} else {
		gr, err := gzip.NewReader(bytes.NewReader(src))
		if err != nil {
			return nil, corruptf("%s: %v", name, err)
		}
		defer gr.Close()
		r = gr
	}
	out, err := readLimited(r, dst)
	if err != nil {
		return nil, corruptf("%s: %v", name, err)
	}
	return out, nil
}

// readLimited reads r to EOF into dst[:cap(dst)], failing if r holds more.
func readLimited(r io.Reader, dst []byte) ([]byte, error) {
	buf := dst[:cap(dst)]
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err == io.EOF {
			return buf[:n], nil
		}
		if err != nil {
			return nil, err
		}
	}
	var one [1]byte
	for {
		m, err := r.Read(one[:])
		if m > 0 {
			return nil, fmt.Errorf("decodes to more than %d bytes", len(buf))
		}
		if err == io.EOF {
			return buf[:n], nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// crc32cCodec is the "crc32c" codec: data followed by its CRC-32C,
// little-endian.
type crc32cCodec struct {
	table *crc32.Table
}

var _ bytesCodec = (*crc32cCodec)(nil)

func newCRC32C() *crc32cCodec { return &crc32cCodec{table: crc32.MakeTable(crc32.Castagnoli)} }

func (c *crc32cCodec) spec() Codec                 { return CRC32CCodec() }
func (c *crc32cCodec) maxEncodedLen(n int64) int64 { return n + 4 }

func (c *crc32cCodec) encode(src []byte) ([]byte, error) {
	out := make([]byte, len(src)+4)
	copy(out, src)
	binary.LittleEndian.PutUint32(out[len(src):], crc32.Checksum(src, c.table))
	return out, nil
}

func (c *crc32cCodec) decode(dst, src []byte) ([]byte, error) {
	if len(src) < 4 {
		return nil, corruptf("crc32c: %d bytes is too short to hold a checksum", len(src))
	}
	body := src[:len(src)-4]
	want := binary.LittleEndian.Uint32(src[len(src)-4:])
	if got := crc32.Checksum(body, c.table); got != want {
		return nil, corruptf("crc32c: checksum %08x, stored %08x", got, want)
	}
	if len(body) > cap(dst) {
		return nil, corruptf("crc32c: %d bytes, more than the %d expected", len(body), cap(dst))
	}
	return body, nil
}

// shuffleCodec is the byte shuffle (numcodecs.shuffle; v2 filter
// "shuffle"): byte plane b holds byte b of every element.
type shuffleCodec struct {
	es int
}

var _ bytesCodec = (*shuffleCodec)(nil)

func (s *shuffleCodec) spec() Codec                 { return ShuffleCodec(s.es) }
func (s *shuffleCodec) maxEncodedLen(n int64) int64 { return n }

func (s *shuffleCodec) encode(src []byte) ([]byte, error) {
	if len(src)%s.es != 0 {
		return nil, fmt.Errorf("shuffle: %d bytes is not a multiple of elementsize %d", len(src), s.es)
	}
	out := make([]byte, len(src))
	shuffle(out, src, s.es)
	return out, nil
}

func (s *shuffleCodec) decode(dst, src []byte) ([]byte, error) {
	if len(src)%s.es != 0 {
		return nil, corruptf("shuffle: %d bytes is not a multiple of elementsize %d", len(src), s.es)
	}
	if len(src) > cap(dst) {
		return nil, corruptf("shuffle: %d bytes, more than the %d expected", len(src), cap(dst))
	}
	out := dst[:len(src)]
	unshuffle(out, src, s.es)
	return out, nil
}

// shuffle writes src's byte planes to dst: dst[b*n+i] = src[i*es+b].
func shuffle(dst, src []byte, es int) {
	n := len(src) / es
	for b := range es {
		plane := dst[b*n : (b+1)*n]
		for i := range plane {
			plane[i] = src[i*es+b]
		}
	}
}

// unshuffle inverts shuffle: dst[i*es+b] = src[b*n+i].
func unshuffle(dst, src []byte, es int) {
	n := len(src) / es
	if unshuffleFast(dst, src, es) {
		return
	}
	switch es {
	case 1:
		copy(dst, src)
		return
	case 4:
		unshuffle4(dst[:4*n], src[:n], src[n:2*n], src[2*n:3*n], src[3*n:4*n])
		return
	case 8:
		unshuffle8(dst[:8*n], src[:8*n], n)
		return
	}
	for b := range es {
		plane := src[b*n : (b+1)*n]
		for i, v := range plane {
			dst[i*es+b] = v
		}
	}
}

// spread8 moves byte k of x to byte 2k of the result.
func spread8(x uint32) uint64 {
	v := uint64(x)
	v = (v | v<<16) & 0x0000ffff0000ffff
	v = (v | v<<8) & 0x00ff00ff00ff00ff
	return v
}

// spread16 moves 16-bit lane k of x to lane 2k of the result.
func spread16(x uint32) uint64 {
	v := uint64(x)
	return (v | v<<16) & 0x0000ffff0000ffff
}

// unshuffle4 interleaves four byte planes into 4-byte elements, four
// elements per step with shifts and masks (about 4x a byte loop).
func unshuffle4(dst, p0, p1, p2, p3 []byte) {
	n := len(p0)
	p1, p2, p3 = p1[:n], p2[:n], p3[:n]
	dst = dst[:4*n]
	i := 0
	for ; i+4 <= n; i += 4 {
		ab0 := spread8(binary.LittleEndian.Uint32(p0[i:])) | spread8(binary.LittleEndian.Uint32(p1[i:]))<<8
		cd0 := spread8(binary.LittleEndian.Uint32(p2[i:])) | spread8(binary.LittleEndian.Uint32(p3[i:]))<<8
		o := dst[4*i : 4*i+16]
		binary.LittleEndian.PutUint64(o[0:], spread16(uint32(ab0))|spread16(uint32(cd0))<<16)
		binary.LittleEndian.PutUint64(o[8:], spread16(uint32(ab0>>32))|spread16(uint32(cd0>>32))<<16)
	}
	for ; i < n; i++ {
		dst[4*i], dst[4*i+1], dst[4*i+2], dst[4*i+3] = p0[i], p1[i], p2[i], p3[i]
	}
}

// unshuffle8 interleaves eight byte planes of n bytes into 8-byte elements.
func unshuffle8(dst, src []byte, n int) {
	for i := range n {
		o := dst[8*i : 8*i+8]
		o[0], o[1], o[2], o[3] = src[i], src[n+i], src[2*n+i], src[3*n+i]
		o[4], o[5], o[6], o[7] = src[4*n+i], src[5*n+i], src[6*n+i], src[7*n+i]
	}
}
