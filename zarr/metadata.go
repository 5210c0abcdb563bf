package zarr

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Format is the Zarr format version of an array.
type Format int

// The two formats soma reads and writes.
const (
	V2 Format = 2
	V3 Format = 3
)

// String returns "v2" or "v3".
func (f Format) String() string { return fmt.Sprintf("v%d", int(f)) }

// Metadata file names.
const (
	v3MetaName = "zarr.json"
	v2MetaName = ".zarray"
	v2AttrName = ".zattrs"
)

// maxChunkBytes bounds one decoded chunk (and shard), so that hostile or
// mistaken metadata cannot make a read allocate without limit.
const maxChunkBytes = 1 << 31

// meta is the parsed, validated metadata of an array, format-neutral.
type meta struct {
	format   Format
	shape    []int64
	chunks   []int64 // the regular grid's chunk shape (shards, if sharded)
	dtype    DataType
	fill     fillValue
	keys     keyEncoding
	codecs   []Codec                    // v3 form, also for v2 arrays
	dimNames []*string                  // nil: absent; entries may be nil (null)
	attrs    json.RawMessage            // v3 "attributes" or v2 .zattrs; nil if absent
	extra    map[string]json.RawMessage // v3 fields with must_understand: false
}

// clone returns a deep enough copy to change the shape.
func (m *meta) withShape(shape []int64) *meta {
	c := *m
	c.shape = append([]int64(nil), shape...)
	return &c
}

// strictUnmarshal decodes a JSON object, held as a map, into v refusing
// unknown fields.
func strictUnmarshal(raw map[string]json.RawMessage, v any) error {
	b, err := json.Marshal(raw)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrBadMetadata, b, err)
	}
	return nil
}

// decodeObject parses b as one JSON object with no trailing data.
func decodeObject(b []byte) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	var raw map[string]json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return nil, badMetaf("not a JSON object: %v", err)
	}
	if raw == nil {
		return nil, badMetaf("not a JSON object (null)")
	}
	if _, err := dec.Token(); err == nil {
		return nil, badMetaf("trailing data after the JSON object")
	}
	return raw, nil
}

func unmarshalField(raw map[string]json.RawMessage, key string, v any, required bool) error {
	b, ok := raw[key]
	if !ok {
		if required {
			return badMetaf("missing required field %q", key)
		}
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badMetaf("field %q: %v", key, err)
	}
	return nil
}

// validExtensionName reports whether s matches ^[a-z][a-z0-9-_.]+$, the
// form of registered extension names (core spec, "Extension definition").
func validExtensionName(s string) bool {
	if len(s) < 2 || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for _, c := range s[1:] {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' && c != '_' && c != '.' {
			return false
		}
	}
	return true
}

// parseV3 parses a zarr.json document.
func parseV3(b []byte) (*meta, error) {
	raw, err := decodeObject(b)
	if err != nil {
		return nil, err
	}
	var format int
	if err := unmarshalField(raw, "zarr_format", &format, true); err != nil {
		return nil, err
	}
	if format != 3 {
		return nil, badMetaf("zarr_format is %d in zarr.json, expected 3", format)
	}
	var nodeType string
	if err := unmarshalField(raw, "node_type", &nodeType, true); err != nil {
		return nil, err
	}
	if nodeType != "array" {
		return nil, fmt.Errorf("%w: node_type is %q (open an array inside it)", ErrNotArray, nodeType)
	}
	m := &meta{format: V3}
	if err := unmarshalField(raw, "shape", &m.shape, true); err != nil {
		return nil, err
	}
	var dt json.RawMessage
	if err := unmarshalField(raw, "data_type", &dt, true); err != nil {
		return nil, err
	}
	var dtName string
	if err := json.Unmarshal(dt, &dtName); err != nil {
		// The extension form {"name": ...} names a non-core type.
		return nil, fmt.Errorf("data_type %s: %w (soma supports %s)", dt, ErrUnsupported, supportedTypes)
	}
	if m.dtype, err = ParseDataType(dtName); err != nil {
		return nil, err
	}
	var grid struct {
		Name          string `json:"name"`
		Configuration struct {
			ChunkShape []int64 `json:"chunk_shape"`
		} `json:"configuration"`
	}
	// The grid's name first: another grid's configuration (rectilinear's
	// chunk_shapes) failed the strict decode below as "unknown field",
	// without naming the grid (issue 16).
	var gridName struct {
		Name string `json:"name"`
	}
	if b, ok := raw["chunk_grid"]; ok && json.Unmarshal(b, &gridName) == nil && gridName.Name != "" && gridName.Name != "regular" {
		return nil, fmt.Errorf("chunk_grid %q: %w (soma reads only the regular grid, where every chunk has the same shape; rewrite the array with regular chunks)", gridName.Name, ErrUnsupported)
	}
	if err := unmarshalField(raw, "chunk_grid", &grid, true); err != nil {
		return nil, err
	}
	if grid.Name != "regular" {
		return nil, fmt.Errorf("chunk_grid %q: %w (soma supports the regular grid)", grid.Name, ErrUnsupported)
	}
	m.chunks = grid.Configuration.ChunkShape
	var kenc struct {
		Name          string `json:"name"`
		Configuration *struct {
			Separator string `json:"separator"`
		} `json:"configuration"`
	}
	if err := unmarshalField(raw, "chunk_key_encoding", &kenc, true); err != nil {
		return nil, err
	}
	switch kenc.Name {
	case "default":
		m.keys = keyEncoding{sep: "/"}
	case "v2":
		m.keys = keyEncoding{v2Style: true, sep: "."}
	default:
		return nil, fmt.Errorf("chunk_key_encoding %q: %w (soma supports default and v2)", kenc.Name, ErrUnsupported)
	}
	if kenc.Configuration != nil && kenc.Configuration.Separator != "" {
		m.keys.sep = kenc.Configuration.Separator
	}
	if m.keys.sep != "/" && m.keys.sep != "." {
		return nil, badMetaf("chunk_key_encoding separator %q is not \"/\" or \".\"", m.keys.sep)
	}
	fillRaw, ok := raw["fill_value"]
	if !ok {
		return nil, badMetaf("missing required field \"fill_value\"")
	}
	if m.fill, err = parseFill(m.dtype, fillRaw, true); err != nil {
		return nil, badMetaf("%v", err)
	}
	if err := unmarshalField(raw, "codecs", &m.codecs, true); err != nil {
		return nil, err
	}
	if st, ok := raw["storage_transformers"]; ok {
		var list []json.RawMessage
		if err := json.Unmarshal(st, &list); err != nil {
			return nil, badMetaf("storage_transformers: %v", err)
		}
		if len(list) > 0 {
			return nil, fmt.Errorf("storage_transformers %s: %w", st, ErrUnsupported)
		}
	}
	if b, ok := raw["dimension_names"]; ok && string(bytes.TrimSpace(b)) != "null" {
		if err := unmarshalField(raw, "dimension_names", &m.dimNames, false); err != nil {
			return nil, err
		}
		if m.dimNames == nil {
			m.dimNames = []*string{}
		}
	}
	if a, ok := raw["attributes"]; ok {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(a, &obj); err != nil || obj == nil {
			return nil, badMetaf("attributes is not a JSON object")
		}
		m.attrs = append(json.RawMessage(nil), a...)
	}
	known := map[string]bool{"zarr_format": true, "node_type": true, "shape": true, "data_type": true,
		"chunk_grid": true, "chunk_key_encoding": true, "fill_value": true, "codecs": true,
		"storage_transformers": true, "dimension_names": true, "attributes": true}
	for k, v := range raw {
		if known[k] {
			continue
		}
		var ext struct {
			MustUnderstand *bool `json:"must_understand"`
		}
		if err := json.Unmarshal(v, &ext); err != nil || ext.MustUnderstand == nil || *ext.MustUnderstand {
			return nil, fmt.Errorf("field %q: %w (unknown fields must be objects with \"must_understand\": false)", k, ErrUnsupported)
		}
		if m.extra == nil {
			m.extra = map[string]json.RawMessage{}
		}
		m.extra[k] = v
	}
	if err := m.validate(); err != nil {
		return nil, err
	}
	return m, nil
}

// validate checks what both formats share.
func (m *meta) validate() error {
	if len(m.chunks) != len(m.shape) {
		return badMetaf("chunk shape %v has %d dimensions, shape %v has %d", m.chunks, len(m.chunks), m.shape, len(m.shape))
	}
	if _, err := numElements(m.shape); err != nil {
		return badMetaf("%v", err)
	}
	for _, c := range m.chunks {
		if c <= 0 {
			return badMetaf("chunk shape %v has an extent < 1", m.chunks)
		}
	}
	n, err := numElements(m.chunks)
	if err != nil || n*int64(m.dtype.Size()) > maxChunkBytes {
		return fmt.Errorf("%w: chunk shape %v of %v is over 2 GiB decoded (use smaller chunks)", ErrUnsupported, m.chunks, m.dtype)
	}
	if m.dimNames != nil && len(m.dimNames) != len(m.shape) {
		return badMetaf("dimension_names has %d entries, the array has %d dimensions", len(m.dimNames), len(m.shape))
	}
	for _, c := range m.codecs {
		if !validExtensionName(c.Name) {
			return badMetaf("codec name %q is not a valid extension name", c.Name)
		}
	}
	return nil
}

// marshalV3 writes a zarr.json document, fields in the spec's order.
func (m *meta) marshalV3() ([]byte, error) {
	type kv struct {
		k string
		v any
	}
	kenc := map[string]any{"name": "default", "configuration": map[string]string{"separator": m.keys.sep}}
	if m.keys.v2Style {
		kenc["name"] = "v2"
	}
	fields := []kv{
		{"zarr_format", 3},
		{"node_type", "array"},
		{"shape", nonNil(m.shape)},
		{"data_type", m.dtype.String()},
		{"chunk_grid", map[string]any{"name": "regular", "configuration": map[string]any{"chunk_shape": m.chunks}}},
		{"chunk_key_encoding", kenc},
		{"fill_value", fillJSON(m.dtype, m.fill, true)},
		{"codecs", m.codecs},
	}
	if m.attrs != nil {
		fields = append(fields, kv{"attributes", m.attrs})
	}
	if m.dimNames != nil {
		fields = append(fields, kv{"dimension_names", m.dimNames})
	}
	extra := make([]string, 0, len(m.extra))
	for k := range m.extra {
		extra = append(extra, k)
	}
	sort.Strings(extra)
	for _, k := range extra {
		fields = append(fields, kv{k, m.extra[k]})
	}
	var buf bytes.Buffer
	buf.WriteString("{\n")
	for i, f := range fields {
		v, err := json.Marshal(f.v)
		if err != nil {
			return nil, fmt.Errorf("marshal %s: %w", f.k, err)
		}
		var ind bytes.Buffer
		if err := json.Indent(&ind, v, "  ", "  "); err != nil {
			return nil, fmt.Errorf("marshal %s: %w", f.k, err)
		}
		fmt.Fprintf(&buf, "  %q: %s", f.k, ind.Bytes())
		if i < len(fields)-1 {
			buf.WriteString(",")
		}
		buf.WriteString("\n")
	}
	buf.WriteString("}\n")
	return buf.Bytes(), nil
}

func nonNil(s []int64) []int64 {
	if s == nil {
		return []int64{}
	}
	return s
}

// parseV2 parses a .zarray document (and, if attrs is not nil, the
// .zattrs next to it) into the v3-form meta.
func parseV2(b, attrs []byte) (*meta, error) {
	raw, err := decodeObject(b)
	if err != nil {
		return nil, err
	}
	known := map[string]bool{"zarr_format": true, "shape": true, "chunks": true, "dtype": true, "compressor": true,
		"fill_value": true, "order": true, "filters": true, "dimension_separator": true}
	for k := range raw {
		if !known[k] {
			return nil, badMetaf("unknown field %q in .zarray (v2 arrays have zarr_format, shape, chunks, dtype, compressor, fill_value, order, filters, dimension_separator)", k)
		}
	}
	var format int
	if err := unmarshalField(raw, "zarr_format", &format, true); err != nil {
		return nil, err
	}
	if format != 2 {
		return nil, badMetaf("zarr_format is %d in .zarray, expected 2", format)
	}
	m := &meta{format: V2}
	if err := unmarshalField(raw, "shape", &m.shape, true); err != nil {
		return nil, err
	}
	if err := unmarshalField(raw, "chunks", &m.chunks, true); err != nil {
		return nil, err
	}
	var dtype json.RawMessage
	if err := unmarshalField(raw, "dtype", &dtype, true); err != nil {
		return nil, err
	}
	var typestr string
	if err := json.Unmarshal(dtype, &typestr); err != nil {
		return nil, fmt.Errorf("dtype %s: %w (structured dtypes are not supported)", dtype, ErrUnsupported)
	}
	dt, big, err := parseV2DType(typestr)
	if err != nil {
		return nil, err
	}
	m.dtype = dt
	var order string
	if err := unmarshalField(raw, "order", &order, true); err != nil {
		return nil, err
	}
	if order != "C" && order != "F" {
		return nil, badMetaf("order %q is not \"C\" or \"F\"", order)
	}
	sep := "."
	if err := unmarshalField(raw, "dimension_separator", &sep, false); err != nil {
		return nil, err
	}
	if sep != "." && sep != "/" {
		return nil, badMetaf("dimension_separator %q is not \".\" or \"/\"", sep)
	}
	m.keys = keyEncoding{v2Style: true, sep: sep}
	fillRaw, ok := raw["fill_value"]
	if !ok {
		return nil, badMetaf("missing required field \"fill_value\"")
	}
	if m.fill, err = parseFill(dt, fillRaw, false); err != nil {
		return nil, badMetaf("%v", err)
	}
	if order == "F" && len(m.shape) > 1 {
		perm := make([]int, len(m.shape))
		for i := range perm {
			perm[i] = len(perm) - 1 - i
		}
		m.codecs = append(m.codecs, TransposeCodec(perm...))
	}
	m.codecs = append(m.codecs, BytesCodec(big))
	var filters []map[string]json.RawMessage
	if err := unmarshalField(raw, "filters", &filters, true); err != nil {
		return nil, err
	}
	for i, f := range filters {
		c, err := v2Codec(f, dt)
		if err != nil {
			return nil, fmt.Errorf("filter %d: %w", i, err)
		}
		m.codecs = append(m.codecs, c)
	}
	var comp map[string]json.RawMessage
	if err := unmarshalField(raw, "compressor", &comp, true); err != nil {
		return nil, err
	}
	if comp != nil {
		c, err := v2Codec(comp, dt)
		if err != nil {
			return nil, fmt.Errorf("compressor: %w", err)
		}
		m.codecs = append(m.codecs, c)
	}
	if attrs != nil {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(attrs, &obj); err != nil || obj == nil {
			return nil, badMetaf(".zattrs is not a JSON object")
		}
		m.attrs = append(json.RawMessage(nil), bytes.TrimSpace(attrs)...)
	}
	if err := m.validate(); err != nil {
		return nil, err
	}
	return m, nil
}

// v2Codec converts a numcodecs configuration ({"id": ...}) to v3 form.
func v2Codec(raw map[string]json.RawMessage, dt DataType) (Codec, error) {
	var id string
	if b, ok := raw["id"]; !ok || json.Unmarshal(b, &id) != nil {
		return Codec{}, badMetaf("numcodecs configuration without a string \"id\"")
	}
	switch id {
	case "zstd":
		var cfg struct {
			ID       string `json:"id"`
			Level    int    `json:"level"`
			Checksum bool   `json:"checksum"`
		}
		if err := strictUnmarshal(raw, &cfg); err != nil {
			return Codec{}, err
		}
		return ZstdCodec(cfg.Level, cfg.Checksum), nil
	case "gzip", "zlib":
		var cfg struct {
			ID    string `json:"id"`
			Level int    `json:"level"`
		}
		if err := strictUnmarshal(raw, &cfg); err != nil {
			return Codec{}, err
		}
		if id == "zlib" {
			return mustCodec("numcodecs.zlib", gzipConfig{Level: cfg.Level}), nil
		}
		return GzipCodec(cfg.Level), nil
	case "shuffle":
		var cfg struct {
			ID          string `json:"id"`
			ElementSize int    `json:"elementsize"`
		}
		if err := strictUnmarshal(raw, &cfg); err != nil {
			return Codec{}, err
		}
		return ShuffleCodec(cfg.ElementSize), nil
	case "blosc":
		cfg, err := bloscV2Config(raw, dt)
		if err != nil {
			return Codec{}, err
		}
		return mustCodec("blosc", cfg), nil
	}
	return Codec{}, fmt.Errorf("numcodecs codec %q: %w (soma reads zstd, gzip, zlib, shuffle, blosc)", id, ErrUnsupported)
}

// marshalV2 writes a .zarray document; it fails if the codecs have no v2
// spelling (crc32c, sharding, a partial transpose).
func (m *meta) marshalV2() ([]byte, error) {
	order := "C"
	codecs := m.codecs
	if len(codecs) > 0 && codecs[0].Name == "transpose" {
		var cfg transposeConfig
		if err := decodeConfig(codecs[0], &cfg); err != nil {
			return nil, err
		}
		for i, o := range cfg.Order {
			if o != len(cfg.Order)-1-i {
				return nil, fmt.Errorf("%w in v2: transpose order %v (v2 has only C and F order; use [%s])", ErrUnsupported, cfg.Order, reversedOrder(len(cfg.Order)))
			}
		}
		order = "F"
		codecs = codecs[1:]
	}
	if len(codecs) == 0 || codecs[0].Name != "bytes" {
		return nil, fmt.Errorf("%w in v2: the array-to-bytes codec must be bytes", ErrUnsupported)
	}
	var bc bytesConfig
	if err := decodeConfig(codecs[0], &bc); err != nil {
		return nil, err
	}
	codecs = codecs[1:]
	var filters []json.RawMessage
	var compressor json.RawMessage = json.RawMessage("null")
	for i, c := range codecs {
		nc, isCompressor, err := numcodecsJSON(c)
		if err != nil {
			return nil, err
		}
		if i == len(codecs)-1 && isCompressor {
			compressor = nc
		} else {
			filters = append(filters, nc)
		}
	}
	filtersJSON := json.RawMessage("null")
	if len(filters) > 0 {
		b, err := json.Marshal(filters)
		if err != nil {
			return nil, err
		}
		filtersJSON = b
	}
	doc := struct {
		Chunks     []int64         `json:"chunks"`
		Compressor json.RawMessage `json:"compressor"`
		DimSep     string          `json:"dimension_separator"`
		DType      string          `json:"dtype"`
		FillValue  json.RawMessage `json:"fill_value"`
		Filters    json.RawMessage `json:"filters"`
		Order      string          `json:"order"`
		Shape      []int64         `json:"shape"`
		Format     int             `json:"zarr_format"`
	}{m.chunks, compressor, m.keys.sep, v2DType(m.dtype, bc.Endian == "big"), fillJSON(m.dtype, m.fill, false), filtersJSON, order, nonNil(m.shape), 2}
	out, err := json.MarshalIndent(doc, "", "    ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

func reversedOrder(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprint(n - 1 - i)
	}
	return strings.Join(parts, ", ")
}

// numcodecsJSON spells a v3 bytes-to-bytes codec as numcodecs config.
func numcodecsJSON(c Codec) (json.RawMessage, bool, error) {
	var v any
	compressor := true
	switch c.Name {
	case "zstd":
		var cfg zstdConfig
		if err := decodeConfig(c, &cfg); err != nil {
			return nil, false, err
		}
		level := 0
		if cfg.Level != nil {
			level = *cfg.Level
		}
		if cfg.Checksum {
			v = map[string]any{"id": "zstd", "level": level, "checksum": true}
		} else {
			// numcodecs 0.11 (Debian's) rejects an explicit checksum key.
			v = map[string]any{"id": "zstd", "level": level}
		}
	case "gzip", "numcodecs.zlib":
		var cfg gzipConfig
		if err := decodeConfig(c, &cfg); err != nil {
			return nil, false, err
		}
		id := "gzip"
		if c.Name == "numcodecs.zlib" {
			id = "zlib"
		}
		v = map[string]any{"id": id, "level": cfg.Level}
	case "numcodecs.shuffle":
		var cfg shuffleConfig
		if err := decodeConfig(c, &cfg); err != nil {
			return nil, false, err
		}
		v = map[string]any{"id": "shuffle", "elementsize": cfg.ElementSize}
		compressor = false
	default:
		return nil, false, fmt.Errorf("%w in v2: codec %q has no numcodecs spelling soma writes (use v3)", ErrUnsupported, c.Name)
	}
	b, err := json.Marshal(v)
	return b, compressor, err
}
