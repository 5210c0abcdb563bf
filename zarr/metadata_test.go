package zarr

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const goodV3 = `{"zarr_format":3,"node_type":"array","shape":[10,4],"data_type":"float32",
"chunk_grid":{"name":"regular","configuration":{"chunk_shape":[4,4]}},
"chunk_key_encoding":{"name":"default","configuration":{"separator":"/"}},
"fill_value":"NaN","codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":3}}]}`

const goodV2 = `{"zarr_format":2,"shape":[10,4],"chunks":[4,4],"dtype":"<f4","compressor":{"id":"zstd","level":3},
"fill_value":"NaN","order":"C","filters":[{"id":"shuffle","elementsize":4}]}`

// replaceField returns doc with field set to raw JSON (or removed if raw
// is "").
func replaceField(t *testing.T, doc, field, raw string) string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(doc), &m); err != nil {
		t.Fatal(err)
	}
	if raw == "" {
		delete(m, field)
	} else {
		m[field] = json.RawMessage(raw)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestParseV3(t *testing.T) {
	tests := []struct {
		name  string
		field string
		raw   string // "" removes the field
		is    error  // nil: must parse
	}{
		{"good", "", "", nil},
		{"missing shape", "shape", "", ErrBadMetadata},
		{"missing fill_value", "fill_value", "", ErrBadMetadata},
		{"null fill_value", "fill_value", "null", ErrBadMetadata},
		{"missing codecs", "codecs", "", ErrBadMetadata},
		{"empty codecs", "codecs", "[]", ErrBadMetadata},
		{"format 2", "zarr_format", "2", ErrBadMetadata},
		{"group", "node_type", `"group"`, ErrNotArray},
		{"unknown data type", "data_type", `"complex64"`, ErrUnsupported},
		{"extension data type", "data_type", `{"name":"datetime64"}`, ErrUnsupported},
		{"irregular grid", "chunk_grid", `{"name":"rectilinear","configuration":{}}`, ErrUnsupported},
		{"rank mismatch", "chunk_grid", `{"name":"regular","configuration":{"chunk_shape":[4]}}`, ErrBadMetadata},
		{"zero chunk", "chunk_grid", `{"name":"regular","configuration":{"chunk_shape":[0,4]}}`, ErrBadMetadata},
		{"negative shape", "shape", `[-1,4]`, ErrBadMetadata},
		{"shape overflow", "shape", `[9223372036854775807,9223372036854775807]`, ErrBadMetadata},
		{"fractional shape", "shape", `[1.5,4]`, ErrBadMetadata},
		{"v2 keys", "chunk_key_encoding", `{"name":"v2","configuration":{"separator":"."}}`, nil},
		{"v2 keys default separator", "chunk_key_encoding", `{"name":"v2"}`, nil},
		{"bad separator", "chunk_key_encoding", `{"name":"default","configuration":{"separator":"-"}}`, ErrBadMetadata},
		{"unknown key encoding", "chunk_key_encoding", `{"name":"hashed"}`, ErrUnsupported},
		{"unknown field", "fancy", `1`, ErrUnsupported},
		{"unknown field must understand", "fancy", `{"name":"x","must_understand":true}`, ErrUnsupported},
		{"ignorable extension", "fancy", `{"name":"x","must_understand":false}`, nil},
		{"storage transformer", "storage_transformers", `[{"name":"x"}]`, ErrUnsupported},
		{"no storage transformers", "storage_transformers", `[]`, nil},
		{"dimension names", "dimension_names", `["a",null]`, nil},
		{"dimension names count", "dimension_names", `["a"]`, ErrBadMetadata},
		{"attributes not object", "attributes", `[1]`, ErrBadMetadata},
		{"unknown codec", "codecs", `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"lzma"}]`, ErrUnsupported},
		{"bare-string codec", "codecs", `["bytes"]`, ErrBadMetadata}, // float32 needs endian
		{"bare-string crc32c", "codecs", `[{"name":"bytes","configuration":{"endian":"big"}},"crc32c"]`, nil},
		{"codec unknown config key", "codecs", `[{"name":"bytes","configuration":{"endian":"little","x":1}}]`, ErrBadMetadata},
		{"zstd without level", "codecs", `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{}}]`, ErrBadMetadata},
		{"zstd level too high", "codecs", `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":23}}]`, ErrBadMetadata},
		{"two array-to-bytes", "codecs", `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"bytes","configuration":{"endian":"little"}}]`, ErrBadMetadata},
		{"transpose after bytes", "codecs", `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"transpose","configuration":{"order":[1,0]}}]`, ErrBadMetadata},
		{"bad transpose", "codecs", `[{"name":"transpose","configuration":{"order":[0,0]}},{"name":"bytes","configuration":{"endian":"little"}}]`, ErrBadMetadata},
		{"bad endian", "codecs", `[{"name":"bytes","configuration":{"endian":"middle"}}]`, ErrBadMetadata},
		{"sharding index with zstd", "codecs", `[{"name":"sharding_indexed","configuration":{"chunk_shape":[2,2],"codecs":[{"name":"bytes","configuration":{"endian":"little"}}],"index_codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":1}}]}}]`, ErrUnsupported},
		{"sharding bad location", "codecs", `[{"name":"sharding_indexed","configuration":{"chunk_shape":[2,2],"codecs":[{"name":"bytes","configuration":{"endian":"little"}}],"index_codecs":[{"name":"bytes","configuration":{"endian":"little"}}],"index_location":"middle"}}]`, ErrBadMetadata},
		{"fill hex", "fill_value", `"0x7fc00001"`, nil},
		{"fill hex wrong width", "fill_value", `"0x7fc0"`, ErrBadMetadata},
		{"fill infinity", "fill_value", `"-Infinity"`, nil},
		{"fill number", "fill_value", `1e3`, nil},
		{"fill huge number", "fill_value", `1e999`, nil},
		{"fill bad string", "fill_value", `"nan"`, ErrBadMetadata},
		{"fill bool for float", "fill_value", `true`, ErrBadMetadata},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			doc := goodV3
			if tc.field != "" {
				doc = replaceField(t, goodV3, tc.field, tc.raw)
			}
			m, err := parseV3([]byte(doc))
			if err == nil {
				_, err = newState(m, "/x")
			}
			switch {
			case tc.is == nil && err != nil:
				t.Fatalf("parse: %v, want success", err)
			case tc.is != nil && !errors.Is(err, tc.is):
				t.Fatalf("parse = %v, want an error wrapping %v", err, tc.is)
			case tc.is == nil:
				// What parses must write back and parse to the same thing.
				out, err := m.marshalV3()
				if err != nil {
					t.Fatalf("marshalV3: %v", err)
				}
				m2, err := parseV3(out)
				if err != nil {
					t.Fatalf("re-parse: %v\n%s", err, out)
				}
				out2, _ := m2.marshalV3()
				if string(out) != string(out2) {
					t.Errorf("round trip changed the document:\n%s\n%s", out, out2)
				}
			}
		})
	}
}

func TestParseV2(t *testing.T) {
	tests := []struct {
		name  string
		field string
		raw   string
		is    error
	}{
		{"good", "", "", nil},
		{"F order", "order", `"F"`, nil},
		{"bad order", "order", `"K"`, ErrBadMetadata},
		{"big-endian", "dtype", `">f4"`, nil},
		{"structured dtype", "dtype", `[["a","<f4"]]`, ErrUnsupported},
		{"datetime", "dtype", `"<M8[ns]"`, ErrUnsupported},
		{"float16", "dtype", `"<f2"`, ErrUnsupported},
		{"bad byte order", "dtype", `"=f4"`, ErrBadMetadata},
		{"no compressor", "compressor", `null`, nil},
		{"missing compressor", "compressor", "", ErrBadMetadata},
		{"unknown compressor", "compressor", `{"id":"lzma"}`, ErrUnsupported},
		{"compressor extra key", "compressor", `{"id":"zstd","level":1,"x":2}`, ErrBadMetadata},
		{"compressor without id", "compressor", `{"level":1}`, ErrBadMetadata},
		{"unknown filter", "filters", `[{"id":"delta","dtype":"<f4"}]`, ErrUnsupported},
		{"null fill", "fill_value", `null`, nil},
		{"nested", "dimension_separator", `"/"`, nil},
		{"bad separator", "dimension_separator", `"-"`, ErrBadMetadata},
		{"unknown key", "extra", `1`, ErrBadMetadata},
		{"format 3", "zarr_format", `3`, ErrBadMetadata},
		{"blosc", "compressor", `{"id":"blosc","cname":"lz4","clevel":5,"shuffle":1,"blocksize":0}`, nil},
		{"blosc bad cname", "compressor", `{"id":"blosc","cname":"brotli","clevel":5,"shuffle":1,"blocksize":0}`, ErrBadMetadata},
		{"gzip", "compressor", `{"id":"gzip","level":1}`, nil},
		{"zlib", "compressor", `{"id":"zlib","level":1}`, nil},
		{"zstd checksum", "compressor", `{"id":"zstd","level":1,"checksum":true}`, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			doc := goodV2
			if tc.field != "" {
				doc = replaceField(t, goodV2, tc.field, tc.raw)
			}
			m, err := parseV2([]byte(doc), nil)
			if err == nil {
				_, err = newState(m, "/x")
			}
			switch {
			case tc.is == nil && err != nil:
				t.Fatalf("parse: %v, want success", err)
			case tc.is != nil && !errors.Is(err, tc.is):
				t.Fatalf("parse = %v, want an error wrapping %v", err, tc.is)
			case tc.is == nil && !strings.Contains(tc.name, "blosc"):
				out, err := m.marshalV2()
				if err != nil {
					t.Fatalf("marshalV2: %v", err)
				}
				m2, err := parseV2(out, nil)
				if err != nil {
					t.Fatalf("re-parse: %v\n%s", err, out)
				}
				if c1, c2 := codecsJSON(m.codecs), codecsJSON(m2.codecs); c1 != c2 {
					t.Errorf("round trip changed codecs: %s -> %s", c1, c2)
				}
			}
		})
	}
}

func codecsJSON(c []Codec) string {
	b, _ := json.Marshal(c)
	return string(b)
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	mk := func(name string, files map[string]string) string {
		p := filepath.Join(dir, name)
		for f, c := range files {
			writeTestFile(t, filepath.Join(p, f), []byte(c))
		}
		return p
	}
	tests := []struct {
		name  string
		files map[string]string
		is    error
	}{
		{"empty folder", map[string]string{"x": ""}, ErrNotArray},
		{"both formats", map[string]string{"zarr.json": goodV3, ".zarray": goodV2}, ErrBadMetadata},
		{"not json", map[string]string{"zarr.json": "{"}, ErrBadMetadata},
		{"json array", map[string]string{"zarr.json": "[1]"}, ErrBadMetadata},
		{"trailing data", map[string]string{"zarr.json": goodV3 + "{}"}, ErrBadMetadata},
		{"json null", map[string]string{".zarray": "null"}, ErrBadMetadata},
		{"bad zattrs", map[string]string{".zarray": goodV2, ".zattrs": "[]"}, ErrBadMetadata},
		{"group", map[string]string{"zarr.json": `{"zarr_format":3,"node_type":"group"}`}, ErrNotArray},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := mk(strings.ReplaceAll(tc.name, " ", "_"), tc.files)
			_, err := Open(ctx, p, Options{})
			if !errors.Is(err, tc.is) {
				t.Fatalf("Open = %v, want an error wrapping %v", err, tc.is)
			}
			if !strings.Contains(err.Error(), p) {
				t.Errorf("error %q does not name the array folder", err)
			}
		})
	}
	if _, err := Open(ctx, filepath.Join(dir, "nope"), Options{}); !errors.Is(err, ErrNotArray) {
		t.Errorf("Open(missing folder) = %v, want ErrNotArray", err)
	}
}

func TestFillValues(t *testing.T) {
	f32 := func(u uint32) []byte { return binary.LittleEndian.AppendUint32(nil, u) }
	f64 := func(u uint64) []byte { return binary.LittleEndian.AppendUint64(nil, u) }
	tests := []struct {
		name   string
		dt     DataType
		raw    string
		v3     bool
		want   []byte
		wantV3 string // metadata spelling written back
		ok     bool
	}{
		{"NaN f32", Float32, `"NaN"`, true, f32(0x7fc00000), `"NaN"`, true},
		{"NaN f64", Float64, `"NaN"`, true, f64(0x7ff8000000000000), `"NaN"`, true},
		{"odd NaN kept as hex", Float32, `"0x7fc00001"`, true, f32(0x7fc00001), `"0x7fc00001"`, true},
		{"hex in v2 refused", Float32, `"0x7fc00001"`, false, nil, "", false},
		{"inf", Float64, `"Infinity"`, true, f64(math.Float64bits(math.Inf(1))), `"Infinity"`, true},
		{"-inf", Float32, `"-Infinity"`, false, f32(math.Float32bits(float32(math.Inf(-1)))), `"-Infinity"`, true},
		{"negative zero", Float64, `-0.0`, true, f64(1 << 63), `-0.0`, true},
		{"rounds to float32", Float32, `0.1`, true, f32(math.Float32bits(0.1)), `0.1`, true},
		{"integer for float", Float64, `3`, true, f64(math.Float64bits(3)), `3.0`, true},
		{"int8 min", Int8, `-128`, true, []byte{0x80}, `-128`, true},
		{"int8 overflow", Int8, `128`, true, nil, "", false},
		{"uint64 max", Uint64, `18446744073709551615`, true, f64(math.MaxUint64), `18446744073709551615`, true},
		{"uint negative", Uint16, `-1`, true, nil, "", false},
		{"int with fraction", Int32, `1.5`, true, nil, "", false},
		{"int with exponent", Int32, `1e3`, true, nil, "", false},
		{"bool", Bool, `true`, true, []byte{1}, `true`, true},
		{"bool as int in v2", Bool, `0`, false, []byte{0}, `false`, true},
		{"bool as int in v3", Bool, `0`, true, nil, "", false},
		{"v2 null", Int32, `null`, false, []byte{0, 0, 0, 0}, `0`, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := parseFill(tc.dt, json.RawMessage(tc.raw), tc.v3)
			if (err == nil) != tc.ok {
				t.Fatalf("parseFill(%v, %s) = %v, want ok %v", tc.dt, tc.raw, err, tc.ok)
			}
			if !tc.ok {
				return
			}
			if string(f.b) != string(tc.want) {
				t.Errorf("parseFill(%v, %s) = %x, want %x", tc.dt, tc.raw, f.b, tc.want)
			}
			if got := string(fillJSON(tc.dt, fillValue{b: f.b}, true)); got != tc.wantV3 {
				t.Errorf("fillJSON = %s, want %s", got, tc.wantV3)
			}
		})
	}
}

func TestFillFromGo(t *testing.T) {
	tests := []struct {
		name string
		dt   DataType
		v    any
		ok   bool
	}{
		{"nil", Int32, nil, true},
		{"int", Int32, -7, true},
		{"int overflow", Int8, 200, false},
		{"float for int", Int32, 1.5, false},
		{"integral float for int", Int64, 3.0, true},
		{"string for float", Float32, "Infinity", true},
		{"bad string", Float32, "inf", false},
		{"string for int", Int32, "NaN", false},
		{"bool for bool", Bool, true, true},
		{"bool for int", Int32, true, false},
		{"float32 NaN payload", Float32, math.Float32frombits(0x7fc00005), true},
		{"struct", Int32, struct{}{}, false},
		{"uint64", Uint64, uint64(math.MaxUint64), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := fillFromGo(tc.dt, tc.v)
			if (err == nil) != tc.ok {
				t.Errorf("fillFromGo(%v, %v) = %v, want ok %v", tc.dt, tc.v, err, tc.ok)
			}
		})
	}
}

// TestMustUnderstandFalseSurvivesAppend checks that an ignorable v3
// extension field is kept when Append rewrites zarr.json.
func TestMustUnderstandFalseSurvivesAppend(t *testing.T) {
	ctx := context.Background()
	p := filepath.Join(t.TempDir(), "a.zarr")
	doc := replaceField(t, replaceField(t, goodV3, "shape", "[0,4]"), "vendor", `{"name":"vendor","must_understand":false,"configuration":{"x":1}}`)
	writeTestFile(t, filepath.Join(p, "zarr.json"), []byte(doc))
	a, err := Open(ctx, p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Append(ctx, genData(t, Float32, []int64{3, 4}, 1)); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(p, "zarr.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Shape  []int64 `json:"shape"`
		Vendor struct {
			MustUnderstand *bool `json:"must_understand"`
		} `json:"vendor"`
	}
	if err := json.Unmarshal(b, &got); err != nil || !equalInts(got.Shape, []int64{3, 4}) || got.Vendor.MustUnderstand == nil || *got.Vendor.MustUnderstand {
		t.Errorf("zarr.json after Append lost the extension or shape (%v):\n%s", err, b)
	}
	if _, err := Open(ctx, p, Options{}); err != nil {
		t.Errorf("re-Open: %v", err)
	}
}
