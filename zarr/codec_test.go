package zarr

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strings"
	"testing"
	"unsafe"

	"github.com/klauspost/compress/zstd"
)

// bytesCodecs is the conformance suite's list: every bytes-to-bytes codec
// soma writes.
func bytesCodecs(t *testing.T) map[string]bytesCodec {
	t.Helper()
	specs := map[string]Codec{
		"zstd":          ZstdCodec(3, false),
		"zstd-fastest":  ZstdCodec(-5, false),
		"zstd-best":     ZstdCodec(19, false),
		"zstd-checksum": ZstdCodec(1, true),
		"gzip":          GzipCodec(6),
		"gzip-0":        GzipCodec(0),
		"zlib":          mustCodec("numcodecs.zlib", gzipConfig{Level: 1}),
		"crc32c":        CRC32CCodec(),
		"shuffle-1":     ShuffleCodec(1),
		"shuffle-2":     ShuffleCodec(2),
		"shuffle-3":     ShuffleCodec(3),
		"shuffle-4":     ShuffleCodec(4),
		"shuffle-8":     ShuffleCodec(8),
	}
	out := map[string]bytesCodec{}
	for name, s := range specs {
		c, err := newBytesCodec(s, Uint8)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if z, ok := c.(*zstdCodec); ok {
			z.maxOut = 1 << 20
		}
		out[name] = c
	}
	return out
}

// TestBytesCodecConformance runs every bytes-to-bytes codec through the
// same contract: round trip, bounded output, damage is an error, the
// spec it reports parses back to the same codec.
func TestBytesCodecConformance(t *testing.T) {
	inputs := map[string][]byte{
		"empty":  {},
		"24":     bytes.Repeat([]byte{1, 2, 3}, 8),
		"zeros":  make([]byte, 4096),
		"random": genData(t, Uint8, []int64{24 * 1000}, 1).Bytes,
	}
	for name, c := range bytesCodecs(t) {
		for iname, in := range inputs {
			t.Run(name+"/"+iname, func(t *testing.T) {
				if sc, ok := c.(*shuffleCodec); ok && len(in)%sc.es != 0 {
					if _, err := c.encode(in); err == nil {
						t.Errorf("shuffle of %d bytes with elementsize %d = nil error", len(in), sc.es)
					}
					return
				}
				enc, err := c.encode(in)
				if err != nil {
					t.Fatalf("encode: %v", err)
				}
				if int64(len(enc)) > c.maxEncodedLen(int64(len(in))) {
					t.Errorf("encoded %d bytes to %d, more than maxEncodedLen %d", len(in), len(enc), c.maxEncodedLen(int64(len(in))))
				}
				got, err := c.decode(make([]byte, 0, len(in)), enc)
				if len(in) == 0 && strings.HasPrefix(name, "zstd") {
					// An empty chunk never occurs (chunks hold >= 1 element);
					// zstd of nothing is an empty frame soma refuses.
					return
				}
				if err != nil {
					t.Fatalf("decode: %v", err)
				}
				if !bytes.Equal(got, in) {
					t.Fatalf("decode(encode(x)) != x")
				}
				if len(in) > 0 {
					if _, err := c.decode(make([]byte, 0, len(in)-1), enc); !errors.Is(err, ErrCorrupt) {
						t.Errorf("decode into %d bytes of room = %v, want ErrCorrupt", len(in)-1, err)
					}
				}
				// A truncated frame fails when the codec checks its length
				// or integrity (zstd without checksum may end early but still
				// produces too few bytes, which the bytes codec then refuses).
				if len(enc) > 1 && !strings.HasPrefix(name, "shuffle") && (!strings.HasPrefix(name, "zstd") || name == "zstd-checksum") {
					if _, err := c.decode(make([]byte, 0, len(in)), enc[:len(enc)-1]); err == nil {
						t.Errorf("decode of a truncated frame = nil error")
					}
				}
				again, err := newBytesCodec(c.spec(), Uint8)
				if err != nil || again.spec().String() != c.spec().String() {
					t.Errorf("spec %s does not parse back: %v", c.spec(), err)
				}
			})
		}
	}
}

// zstdHeader returns whether a frame declares its content size, and the
// size.
func zstdHeader(t *testing.T, b []byte) (bool, uint64, bool) {
	t.Helper()
	if len(b) < 6 || binary.LittleEndian.Uint32(b) != 0xFD2FB528 {
		t.Fatalf("not a zstd frame: % x", b)
	}
	fhd := b[4]
	fcsFlag, single, checksum := fhd>>6, fhd&0x20 != 0, fhd&0x04 != 0
	pos := 5
	if !single {
		pos++ // window descriptor
	}
	pos += []int{0, 1, 2, 4}[fhd&3] // dictionary id
	sizes := []int{0, 2, 4, 8}
	n := sizes[fcsFlag]
	if fcsFlag == 0 && single {
		n = 1
	}
	if n == 0 {
		return false, 0, checksum
	}
	var v uint64
	for i := range n {
		v |= uint64(b[pos+i]) << (8 * i)
	}
	if n == 2 {
		v += 256
	}
	return true, v, checksum
}

// TestZstdFramesCarryContentSize: numcodecs 0.11 and other readers fail
// on frames without Frame_Content_Size (zarr-spec.md §4), so soma always
// writes it, at every size (klauspost omits it below 256 bytes unless
// frames are single-segment).
func TestZstdFramesCarryContentSize(t *testing.T) {
	for _, checksum := range []bool{false, true} {
		c, err := newZstd(zstdConfig{Level: new(int), Checksum: checksum})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []int{1, 48, 255, 256, 1000, 65791, 65792, 1 << 20} {
			t.Run(fmt.Sprintf("checksum=%v/%d", checksum, n), func(t *testing.T) {
				enc, err := c.encode(bytes.Repeat([]byte{7, 1, 2}, n)[:n])
				if err != nil {
					t.Fatal(err)
				}
				has, size, ck := zstdHeader(t, enc)
				if !has || size != uint64(n) {
					t.Errorf("frame content size = %v, %d; want %d", has, size, n)
				}
				if ck != checksum {
					t.Errorf("frame checksum flag = %v, want %v", ck, checksum)
				}
			})
		}
	}
}

// TestZstdAcceptsFramesWithoutContentSize decodes a streamed frame (no
// content size), as tensorstore writes them.
func TestZstdAcceptsFramesWithoutContentSize(t *testing.T) {
	// klauspost omits the content size of multi-segment frames under 256
	// bytes; that is the frame shape to accept (the fixture
	// int32_bytes_zstd_nofcs has zstd CLI frames of this kind).
	in := bytes.Repeat([]byte("soma zarr "), 20)
	w, err := zstd.NewWriter(nil, zstd.WithSingleSegment(false))
	if err != nil {
		t.Fatal(err)
	}
	buf := bytes.NewBuffer(w.EncodeAll(in, nil))
	if has, _, _ := zstdHeader(t, buf.Bytes()); has {
		t.Fatalf("test setup: streamed frame has a content size")
	}
	c, err := newZstd(zstdConfig{Level: new(int)})
	if err != nil {
		t.Fatal(err)
	}
	c.maxOut = int64(len(in))
	got, err := c.decode(make([]byte, 0, len(in)), buf.Bytes())
	if err != nil || !bytes.Equal(got, in) {
		t.Errorf("decode of a frame without content size = %v (equal %v)", err, bytes.Equal(got, in))
	}
	if _, err := c.decode(make([]byte, 0, len(in)-1), buf.Bytes()); !errors.Is(err, ErrCorrupt) {
		t.Errorf("decode with too little room = %v, want ErrCorrupt", err)
	}
}

func TestCRC32CCheckValue(t *testing.T) {
	c := newCRC32C()
	enc, _ := c.encode([]byte("123456789"))
	if got := binary.LittleEndian.Uint32(enc[9:]); got != 0xE3069283 {
		t.Errorf("crc32c(\"123456789\") = %#x, want 0xe3069283 (RFC 3720 check value)", got)
	}
	if got := crc32.Checksum([]byte("123456789"), c.table); got != 0xE3069283 {
		t.Errorf("table checksum = %#x", got)
	}
}

// TestUnshuffle compares the fast paths with the definition.
func TestUnshuffle(t *testing.T) {
	for _, es := range []int{1, 2, 3, 4, 5, 8, 16} {
		for _, n := range []int{0, 1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 1000, 4099} {
			t.Run(fmt.Sprintf("es=%d/n=%d", es, n), func(t *testing.T) {
				src := genData(t, Uint8, []int64{int64(es * n)}, uint64(es*n)).Bytes
				sh := make([]byte, len(src))
				shuffle(sh, src, es)
				for b := range es {
					for i := range n {
						if sh[b*n+i] != src[i*es+b] {
							t.Fatalf("shuffle: out[%d] != in[%d]", b*n+i, i*es+b)
						}
					}
				}
				got := make([]byte, len(src))
				unshuffle(got, sh, es)
				if !bytes.Equal(got, src) {
					t.Errorf("unshuffle(shuffle(x)) != x")
				}
				// The portable loops, which amd64 uses only for tails.
				clear(got)
				switch es {
				case 4:
					unshuffle4(got, sh[:n], sh[n:2*n], sh[2*n:3*n], sh[3*n:])
				case 8:
					unshuffle8(got, sh, n)
				default:
					return
				}
				if !bytes.Equal(got, src) {
					t.Errorf("portable unshuffle(shuffle(x)) != x")
				}
			})
		}
	}
}

func TestLZ4Decode(t *testing.T) {
	tests := []struct {
		name string
		src  []byte
		want string
		ok   bool
	}{
		{"literals only", []byte{0x50, 'h', 'e', 'l', 'l', 'o'}, "hello", true},
		// "ab" then a match of 6 at offset 2 ("ababab"), then literal "!".
		{"overlapping match", []byte{0x22, 'a', 'b', 0x02, 0x00, 0x10, '!'}, "abababab!", true},
		{"long literal", append([]byte{0xF0, 3}, bytes.Repeat([]byte{'x'}, 18)...), "xxxxxxxxxxxxxxxxxx", true},
		{"long match", []byte{0x1F, 'z', 0x01, 0x00, 2, 0x00}, "zzzzzzzzzzzzzzzzzzzzzz", true},
		{"zero offset", []byte{0x12, 'a', 0x00, 0x00, 0x00}, "aaaaaaa", false},
		{"offset before start", []byte{0x12, 'a', 0x05, 0x00, 0x00}, "aaaaaaa", false},
		{"truncated literal", []byte{0x50, 'h', 'e'}, "hello", false},
		{"truncated offset", []byte{0x12, 'a', 0x01}, "aaaaaaa", false},
		{"output too long", []byte{0x50, 'h', 'e', 'l', 'l', 'o'}, "hell", false},
		{"output too short", []byte{0x30, 'h', 'e', 'l'}, "hello", false},
		{"empty", nil, "x", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dst := make([]byte, len(tc.want))
			err := lz4Decode(dst, tc.src)
			if (err == nil) != tc.ok {
				t.Fatalf("lz4Decode = %v, want ok %v", err, tc.ok)
			}
			if tc.ok && string(dst) != tc.want {
				t.Errorf("lz4Decode = %q, want %q", dst, tc.want)
			}
		})
	}
}

func TestBlosclzDecode(t *testing.T) {
	tests := []struct {
		name string
		src  []byte
		want string
		ok   bool
	}{
		// First byte: literal run of ctrl+1 (the 0x20 level marker masked).
		{"literals", []byte{0x20 | 2, 'a', 'b', 'c'}, "abc", true},
		// "ab", then a match: length code 1 means 3 bytes, from distance
		// code 1 (+1 bias: 2 back).
		{"match", []byte{0x20 | 1, 'a', 'b', 1 << 5, 1}, "ababa", true},
		// A run: distance code 0 repeats the last byte; length code 2 is 4.
		{"run", []byte{0x20, 'q', 2 << 5, 0}, "qqqqq", true},
		{"distance before start", []byte{0x20, 'q', 2 << 5, 9}, "qqqqq", false},
		{"truncated", []byte{0x20 | 5, 'a'}, "aaaaaa", false},
		{"short output", []byte{0x20 | 2, 'a', 'b', 'c'}, "abcd", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dst := make([]byte, len(tc.want))
			err := blosclzDecode(dst, tc.src)
			if (err == nil) != tc.ok {
				t.Fatalf("blosclzDecode = %v, want ok %v", err, tc.ok)
			}
			if tc.ok && string(dst) != tc.want {
				t.Errorf("blosclzDecode = %q, want %q", dst, tc.want)
			}
		})
	}
}

// TestBloscHeaderChecks feeds damaged blosc frames: errors, no panics.
func TestBloscHeaderChecks(t *testing.T) {
	c, err := newBlosc(bloscConfig{CName: "lz4", Shuffle: "shuffle"}, Float32)
	if err != nil {
		t.Fatal(err)
	}
	hdr := func(version, flags, typesize byte, nbytes, blocksize, cbytes uint32) []byte {
		b := []byte{version, 1, flags, typesize}
		b = binary.LittleEndian.AppendUint32(b, nbytes)
		b = binary.LittleEndian.AppendUint32(b, blocksize)
		return binary.LittleEndian.AppendUint32(b, cbytes)
	}
	memcpy := append(hdr(2, 0x02|0x10, 4, 8, 8, 24), 1, 2, 3, 4, 5, 6, 7, 8)
	tests := []struct {
		name string
		src  []byte
		room int
		is   error // nil: success
	}{
		{"memcpy frame", memcpy, 8, nil},
		{"short", memcpy[:10], 8, ErrCorrupt},
		{"future version", append(hdr(3, 0x02, 4, 8, 8, 24), make([]byte, 8)...), 8, ErrUnsupported},
		{"reserved flag", append(hdr(2, 0x08, 4, 8, 8, 24), make([]byte, 8)...), 8, ErrUnsupported},
		{"cbytes past end", hdr(2, 0x02, 4, 8, 8, 999), 8, ErrCorrupt},
		{"too big for room", memcpy, 4, ErrCorrupt},
		{"memcpy size mismatch", append(hdr(2, 0x02, 4, 9, 8, 24), make([]byte, 8)...), 9, ErrCorrupt},
		{"zero blocksize", append(hdr(2, 0x20, 4, 8, 0, 24), make([]byte, 8)...), 8, ErrCorrupt},
		{"bstarts missing", hdr(2, 0x20, 4, 1000, 8, 16), 1000, ErrCorrupt},
		{"split start outside", append(hdr(2, 0x20|0x10, 4, 8, 8, 24), 0xff, 0, 0, 0, 0, 0, 0, 0), 8, ErrCorrupt},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := c.decode(make([]byte, 0, tc.room), tc.src)
			if tc.is == nil {
				if err != nil || !bytes.Equal(got, []byte{1, 2, 3, 4, 5, 6, 7, 8}) {
					t.Errorf("decode = %v, %v", got, err)
				}
				return
			}
			if !errors.Is(err, tc.is) {
				t.Errorf("decode = %v, want an error wrapping %v", err, tc.is)
			}
		})
	}
}

// BenchmarkUnshuffleApart unshuffles a 4 MiB float32 chunk into a
// destination 0 bytes to 4 KiB - 64 after the source modulo 4 KiB: the
// reason getBufApart places scratch buffers 2 KiB apart.
func BenchmarkUnshuffleApart(b *testing.B) {
	src := genData(b, Uint8, []int64{4 << 20}, 1).Bytes // page-aligned: a large allocation
	big := make([]byte, 4<<20+4096)
	for _, off := range []int{0, 256, 2048, 4032} {
		b.Run(fmt.Sprint(off), func(b *testing.B) {
			dst := big[off : off+4<<20]
			b.SetBytes(int64(len(src)))
			for b.Loop() {
				unshuffle(dst, src, 4)
			}
		})
	}
}

// TestGetBufApart: the scratch buffer starts 2 KiB from dst modulo 4 KiB,
// has the length asked, and goes back to the free list.
func TestGetBufApart(t *testing.T) {
	ch, err := buildChain([]Codec{BytesCodec(false), ShuffleCodec(4), ZstdCodec(1, false)}, chunkRep{shape: []int64{1024}, dtype: Float32}, make([]byte, 4))
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 8192)
	for _, off := range []int{0, 1, 100, 2048, 4095} {
		dst := big[off : off+4096]
		view, whole := ch.getBufApart(4096, dst)
		d := uintptr(unsafe.Pointer(&dst[0])) % 4096
		v := uintptr(unsafe.Pointer(&view[0])) % 4096
		if len(view) != 4096 || (v+4096-d)%4096 != 2048 {
			t.Errorf("dst at %d mod 4096: view of %d bytes at %d mod 4096, want 4096 bytes at %d", d, len(view), v, (d+2048)%4096)
		}
		ch.putBuf(whole)
		if len(ch.free) == 0 {
			t.Errorf("putBuf(whole) did not keep the buffer")
		}
		<-ch.free
	}
}

func BenchmarkUnshuffle(b *testing.B) {
	for _, es := range []int{4, 8} {
		b.Run(fmt.Sprint(es), func(b *testing.B) {
			src := genData(b, Uint8, []int64{4 << 20}, 1).Bytes
			dst := make([]byte, len(src))
			b.SetBytes(int64(len(src)))
			for b.Loop() {
				unshuffle(dst, src, es)
			}
		})
	}
}
