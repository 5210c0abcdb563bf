package zarr

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadArraysWrittenByZarrPython generates arrays with zarr-python 2.13
// (every data type, every v2 compressor and filter it offers, F order,
// big-endian, nested keys, unwritten chunks) and reads them back.
func TestReadArraysWrittenByZarrPython(t *testing.T) {
	dir := t.TempDir()
	runPython(t, "make", dir)
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var manifest []struct {
		Name        string  `json:"name"`
		Shape       []int64 `json:"shape"`
		Unsupported bool    `json:"unsupported"`
	}
	if err := json.Unmarshal(b, &manifest); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, m := range manifest {
		t.Run(m.Name, func(t *testing.T) {
			a, err := Open(ctx, filepath.Join(dir, m.Name+".zarr"), Options{Parallelism: 3})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			full := make([]int64, len(m.Shape))
			got, err := a.ReadRegion(ctx, full, m.Shape)
			if m.Unsupported {
				var ce *ChunkError
				if !errors.Is(err, ErrUnsupported) || !errors.As(err, &ce) {
					t.Fatalf("ReadRegion = %v, want a ChunkError wrapping ErrUnsupported", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ReadRegion: %v", err)
			}
			want, err := os.ReadFile(filepath.Join(dir, m.Name+".bin"))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Bytes, want) {
				t.Fatalf("ReadRegion bytes differ from zarr-python's (%d vs %d bytes)", len(got.Bytes), len(want))
			}
			wd := &Data{Type: a.DataType(), Shape: m.Shape, Bytes: want}
			start, stop := m.Shape[0]/3, m.Shape[0]-m.Shape[0]/4
			rows, err := a.ReadRows(ctx, start, stop)
			if err != nil {
				t.Fatalf("ReadRows(%d, %d): %v", start, stop, err)
			}
			rshape := append([]int64{stop - start}, m.Shape[1:]...)
			rstart := make([]int64, len(m.Shape))
			rstart[0] = start
			if !bytes.Equal(rows.Bytes, region(wd, rstart, rshape).Bytes) {
				t.Errorf("ReadRows(%d, %d) differs from zarr-python's values", start, stop)
			}
			var attrs map[string]any
			if err := json.Unmarshal(a.Info().Attributes, &attrs); err != nil || attrs["made_by"] != "zarr_helper.py" {
				t.Errorf("Info().Attributes = %s, want made_by from .zattrs", a.Info().Attributes)
			}
		})
	}
}

type pyDump struct {
	Shape      []int64        `json:"shape"`
	DType      string         `json:"dtype"`
	SHA256     string         `json:"sha256"`
	FillValue  any            `json:"fill_value"`
	Attributes map[string]any `json:"attributes"`
}

func parseDumps(t *testing.T, out []byte, n int) []pyDump {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != n {
		t.Fatalf("zarr_helper.py printed %d lines, want %d:\n%s", len(lines), n, out)
	}
	dumps := make([]pyDump, n)
	for i, l := range lines {
		if err := json.Unmarshal([]byte(l), &dumps[i]); err != nil {
			t.Fatalf("line %d: %v: %s", i, err, l)
		}
	}
	return dumps
}

// somaWritten is one array soma writes for another reader to check.
type somaWritten struct {
	name string
	spec Spec
}

// writeForReaders creates each array, writes a partial region (so some
// chunks stay unwritten), appends rows, and returns the expected content.
func writeForReaders(t *testing.T, dir string, cases []somaWritten) (paths []string, want []*Data) {
	t.Helper()
	ctx := context.Background()
	for i, c := range cases {
		p := filepath.Join(dir, c.name)
		a := mustCreate(t, p, c.spec, Options{Parallelism: 2})
		shape := c.spec.Shape
		m := a.state.Load().m
		exp := filled(c.spec.DataType, shape, m.fill.b)
		// Write rows [chunk, end) of the initial shape; rows [0, chunk)
		// stay unwritten and must read as the fill value.
		c0 := c.spec.ChunkShape[0]
		wshape := append([]int64{shape[0] - c0}, shape[1:]...)
		data := genData(t, c.spec.DataType, wshape, uint64(i))
		start := make([]int64, len(shape))
		start[0] = c0
		if err := a.WriteRegion(ctx, start, data); err != nil {
			t.Fatalf("%s: WriteRegion: %v", c.name, err)
		}
		copyBox(exp.Bytes, shape, start, data.Bytes, wshape, make([]int64, len(shape)), wshape, c.spec.DataType.Size())
		add := append([]int64{c0 + 3}, shape[1:]...)
		more := genData(t, c.spec.DataType, add, uint64(100+i))
		if err := a.Append(ctx, more); err != nil {
			t.Fatalf("%s: Append: %v", c.name, err)
		}
		full := append([]int64{shape[0] + add[0]}, shape[1:]...)
		e2 := filled(c.spec.DataType, full, m.fill.b)
		copy(e2.Bytes, exp.Bytes)
		copy(e2.Bytes[len(exp.Bytes):], more.Bytes)
		paths = append(paths, p)
		want = append(want, e2)
	}
	return paths, want
}

// TestZarrPythonReadsWhatSomaWrites writes v2 arrays with soma (every data
// type, shuffle, gzip, zlib, F order, big-endian, nested keys, NaN fill)
// and has zarr-python 2.13 read them.
func TestZarrPythonReadsWhatSomaWrites(t *testing.T) {
	dir := t.TempDir()
	le, be := BytesCodec(false), BytesCodec(true)
	cases := []somaWritten{
		{"bool.zarr", Spec{Format: V2, Shape: []int64{19, 3}, ChunkShape: []int64{4, 2}, DataType: Bool, FillValue: true}},
		{"int8.zarr", Spec{Format: V2, Shape: []int64{19, 3}, ChunkShape: []int64{4, 2}, DataType: Int8, FillValue: -7}},
		{"uint8_raw.zarr", Spec{Format: V2, Shape: []int64{19, 3}, ChunkShape: []int64{4, 2}, DataType: Uint8, FillValue: 9, Codecs: []Codec{le}}},
		{"int16_gzip.zarr", Spec{Format: V2, Shape: []int64{19, 3}, ChunkShape: []int64{4, 2}, DataType: Int16, FillValue: -7, Codecs: []Codec{le, GzipCodec(5)}}},
		{"uint16_zlib.zarr", Spec{Format: V2, Shape: []int64{19, 3}, ChunkShape: []int64{4, 2}, DataType: Uint16, Codecs: []Codec{le, mustCodec("numcodecs.zlib", gzipConfig{Level: 4})}}},
		{"int32_shuffle_zstd.zarr", Spec{Format: V2, Shape: []int64{19, 3}, ChunkShape: []int64{4, 2}, DataType: Int32, FillValue: -7, Codecs: []Codec{le, ShuffleCodec(4), ZstdCodec(3, false)}}},
		{"uint32_big.zarr", Spec{Format: V2, Shape: []int64{19, 3}, ChunkShape: []int64{4, 2}, DataType: Uint32, Codecs: []Codec{be, ZstdCodec(1, false)}}},
		{"int64_F.zarr", Spec{Format: V2, Shape: []int64{19, 3, 4}, ChunkShape: []int64{4, 2, 3}, DataType: Int64, FillValue: -7, Codecs: []Codec{TransposeCodec(2, 1, 0), le, ZstdCodec(3, false)}}},
		{"uint64_nested.zarr", Spec{Format: V2, Shape: []int64{19, 3}, ChunkShape: []int64{4, 2}, DataType: Uint64, ChunkKeySeparator: "/"}},
		{"float32_shuffle_zstd.zarr", Spec{Format: V2, Shape: []int64{190, 30}, ChunkShape: []int64{40, 16}, DataType: Float32, FillValue: "NaN",
			Codecs: []Codec{le, ShuffleCodec(4), ZstdCodec(3, false)}, DimensionNames: []string{"row", "feature"}, Attributes: map[string]any{"units": "m"}}},
		{"float64_bigF.zarr", Spec{Format: V2, Shape: []int64{19, 3}, ChunkShape: []int64{4, 2}, DataType: Float64, FillValue: -1.5, Codecs: []Codec{TransposeCodec(1, 0), be, ZstdCodec(5, false)}}},
		{"float32_zstd_checksum.zarr", Spec{Format: V2, Shape: []int64{19, 3}, ChunkShape: []int64{4, 2}, DataType: Float32, FillValue: "-Infinity", Codecs: []Codec{le, ZstdCodec(3, false)}}},
	}
	paths, want := writeForReaders(t, dir, cases)
	dumps := parseDumps(t, runPython(t, append([]string{"dump"}, paths...)...), len(paths))
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := dumps[i]
			if !equalInts(d.Shape, want[i].Shape) {
				t.Errorf("zarr-python shape = %v, want %v", d.Shape, want[i].Shape)
			}
			if got, wantSHA := d.SHA256, sha(want[i].Bytes); got != wantSHA {
				t.Errorf("zarr-python sha256 = %s, want %s", got, wantSHA)
			}
		})
	}
	if a := dumps[9].Attributes; a["units"] != "m" || a["_ARRAY_DIMENSIONS"] == nil {
		t.Errorf("zarr-python attributes = %v, want units and _ARRAY_DIMENSIONS", a)
	}
	if dumps[9].FillValue != "NaN" {
		t.Errorf("zarr-python fill_value = %v, want NaN", dumps[9].FillValue)
	}
}

// TestIndependentReaderReadsSomaV3 writes v3 arrays (transpose, crc32c,
// gzip, big-endian, shuffle, v2 keys, sharding at both index locations)
// and reads them with the fixtures' independent Python reader.
func TestIndependentReaderReadsSomaV3(t *testing.T) {
	dir := t.TempDir()
	le := BytesCodec(false)
	idx := []Codec{le, CRC32CCodec()}
	cases := []somaWritten{
		{"int32_zstd.zarr", Spec{Shape: []int64{19, 5}, ChunkShape: []int64{4, 3}, DataType: Int32, FillValue: -7, DimensionNames: []string{"row", ""}, Attributes: map[string]any{"a": 1}}},
		{"int32_transpose_crc.zarr", Spec{Shape: []int64{19, 5}, ChunkShape: []int64{4, 3}, DataType: Int32, Codecs: []Codec{TransposeCodec(1, 0), le, ZstdCodec(1, false), CRC32CCodec()}}},
		{"int32_big_gzip.zarr", Spec{Shape: []int64{19, 5}, ChunkShape: []int64{4, 3}, DataType: Int32, Codecs: []Codec{BytesCodec(true), GzipCodec(5)}}},
		{"float32_shuffle_checksum.zarr", Spec{Shape: []int64{19, 5}, ChunkShape: []int64{4, 3}, DataType: Float32, FillValue: "NaN", Codecs: []Codec{le, ShuffleCodec(4), ZstdCodec(3, true)}}},
		{"int32_v2keys.zarr", Spec{Shape: []int64{19, 5}, ChunkShape: []int64{4, 3}, DataType: Int32, ChunkKeySeparator: "."}},
		{"int32_sharded_end.zarr", Spec{Shape: []int64{19, 5}, ChunkShape: []int64{8, 6}, DataType: Int32, FillValue: -7,
			Codecs: []Codec{ShardingCodec([]int64{4, 3}, []Codec{le, ZstdCodec(1, false)}, idx, false)}}},
		{"int32_sharded_start.zarr", Spec{Shape: []int64{19, 5}, ChunkShape: []int64{8, 6}, DataType: Int32,
			Codecs: []Codec{ShardingCodec([]int64{2, 3}, []Codec{le, GzipCodec(1)}, idx, true)}}},
	}
	paths, want := writeForReaders(t, dir, cases)
	dumps := parseDumps(t, runPython(t, append([]string{"dumpv3"}, paths...)...), len(paths))
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got, w := dumps[i].SHA256, sha(want[i].Bytes); got != w {
				t.Errorf("independent reader sha256 = %s, want %s (shape %v, want %v)", got, w, dumps[i].Shape, want[i].Shape)
			}
		})
	}
}

// TestSomaReadsZarrPythonAppend has zarr-python append to an array soma
// created and soma see the rows after Refresh.
func TestSomaReadsZarrPythonAppend(t *testing.T) {
	ctx := context.Background()
	p := filepath.Join(t.TempDir(), "a.zarr")
	a := mustCreate(t, p, Spec{Format: V2, Shape: []int64{0, 3}, ChunkShape: []int64{4, 3}, DataType: Float64,
		Codecs: []Codec{BytesCodec(false), ShuffleCodec(8), ZstdCodec(3, false)}}, Options{})
	if err := a.Append(ctx, genData(t, Float64, []int64{6, 3}, 1)); err != nil {
		t.Fatal(err)
	}
	runPython(t, "append", p, "5")
	if got := a.Shape()[0]; got != 6 {
		t.Fatalf("Shape()[0] before Refresh = %d, want 6", got)
	}
	if err := a.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	d, err := a.ReadRows(ctx, 6, 11)
	if err != nil {
		t.Fatal(err)
	}
	vals, err := Values[float64](d)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range vals {
		if want := float64((6+i/3)*1000 + i%3); v != want {
			t.Errorf("row %d col %d = %v, want %v", 6+i/3, i%3, v, want)
		}
	}
}
