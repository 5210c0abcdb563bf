//go:build !amd64

package zarr

// unshuffleFast has no vector version on this architecture.
func unshuffleFast(dst, src []byte, es int) bool { return false }
