package zarr

// unshuffle4SSE2 and unshuffle8SSE2 interleave byte planes 16 elements at
// a time (unshuffle_amd64.s); they ignore the last n % 16 elements.
//
//go:noescape
func unshuffle4SSE2(dst, src *byte, n int)

//go:noescape
func unshuffle8SSE2(dst, src *byte, n int)

// unshuffleFast handles element sizes 4 and 8 with SSE2, reporting
// whether it did; the tail of n % 16 elements goes through the byte loop.
func unshuffleFast(dst, src []byte, es int) bool {
	n := len(src) / es
	if (es != 4 && es != 8) || n < 16 || len(dst) < n*es || len(src) < n*es {
		return false
	}
	if es == 4 {
		unshuffle4SSE2(&dst[0], &src[0], n)
	} else {
		unshuffle8SSE2(&dst[0], &src[0], n)
	}
	for i := n &^ 15; i < n; i++ {
		for b := range es {
			dst[i*es+b] = src[b*n+i]
		}
	}
	return true
}
