package zarr

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// bloscExpected is expected.json as `zarr_helper.py makeblosc` writes it.
type bloscExpected struct {
	Generator map[string]string `json:"generator"`
	Arrays    map[string]struct {
		DType  string            `json:"dtype"`
		Shape  []int64           `json:"shape"`
		SHA256 string            `json:"sha256_le_c"`
		Head   []json.RawMessage `json:"head"`
	} `json:"arrays"`
}

func loadBloscExpected(t *testing.T, dir string) bloscExpected {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	var e bloscExpected
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatal(err)
	}
	if len(e.Arrays) < 60 {
		t.Fatalf("%s: %d arrays, want the 60+ makeblosc writes", dir, len(e.Arrays))
	}
	return e
}

// checkBloscArrays reads every array of a makeblosc folder with soma and
// compares it with zarr-python's digest and first values.
func checkBloscArrays(t *testing.T, dir string) bloscExpected {
	t.Helper()
	e := loadBloscExpected(t, dir)
	ctx := context.Background()
	for name, exp := range e.Arrays {
		t.Run(name, func(t *testing.T) {
			a, err := Open(ctx, filepath.Join(dir, name), Options{Parallelism: 2})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			d, err := a.ReadRegion(ctx, []int64{0}, exp.Shape)
			if err != nil {
				t.Fatalf("ReadRegion: %v", err)
			}
			for i, raw := range exp.Head {
				got := d.At(int64(i))
				var want string
				if err := json.Unmarshal(raw, &want); err == nil { // a float, as Python's repr
					f, _ := strconv.ParseFloat(want, 64)
					want = fmt.Sprint(f)
					got = fmt.Sprint(toFloat(got))
				} else {
					want = string(raw)
				}
				if fmt.Sprint(got) != want {
					t.Fatalf("element %d = %v, want %s (zarr-python's)", i, got, want)
				}
			}
			if got := sha(d.Bytes); got != exp.SHA256 {
				t.Fatalf("sha256 of the values = %s, want zarr-python's %s", got, exp.SHA256)
			}
		})
	}
	return e
}

func toFloat(v any) float64 {
	switch x := v.(type) {
	case float32:
		return float64(x)
	case float64:
		return x
	}
	return 0
}

// TestBloscShuffleFixtures reads blosc arrays zarr-python 2.13 (numcodecs
// 0.11, c-blosc 1.21.3) wrote, and v3 arrays made from numcodecs' Blosc
// frames: shuffle and bitshuffle for 1-, 2-, 4- and 8-byte elements,
// chunks and blocks that are and are not a multiple of 8 elements, short
// last blocks, split blocks, and a Shuffle filter before a bitshuffling
// blosc (which gives blosc typesize 1).
//
// Regression: soma ignored bitshuffle for typesize 1 and returned the
// bit-transposed bytes: zarr-python's u1 arange(4000) % 4 read as 170 170
// 170 ..., with no error; and it refused bitshuffle for wider types.
func TestBloscShuffleFixtures(t *testing.T) {
	checkBloscArrays(t, "testdata/blosc")
	a, err := Open(context.Background(), "testdata/blosc/v2_uint8_bitshuffle_arange4000mod4.zarr", Options{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := a.ReadRows(context.Background(), 0, 4000)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range d.Bytes {
		if int(v) != i%4 {
			t.Fatalf("element %d = %d, want %d", i, v, i%4)
		}
	}
}

// TestBloscShuffleLiveZarrPython regenerates the blosc arrays with the
// installed zarr-python and numcodecs and reads them; and checks that the
// committed copy in testdata/blosc holds the same values (the generator
// is deterministic).
func TestBloscShuffleLiveZarrPython(t *testing.T) {
	dir := t.TempDir()
	runPython(t, "makeblosc", dir)
	live := checkBloscArrays(t, dir)
	committed := loadBloscExpected(t, "testdata/blosc")
	for name, l := range live.Arrays {
		c, ok := committed.Arrays[name]
		if !ok || c.SHA256 != l.SHA256 {
			t.Errorf("%s: testdata/blosc is stale (regenerate: zarr_helper.py makeblosc, see testdata/README.md)", name)
		}
	}
	if len(committed.Arrays) != len(live.Arrays) {
		t.Errorf("testdata/blosc has %d arrays, makeblosc writes %d", len(committed.Arrays), len(live.Arrays))
	}
}

// bitShuffleRef is bitshuffle from its definition, one bit at a time:
// for n elements of ts bytes (n % 8 == 0), bit k of byte j of element i
// goes to bit i%8 of byte i/8 of row j*8+k, rows of n/8 bytes.
func bitShuffleRef(src []byte, ts int) []byte {
	n := len(src) / ts
	out := make([]byte, len(src))
	if n%8 != 0 {
		copy(out, src)
		return out
	}
	for i := range n {
		for j := range ts {
			for k := range 8 {
				bit := src[i*ts+j] >> k & 1
				out[(j*8+k)*(n/8)+i/8] |= bit << (i % 8)
			}
		}
	}
	copy(out[n*ts:], src[n*ts:])
	return out
}

// TestBitUnshuffleInvertsDefinition covers every element size soma can
// meet (1..16 and a few odd ones), element counts that are and are not a
// multiple of 8, and blocks with bytes after the last whole element.
func TestBitUnshuffleInvertsDefinition(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, ts := range []int{1, 2, 3, 4, 5, 7, 8, 12, 16, 33} {
		for _, n := range []int{0, 1, 7, 8, 9, 16, 24, 63, 64, 200, 1000} {
			for _, extra := range []int{0, 1, ts - 1} {
				if extra >= ts && extra > 0 {
					continue
				}
				src := make([]byte, n*ts+extra)
				for i := range src {
					src[i] = byte(r.Uint32())
				}
				got := make([]byte, len(src))
				bitUnshuffle(got, bitShuffleRef(src, ts), ts)
				if !bytes.Equal(got, src) {
					t.Errorf("ts %d, %d elements + %d bytes: bitUnshuffle(bitshuffle(x)) != x", ts, n, extra)
				}
			}
		}
	}
}
