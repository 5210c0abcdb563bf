package fsstore

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// Issue 16: a root under a file said only "not a directory", and a
// folder that lost its soma.json "point soma at an empty or new folder",
// with no way back. Each says what is wrong and the fix.
func TestOpenExplainsWhatIsThere(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o666)
	_, err := Open(filepath.Join(file, "root"), Options{Create: true})
	if !errors.Is(err, syscall.ENOTDIR) || !strings.Contains(err.Error(), "the root, or a folder above it, is a file") {
		t.Errorf("root under a file: %v", err)
	}

	root := filepath.Join(dir, "root")
	s, err := Open(root, Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	_ = s
	os.Mkdir(filepath.Join(root, "logs"), 0o777)
	marker, _ := os.ReadFile(filepath.Join(root, markerName))
	os.Remove(filepath.Join(root, markerName))
	_, err = Open(root, Options{Create: true})
	want := "write it back (echo '" + strings.TrimSpace(string(marker)) + "' > " + filepath.Join(root, markerName) + ")"
	if !errors.Is(err, ErrNotStore) || !strings.Contains(err.Error(), want) {
		t.Errorf("lost soma.json: %v\nwant %q", err, want)
	}

	other := filepath.Join(dir, "other")
	os.MkdirAll(filepath.Join(other, "data"), 0o777)
	_, err = Open(other, Options{Create: true})
	if !errors.Is(err, ErrNotStore) || !strings.Contains(err.Error(), "so it is not a soma store") || strings.Contains(err.Error(), "write it back") {
		t.Errorf("a folder that is not a store: %v", err)
	}
}

// Issue 16: a read-only root said "server time: fsstore: temp file …:
// permission denied". The message names the folder, its owner and mode,
// and who this process is.
func TestNotWritableSaysByWhom(t *testing.T) {
	dir := t.TempDir()
	err := notWritable(dir, &os.PathError{Op: "open", Path: dir + "/x", Err: syscall.EACCES})
	for _, want := range []string{dir + " is not writable by ", "uid " + itoa(os.Geteuid()), "mode drwx", "make it writable"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v\nlacks %q", err, want)
		}
	}
	if !errors.Is(err, syscall.EACCES) {
		t.Errorf("%v does not wrap EACCES", err)
	}
	if err := notWritable(dir, syscall.EROFS); !strings.Contains(err.Error(), "read-only filesystem") {
		t.Errorf("EROFS: %v", err)
	}
	if err := notWritable(dir, syscall.ENOSPC); err != syscall.ENOSPC {
		t.Errorf("ENOSPC: %v, want it unchanged", err)
	}
	if os.Geteuid() == 0 {
		t.Skip("root writes in any folder: the real read-only root is not testable here")
	}
	root := filepath.Join(dir, "root")
	s, err := Open(root, Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}

	os.Chmod(filepath.Join(root, "tmp"), 0o555)
	defer os.Chmod(filepath.Join(root, "tmp"), 0o755)
	if _, err := s.Now(t.Context()); err == nil || !strings.Contains(err.Error(), "is not writable by") {
		t.Errorf("Now in a read-only tmp/: %v", err)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// Issue 16: a soma.json that is JSON but not soma's said "... that is not
// soma's (<nil>)": the parse error, nil, stood where the reason should.
func TestForeignMarkerSaysWhy(t *testing.T) {
	tests := []struct {
		name, marker, want string
	}{
		{"another program's JSON", `{"name":"other"}`, `its format is "", not "soma-store"`},
		{"another format", `{"format":"zarr","version":1}`, `its format is "zarr", not "soma-store"`},
		{"not JSON", `format = 1`, "invalid character"},
		{"version zero", `{"format":"soma-store","version":0}`, "format version 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, markerName), []byte(tt.marker), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Open(dir, Options{})
			if !errors.Is(err, ErrNotStore) || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "nil") {
				t.Errorf("Open(%s) = %v, want ErrNotStore saying %q", tt.marker, err, tt.want)
			}
		})
	}
}
