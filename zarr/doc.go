// Package zarr reads and writes Zarr arrays in folders (Zarr v3, and v2 for
// the arrays users already have), so that a range of rows costs only the
// chunks that cover it, and repeated reads come from node-local disk.
//
// # Arrays
//
// Open reads an array's metadata (zarr.json for v3, .zarray and .zattrs
// for v2); Create makes a new one from a Spec. ReadRows(ctx, a, b) returns
// rows [a, b) of the first dimension; ReadRegion and ReadRegionInto read
// any box. Reads open only the chunk files that overlap the request and
// decode up to Options.Parallelism chunks at once. A chunk with no file
// reads as the fill value; a chunk that does not decode is an error
// (*ChunkError wrapping ErrCorrupt or ErrUnsupported) that names the
// array and the chunk key, never zeros.
//
// WriteRegion writes a box; Append adds rows. Every file is written with
// fsstore.WriteFileAtomic (temp file, fsync, rename, folder fsync), so a
// reader sees an old or a new chunk, never a mix. Append writes its
// chunks first and the metadata with the new shape last: a reader never
// sees a shape whose chunks are not written, and a crash keeps the old
// shape (zarr-python 2.13 resizes first, so a crash there exposes fill
// values; zarr-spec.md §7). Only the last chunk row is rewritten, and only
// if it is partial. One Array serializes its own writes; writers in
// different processes must not write the same array at once.
//
// # Formats
//
// Data types: bool, int8-64, uint8-64, float32, float64. v3 codecs: bytes
// (either endian), transpose, zstd, gzip, crc32c, numcodecs.shuffle,
// numcodecs.zlib, blosc (read only) and sharding_indexed (read and write;
// reads fetch the shard index and then only the inner chunks needed). v2
// arrays are mapped onto the same codecs: order F is a transpose, a ">"
// dtype is big-endian bytes, filters (shuffle) and compressors (zstd,
// gzip, zlib, blosc) are bytes-to-bytes codecs. Zstd frames are written
// with their content size (numcodecs < 0.12 cannot read frames without
// it) and read with or without it. Unknown codecs, data types and
// metadata fields are refused with ErrUnsupported or ErrBadMetadata; v3
// fields marked "must_understand": false are kept and ignored. blosc is
// read with every c-blosc 1.x compressor, shuffle and bitshuffle (any
// element size).
//
// # The chunk cache
//
// A Cache is a folder on node-local disk (DefaultCacheDir: Slurm's
// $SLURM_TMPDIR or $TMPDIR) holding decoded chunks, shared by the arrays
// and the processes of a node, bounded by CacheOptions.MaxBytes with
// least-recently-used eviction. An entry's key is a SHA-256 of the
// array's folder, the decoding (data type, chunk shape, codecs, fill), the
// chunk key and the identity of the chunk file (device, inode, size, mtime,
// ctime, read with open+fstat so that NFS revalidates them). A rewritten
// chunk has a new file and so a new key: a reader never gets the old bytes,
// in this process or another, and the stale entry is removed by the
// writer or ages out. The one function that turns a key into a path is
// used by both the read and the write side, and entries record their key
// (the original cache hashed a hex key on one side only and never hit,
// D-31). What is left: a stale hit needs a chunk file replaced twice within
// one tick of the file system's clock, reusing the inode number, with the
// same size.
//
// A warm cached read costs an open and fstat of the chunk file in the
// array's folder (for its identity) plus a read of the needed rows from
// the local entry; it reads no chunk bytes from the array's folder. A
// cache that fails (a full or broken local disk) does not fail reads:
// they go on from the array's files, and Stats.CacheErrors counts it.
// Without a cache, a read that needs only the first rows of a bytes+zstd
// chunk decodes only that prefix of it.
//
// # Concurrency and cost
//
// All calls block until done; goroutines they start finish before they
// return. Calls that block take a context.Context first and stop at the
// next chunk when it is canceled. An Array is safe for concurrent use; so
// is a Cache. There is no package-level state.
package zarr
