package worker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/zarr"
)

// ErrRef is a reference that cannot be resolved: malformed, unknown
// scheme, or naming something that is not there. It is never turned into
// an empty value.
var ErrRef = errors.New("worker: unresolvable reference")

// ArrayValue returns an inline array Value of v's dtype and shape.
func ArrayValue(d *zarr.Data) Value {
	return Value{Kind: KindArray, DType: d.Type.String(), Shape: append([]int64(nil), d.Shape...), Data: d.Bytes}
}

// BlobRef returns the reference string of a blob.
func BlobRef(d fsstore.Digest) string { return "blob:" + d.String() }

// ZarrRef returns the reference string of rows [start, stop) of the
// array at path.
func ZarrRef(path string, start, stop int64) string {
	return fmt.Sprintf("zarr:%s?rows=%d:%d", path, start, stop)
}

// checkArray checks that an inline array's bytes match its dtype and
// shape.
func checkArray(v Value) error {
	return checkArrayLen(v, int64(len(v.Data)))
}

// checkArrayLen checks that n bytes match v's dtype and shape.
func checkArrayLen(v Value, n int64) error {
	t, err := zarr.ParseDataType(v.DType)
	if err != nil {
		return fmt.Errorf("worker: array dtype %q: %w", v.DType, err)
	}
	elems := int64(1)
	for _, s := range v.Shape {
		if s < 0 || (s > 0 && elems > math.MaxInt64/s) {
			return fmt.Errorf("worker: array shape %v: invalid dimension", v.Shape)
		}
		elems *= s
	}
	if elems > math.MaxInt64/8 {
		return fmt.Errorf("worker: array shape %v: too large", v.Shape)
	}
	if want := elems * int64(t.Size()); n != want {
		return fmt.Errorf("worker: array %s%v has %d bytes, want %d", v.DType, v.Shape, n, want)
	}
	return nil
}

// resolver turns references into inline values on the worker.
type resolver struct {
	store *fsstore.Store // nil: blob refs are refused
	cache *zarr.Cache    // node-local chunk cache for zarr refs, may be nil
	tmp   string         // node-local folder for decoded zarr rows the daemon maps; "" = inline
}

// resolve returns v with its bytes inline. An inline value is checked and
// returned as is.
func (r *resolver) resolve(ctx context.Context, v Value) (Value, error) {
	if v.Ref == "" {
		if v.Kind == KindArray {
			if err := checkArray(v); err != nil {
				return Value{}, err
			}
		}
		return v, nil
	}
	scheme, rest, _ := strings.Cut(v.Ref, ":")
	switch scheme {
	case "blob":
		return r.resolveBlob(ctx, v, rest)
	case "zarr":
		return r.resolveZarr(ctx, rest)
	}
	return Value{}, fmt.Errorf("%w: %q: unknown scheme %q (want blob: or zarr:)", ErrRef, v.Ref, scheme)
}

// resolveForPipe is resolve for a value the daemon receives: a blob
// reference becomes the blob's verified file, which daemon.py maps
// instead of receiving a copy of its bytes through the pipe (the store
// keeps the file unchanged).
func (r *resolver) resolveForPipe(ctx context.Context, v Value) (Value, error) {
	scheme, digest, _ := strings.Cut(v.Ref, ":")
	if scheme == "zarr" && r.tmp != "" {
		return r.resolveZarrToFile(ctx, digest)
	}
	if scheme != "blob" || r.store == nil || (v.Kind != KindArray && v.Kind != KindBytes) {
		return r.resolve(ctx, v)
	}
	d, err := fsstore.ParseDigest(digest)
	if err != nil {
		return Value{}, fmt.Errorf("%w: %q: %v", ErrRef, v.Ref, err)
	}
	path, size, err := r.store.VerifiedBlobFile(ctx, d)
	if err != nil {
		return Value{}, fmt.Errorf("%w: %q: %w", ErrRef, v.Ref, err)
	}
	out := Value{Kind: v.Kind, DType: v.DType, Shape: v.Shape, file: path, size: size}
	if out.Kind == KindArray {
		if err := checkArrayLen(out, size); err != nil {
			return Value{}, fmt.Errorf("%w: %q: %v", ErrRef, v.Ref, err)
		}
	}
	return out, nil
}

func (r *resolver) resolveBlob(ctx context.Context, v Value, digest string) (Value, error) {
	if r.store == nil {
		return Value{}, fmt.Errorf("%w: %q: this worker has no store (start soma-worker with --root)", ErrRef, v.Ref)
	}
	d, err := fsstore.ParseDigest(digest)
	if err != nil {
		return Value{}, fmt.Errorf("%w: %q: %v", ErrRef, v.Ref, err)
	}
	// Get rehashes the bytes: a corrupt blob is a *CorruptError here,
	// not data.
	b, err := r.store.Get(ctx, d)
	if err != nil {
		return Value{}, fmt.Errorf("%w: %q: %w", ErrRef, v.Ref, err)
	}
	out := Value{Kind: v.Kind, DType: v.DType, Shape: v.Shape, Data: b}
	switch out.Kind {
	case KindArray:
		if err := checkArray(out); err != nil {
			return Value{}, fmt.Errorf("%w: %q: %v", ErrRef, v.Ref, err)
		}
	case KindBytes:
	case "":
		out.Kind = KindBytes
	default:
		return Value{}, fmt.Errorf("%w: %q: a blob holds an array or bytes, not %q", ErrRef, v.Ref, v.Kind)
	}
	return out, nil
}

func (r *resolver) resolveZarr(ctx context.Context, rest string) (Value, error) {
	a, start, stop, err := r.openZarr(ctx, rest)
	if err != nil {
		return Value{}, err
	}
	d, err := a.ReadRows(ctx, start, stop)
	if err != nil {
		return Value{}, fmt.Errorf("%w: %q: %w", ErrRef, "zarr:"+rest, err)
	}
	return ArrayValue(d), nil
}

// openZarr opens the array of a zarr reference and returns its row range.
func (r *resolver) openZarr(ctx context.Context, rest string) (*zarr.Array, int64, int64, error) {
	ref := "zarr:" + rest
	path, query, _ := strings.Cut(rest, "?")
	if path == "" {
		return nil, 0, 0, fmt.Errorf("%w: %q: no array path", ErrRef, ref)
	}
	if !filepath.IsAbs(path) {
		if r.store == nil {
			return nil, 0, 0, fmt.Errorf("%w: %q: a relative path needs a store root (start soma-worker with --root, or give an absolute path)", ErrRef, ref)
		}
		path = filepath.Join(r.store.Root(), path)
	}
	rows := ""
	for _, kv := range strings.Split(query, "&") {
		if k, v, ok := strings.Cut(kv, "="); ok && k == "rows" {
			rows = v
		} else if kv != "" {
			return nil, 0, 0, fmt.Errorf("%w: %q: unknown parameter %q (want rows=A:B)", ErrRef, ref, kv)
		}
	}
	a, err := zarr.Open(ctx, path, zarr.Options{Cache: r.cache})
	if err != nil {
		return nil, 0, 0, fmt.Errorf("%w: %q: %w", ErrRef, ref, err)
	}
	if len(a.Shape()) == 0 {
		return nil, 0, 0, fmt.Errorf("%w: %q: a 0-dimensional array has no rows", ErrRef, ref)
	}
	start, stop := int64(0), a.Shape()[0]
	if rows != "" {
		start, stop, err = zarr.ParseRowRange(rows, a.Shape()[0])
		if err != nil {
			return nil, 0, 0, fmt.Errorf("%w: %q: %w", ErrRef, ref, err)
		}
	}
	return a, start, stop, nil
}

// resolveZarrToFile decodes a zarr reference's rows into a file under
// r.tmp that the daemon maps (zarrRowsToFile); where that is not
// possible the rows are resolved inline.
func (r *resolver) resolveZarrToFile(ctx context.Context, rest string) (Value, error) {
	a, start, stop, err := r.openZarr(ctx, rest)
	if err != nil {
		return Value{}, err
	}
	path, size, err := zarrRowsToFile(ctx, a, start, stop, r.tmp)
	if errors.Is(err, errors.ErrUnsupported) {
		return r.resolveZarr(ctx, rest)
	}
	if err != nil {
		return Value{}, fmt.Errorf("%w: %q: %w", ErrRef, "zarr:"+rest, err)
	}
	shape := append([]int64{stop - start}, a.Shape()[1:]...)
	return Value{Kind: KindArray, DType: a.DataType().String(), Shape: shape, file: path, size: size, temp: true}, nil
}

// deliver returns an output value as the result carries it: inline up to
// limit bytes, else as a blob of the store (when there is one).
func (r *resolver) deliver(ctx context.Context, v Value, limit int) (Value, error) {
	if r.store == nil || len(v.Data) <= limit || (v.Kind != KindArray && v.Kind != KindBytes) {
		return v, nil
	}
	d, err := r.store.Put(ctx, v.Data)
	if err != nil {
		return Value{}, fmt.Errorf("worker: store output: %w", err)
	}
	return Value{Kind: v.Kind, DType: v.DType, Shape: v.Shape, Ref: BlobRef(d)}, nil
}

// concatRows joins arrays along their first axis (a stream's chunks, for
// Fit): same dtype and trailing shape required.
func concatRows(vs []Value) (Value, error) {
	if len(vs) == 0 {
		return Value{}, errors.New("worker: no chunks")
	}
	first := vs[0]
	if len(vs) == 1 {
		return first, nil
	}
	if first.Kind != KindArray || len(first.Shape) == 0 {
		return Value{}, fmt.Errorf("worker: chunks to join must be arrays of at least one dimension, not %s", first.Kind)
	}
	out := Value{Kind: KindArray, DType: first.DType, Shape: append([]int64(nil), first.Shape...)}
	out.Shape[0] = 0
	size := 0
	for _, v := range vs {
		size += len(v.Data)
	}
	out.Data = make([]byte, 0, size)
	for i, v := range vs {
		if v.Kind != KindArray || v.DType != first.DType || len(v.Shape) != len(first.Shape) || !equalInts(v.Shape[1:], first.Shape[1:]) {
			return Value{}, fmt.Errorf("worker: chunk %d is %s%v, chunk 0 is %s%v: chunks must share dtype and trailing shape", i, v.DType, v.Shape, first.DType, first.Shape)
		}
		out.Shape[0] += v.Shape[0]
		out.Data = append(out.Data, v.Data...)
	}
	return out, nil
}

func equalInts(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
