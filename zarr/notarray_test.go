package zarr

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Issue 16: a v2 group folder and a missing path both got "not a zarr
// array (no zarr.json or .zarray in it)", and a rectilinear chunk grid got
// `unknown field "chunk_shapes"`. Each says what is there.
func TestNotAnArraySaysWhatIsThere(t *testing.T) {
	dir := t.TempDir()
	write := func(p, s string) {
		p = filepath.Join(dir, p)
		os.MkdirAll(filepath.Dir(p), 0o777)
		if err := os.WriteFile(p, []byte(s), 0o666); err != nil {
			t.Fatal(err)
		}
	}
	write("g2/.zgroup", `{"zarr_format":2}`)
	write("g2/a/.zarray", `{}`)
	write("empty/x", "")
	write("file", "")
	write("rect/zarr.json", `{"zarr_format":3,"node_type":"array","shape":[10],"data_type":"int32",
		"chunk_grid":{"name":"rectilinear","configuration":{"kind":"inline","chunk_shapes":[[3,7]]}},
		"chunk_key_encoding":{"name":"default"},"fill_value":0,"codecs":[{"name":"bytes","configuration":{"endian":"little"}}]}`)
	tests := []struct {
		path string
		is   error
		want string
	}{
		{"missing", fs.ErrNotExist, "nothing at this path"},
		{"g2", ErrNotArray, "a zarr v2 group (.zgroup), not an array (open an array inside it, e.g. " + filepath.Join(dir, "g2", "a") + ")"},
		{"empty", ErrNotArray, "a folder with no zarr.json or .zarray in it"},
		{"file", ErrNotArray, "a file, not a folder"},
		{"rect", ErrUnsupported, `chunk_grid "rectilinear"`},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			_, err := Open(context.Background(), filepath.Join(dir, tc.path), Options{})
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Open: %v; want %v with %q", err, tc.is, tc.want)
			}
		})
	}
	if _, err := Open(context.Background(), filepath.Join(dir, "missing"), Options{}); !errors.Is(err, ErrNotArray) {
		t.Errorf("missing path: %v is not ErrNotArray", err)
	}
}
