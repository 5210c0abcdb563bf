package zarr

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Info describes an array for people and tools (`soma zarr info`).
type Info struct {
	Path             string          `json:"path"`
	Format           Format          `json:"zarr_format"`
	Shape            []int64         `json:"shape"`
	DataType         DataType        `json:"data_type"`
	ChunkShape       []int64         `json:"chunk_shape"`
	InnerChunkShape  []int64         `json:"inner_chunk_shape,omitempty"` // sharded arrays
	ChunkGrid        []int64         `json:"chunk_grid"`                  // chunks (shards) per dimension
	ChunkBytes       int64           `json:"chunk_bytes"`                 // one decoded chunk (shard)
	ChunkKeyExample  string          `json:"chunk_key_example"`           // the key of the first chunk
	FillValue        json.RawMessage `json:"fill_value"`
	Codecs           []Codec         `json:"codecs"` // v3 spelling, also for v2 arrays
	DimensionNames   []*string       `json:"dimension_names,omitempty"`
	Attributes       json.RawMessage `json:"attributes,omitempty"`
	UncompressedSize int64           `json:"uncompressed_bytes"`
}

// Info returns a description of the array as of its current metadata.
func (a *Array) Info() Info {
	st := a.state.Load()
	m := st.m
	in := Info{
		Path:             a.path,
		Format:           m.format,
		Shape:            append([]int64{}, m.shape...),
		DataType:         m.dtype,
		ChunkShape:       append([]int64{}, m.chunks...),
		ChunkGrid:        gridShape(m.shape, m.chunks),
		ChunkBytes:       st.full.rep.nbytes(),
		ChunkKeyExample:  m.keys.key(make([]int64, len(m.shape))),
		FillValue:        fillJSON(m.dtype, m.fill, m.format == V3),
		Codecs:           append([]Codec{}, m.codecs...),
		DimensionNames:   m.dimNames,
		Attributes:       m.attrs,
		UncompressedSize: prod(m.shape) * int64(m.dtype.Size()),
	}
	if st.plan.shard != nil {
		in.InnerChunkShape = append([]int64{}, st.plan.chunk...)
	}
	return in
}

// CheckDecode reads and decodes the first stored chunk (in C order over
// the chunk grid, looking at the first 1000 positions), so that a codec
// or a frame soma cannot decode is named before a read of the data fails
// (`soma zarr info` runs it). It returns the chunk's key, or "" if none
// of those positions holds a chunk, and the read's error.
func (a *Array) CheckDecode(ctx context.Context) (string, error) {
	st := a.state.Load()
	m := st.m
	grid := gridShape(m.shape, m.chunks)
	n := min(prod(grid), 1000)
	coord := make([]int64, len(grid))
	for i := int64(0); i < n; i++ {
		rem := i
		for d := len(grid) - 1; d >= 0; d-- {
			coord[d] = rem % grid[d]
			rem /= grid[d]
		}
		key := m.keys.key(coord)
		if _, err := os.Stat(a.objPath(key)); err != nil {
			continue
		}
		start := make([]int64, len(coord))
		stop := make([]int64, len(coord))
		for d := range coord {
			start[d] = coord[d] * m.chunks[d]
			stop[d] = min(start[d]+m.chunks[d], m.shape[d])
		}
		_, err := a.readRegion(ctx, st, start, stop)
		return key, err
	}
	return "", nil
}

// WriteText writes the description as aligned "name: value" lines.
func (in Info) WriteText(w io.Writer) error {
	var b strings.Builder
	line := func(k, f string, args ...any) { fmt.Fprintf(&b, "%-18s "+f+"\n", append([]any{k + ":"}, args...)...) }
	line("path", "%s", in.Path)
	line("format", "zarr %s", in.Format)
	line("shape", "%v", in.Shape)
	line("data type", "%v", in.DataType)
	line("chunk shape", "%v (%d bytes decoded)", in.ChunkShape, in.ChunkBytes)
	if in.InnerChunkShape != nil {
		line("inner chunks", "%v (sharded)", in.InnerChunkShape)
	}
	line("chunk grid", "%v", in.ChunkGrid)
	line("first chunk key", "%s", in.ChunkKeyExample)
	line("fill value", "%s", in.FillValue)
	for i, c := range in.Codecs {
		name := ""
		if i == 0 {
			name = "codecs"
		}
		fmt.Fprintf(&b, "%-18s %s\n", name+ternary(name != "", ":", ""), c)
	}
	if in.DimensionNames != nil {
		names := make([]string, len(in.DimensionNames))
		for i, n := range in.DimensionNames {
			names[i] = "-"
			if n != nil {
				names[i] = *n
			}
		}
		line("dimension names", "%s", strings.Join(names, ", "))
	}
	if in.Attributes != nil {
		var c bytes.Buffer
		if json.Compact(&c, in.Attributes) != nil {
			c.Write(in.Attributes)
		}
		line("attributes", "%s", c.Bytes())
	}
	line("uncompressed", "%d bytes", in.UncompressedSize)
	_, err := io.WriteString(w, b.String())
	return err
}

func ternary(c bool, a, b string) string {
	if c {
		return a
	}
	return b
}

// ParseRowRange parses a row range as `soma zarr cat --rows` takes it,
// for an array of rows rows: "A:B" is rows [A, B); "A:" runs to the end,
// ":B" starts at 0, "A" is the one row A; negative numbers count from the
// end, as in Python ("-10:" is the last ten rows). A range outside
// [0, rows] or reversed is an error wrapping ErrOutOfRange.
func ParseRowRange(s string, rows int64) (start, stop int64, err error) {
	bad := func(why string) (int64, int64, error) {
		return 0, 0, fmt.Errorf("zarr: rows %q: %s (use A:B with 0 <= A <= B <= %d)", s, why, rows)
	}
	num := func(t string, def int64) (int64, error) {
		if t == "" {
			return def, nil
		}
		v, err := strconv.ParseInt(strings.TrimSpace(t), 10, 64)
		if err != nil {
			return 0, err
		}
		if v < 0 {
			v += rows
		}
		return v, nil
	}
	lo, hi, found := strings.Cut(s, ":")
	if strings.TrimSpace(s) == "" || (!found && strings.TrimSpace(lo) == "") {
		return bad("empty")
	}
	if start, err = num(lo, 0); err != nil {
		return bad("not a number")
	}
	if !found {
		stop = start + 1
	} else if stop, err = num(hi, rows); err != nil {
		return bad("not a number")
	}
	if start < 0 || stop > rows || start > stop {
		_, _, e := bad(fmt.Sprintf("[%d, %d) is outside the array or reversed", start, stop))
		return 0, 0, fmt.Errorf("%w: %w", ErrOutOfRange, e)
	}
	return start, stop, nil
}
