package fsstore

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"
)

// TestTouchResolve: the record comes back with the time the touch set,
// which a Resolve then reads too; an unbound name is ErrNotFound; a
// record whose bytes are not a record is touched and reported corrupt
// with its new time; a link at the name is refused and its target's time
// is left alone.
func TestTouchResolve(t *testing.T) {
	ctx := context.Background()
	s, d := newStoreWithBlob(t)
	meta := Meta{}.Set("nonce", "n1")
	if won, err := s.Claim(ctx, "leases/w/0", d, meta); !won || err != nil {
		t.Fatalf("claim: %v, %v", won, err)
	}
	b0, err := s.Resolve(ctx, "leases/w/0")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // coarse kernel timestamps
	b1, err := s.TouchResolve(ctx, "leases/w/0")
	if err != nil {
		t.Fatal(err)
	}
	if !b1.Time.After(b0.Time) || b1.Digest != d || b1.Meta.Value("nonce") != "n1" || b1.Name != "leases/w/0" {
		t.Errorf("TouchResolve = %+v, want the record (nonce n1, digest %s) with a time after %v", b1, d, b0.Time)
	}
	if b2, err := s.Resolve(ctx, "leases/w/0"); err != nil || !b2.Time.Equal(b1.Time) {
		t.Errorf("Resolve after TouchResolve: time %v, %v; want %v", b2.Time, err, b1.Time)
	}
	if _, err := s.TouchResolve(ctx, "leases/w/1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("TouchResolve(unbound) = %v, want ErrNotFound", err)
	}
	if _, err := s.TouchResolve(ctx, "leases"); !errors.Is(err, ErrNotFound) {
		t.Errorf("TouchResolve(a prefix) = %v, want ErrNotFound", err)
	}

	if err := os.WriteFile(s.namePath("leases/w/junk"), []byte("not a record"), 0o666); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(s.namePath("leases/w/junk"), old, old); err != nil {
		t.Fatal(err)
	}
	bj, err := s.TouchResolve(ctx, "leases/w/junk")
	var ce *CorruptError
	if !errors.As(err, &ce) || bj.Name != "leases/w/junk" || !bj.Time.After(old.Add(time.Minute)) {
		t.Errorf("TouchResolve(junk) = %+v, %v; want a *CorruptError with the new time", bj, err)
	}

	target := s.namePath("leases/w/0")
	st0, err := os.Stat(target)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, s.namePath("leases/w/link")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if _, err := s.TouchResolve(ctx, "leases/w/link"); !errors.Is(err, ErrForeign) {
		t.Errorf("TouchResolve(a link) = %v, want ErrForeign", err)
	}
	if st1, err := os.Stat(target); err != nil || !st1.ModTime().Equal(st0.ModTime()) {
		t.Errorf("the link's target's time: %v, %v; want it untouched (%v)", st1.ModTime(), err, st0.ModTime())
	}
}
