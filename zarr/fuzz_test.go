package zarr

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParseMetadata: parsing never panics, and whatever parses writes
// back to a document that parses to the same metadata. The seeds (run by
// a plain `go test`) are every fixture's metadata plus hand-made edge
// cases.
func FuzzParseMetadata(f *testing.F) {
	f.Add([]byte(goodV3), true)
	f.Add([]byte(goodV2), false)
	f.Add([]byte(`{"zarr_format":3,"node_type":"array","shape":[],"data_type":"bool","chunk_grid":{"name":"regular","configuration":{"chunk_shape":[]}},"chunk_key_encoding":{"name":"v2"},"fill_value":false,"codecs":["bytes"]}`), true)
	f.Add([]byte(`{"zarr_format":2,"shape":[3],"chunks":[2],"dtype":">u8","compressor":null,"fill_value":null,"order":"F","filters":null}`), false)
	f.Add([]byte(`{"zarr_format":3,"shape":[1e400]}`), true)
	f.Add([]byte(`{"zarr_format":3,"node_type":"array","shape":[4],"data_type":"int8","chunk_grid":{"name":"regular","configuration":{"chunk_shape":[4]}},"chunk_key_encoding":{"name":"default"},"fill_value":1,"codecs":[{"name":"sharding_indexed","configuration":{"chunk_shape":[2],"codecs":[{"name":"sharding_indexed","configuration":{"chunk_shape":[1],"codecs":["bytes"],"index_codecs":[{"name":"bytes","configuration":{"endian":"big"}}]}}],"index_codecs":[{"name":"bytes","configuration":{"endian":"little"}},"crc32c"]}}]}`), true)
	for _, pat := range []string{"testdata/zarr-v3/*/zarr.json", "testdata/zarr-v2/*/.zarray"} {
		files, _ := filepath.Glob(pat)
		for _, p := range files {
			b, err := os.ReadFile(p)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b, filepath.Base(p) == "zarr.json")
		}
	}
	f.Fuzz(func(t *testing.T, doc []byte, v3 bool) {
		var m *meta
		var err error
		if v3 {
			m, err = parseV3(doc)
		} else {
			m, err = parseV2(doc, nil)
		}
		if err != nil {
			return
		}
		if _, err := newState(m, "/fuzz"); err != nil {
			return
		}
		var out []byte
		if v3 {
			out, err = m.marshalV3()
		} else {
			out, err = m.marshalV2()
		}
		if err != nil {
			if v3 {
				t.Fatalf("marshalV3 of parsed metadata: %v", err)
			}
			return // e.g. blosc has no v2 spelling soma writes
		}
		var m2 *meta
		if v3 {
			m2, err = parseV3(out)
		} else {
			m2, err = parseV2(out, nil)
		}
		if err != nil {
			t.Fatalf("written metadata does not parse: %v\n%s", err, out)
		}
		var out2 []byte
		if v3 {
			out2, _ = m2.marshalV3()
		} else {
			out2, _ = m2.marshalV2()
		}
		if !bytes.Equal(out, out2) {
			t.Fatalf("metadata changed on a second round trip:\n%s\n%s", out, out2)
		}
	})
}

// fuzzChains are the codec chains FuzzCodecChain exercises, for an int16
// chunk of shape [3, 4] (sharded: [2, 2] inner chunks of a [4, 4] shard).
func fuzzChains() []struct {
	codecs []Codec
	shape  []int64
} {
	le, be := BytesCodec(false), BytesCodec(true)
	return []struct {
		codecs []Codec
		shape  []int64
	}{
		{[]Codec{le}, []int64{3, 4}},
		{[]Codec{be, ZstdCodec(3, false)}, []int64{3, 4}},
		{[]Codec{le, ShuffleCodec(2), ZstdCodec(1, true)}, []int64{3, 4}},
		{[]Codec{TransposeCodec(1, 0), le, GzipCodec(1), CRC32CCodec()}, []int64{3, 4}},
		{[]Codec{le, mustCodec("numcodecs.zlib", gzipConfig{Level: 1})}, []int64{3, 4}},
		{[]Codec{le, mustCodec("blosc", bloscConfig{CName: "lz4", Shuffle: "shuffle", TypeSize: 2})}, []int64{3, 4}},
		{[]Codec{ShardingCodec([]int64{2, 2}, []Codec{le, ZstdCodec(1, false)}, []Codec{le, CRC32CCodec()}, false)}, []int64{4, 4}},
		{[]Codec{ShardingCodec([]int64{2, 2}, []Codec{TransposeCodec(1, 0), be}, []Codec{be}, true)}, []int64{4, 4}},
	}
}

// FuzzCodecChain: for every chain, encode then decode returns the chunk;
// decoding arbitrary bytes returns an error or a chunk, never panics or
// writes outside the chunk.
func FuzzCodecChain(f *testing.F) {
	f.Add(uint8(0), []byte("0123456789abcdef0123456789abcdef"), false)
	f.Add(uint8(1), []byte{0x28, 0xb5, 0x2f, 0xfd, 0x20, 0x18, 0xc1, 0, 0, 1, 2, 3}, true)
	f.Add(uint8(3), bytes.Repeat([]byte{0x1f, 0x8b}, 20), true)
	f.Add(uint8(5), []byte{2, 1, 0x21, 2, 24, 0, 0, 0, 24, 0, 0, 0, 40, 0, 0, 0}, true)
	f.Add(uint8(6), make([]byte, 68), true)
	f.Add(uint8(7), bytes.Repeat([]byte{0xff}, 64), true)
	for i := range fuzzChains() {
		f.Add(uint8(i), []byte("some chunk data that is long enough for a 4x4 int16"), false)
	}
	chains := fuzzChains()
	built := make([]*chain, len(chains))
	for i, c := range chains {
		ch, err := buildChain(c.codecs, chunkRep{shape: c.shape, dtype: Int16}, []byte{0xf9, 0xff})
		if err != nil {
			f.Fatalf("chain %d: %v", i, err)
		}
		built[i] = ch
	}
	f.Fuzz(func(t *testing.T, which uint8, data []byte, asEncoded bool) {
		ch := built[int(which)%len(built)]
		n := ch.rep.nbytes()
		// Guard bytes after the chunk catch writes outside it.
		dst := make([]byte, n+8)
		for i := range dst {
			dst[i] = 0xa5
		}
		if asEncoded {
			if err := ch.decode(dst[:n:n], data); err != nil {
				return
			}
		} else {
			chunk := make([]byte, n)
			copy(chunk, data)
			if readOnly(ch) {
				return // soma does not write blosc
			}
			enc, err := ch.encode(chunk)
			if err != nil {
				t.Fatalf("encode: %v", err)
			}
			if int64(len(enc)) > ch.encodedBound() {
				t.Fatalf("encoded %d bytes, bound %d", len(enc), ch.encodedBound())
			}
			if err := ch.decode(dst[:n:n], enc); err != nil {
				t.Fatalf("decode(encode(x)): %v", err)
			}
			if !bytes.Equal(dst[:n], chunk) {
				t.Fatalf("decode(encode(x)) != x")
			}
		}
		for _, b := range dst[n:] {
			if b != 0xa5 {
				t.Fatalf("decode wrote past the chunk")
			}
		}
	})
}

// readOnly reports a chain soma can decode but not encode (blosc).
func readOnly(ch *chain) bool {
	for _, bc := range ch.bb {
		if _, ok := bc.(*bloscCodec); ok {
			return true
		}
	}
	return false
}

// FuzzBloscDecode: blosc frames from other writers are parsed by hand;
// damaged ones must fail cleanly. Seeds are the fixtures' blosc chunks,
// shuffled and bitshuffled.
func FuzzBloscDecode(f *testing.F) {
	for _, pat := range []string{"testdata/zarr-v2/float32_blosc_lz4_shuffle.zarr/*", "testdata/zarr-v3/float32_blosc_zstd_shuffle.zarr/c/*/*",
		"testdata/blosc/v2_uint8_bitshuffle_c800.zarr/0", "testdata/blosc/v2_float64_bitshuffle_c600_b128.zarr/0",
		"testdata/blosc/v3_float32_bitshuffle_blosclz5_c800_b0.zarr/c/1", "testdata/blosc/v2_uint16_bitshuffle_c601_b200.zarr/0"} {
		files, _ := filepath.Glob(pat)
		for _, p := range files {
			if b, err := os.ReadFile(p); err == nil && filepath.Base(p)[0] != '.' {
				f.Add(b, uint16(48))
			}
		}
	}
	f.Add([]byte{2, 1, 0x21, 4, 0, 2, 0, 0, 0, 2, 0, 0, 40, 0, 0, 0, 20, 0, 0, 0, 4, 0, 0, 0, 0x10, 0x20, 0x30, 0x40}, uint16(512))
	c, err := newBlosc(bloscConfig{CName: "lz4", Shuffle: "shuffle"}, Float32)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, src []byte, room uint16) {
		out, err := c.decode(make([]byte, 0, int(room)), src)
		if err == nil && len(out) > int(room) {
			t.Fatalf("decoded %d bytes into room for %d", len(out), room)
		}
	})
}
