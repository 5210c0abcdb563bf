package zarr

import (
	"errors"
	"fmt"
)

// Sentinel errors to branch on with errors.Is.
var (
	// ErrUnsupported marks metadata that is valid Zarr but uses a data type,
	// codec or feature soma does not implement.
	ErrUnsupported = errors.New("unsupported")
	// ErrCorrupt marks a chunk or shard whose bytes do not decode: a
	// truncated file, a bad checksum, a size that does not match the chunk.
	// A missing chunk is not corrupt: it reads as the fill value.
	ErrCorrupt = errors.New("corrupt")
	// ErrBadMetadata marks a zarr.json or .zarray that is not valid Zarr.
	ErrBadMetadata = errors.New("bad metadata")
	// ErrOutOfRange marks a region or row range outside the array's shape.
	ErrOutOfRange = errors.New("out of range")
	// ErrExist is returned by Create when an array or other files are
	// already at the path.
	ErrExist = errors.New("already exists")
	// ErrNotArray is returned by Open when the path holds no array metadata
	// (or holds a group).
	ErrNotArray = errors.New("not a zarr array")
)

// ChunkError is the error for one chunk (or shard) of an array: it names
// the array's path and the chunk's key so that an operator can find the
// file.
type ChunkError struct {
	Array string // the array's folder
	Key   string // the chunk key, e.g. "c/1/0" or "1.0"; for an inner chunk of a shard, "c/1/0[3]"
	Op    string // "read", "decode", "write"
	Err   error
}

func (e *ChunkError) Error() string {
	hint := ""
	switch {
	case errors.Is(e.Err, ErrCorrupt):
		hint = " (the chunk file is damaged: restore it from a copy or rewrite that region)"
	case errors.Is(e.Err, ErrUnsupported):
		hint = " (this codec configuration is not implemented by soma)"
	}
	return fmt.Sprintf("zarr: array %s chunk %s: %s: %v%s", e.Array, e.Key, e.Op, e.Err, hint)
}

// Unwrap returns the cause.
func (e *ChunkError) Unwrap() error { return e.Err }

// MetadataError is the error for an array's metadata document.
type MetadataError struct {
	Path string // the metadata file
	Err  error
}

func (e *MetadataError) Error() string {
	return fmt.Sprintf("zarr: metadata %s: %v", e.Path, e.Err)
}

// Unwrap returns the cause.
func (e *MetadataError) Unwrap() error { return e.Err }

// corruptf returns an error wrapping ErrCorrupt.
func corruptf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}

// badMetaf returns an error wrapping ErrBadMetadata.
func badMetaf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadMetadata, fmt.Sprintf(format, args...))
}
