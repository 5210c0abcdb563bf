package fsstore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestVerifiedBlobFile(t *testing.T) {
	ctx := context.Background()
	s, err := Open(filepath.Join(t.TempDir(), "root"), Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	want := []byte("the bytes of a blob")
	d, err := s.Put(ctx, want)
	if err != nil {
		t.Fatal(err)
	}
	path, size, err := s.VerifiedBlobFile(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != string(want) || size != int64(len(want)) {
		t.Fatalf("VerifiedBlobFile = %s (%d bytes: %q), %v; want the blob's file", path, size, got, err)
	}
	if _, _, err := s.VerifiedBlobFile(ctx, Sum([]byte("absent"))); !errors.Is(err, ErrNotFound) {
		t.Fatalf("absent blob: %v, want ErrNotFound", err)
	}
	os.Chmod(path, 0o644)
	if err := os.WriteFile(path, []byte("the bytes of a blub"), 0o644); err != nil {
		t.Fatal(err)
	}
	var ce *CorruptError
	if _, _, err := s.VerifiedBlobFile(ctx, d); !errors.As(err, &ce) {
		t.Fatalf("corrupt blob: %v, want a *CorruptError", err)
	}
}
