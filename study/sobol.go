package study

import (
	"fmt"
	"math/bits"
)

// sobolBits is B, the number of bits of each coordinate (scipy's default).
const sobolBits = 30

// sobolDirections holds (s, a, m₁…m_s) for dimensions 2..21 from Joe & Kuo's
// new-joe-kuo-6.21201 (SIAM J. Sci. Comput. 30(5), 2008; the file is
// on web.maths.unsw.edu.au/~fkuo/sobol/). Dimension 1 has m_k = 1 for all k.
var sobolDirections = [...]struct {
	s, a uint32
	m    []uint32
}{
	{1, 0, []uint32{1}},
	{2, 1, []uint32{1, 3}},
	{3, 1, []uint32{1, 3, 1}},
	{3, 2, []uint32{1, 1, 1}},
	{4, 1, []uint32{1, 1, 3, 3}},
	{4, 4, []uint32{1, 3, 5, 13}},
	{5, 2, []uint32{1, 1, 5, 5, 17}},
	{5, 4, []uint32{1, 1, 5, 5, 5}},
	{5, 7, []uint32{1, 1, 7, 11, 19}},
	{5, 11, []uint32{1, 1, 5, 1, 1}},
	{5, 13, []uint32{1, 1, 1, 3, 11}},
	{5, 14, []uint32{1, 3, 5, 5, 31}},
	{6, 1, []uint32{1, 3, 3, 9, 7, 49}},
	{6, 13, []uint32{1, 1, 1, 15, 21, 21}},
	{6, 16, []uint32{1, 3, 1, 13, 27, 49}},
	{6, 19, []uint32{1, 1, 1, 15, 7, 5}},
	{6, 22, []uint32{1, 3, 1, 15, 13, 25}},
	{6, 25, []uint32{1, 1, 5, 5, 19, 61}},
	{7, 1, []uint32{1, 3, 7, 11, 23, 15, 103}},
	{7, 4, []uint32{1, 3, 7, 13, 13, 15, 69}},
}

// sobolMaxDim is the number of dimensions with direction numbers; knobs
// past it are drawn from counter-based random streams instead.
const sobolMaxDim = len(sobolDirections) + 1

// sobolV returns the unscrambled direction integers V_d[0..B-1] of
// dimension d (0-based: d = 0 is the first dimension).
func sobolV(d int) [sobolBits]uint32 {
	var m [sobolBits + 1]uint32 // 1-based m_k
	if d == 0 {
		for k := 1; k <= sobolBits; k++ {
			m[k] = 1
		}
	} else {
		row := sobolDirections[d-1]
		s := int(row.s)
		for k := 1; k <= s; k++ {
			m[k] = row.m[k-1]
		}
		for k := s + 1; k <= sobolBits; k++ {
			x := m[k-s] ^ (m[k-s] << uint(s))
			for j := 1; j < s; j++ {
				if (row.a>>uint(s-1-j))&1 == 1 {
					x ^= m[k-j] << uint(j)
				}
			}
			m[k] = x
		}
	}
	var v [sobolBits]uint32
	for k := 0; k < sobolBits; k++ {
		v[k] = m[k+1] << uint(sobolBits-1-k)
	}
	return v
}

// sobolDim is one dimension's scrambled direction integers and shift.
type sobolDim struct {
	v     [sobolBits]uint32
	shift uint32
}

// scrambledDim applies a random linear matrix scramble and digital shift
// (Matoušek 1998; scipy's _scramble) to dimension d, with bits drawn from
// the stream (seed, d). The point set stays index-addressable: point i is
// shift ⊕ XOR of v[k] over the set bits k of gray(i).
func scrambledDim(seed uint64, d int) sobolDim {
	base := sobolV(d)
	st := newStream(seed, d, "sobol/scramble")
	// Row r (MSB-first) of the lower-triangular L: bits c < r random,
	// bit r set; stored as a mask over the coordinate's bit positions.
	var rows [sobolBits]uint32
	for r := 0; r < sobolBits; r++ {
		below := uint32(st.uint64(r)) // random bits
		var mask uint32
		for c := 0; c < r; c++ {
			if below>>uint(c)&1 == 1 {
				mask |= 1 << uint(sobolBits-1-c)
			}
		}
		rows[r] = mask | 1<<uint(sobolBits-1-r)
	}
	var out sobolDim
	for k, vk := range base {
		var x uint32
		for r := 0; r < sobolBits; r++ {
			if bits.OnesCount32(rows[r]&vk)&1 == 1 {
				x |= 1 << uint(sobolBits-1-r)
			}
		}
		out.v[k] = x
	}
	out.shift = uint32(st.uint64(sobolBits)) & (1<<sobolBits - 1)
	return out
}

// sobolPoint returns coordinate u ∈ [0, 1) of point i in one dimension.
func (d *sobolDim) at(i uint64) float64 {
	g := i ^ (i >> 1)
	x := d.shift
	for k := 0; g != 0 && k < sobolBits; k++ {
		if g&1 == 1 {
			x ^= d.v[k]
		}
		g >>= 1
	}
	return float64(x) * (1.0 / (1 << sobolBits))
}

// SobolSampler proposes point n of a scrambled Sobol sequence for trial n:
// quasi-random points that fill the space more evenly than random ones,
// each a pure function of (seed, trial). Knob i is dimension i; knobs past
// the 21st are drawn from counter-based random streams. Use budgets that
// are powers of two for the best balance. It ignores the history.
type SobolSampler struct {
	seed uint64
	dims []sobolDim
}

// NewSobolSampler returns a SobolSampler with the given seed; the seed
// picks the scramble.
func NewSobolSampler(seed uint64) *SobolSampler {
	s := &SobolSampler{seed: seed, dims: make([]sobolDim, sobolMaxDim)}
	for d := range s.dims {
		s.dims[d] = scrambledDim(seed, d)
	}
	return s
}

// Ask returns point trial of the sequence.
func (s *SobolSampler) Ask(space *Space, trial int, _ History) (Point, error) {
	if trial < 0 || trial >= 1<<sobolBits {
		return Point{}, fmt.Errorf("study: sampler sobol: trial %d outside [0, 2^%d)", trial, sobolBits)
	}
	return s.point(space, trial), nil
}

func (s *SobolSampler) point(space *Space, trial int) Point {
	v := s.values(space, trial)
	if space.conds != nil {
		// Knob i stays dimension i whatever is present, so the present
		// knobs of a branch keep the sequence's balance among themselves.
		space.mask(v)
	}
	return Point{v: v}
}

// values returns point trial's value for every knob, present or not.
func (s *SobolSampler) values(space *Space, trial int) []float64 {
	v := make([]float64, len(space.knobs))
	for i, k := range space.knobs {
		var u float64
		if i < len(s.dims) {
			u = s.dims[i].at(uint64(trial))
		} else {
			u = newStream(s.seed, trial, "sobol/"+k.Name).float(0)
		}
		v[i] = space.fromUnit(i, u)
	}
	return v
}

var _ Sampler = (*SobolSampler)(nil)
