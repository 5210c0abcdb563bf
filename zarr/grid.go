package zarr

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// maxElements bounds any shape's element count so that sizes in bytes fit
// in an int64 (and, on 64-bit machines, an int) with room to spare.
const maxElements = 1 << 56

// numElements returns the product of shape, refusing negative extents and
// products that overflow.
func numElements(shape []int64) (int64, error) {
	n := int64(1)
	for _, s := range shape {
		if s < 0 {
			return 0, fmt.Errorf("negative extent in shape %v", shape)
		}
		if s != 0 && n > maxElements/s {
			return 0, fmt.Errorf("shape %v has more than 2^56 elements", shape)
		}
		n *= s
	}
	return n, nil
}

// prod is numElements for shapes already validated.
func prod(shape []int64) int64 {
	n := int64(1)
	for _, s := range shape {
		n *= s
	}
	return n
}

// ceilDiv returns ceil(a/b) for a >= 0, b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// gridShape returns the number of chunks along each dimension.
func gridShape(shape, chunk []int64) []int64 {
	g := make([]int64, len(shape))
	for i := range shape {
		g[i] = ceilDiv(shape[i], chunk[i])
	}
	return g
}

// span is the part of one chunk that a range of rows touches: chunk index
// Chunk, rows [Lo, Hi) within that chunk, which are rows [Off, Off+Hi-Lo)
// of the range.
type span struct {
	Chunk, Lo, Hi, Off int64
}

// spans splits the element range [start, stop) of one dimension with
// chunk length c into per-chunk pieces, in order. An empty range has no
// pieces. It is the whole of the chunk arithmetic of ReadRows and Append:
// an append of n rows to r rows writes spans(r, r+n, c), whose first piece
// keeps rows [0, Lo) of a partial last chunk (Lo > 0) and whose others are
// new chunks.
func spans(start, stop, c int64) []span {
	if stop <= start {
		return nil
	}
	first, last := start/c, (stop-1)/c
	out := make([]span, 0, last-first+1)
	for k := first; k <= last; k++ {
		lo := max(start, k*c) - k*c
		hi := min(stop, (k+1)*c) - k*c
		out = append(out, span{Chunk: k, Lo: lo, Hi: hi, Off: k*c + lo - start})
	}
	return out
}

// keyEncoding turns chunk grid coordinates into store keys.
type keyEncoding struct {
	v2Style bool   // "1.2" instead of "c/1/2"
	sep     string // "/" or "."
}

// key returns the store key of the chunk at coord.
func (k keyEncoding) key(coord []int64) string {
	var b strings.Builder
	if !k.v2Style {
		b.WriteString("c")
		for _, c := range coord {
			b.WriteString(k.sep)
			b.WriteString(strconv.FormatInt(c, 10))
		}
		return b.String()
	}
	if len(coord) == 0 {
		return "0"
	}
	for i, c := range coord {
		if i > 0 {
			b.WriteString(k.sep)
		}
		b.WriteString(strconv.FormatInt(c, 10))
	}
	return b.String()
}

// strides returns C-order element strides for shape.
func strides(shape []int64) []int64 {
	st := make([]int64, len(shape))
	s := int64(1)
	for i := len(shape) - 1; i >= 0; i-- {
		st[i] = s
		s *= shape[i]
	}
	return st
}

// contiguous reports whether the box [off, off+count) of an array of the
// given shape is one contiguous run of memory in C order, and returns its
// first element's linear index.
func contiguous(shape, off, count []int64) (bool, int64) {
	n := len(shape)
	st := strides(shape)
	start := int64(0)
	for i := range n {
		start += off[i] * st[i]
	}
	// Find the outermost dimension with count > 1; every dimension after
	// it must be taken whole.
	k := 0
	for k < n && count[k] == 1 {
		k++
	}
	for j := k + 1; j < n; j++ {
		if count[j] != shape[j] {
			return false, start
		}
	}
	return true, start
}

// lastElement returns the C-order linear index of the last element of the
// (non-empty) box [off, off+count) in an array of the given shape.
func lastElement(shape, off, count []int64) int64 {
	st := strides(shape)
	var n int64
	for i := range shape {
		n += (off[i] + count[i] - 1) * st[i]
	}
	return n
}

// copyBox copies the box of extent count from src (shape srcShape, box
// origin srcOff) to dst (shape dstShape, origin dstOff). Elements are es
// bytes. Trailing dimensions that both arrays take whole are merged so
// that full-width rows cost one copy each.
func copyBox(dst []byte, dstShape, dstOff []int64, src []byte, srcShape, srcOff []int64, count []int64, es int) {
	n := len(count)
	if n == 0 {
		copy(dst[:es], src[:es])
		return
	}
	for _, c := range count {
		if c == 0 {
			return
		}
	}
	ds, ss := strides(dstShape), strides(srcShape)
	// j is the dimension at which runs start: dims after j are whole in
	// both arrays.
	j := n - 1
	for j > 0 && count[j] == srcShape[j] && count[j] == dstShape[j] {
		j--
	}
	run := count[j] * ss[j] * int64(es)
	if j == n-1 {
		run = count[j] * int64(es)
	}
	idx := make([]int64, j) // odometer over dims [0, j)
	for {
		var so, do int64
		for i := range j {
			so += (srcOff[i] + idx[i]) * ss[i]
			do += (dstOff[i] + idx[i]) * ds[i]
		}
		so += srcOff[j] * ss[j]
		do += dstOff[j] * ds[j]
		copy(dst[do*int64(es):do*int64(es)+run], src[so*int64(es):so*int64(es)+run])
		i := j - 1
		for ; i >= 0; i-- {
			idx[i]++
			if idx[i] < count[i] {
				break
			}
			idx[i] = 0
		}
		if i < 0 {
			return
		}
	}
}

// fillBox writes the element pattern fill into every element of the box
// [off, off+count) of dst (shape shape).
func fillBox(dst []byte, shape, off, count []int64, fill []byte) {
	es := len(fill)
	n := len(count)
	if n == 0 {
		copy(dst[:es], fill)
		return
	}
	for _, c := range count {
		if c == 0 {
			return
		}
	}
	st := strides(shape)
	j := n - 1
	for j > 0 && count[j] == shape[j] {
		j--
	}
	runElems := count[j] * st[j]
	if j == n-1 {
		runElems = count[j]
	}
	idx := make([]int64, j)
	for {
		var o int64
		for i := range j {
			o += (off[i] + idx[i]) * st[i]
		}
		o += off[j] * st[j]
		fillPattern(dst[o*int64(es):(o+runElems)*int64(es)], fill)
		i := j - 1
		for ; i >= 0; i-- {
			idx[i]++
			if idx[i] < count[i] {
				break
			}
			idx[i] = 0
		}
		if i < 0 {
			return
		}
	}
}

// fillPattern repeats pat over b (len(b) a multiple of len(pat)).
func fillPattern(b, pat []byte) {
	if len(b) == 0 {
		return
	}
	allZero := true
	for _, c := range pat {
		if c != 0 {
			allZero = false
			break
		}
	}
	if allZero {
		clear(b)
		return
	}
	n := copy(b, pat)
	for n < len(b) {
		n += copy(b[n:], b[:n])
	}
}

// checkRegion validates 0 <= start <= stop <= shape.
func checkRegion(shape, start, stop []int64) error {
	if len(start) != len(shape) || len(stop) != len(shape) {
		return fmt.Errorf("%w: region [%v, %v) has %d/%d dimensions, array has %d", ErrOutOfRange, start, stop, len(start), len(stop), len(shape))
	}
	for i := range shape {
		if start[i] < 0 || start[i] > stop[i] || stop[i] > shape[i] {
			return fmt.Errorf("%w: region [%v, %v) is not inside shape %v", ErrOutOfRange, start, stop, shape)
		}
	}
	return nil
}

// addOverflows reports whether a+b overflows int64 for a, b >= 0.
func addOverflows(a, b int64) bool { return a > math.MaxInt64-b }
