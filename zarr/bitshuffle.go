package zarr

import "encoding/binary"

// bitUnshuffle undoes c-blosc 1.x's bitshuffle of one block (src) into
// dst, for elements of ts bytes. It follows what c-blosc writes in format
// version 2 (the only one c-blosc 1.x writes, and what numcodecs' Blosc
// and so zarr-python 2 and 3 produce): when the block holds a multiple of
// 8 whole elements, those elements are bit-transposed and the bytes after
// them (len(src) % ts of them) are copied; otherwise the whole block is
// copied untouched (c-blosc 1.21 shuffle.c bitshuffle/bitunshuffle, kept
// as the format_version == 2 branch of c-blosc2's bitunshuffle; c-blosc2's
// own formats, version 3 and up, transpose the first n - n%8 elements
// instead, and soma does not read those frames).
//
// The transposed layout (bitshuffle-generic.c, bshuf_trans_bit_elem):
// for byte j of an element and bit k of that byte, row j*8+k holds n/8
// bytes, and bit i%8 of byte i/8 of the row is bit k of byte j of element i.
//
// len(dst) must be at least len(src).
func bitUnshuffle(dst, src []byte, ts int) {
	n := len(src) / ts
	if n%8 != 0 {
		copy(dst, src)
		return
	}
	whole := n * ts
	bitUntranspose(dst[:whole], src[:whole], n, ts)
	copy(dst[whole:len(src)], src[whole:])
}

// bitUntranspose is bshuf_untrans_bit_elem for n elements (n % 8 == 0)
// of ts bytes: each group of 8 elements and byte j is one 8x8 bit matrix
// whose rows are the 8 bit rows of byte j.
func bitUntranspose(dst, src []byte, n, ts int) {
	n8 := n / 8
	for j := range ts {
		rows := src[j*8*n8 : (j+1)*8*n8]
		r0, r1, r2, r3 := rows[0:n8], rows[n8:2*n8], rows[2*n8:3*n8], rows[3*n8:4*n8]
		r4, r5, r6, r7 := rows[4*n8:5*n8], rows[5*n8:6*n8], rows[6*n8:7*n8], rows[7*n8:8*n8]
		if ts == 1 {
			// One-byte elements land contiguously: 8 at a time.
			for g := range r0 {
				x := uint64(r0[g]) | uint64(r1[g])<<8 | uint64(r2[g])<<16 | uint64(r3[g])<<24 |
					uint64(r4[g])<<32 | uint64(r5[g])<<40 | uint64(r6[g])<<48 | uint64(r7[g])<<56
				binary.LittleEndian.PutUint64(dst[8*g:], transposeBits8(x))
			}
			continue
		}
		for g := range r0 {
			x := uint64(r0[g]) | uint64(r1[g])<<8 | uint64(r2[g])<<16 | uint64(r3[g])<<24 |
				uint64(r4[g])<<32 | uint64(r5[g])<<40 | uint64(r6[g])<<48 | uint64(r7[g])<<56
			x = transposeBits8(x)
			out := dst[8*g*ts+j : 8*g*ts+j+7*ts+1]
			for m := range 8 {
				out[m*ts] = byte(x >> (8 * m))
			}
		}
	}
}

// transposeBits8 transposes x as an 8x8 bit matrix whose row r is byte r
// (little-endian) and column c is bit c: bit c of byte r moves to bit r
// of byte c (bitshuffle's TRANS_BIT_8X8, from Hacker's Delight 7-3).
func transposeBits8(x uint64) uint64 {
	t := (x ^ (x >> 7)) & 0x00AA00AA00AA00AA
	x ^= t ^ (t << 7)
	t = (x ^ (x >> 14)) & 0x0000CCCC0000CCCC
	x ^= t ^ (t << 14)
	t = (x ^ (x >> 28)) & 0x00000000F0F0F0F0
	x ^= t ^ (t << 28)
	return x
}
