package fsstore

import (
	"context"
	"os"
	"testing"
	"time"
)

// Bug (issue 13, item 6): Put of bytes already stored returned without
// refreshing the blob's time, so a GC whose name scan came before the
// writer's Bind removed a blob the writer had just Put, and the record
// it bound pointed at nothing. Each case puts the writer's Put and Bind
// at one point of GC's run, on a blob older than the grace that no name
// refers to when GC scans; afterwards the name's blob must exist.
func TestGCKeepsABlobBeingBound(t *testing.T) {
	ctx := context.Background()
	const grace = time.Hour
	tests := []struct {
		name string
		// at is where the writer's Put+Bind run: "afterScan" (after GC
		// listed the names, before it decides on blobs) or
		// "beforeRecheck" (after GC moved the blob aside).
		at string
	}{
		{"put and bind after the scan", "afterScan"},
		{"put and bind while the blob is moved aside", "beforeRecheck"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			b := []byte("the empty curve")
			d, err := s.Put(ctx, b)
			if err != nil {
				t.Fatal(err)
			}
			old := time.Now().Add(-2 * grace)
			if err := os.Chtimes(s.blobPath(d), old, old); err != nil {
				t.Fatal(err)
			}
			write := func() {
				if _, err := s.Put(ctx, b); err != nil {
					t.Error(err)
				}
				if _, err := s.Bind(ctx, "study/s/trial/0/0", d, nil); err != nil {
					t.Error(err)
				}
			}
			opts := GCOptions{TempOlderThan: grace, Blobs: true}
			switch tc.at {
			case "afterScan":
				opts.afterScan = write
			case "beforeRecheck":
				opts.beforeRecheck = func(Digest) { write() }
			}
			rep, err := s.GC(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Get(ctx, d); err != nil {
				t.Fatalf("after GC (%+v) the bound name's blob: %v", rep, err)
			}
			if tc.at == "afterScan" && rep.Blobs != 0 {
				// (Moved aside, the writer stored the bytes anew, and GC
				// removed the old file: one removed, correctly.)
				t.Errorf("GC removed %d blobs, want 0", rep.Blobs)
			}
			// With nothing in the way, the same blob, unreferenced and
			// old again, goes.
			if err := s.Unbind(ctx, "study/s/trial/0/0"); err != nil {
				t.Fatal(err)
			}
			os.Chtimes(s.blobPath(d), old, old)
			if rep, err := s.GC(ctx, GCOptions{TempOlderThan: grace, Blobs: true}); err != nil || rep.Blobs != 1 {
				t.Errorf("GC of the unreferenced old blob = %+v, %v; want it removed", rep, err)
			}
		})
	}
}

// A GC that died with a blob moved aside leaves it under a ".gc-" name:
// the next GC puts it back, and it reads as before.
func TestGCPutsBackABlobLeftAside(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	d, _ := s.Put(ctx, []byte("x"))
	s.Bind(ctx, "n", d, nil)
	p := s.blobPath(d)
	aside := p[:len(p)-len(d.Hex()[2:])] + gcAside + d.Hex()[2:] + ".abcdef"
	if err := os.Rename(p, aside); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GC(ctx, GCOptions{Blobs: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, d); err != nil {
		t.Errorf("blob after GC: %v", err)
	}
	if _, err := os.Lstat(aside); !os.IsNotExist(err) {
		t.Errorf("the aside name is still there: %v", err)
	}
}
