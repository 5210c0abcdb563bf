package zarr

import (
	"bytes"
	"reflect"
	"testing"
)

// TestSpans covers the row-range arithmetic at every boundary the issue
// lists: empty, one row, inside one chunk, exactly one full chunk, ending
// on a boundary, across many chunks.
func TestSpans(t *testing.T) {
	tests := []struct {
		name              string
		start, stop, c    int64
		want              []span
		wantFirst, wantLn int64
	}{
		{name: "empty", start: 5, stop: 5, c: 4, want: nil},
		{name: "empty at zero", start: 0, stop: 0, c: 4, want: nil},
		{name: "one row", start: 5, stop: 6, c: 4, want: []span{{Chunk: 1, Lo: 1, Hi: 2, Off: 0}}},
		{name: "one row at chunk start", start: 8, stop: 9, c: 4, want: []span{{Chunk: 2, Lo: 0, Hi: 1, Off: 0}}},
		{name: "one row at chunk end", start: 7, stop: 8, c: 4, want: []span{{Chunk: 1, Lo: 3, Hi: 4, Off: 0}}},
		{name: "inside one chunk", start: 9, stop: 11, c: 4, want: []span{{Chunk: 2, Lo: 1, Hi: 3, Off: 0}}},
		{name: "exactly one full chunk", start: 4, stop: 8, c: 4, want: []span{{Chunk: 1, Lo: 0, Hi: 4, Off: 0}}},
		{name: "ending on a boundary", start: 2, stop: 8, c: 4, want: []span{{Chunk: 0, Lo: 2, Hi: 4, Off: 0}, {Chunk: 1, Lo: 0, Hi: 4, Off: 2}}},
		{name: "starting on a boundary", start: 4, stop: 10, c: 4, want: []span{{Chunk: 1, Lo: 0, Hi: 4, Off: 0}, {Chunk: 2, Lo: 0, Hi: 2, Off: 4}}},
		{name: "across many", start: 3, stop: 14, c: 4, want: []span{
			{Chunk: 0, Lo: 3, Hi: 4, Off: 0}, {Chunk: 1, Lo: 0, Hi: 4, Off: 1}, {Chunk: 2, Lo: 0, Hi: 4, Off: 5}, {Chunk: 3, Lo: 0, Hi: 2, Off: 9}}},
		{name: "chunk of one", start: 2, stop: 5, c: 1, want: []span{{Chunk: 2, Lo: 0, Hi: 1, Off: 0}, {Chunk: 3, Lo: 0, Hi: 1, Off: 1}, {Chunk: 4, Lo: 0, Hi: 1, Off: 2}}},
		{name: "whole array of full chunks", start: 0, stop: 12, c: 4, want: []span{{Chunk: 0, Lo: 0, Hi: 4}, {Chunk: 1, Lo: 0, Hi: 4, Off: 4}, {Chunk: 2, Lo: 0, Hi: 4, Off: 8}}},
		{name: "large indexes", start: 1<<40 + 1, stop: 1<<40 + 3, c: 1 << 20, want: []span{{Chunk: 1 << 20, Lo: 1, Hi: 3, Off: 0}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := spans(tc.start, tc.stop, tc.c)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("spans(%d, %d, %d) = %+v, want %+v", tc.start, tc.stop, tc.c, got, tc.want)
			}
			// Invariants: pieces tile the range in order.
			var n int64
			for _, s := range got {
				if s.Off != n || s.Lo < 0 || s.Hi > tc.c || s.Lo >= s.Hi || s.Chunk*tc.c+s.Lo != tc.start+s.Off {
					t.Errorf("piece %+v does not continue at offset %d", s, n)
				}
				n += s.Hi - s.Lo
			}
			if n != tc.stop-tc.start {
				t.Errorf("pieces cover %d rows, want %d", n, tc.stop-tc.start)
			}
		})
	}
}

func TestChunkKeys(t *testing.T) {
	tests := []struct {
		name  string
		enc   keyEncoding
		coord []int64
		want  string
	}{
		{"v3 default", keyEncoding{sep: "/"}, []int64{1, 23, 45}, "c/1/23/45"},
		{"v3 default dot", keyEncoding{sep: "."}, []int64{1, 0}, "c.1.0"},
		{"v3 default 0-d", keyEncoding{sep: "/"}, nil, "c"},
		{"v2 dot", keyEncoding{v2Style: true, sep: "."}, []int64{2, 4}, "2.4"},
		{"v2 nested", keyEncoding{v2Style: true, sep: "/"}, []int64{2, 4}, "2/4"},
		{"v2 0-d", keyEncoding{v2Style: true, sep: "."}, nil, "0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.enc.key(tc.coord); got != tc.want {
				t.Errorf("key(%v) = %q, want %q", tc.coord, got, tc.want)
			}
		})
	}
}

func TestContiguous(t *testing.T) {
	tests := []struct {
		name            string
		shape, off, cnt []int64
		want            bool
		wantStart       int64
	}{
		{"full rows", []int64{10, 4}, []int64{2, 0}, []int64{3, 4}, true, 8},
		{"partial row", []int64{10, 4}, []int64{2, 1}, []int64{1, 2}, true, 9},
		{"partial rows", []int64{10, 4}, []int64{2, 1}, []int64{2, 2}, false, 9},
		{"1-d", []int64{10}, []int64{3}, []int64{5}, true, 3},
		{"3-d plane", []int64{4, 5, 6}, []int64{1, 2, 0}, []int64{1, 3, 6}, true, 42},
		{"3-d broken", []int64{4, 5, 6}, []int64{1, 2, 0}, []int64{2, 3, 6}, false, 42},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, start := contiguous(tc.shape, tc.off, tc.cnt)
			if got != tc.want || start != tc.wantStart {
				t.Errorf("contiguous(%v, %v, %v) = %v, %d, want %v, %d", tc.shape, tc.off, tc.cnt, got, start, tc.want, tc.wantStart)
			}
		})
	}
}

// TestCopyBox compares copyBox with an element-by-element copy.
func TestCopyBox(t *testing.T) {
	tests := []struct {
		name                  string
		srcShape, dstShape    []int64
		srcOff, dstOff, count []int64
	}{
		{"2-d inner", []int64{5, 7}, []int64{4, 4}, []int64{1, 2}, []int64{0, 1}, []int64{3, 3}},
		{"2-d full rows", []int64{5, 7}, []int64{6, 7}, []int64{1, 0}, []int64{2, 0}, []int64{3, 7}},
		{"3-d", []int64{4, 5, 6}, []int64{3, 6, 6}, []int64{1, 0, 2}, []int64{0, 1, 1}, []int64{2, 5, 3}},
		{"3-d whole planes", []int64{4, 5, 6}, []int64{3, 5, 6}, []int64{1, 0, 0}, []int64{0, 0, 0}, []int64{3, 5, 6}},
		{"1-d", []int64{9}, []int64{5}, []int64{3}, []int64{1}, []int64{4}},
		{"empty", []int64{5, 7}, []int64{4, 4}, []int64{1, 2}, []int64{0, 1}, []int64{0, 3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, es := range []int{1, 4} {
				src := make([]byte, prod(tc.srcShape)*int64(es))
				for i := range src {
					src[i] = byte(i*7 + 1)
				}
				got := make([]byte, prod(tc.dstShape)*int64(es))
				want := make([]byte, len(got))
				touched := make([]bool, prod(tc.dstShape))
				copyBox(got, tc.dstShape, tc.dstOff, src, tc.srcShape, tc.srcOff, tc.count, es)
				ss, ds := strides(tc.srcShape), strides(tc.dstShape)
				idx := make([]int64, len(tc.count))
				for n := prod(tc.count); n > 0; n-- {
					var so, do int64
					for i := range idx {
						so += (tc.srcOff[i] + idx[i]) * ss[i]
						do += (tc.dstOff[i] + idx[i]) * ds[i]
					}
					copy(want[do*int64(es):(do+1)*int64(es)], src[so*int64(es):(so+1)*int64(es)])
					touched[do] = true
					for i := len(idx) - 1; i >= 0; i-- {
						if idx[i]++; idx[i] < tc.count[i] {
							break
						}
						idx[i] = 0
					}
				}
				if !bytes.Equal(got, want) {
					t.Errorf("es %d: copyBox = %v, want %v", es, got, want)
				}
				// fillBox fills exactly the elements copyBox writes.
				fill := bytes.Repeat([]byte{0xAB}, es)
				f := make([]byte, len(got))
				fillBox(f, tc.dstShape, tc.dstOff, tc.count, fill)
				for i, tch := range touched {
					if filled := f[i*es] == 0xAB; filled != tch {
						t.Errorf("es %d: fillBox element %d filled = %v, want %v", es, i, filled, tch)
					}
				}
			}
		})
	}
}

func TestCheckRegion(t *testing.T) {
	shape := []int64{10, 4}
	tests := []struct {
		name        string
		start, stop []int64
		ok          bool
	}{
		{"whole", []int64{0, 0}, []int64{10, 4}, true},
		{"empty", []int64{3, 0}, []int64{3, 4}, true},
		{"negative", []int64{-1, 0}, []int64{3, 4}, false},
		{"reversed", []int64{5, 0}, []int64{3, 4}, false},
		{"past end", []int64{0, 0}, []int64{11, 4}, false},
		{"rank", []int64{0}, []int64{10}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := checkRegion(shape, tc.start, tc.stop)
			if (err == nil) != tc.ok {
				t.Errorf("checkRegion(%v, %v) = %v, want ok %v", tc.start, tc.stop, err, tc.ok)
			}
		})
	}
}
