package fsstore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// RemoveTree removes the names under a prefix and nothing else: not a
// sibling whose name starts the same, not what a link inside points at;
// and a write after it makes the folders again (the cached folder was
// dropped, not written into while unlinked).
func TestRemoveTree(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	d, err := s.Put(ctx, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"study/s/spec", "study/s/trial/0/0", "study/s/trial/1/0", "study/s2/spec", "study/s2/trial/0/0"} {
		if _, err := s.Claim(ctx, n, d, nil); err != nil {
			t.Fatal(err)
		}
	}
	outside := filepath.Join(t.TempDir(), "outside")
	if err := os.WriteFile(outside, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(outside), filepath.Join(s.Root(), "names", "study", "s", "trial", "link")); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"study", "", "../x", "study/../s"} {
		if err := s.RemoveTree(ctx, bad); err == nil {
			t.Errorf("RemoveTree(%q) = nil, want refused", bad)
		}
	}
	if err := s.RemoveTree(ctx, "study/s"); err != nil {
		t.Fatal(err)
	}
	got, err := s.List(ctx, "study")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"study/s2/spec", "study/s2/trial/0/0"}; !slices.Equal(got, want) {
		t.Errorf("names after RemoveTree(study/s) = %v, want %v", got, want)
	}
	if b, err := os.ReadFile(outside); err != nil || string(b) != "keep" {
		t.Errorf("the link's target: %q, %v; want it untouched", b, err)
	}
	if _, err := s.Resolve(ctx, "study/s/trial/0/0"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Resolve of a removed name = %v, want ErrNotFound", err)
	}
	if _, err := s.Bind(ctx, "study/s/trial/1/0", d, nil); err != nil {
		t.Fatalf("Bind after RemoveTree: %v", err)
	}
	if _, err := s.Resolve(ctx, "study/s/trial/1/0"); err != nil {
		t.Errorf("a name bound after RemoveTree: %v, want it readable", err)
	}
	if err := s.RemoveTree(ctx, "study/nothing"); err != nil {
		t.Errorf("RemoveTree of nothing = %v, want nil", err)
	}
}
