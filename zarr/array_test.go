package zarr

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// chainCases are codec chains every round-trip test runs through (as v3;
// the ones with a v2 spelling also as v2).
func chainCases(dt DataType) []struct {
	name   string
	codecs []Codec
	v2     bool
} {
	le, be := BytesCodec(false), BytesCodec(true)
	es := dt.Size()
	return []struct {
		name   string
		codecs []Codec
		v2     bool
	}{
		{"default", nil, true},
		{"raw", []Codec{le}, true},
		{"big-endian gzip", []Codec{be, GzipCodec(5)}, true},
		{"big-endian zstd", []Codec{be, ZstdCodec(1, false)}, true},
		{"shuffle zstd", []Codec{le, ShuffleCodec(es), ZstdCodec(3, false)}, true},
		{"transpose crc32c", []Codec{TransposeCodec(1, 0), le, ZstdCodec(1, true), CRC32CCodec()}, false},
		{"F order checksum", []Codec{TransposeCodec(1, 0), le, ZstdCodec(1, true)}, true},
		{"zlib", []Codec{le, mustCodec("numcodecs.zlib", gzipConfig{Level: 1})}, true},
		{"sharded", []Codec{ShardingCodec([]int64{2, 3}, []Codec{le, ZstdCodec(1, false)}, []Codec{le, CRC32CCodec()}, false)}, false},
		{"sharded start, inner transpose", []Codec{ShardingCodec([]int64{4, 1}, []Codec{TransposeCodec(1, 0), be, GzipCodec(1)}, []Codec{be}, true)}, false},
	}
}

var allTypes = []DataType{Bool, Int8, Int16, Int32, Int64, Uint8, Uint16, Uint32, Uint64, Float32, Float64}

// TestRoundTrip writes every data type through every codec chain in both
// formats and reads back whole arrays, row ranges and boxes.
func TestRoundTrip(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	shape, chunks := []int64{13, 7}, []int64{4, 3}
	for _, dt := range allTypes {
		for _, cc := range chainCases(dt) {
			for _, format := range []Format{V3, V2} {
				if format == V2 && !cc.v2 {
					continue
				}
				name := fmt.Sprintf("%v/%s/%v", dt, cc.name, format)
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					path := filepath.Join(dir, strings.NewReplacer("/", "_", " ", "_", ",", "").Replace(name))
					a := mustCreate(t, path, Spec{Format: format, Shape: shape, ChunkShape: chunks, DataType: dt, Codecs: cc.codecs}, Options{Parallelism: 3})
					want := genData(t, dt, shape, 42)
					if err := a.WriteRegion(ctx, []int64{0, 0}, want); err != nil {
						t.Fatalf("WriteRegion: %v", err)
					}
					b, err := Open(ctx, path, Options{})
					if err != nil {
						t.Fatalf("Open: %v", err)
					}
					got, err := b.ReadRegion(ctx, []int64{0, 0}, shape)
					if err != nil {
						t.Fatalf("ReadRegion: %v", err)
					}
					if !bytes.Equal(got.Bytes, want.Bytes) {
						t.Fatalf("ReadRegion(all) differs from what was written")
					}
					for _, r := range [][2]int64{{0, 0}, {0, 1}, {3, 4}, {4, 8}, {5, 7}, {2, 13}, {12, 13}} {
						got, err := b.ReadRows(ctx, r[0], r[1])
						if err != nil {
							t.Fatalf("ReadRows(%d, %d): %v", r[0], r[1], err)
						}
						if w := region(want, []int64{r[0], 0}, []int64{r[1] - r[0], 7}); !bytes.Equal(got.Bytes, w.Bytes) {
							t.Errorf("ReadRows(%d, %d) differs", r[0], r[1])
						}
					}
					box, err := b.ReadRegion(ctx, []int64{3, 2}, []int64{10, 6})
					if err != nil {
						t.Fatalf("ReadRegion(box): %v", err)
					}
					if w := region(want, []int64{3, 2}, []int64{7, 4}); !bytes.Equal(box.Bytes, w.Bytes) {
						t.Errorf("ReadRegion([3 2], [10 6]) differs")
					}
				})
			}
		}
	}
}

// TestReadRowsReadsOnlyCoveringChunks checks ReadRows at every boundary
// against the data and against the number of chunks it reads.
func TestReadRowsReadsOnlyCoveringChunks(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "a.zarr")
	const rows, c = 20, 4
	a := mustCreate(t, path, Spec{Shape: []int64{rows, 3}, ChunkShape: []int64{c, 3}, DataType: Int32, FillValue: -7}, Options{})
	want := genData(t, Int32, []int64{rows, 3}, 1)
	if err := a.WriteRegion(ctx, []int64{0, 0}, want); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name        string
		start, stop int64
		chunks      int64
	}{
		{"empty", 6, 6, 0},
		{"one row", 6, 7, 1},
		{"inside one chunk", 5, 7, 1},
		{"exactly one chunk", 8, 12, 1},
		{"ending on a boundary", 6, 12, 2},
		{"across many", 3, 17, 5},
		{"last row", 19, 20, 1},
		{"all", 0, 20, 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := Open(ctx, path, Options{Parallelism: 2})
			if err != nil {
				t.Fatal(err)
			}
			got, err := b.ReadRows(ctx, tc.start, tc.stop)
			if err != nil {
				t.Fatalf("ReadRows(%d, %d): %v", tc.start, tc.stop, err)
			}
			if w := region(want, []int64{tc.start, 0}, []int64{tc.stop - tc.start, 3}); !bytes.Equal(got.Bytes, w.Bytes) || !slices.Equal(got.Shape, w.Shape) {
				t.Errorf("ReadRows(%d, %d) = shape %v, data differs from want shape %v", tc.start, tc.stop, got.Shape, w.Shape)
			}
			if s := b.Stats(); s.ChunkReads != tc.chunks || s.Decoded != tc.chunks {
				t.Errorf("ReadRows(%d, %d) read %d and decoded %d chunks, want %d", tc.start, tc.stop, s.ChunkReads, s.Decoded, tc.chunks)
			}
		})
	}
	for _, r := range [][2]int64{{-1, 2}, {3, 2}, {0, 21}} {
		if _, err := a.ReadRows(ctx, r[0], r[1]); !errors.Is(err, ErrOutOfRange) {
			t.Errorf("ReadRows(%d, %d) = %v, want ErrOutOfRange", r[0], r[1], err)
		}
	}
}

// chunkIDs returns the identity of every chunk file under dir.
func chunkIDs(t *testing.T, dir string) map[string]string {
	t.Helper()
	ids := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasPrefix(d.Name(), ".") || d.Name() == "zarr.json" {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		ids[filepath.ToSlash(rel)] = fileIdentity(fi)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestAppendWritesOnlyTailChunks checks, by file identity, that Append
// rewrites only the last chunk row when it is partial and otherwise only
// creates chunks, at every boundary.
func TestAppendWritesOnlyTailChunks(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name      string
		rows, add int64
		rewritten []string // existing chunk files that change
		created   []string
	}{
		{"nothing", 8, 0, nil, nil},
		{"one row to an empty array", 0, 1, nil, []string{"c/0/0", "c/0/1"}},
		{"exactly full to an empty array", 0, 4, nil, []string{"c/0/0", "c/0/1"}},
		{"after a full chunk", 4, 2, nil, []string{"c/1/0", "c/1/1"}},
		{"fills the partial chunk exactly", 5, 3, []string{"c/1/0", "c/1/1"}, nil},
		{"one row into the partial chunk", 6, 1, []string{"c/1/0", "c/1/1"}, nil},
		{"partial then many, ending on a boundary", 6, 10, []string{"c/1/0", "c/1/1"}, []string{"c/2/0", "c/2/1", "c/3/0", "c/3/1"}},
		{"partial then many, ending inside", 6, 11, []string{"c/1/0", "c/1/1"}, []string{"c/2/0", "c/2/1", "c/3/0", "c/3/1", "c/4/0", "c/4/1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "a.zarr")
			a := mustCreate(t, path, Spec{Shape: []int64{0, 5}, ChunkShape: []int64{4, 3}, DataType: Int32, FillValue: -7}, Options{})
			if tc.rows > 0 {
				if err := a.Append(ctx, appendRows(t, 0, tc.rows, 5)); err != nil {
					t.Fatal(err)
				}
			}
			before := chunkIDs(t, path)
			if err := a.Append(ctx, appendRows(t, tc.rows, tc.add, 5)); err != nil {
				t.Fatal(err)
			}
			after := chunkIDs(t, path)
			var rewritten, created []string
			for k, id := range after {
				old, ok := before[k]
				switch {
				case !ok:
					created = append(created, k)
				case old != id:
					rewritten = append(rewritten, k)
				}
			}
			slices.Sort(rewritten)
			slices.Sort(created)
			if !slices.Equal(rewritten, tc.rewritten) || !slices.Equal(created, tc.created) {
				t.Errorf("Append(%d rows to %d) rewrote %v and created %v, want %v and %v", tc.add, tc.rows, rewritten, created, tc.rewritten, tc.created)
			}
			b, err := Open(ctx, path, Options{})
			if err != nil {
				t.Fatal(err)
			}
			got, err := b.ReadRows(ctx, 0, tc.rows+tc.add)
			if err != nil {
				t.Fatal(err)
			}
			if w := appendRows(t, 0, tc.rows+tc.add, 5); !bytes.Equal(got.Bytes, w.Bytes) {
				t.Errorf("after Append the rows differ")
			}
		})
	}
}

func TestAppendRefuses(t *testing.T) {
	ctx := context.Background()
	a := mustCreate(t, filepath.Join(t.TempDir(), "a.zarr"), Spec{Shape: []int64{2, 5}, ChunkShape: []int64{4, 3}, DataType: Int32}, Options{})
	tests := []struct {
		name string
		d    *Data
	}{
		{"wrong width", appendRows(t, 0, 2, 4)},
		{"wrong type", genData(t, Float32, []int64{2, 5}, 1)},
		{"wrong rank", genData(t, Int32, []int64{10}, 1)},
		{"bytes do not match shape", &Data{Type: Int32, Shape: []int64{2, 5}, Bytes: make([]byte, 3)}},
		{"nil", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := a.Append(ctx, tc.d); err == nil {
				t.Errorf("Append(%s) = nil, want an error", tc.name)
			}
		})
	}
	if got := a.Shape(); !slices.Equal(got, []int64{2, 5}) {
		t.Errorf("Shape() after refused appends = %v, want [2 5]", got)
	}
}

// TestMissingChunksReadAsFill covers unwritten chunks, also inside shards.
func TestMissingChunksReadAsFill(t *testing.T) {
	ctx := context.Background()
	le := BytesCodec(false)
	for _, cc := range []struct {
		name    string
		codecs  []Codec
		missing int64 // read units without a file: 1 chunk, or 4 inner chunks of 1 shard
	}{
		{"plain", nil, 1},
		{"sharded", []Codec{ShardingCodec([]int64{2, 2}, []Codec{le}, []Codec{le}, false)}, 4},
	} {
		t.Run(cc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "a.zarr")
			a := mustCreate(t, path, Spec{Shape: []int64{8, 4}, ChunkShape: []int64{4, 4}, DataType: Float64, FillValue: "NaN", Codecs: cc.codecs}, Options{})
			one := genData(t, Float64, []int64{1, 1}, 3)
			if err := a.WriteRegion(ctx, []int64{1, 1}, one); err != nil {
				t.Fatal(err)
			}
			got, err := a.ReadRegion(ctx, []int64{0, 0}, []int64{8, 4})
			if err != nil {
				t.Fatal(err)
			}
			vals, _ := Values[float64](got)
			for i, v := range vals {
				if i == 5 {
					if w, _ := Values[float64](one); v != w[0] {
						t.Errorf("element 5 = %v, want %v", v, w[0])
					}
					continue
				}
				if v == v {
					t.Errorf("element %d = %v, want the NaN fill", i, v)
				}
			}
			if s := a.Stats(); s.MissingChunks != cc.missing {
				t.Errorf("Stats().MissingChunks = %d, want %d (the second chunk row)", s.MissingChunks, cc.missing)
			}
		})
	}
}

// TestCorruptChunks damages chunk files in several ways: every read must
// fail with a ChunkError naming the array and the chunk, never return
// zeros or panic.
func TestCorruptChunks(t *testing.T) {
	ctx := context.Background()
	le := BytesCodec(false)
	// checked: the chain detects any changed byte (gzip's CRC-32, zstd's
	// checksum, crc32c); without that a flipped byte can decode to wrong
	// values, which no reader can tell from right ones.
	chains := []struct {
		name    string
		codecs  []Codec
		key     string
		checked bool
	}{
		{"zstd", []Codec{le, ZstdCodec(3, false)}, "c/0/0", false},
		{"zstd checksum", []Codec{le, ZstdCodec(3, true)}, "c/0/0", true},
		{"gzip", []Codec{le, GzipCodec(3)}, "c/0/0", true},
		{"crc32c", []Codec{le, CRC32CCodec()}, "c/0/0", true},
		{"raw", []Codec{le}, "c/0/0", false},
		{"shuffle", []Codec{le, ShuffleCodec(4)}, "c/0/0", false},
		{"sharded", []Codec{ShardingCodec([]int64{2, 2}, []Codec{le, ZstdCodec(1, false)}, []Codec{le, CRC32CCodec()}, false)}, "c/0/0", false},
	}
	damages := []struct {
		name string
		fn   func([]byte) []byte
	}{
		{"truncated", func(b []byte) []byte { return b[:len(b)/2] }},
		{"empty", func(b []byte) []byte { return nil }},
		{"flipped byte", func(b []byte) []byte { c := bytes.Clone(b); c[len(c)/2] ^= 0x55; c[len(c)-1] ^= 0x0f; return c }},
		{"extra bytes", func(b []byte) []byte { return append(bytes.Clone(b), 1, 2, 3, 4, 5) }},
		{"garbage", func(b []byte) []byte { return bytes.Repeat([]byte{0xde, 0xad}, 37) }},
	}
	for _, ch := range chains {
		for _, dm := range damages {
			t.Run(ch.name+"/"+dm.name, func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "a.zarr")
				a := mustCreate(t, path, Spec{Shape: []int64{4, 4}, ChunkShape: []int64{4, 4}, DataType: Float32, Codecs: ch.codecs}, Options{})
				orig := genData(t, Float32, []int64{4, 4}, 1)
				if err := a.WriteRegion(ctx, []int64{0, 0}, orig); err != nil {
					t.Fatal(err)
				}
				file := filepath.Join(path, filepath.FromSlash(ch.key))
				b, err := os.ReadFile(file)
				if err != nil {
					t.Fatal(err)
				}
				damaged := dm.fn(b)
				if err := os.Remove(file); err != nil {
					t.Fatal(err)
				}
				writeTestFile(t, file, damaged)
				got, err := a.ReadRows(ctx, 0, 4)
				if err == nil {
					if !ch.checked && dm.name == "flipped byte" {
						return
					}
					t.Fatalf("ReadRows on a %s chunk = %v, nil; want an error", dm.name, got.Bytes)
				}
				var ce *ChunkError
				if !errors.As(err, &ce) || !strings.Contains(ce.Key, ch.key) || ce.Array != path {
					t.Fatalf("ReadRows error = %v, want a ChunkError naming %s in %s", err, ch.key, path)
				}
				if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), ch.key) {
					t.Errorf("error %q does not name the array and the chunk", err)
				}
				// A read of the first row decodes only a prefix of a zstd
				// chunk: it must fail too, or return the right row when
				// the damage lies past the bytes it needs.
				row, err := a.ReadRows(ctx, 0, 1)
				if err == nil && !bytes.Equal(row.Bytes, orig.Bytes[:16]) {
					t.Errorf("ReadRows(0, 1) of a %s chunk returned wrong values without an error", dm.name)
				}
				if err != nil && !errors.As(err, &ce) {
					t.Errorf("ReadRows(0, 1) error = %v, want a ChunkError", err)
				}
			})
		}
	}
}

// writeTestFile puts bytes in place for tests that damage files on
// purpose; it goes through the same atomic helper as the package.
func writeTestFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := fsstoreWrite(path, b); err != nil {
		t.Fatal(err)
	}
}

func TestCreateRefuses(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	good := Spec{Shape: []int64{4, 4}, ChunkShape: []int64{2, 2}, DataType: Int32}
	mustCreate(t, filepath.Join(dir, "exists"), good, Options{})
	writeTestFile(t, filepath.Join(dir, "nonempty", "x"), []byte("x"))
	tests := []struct {
		name string
		path string
		spec Spec
		is   error
	}{
		{"existing array", "exists", good, ErrExist},
		{"non-empty folder", "nonempty", good, ErrExist},
		{"no data type", "a", Spec{Shape: []int64{4}, ChunkShape: []int64{2}}, nil},
		{"rank mismatch", "b", Spec{Shape: []int64{4, 4}, ChunkShape: []int64{2}, DataType: Int32}, ErrBadMetadata},
		{"zero chunk", "c", Spec{Shape: []int64{4}, ChunkShape: []int64{0}, DataType: Int32}, ErrBadMetadata},
		{"negative shape", "d", Spec{Shape: []int64{-4}, ChunkShape: []int64{2}, DataType: Int32}, ErrBadMetadata},
		{"huge chunk", "e", Spec{Shape: []int64{4}, ChunkShape: []int64{1 << 40}, DataType: Int32}, ErrUnsupported},
		{"blosc", "f", Spec{Shape: []int64{4}, ChunkShape: []int64{2}, DataType: Int32, Codecs: []Codec{BytesCodec(false), mustCodec("blosc", bloscConfig{CName: "lz4", CLevel: 5, Shuffle: "shuffle", TypeSize: 4})}}, ErrUnsupported},
		{"crc32c in v2", "g", Spec{Format: V2, Shape: []int64{4}, ChunkShape: []int64{2}, DataType: Int32, Codecs: []Codec{BytesCodec(false), CRC32CCodec()}}, ErrUnsupported},
		{"partial transpose in v2", "h", Spec{Format: V2, Shape: []int64{4, 4, 4}, ChunkShape: []int64{2, 2, 2}, DataType: Int32, Codecs: []Codec{TransposeCodec(1, 0, 2), BytesCodec(false)}}, ErrUnsupported},
		{"unknown codec", "i", Spec{Shape: []int64{4}, ChunkShape: []int64{2}, DataType: Int32, Codecs: []Codec{BytesCodec(false), {Name: "lzma"}}}, ErrUnsupported},
		{"no array-to-bytes codec", "j", Spec{Shape: []int64{4}, ChunkShape: []int64{2}, DataType: Int32, Codecs: []Codec{ZstdCodec(1, false)}}, ErrBadMetadata},
		{"fill of wrong type", "k", Spec{Shape: []int64{4}, ChunkShape: []int64{2}, DataType: Int32, FillValue: "NaN"}, nil},
		{"fill out of range", "l", Spec{Shape: []int64{4}, ChunkShape: []int64{2}, DataType: Uint8, FillValue: 300}, nil},
		{"shard not dividing", "m", Spec{Shape: []int64{4}, ChunkShape: []int64{4}, DataType: Int32, Codecs: []Codec{ShardingCodec([]int64{3}, []Codec{BytesCodec(false)}, []Codec{BytesCodec(false)}, false)}}, ErrBadMetadata},
		{"dimension names count", "n", Spec{Shape: []int64{4}, ChunkShape: []int64{2}, DataType: Int32, DimensionNames: []string{"a", "b"}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Create(ctx, filepath.Join(dir, tc.path), tc.spec, Options{})
			if err == nil || (tc.is != nil && !errors.Is(err, tc.is)) {
				t.Errorf("Create(%s) = %v, want an error wrapping %v", tc.name, err, tc.is)
			}
		})
	}
}

func TestWriteRegionRefuses(t *testing.T) {
	ctx := context.Background()
	a := mustCreate(t, filepath.Join(t.TempDir(), "a.zarr"), Spec{Shape: []int64{4, 4}, ChunkShape: []int64{2, 2}, DataType: Int32}, Options{})
	tests := []struct {
		name  string
		start []int64
		d     *Data
	}{
		{"outside", []int64{3, 0}, genData(t, Int32, []int64{2, 4}, 1)},
		{"negative", []int64{-1, 0}, genData(t, Int32, []int64{1, 4}, 1)},
		{"rank", []int64{0}, genData(t, Int32, []int64{1, 4}, 1)},
		{"type", []int64{0, 0}, genData(t, Int64, []int64{1, 4}, 1)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := a.WriteRegion(ctx, tc.start, tc.d); err == nil {
				t.Errorf("WriteRegion(%v) = nil, want an error", tc.start)
			}
		})
	}
}

// TestOverwriteKeepsNeighbours writes overlapping boxes and checks
// read-modify-write keeps what is outside each box.
func TestOverwriteKeepsNeighbours(t *testing.T) {
	ctx := context.Background()
	for _, format := range []Format{V3, V2} {
		t.Run(format.String(), func(t *testing.T) {
			a := mustCreate(t, filepath.Join(t.TempDir(), "a.zarr"), Spec{Format: format, Shape: []int64{9, 7}, ChunkShape: []int64{4, 3}, DataType: Uint16, FillValue: 7}, Options{})
			want := filled(Uint16, []int64{9, 7}, []byte{7, 0})
			for i, box := range [][4]int64{{0, 0, 9, 7}, {1, 1, 3, 3}, {5, 2, 4, 5}, {8, 6, 1, 1}, {0, 3, 2, 1}} {
				d := genData(t, Uint16, []int64{box[2], box[3]}, uint64(i))
				if err := a.WriteRegion(ctx, []int64{box[0], box[1]}, d); err != nil {
					t.Fatal(err)
				}
				copyBox(want.Bytes, want.Shape, []int64{box[0], box[1]}, d.Bytes, d.Shape, []int64{0, 0}, d.Shape, 2)
				got, err := a.ReadRegion(ctx, []int64{0, 0}, []int64{9, 7})
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got.Bytes, want.Bytes) {
					t.Fatalf("after write %d (box %v) the array differs", i, box)
				}
			}
		})
	}
}

func TestReadRegionInto(t *testing.T) {
	ctx := context.Background()
	a := mustCreate(t, filepath.Join(t.TempDir(), "a.zarr"), Spec{Shape: []int64{10, 3}, ChunkShape: []int64{4, 3}, DataType: Int32, FillValue: -7}, Options{})
	want := genData(t, Int32, []int64{6, 3}, 2)
	if err := a.WriteRegion(ctx, []int64{0, 0}, want); err != nil {
		t.Fatal(err)
	}
	dst := genData(t, Int32, []int64{5, 3}, 9) // dirty buffer
	if err := a.ReadRegionInto(ctx, []int64{4, 0}, dst); err != nil {
		t.Fatal(err)
	}
	vals, _ := Values[int32](dst)
	wv, _ := Values[int32](want)
	for i, v := range vals {
		w := int32(-7)
		if 12+i < len(wv) {
			w = wv[12+i]
		}
		if v != w {
			t.Errorf("element %d = %d, want %d", i, v, w)
		}
	}
	if err := a.ReadRegionInto(ctx, []int64{6, 0}, dst); !errors.Is(err, ErrOutOfRange) {
		t.Errorf("ReadRegionInto past the end = %v, want ErrOutOfRange", err)
	}
}

func TestContextCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	a := mustCreate(t, filepath.Join(t.TempDir(), "a.zarr"), Spec{Shape: []int64{10, 3}, ChunkShape: []int64{2, 3}, DataType: Int32}, Options{})
	cancel()
	if _, err := a.ReadRows(ctx, 0, 10); !errors.Is(err, context.Canceled) {
		t.Errorf("ReadRows with a canceled context = %v, want context.Canceled", err)
	}
	if err := a.Append(ctx, appendRows(t, 10, 3, 3)); !errors.Is(err, context.Canceled) {
		t.Errorf("Append with a canceled context = %v, want context.Canceled", err)
	}
	if got := a.Shape()[0]; got != 10 {
		t.Errorf("Shape()[0] after a canceled Append = %d, want 10", got)
	}
}

func TestZeroDimensional(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "s.zarr")
	a := mustCreate(t, path, Spec{Shape: []int64{}, ChunkShape: []int64{}, DataType: Float64, FillValue: 1.5}, Options{})
	got, err := a.ReadRegion(ctx, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if v := got.At(0); v != 1.5 {
		t.Errorf("unwritten scalar = %v, want the fill 1.5", v)
	}
	d, _ := DataOf([]int64{}, []float64{2.5})
	if err := a.WriteRegion(ctx, nil, d); err != nil {
		t.Fatal(err)
	}
	if got, err = a.ReadRegion(ctx, nil, nil); err != nil || got.At(0) != 2.5 {
		t.Errorf("scalar = %v, %v, want 2.5", got, err)
	}
	if _, err := os.Stat(filepath.Join(path, "c")); err != nil {
		t.Errorf("0-d chunk key: %v, want file c", err)
	}
	if _, err := a.ReadRows(ctx, 0, 0); err == nil {
		t.Errorf("ReadRows on a 0-d array = nil error")
	}
}

func TestInfo(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "a.zarr")
	a := mustCreate(t, path, Spec{Shape: []int64{10, 3}, ChunkShape: []int64{4, 3}, DataType: Float32, FillValue: "NaN",
		DimensionNames: []string{"row", ""}, Attributes: map[string]any{"k": "v"},
		Codecs: []Codec{ShardingCodec([]int64{2, 3}, []Codec{BytesCodec(false)}, []Codec{BytesCodec(false)}, false)}}, Options{})
	b, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	in := b.Info()
	if in.Format != V3 || !slices.Equal(in.ChunkGrid, []int64{3, 1}) || !slices.Equal(in.InnerChunkShape, []int64{2, 3}) ||
		string(in.FillValue) != `"NaN"` || in.ChunkKeyExample != "c/0/0" || in.UncompressedSize != 120 {
		t.Errorf("Info() = %+v", in)
	}
	var buf bytes.Buffer
	if err := in.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"shape:", "[10 3]", "float32", "sharding_indexed", "row, -", `"k":"v"`} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("WriteText output lacks %q:\n%s", want, buf.String())
		}
	}
	if a.FillValue().(float32) == a.FillValue().(float32) {
		t.Errorf("FillValue() = %v, want NaN", a.FillValue())
	}
}

func TestDataText(t *testing.T) {
	tests := []struct {
		name string
		d    func() (*Data, error)
		want string
	}{
		{"int 2-d", func() (*Data, error) { return DataOf([]int64{2, 3}, []int32{1, -2, 3, 4, 5, 6}) }, "1\t-2\t3\n4\t5\t6\n"},
		{"float specials", func() (*Data, error) {
			return DataOf([]int64{3}, []float32{float32(nan()), float32(inf()), 0.1})
		}, "NaN\n+Inf\n0.1\n"},
		{"bool 3-d", func() (*Data, error) {
			return DataOf([]int64{1, 2, 2}, []bool{true, false, false, true})
		}, "true\tfalse\tfalse\ttrue\n"},
		{"empty", func() (*Data, error) { return DataOf([]int64{0, 3}, []uint8{}) }, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := tc.d()
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if err := d.WriteText(&buf); err != nil {
				t.Fatal(err)
			}
			if buf.String() != tc.want {
				t.Errorf("WriteText = %q, want %q", buf.String(), tc.want)
			}
		})
	}
}

func TestValuesTypeMismatch(t *testing.T) {
	d := genData(t, Int32, []int64{3}, 1)
	if _, err := Values[float32](d); err == nil {
		t.Errorf("Values[float32] of int32 data = nil error")
	}
	if _, err := DataOf([]int64{4}, []int8{1, 2}); err == nil {
		t.Errorf("DataOf with too few values = nil error")
	}
}

func TestParseRowRange(t *testing.T) {
	tests := []struct {
		in          string
		start, stop int64
		ok          bool
	}{
		{"3:7", 3, 7, true},
		{"0:10", 0, 10, true},
		{"4:", 4, 10, true},
		{":2", 0, 2, true},
		{":", 0, 10, true},
		{"5", 5, 6, true},
		{"-3:", 7, 10, true},
		{"-1", 9, 10, true},
		{"2:-2", 2, 8, true},
		{"10:10", 10, 10, true},
		{"7:3", 0, 0, false},
		{"0:11", 0, 0, false},
		{"10", 0, 0, false},
		{"-11:", 0, 0, false},
		{"a:b", 0, 0, false},
		{"", 0, 0, false},
		{"1:2:3", 0, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			start, stop, err := ParseRowRange(tc.in, 10)
			if (err == nil) != tc.ok || start != tc.start || stop != tc.stop {
				t.Errorf("ParseRowRange(%q, 10) = %d, %d, %v; want %d, %d, ok %v", tc.in, start, stop, err, tc.start, tc.stop, tc.ok)
			}
		})
	}
}

// TestConcurrentCreate races Create on one path: exactly one wins.
func TestConcurrentCreate(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "a.zarr")
	const n = 8
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := Create(ctx, path, Spec{Shape: []int64{4}, ChunkShape: []int64{2}, DataType: Int8}, Options{})
			errs <- err
		}()
	}
	won := 0
	for range n {
		switch err := <-errs; {
		case err == nil:
			won++
		case !errors.Is(err, ErrExist):
			t.Errorf("Create = %v, want nil or ErrExist", err)
		}
	}
	if won != 1 {
		t.Errorf("%d Creates succeeded, want 1", won)
	}
	if _, err := Open(ctx, path, Options{}); err != nil {
		t.Errorf("Open after the race: %v", err)
	}
}

// TestConcurrentReadersInProcess shares one Array (and one cache) between
// an appending goroutine and reading goroutines, for the race detector
// and for Append's atomicity within a process.
func TestConcurrentReadersInProcess(t *testing.T) {
	ctx := context.Background()
	c := openTestCache(t, 1<<20)
	a := mustCreate(t, filepath.Join(t.TempDir(), "a.zarr"), Spec{Shape: []int64{0, 4}, ChunkShape: []int64{5, 3}, DataType: Int32, FillValue: -7}, Options{Cache: c, Parallelism: 3})
	done := make(chan struct{})
	errs := make(chan error, 4)
	for range 3 {
		go func() {
			for {
				select {
				case <-done:
					errs <- nil
					return
				default:
				}
				rows := a.Shape()[0]
				d, err := a.ReadRows(ctx, 0, rows)
				if err != nil {
					errs <- err
					return
				}
				vals, _ := Values[int32](d)
				for i, v := range vals {
					if r, col := int64(i)/4, int64(i)%4; v != appendValue(r, col) {
						errs <- fmt.Errorf("rows %d: element (%d, %d) = %d", rows, r, col, v)
						return
					}
				}
			}
		}()
	}
	rows := int64(0)
	for i := range 30 {
		n := int64(1 + i%7)
		if err := a.Append(ctx, appendRows(t, rows, n, 4)); err != nil {
			t.Fatal(err)
		}
		rows += n
	}
	close(done)
	for range 3 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
