package zarr

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
)

type shardingConfig struct {
	ChunkShape    []int64 `json:"chunk_shape"`
	Codecs        []Codec `json:"codecs"`
	IndexCodecs   []Codec `json:"index_codecs"`
	IndexLocation string  `json:"index_location,omitempty"`
}

// emptyEntry marks an inner chunk that is not stored (it reads as the
// fill value): offset and nbytes both 2^64-1 (sharding-indexed spec).
const emptyEntry = math.MaxUint64

// shardingCodec is "sharding_indexed": a chunk (the shard) holds a grid of
// inner chunks, each encoded with the inner codecs, plus an index of
// (offset, nbytes) pairs encoded with fixed-size index codecs.
type shardingCodec struct {
	cfg       shardingConfig
	inner     *chain
	index     *chain
	perShard  []int64 // inner chunks per shard along each dimension
	n         int64   // inner chunks per shard
	indexSize int64   // encoded index bytes
	atStart   bool
	fill      []byte
}

var _ arrayBytesCodec = (*shardingCodec)(nil)

func newSharding(cfg shardingConfig, in chunkRep, fill []byte) (*shardingCodec, error) {
	if len(cfg.ChunkShape) != len(in.shape) {
		return nil, fmt.Errorf("%w: sharding chunk_shape %v has %d dimensions, the shard %v has %d", ErrBadMetadata, cfg.ChunkShape, len(cfg.ChunkShape), in.shape, len(in.shape))
	}
	s := &shardingCodec{cfg: cfg, fill: fill, perShard: make([]int64, len(in.shape))}
	for i, c := range cfg.ChunkShape {
		if c <= 0 || in.shape[i]%c != 0 {
			return nil, fmt.Errorf("%w: sharding inner chunk_shape %v must be positive and divide the shard shape %v", ErrBadMetadata, cfg.ChunkShape, in.shape)
		}
		s.perShard[i] = in.shape[i] / c
	}
	s.n = prod(s.perShard)
	switch cfg.IndexLocation {
	case "", "end":
		s.cfg.IndexLocation = "end"
	case "start":
		s.atStart = true
	default:
		return nil, fmt.Errorf("%w: sharding index_location %q is not \"start\" or \"end\"", ErrBadMetadata, cfg.IndexLocation)
	}
	var err error
	if s.inner, err = buildChain(cfg.Codecs, chunkRep{shape: cfg.ChunkShape, dtype: in.dtype}, fill); err != nil {
		return nil, fmt.Errorf("sharding codecs: %w", err)
	}
	ishape := append(append([]int64{}, s.perShard...), 2)
	if s.index, err = buildChain(cfg.IndexCodecs, chunkRep{shape: ishape, dtype: Uint64}, make([]byte, 8)); err != nil {
		return nil, fmt.Errorf("sharding index_codecs: %w", err)
	}
	// The index must have a size known in advance (spec: fixed-size codecs
	// only): bytes, transpose and crc32c.
	if _, ok := s.index.ab.(*bytesArrayCodec); !ok {
		return nil, fmt.Errorf("%w: sharding index_codecs must use the bytes codec", ErrUnsupported)
	}
	s.indexSize = 16 * s.n
	for _, bc := range s.index.bb {
		if _, ok := bc.(*crc32cCodec); !ok {
			return nil, fmt.Errorf("%w: sharding index_codecs may only add crc32c after bytes (it must have a fixed size), not %s", ErrUnsupported, bc.spec().Name)
		}
		s.indexSize += 4
	}
	return s, nil
}

func (s *shardingCodec) spec() Codec {
	return mustCodec("sharding_indexed", shardingConfig{
		ChunkShape:    s.cfg.ChunkShape,
		Codecs:        s.inner.specs(),
		IndexCodecs:   s.index.specs(),
		IndexLocation: s.cfg.IndexLocation,
	})
}

func (s *shardingCodec) maxEncodedLen(rep chunkRep) int64 {
	return s.n*s.inner.encodedBound() + s.indexSize
}

// indexBytes returns the encoded index inside a whole shard.
func (s *shardingCodec) indexBytes(shard []byte) ([]byte, error) {
	if int64(len(shard)) < s.indexSize {
		return nil, corruptf("shard of %d bytes is shorter than its %d-byte index", len(shard), s.indexSize)
	}
	if s.atStart {
		return shard[:s.indexSize], nil
	}
	return shard[int64(len(shard))-s.indexSize:], nil
}

// parseIndex decodes an encoded index into 2n values (offset, nbytes per
// inner chunk, C order) and checks every stored range against shardLen.
func (s *shardingCodec) parseIndex(b []byte, shardLen int64) ([]uint64, error) {
	raw := make([]byte, 16*s.n)
	if err := s.index.decode(raw, b); err != nil {
		return nil, corruptf("shard index: %v", err)
	}
	out := make([]uint64, 2*s.n)
	for i := range out {
		out[i] = binary.LittleEndian.Uint64(raw[8*i:])
	}
	for k := int64(0); k < s.n; k++ {
		off, nb := out[2*k], out[2*k+1]
		if off == emptyEntry && nb == emptyEntry {
			continue
		}
		if off > uint64(shardLen) || nb > uint64(shardLen)-off {
			return nil, corruptf("shard index entry %d: bytes [%d, +%d) are outside the %d-byte shard", k, off, nb, shardLen)
		}
	}
	return out, nil
}

// innerOrigin returns the element origin of inner chunk k (C order)
// within the shard.
func (s *shardingCodec) innerOrigin(k int64) []int64 {
	o := make([]int64, len(s.perShard))
	for i := len(s.perShard) - 1; i >= 0; i-- {
		o[i] = (k % s.perShard[i]) * s.cfg.ChunkShape[i]
		k /= s.perShard[i]
	}
	return o
}

func (s *shardingCodec) decode(dst, src []byte, rep chunkRep) error {
	ib, err := s.indexBytes(src)
	if err != nil {
		return err
	}
	idx, err := s.parseIndex(ib, int64(len(src)))
	if err != nil {
		return err
	}
	inner := s.inner.rep
	scratch := s.inner.getBuf(inner.nbytes())
	defer s.inner.putBuf(scratch)
	zero := make([]int64, len(rep.shape))
	for k := int64(0); k < s.n; k++ {
		origin := s.innerOrigin(k)
		off, nb := idx[2*k], idx[2*k+1]
		if off == emptyEntry && nb == emptyEntry {
			fillBox(dst, rep.shape, origin, inner.shape, s.fill)
			continue
		}
		if err := s.inner.decode(scratch, src[off:off+nb]); err != nil {
			return fmt.Errorf("inner chunk %d: %w", k, err)
		}
		copyBox(dst, rep.shape, origin, scratch, inner.shape, zero, inner.shape, rep.dtype.Size())
	}
	return nil
}

func (s *shardingCodec) encode(src []byte, rep chunkRep) ([]byte, error) {
	inner := s.inner.rep
	scratch := make([]byte, inner.nbytes())
	zero := make([]int64, len(rep.shape))
	idx := make([]byte, 16*s.n)
	var body bytes.Buffer
	base := int64(0)
	if s.atStart {
		base = s.indexSize
	}
	for k := int64(0); k < s.n; k++ {
		copyBox(scratch, inner.shape, zero, src, rep.shape, s.innerOrigin(k), inner.shape, rep.dtype.Size())
		if allFill(scratch, s.fill) {
			binary.LittleEndian.PutUint64(idx[16*k:], emptyEntry)
			binary.LittleEndian.PutUint64(idx[16*k+8:], emptyEntry)
			continue
		}
		enc, err := s.inner.encode(scratch)
		if err != nil {
			return nil, fmt.Errorf("inner chunk %d: %w", k, err)
		}
		binary.LittleEndian.PutUint64(idx[16*k:], uint64(base+int64(body.Len())))
		binary.LittleEndian.PutUint64(idx[16*k+8:], uint64(len(enc)))
		body.Write(enc)
	}
	ienc, err := s.index.encode(idx)
	if err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	if int64(len(ienc)) != s.indexSize {
		return nil, fmt.Errorf("index encoded to %d bytes, expected %d", len(ienc), s.indexSize)
	}
	out := make([]byte, 0, len(ienc)+body.Len())
	if s.atStart {
		out = append(append(out, ienc...), body.Bytes()...)
	} else {
		out = append(append(out, body.Bytes()...), ienc...)
	}
	return out, nil
}

// allFill reports whether every element of b equals fill.
func allFill(b, fill []byte) bool {
	es := len(fill)
	if len(b) < es {
		return len(b) == 0
	}
	if !bytes.Equal(b[:es], fill) {
		return false
	}
	// b[es:] == b[:len-es] means b is periodic with period es.
	return bytes.Equal(b[es:], b[:len(b)-es])
}
