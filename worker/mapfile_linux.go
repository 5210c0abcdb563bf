//go:build linux

package worker

import (
	"context"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/soma-hpc/soma/zarr"
)

// zarrRowsToFile decodes rows [start, stop) of a straight into a new file
// in dir, through a shared mapping of it, and returns the file's path and
// size: the daemon maps the same file, so the rows are decoded once and
// never copied through the pipe. The caller removes the file once the
// daemon has mapped it.
func zarrRowsToFile(ctx context.Context, a *zarr.Array, start, stop int64, dir string) (string, int64, error) {
	shape := append([]int64{stop - start}, a.Shape()[1:]...)
	size := int64(a.DataType().Size())
	for _, s := range shape {
		size *= s
	}
	f, err := os.CreateTemp(dir, "zarr-rows-*")
	if err != nil {
		return "", 0, fmt.Errorf("worker: zarr rows: %w", err)
	}
	path := f.Name()
	defer f.Close()
	fail := func(err error) (string, int64, error) {
		os.Remove(path)
		return "", 0, fmt.Errorf("worker: zarr rows: %w", err)
	}
	if size == 0 {
		return path, 0, nil
	}
	if err := f.Truncate(size); err != nil {
		return fail(err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail(err)
	}
	start0 := make([]int64, len(shape))
	start0[0] = start
	err = a.ReadRegionInto(ctx, start0, &zarr.Data{Type: a.DataType(), Shape: shape, Bytes: m})
	if uerr := unix.Munmap(m); err == nil {
		err = uerr
	}
	if err != nil {
		return fail(err)
	}
	return path, size, nil
}
