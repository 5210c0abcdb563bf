package admin

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soma-hpc/soma/internal/testutil"
	"github.com/soma-hpc/soma/s3store"
	"github.com/soma-hpc/soma/study"
)

// TestGCAndRemoveOnBucket: GC packs a study kept in a bucket and keeps
// every blob its records need; Remove takes the study's records out of
// the bucket and its logs out of the local folder soma-trial wrote them
// in, and nothing of another study.
func TestGCAndRemoveOnBucket(t *testing.T) {
	srv := testutil.NeedS3(t)
	srv.Setenv(t)
	ctx := context.Background()
	root := srv.FreshRoot(t, "admin")
	s, err := s3store.Open(ctx, root, s3store.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	// Enough trials for a pack (study.PackOptions: 256).
	const n = 260
	for name, budget := range map[string]int{"lr": n, "keep": 2} {
		spec, err := study.ParseSpec(fmt.Appendf(nil, "direction = \"minimize\"\nbudget = %d\nsampler = \"random\"\n[param]\nx = \"float:0:1\"\n", budget))
		if err != nil {
			t.Fatal(err)
		}
		st, err := study.Open(ctx, s, name, spec, study.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range budget {
			r, err := st.Next(ctx, study.Me(""))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.Report(ctx, 1, float64(i)); err != nil {
				t.Fatal(err)
			}
			if err := r.Finish(ctx, study.StateDone, float64(i), ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	res, err := GC(ctx, s, GCOptions{OlderThan: study.MinGCAge})
	if err != nil {
		t.Fatal(err)
	}
	if res.Packed["lr"].Packed != n || res.Packed["keep"].Packed != 0 || res.Blobs != 0 || res.BlobsKept == 0 {
		t.Errorf("GC on a bucket: %+v; want %d trials of lr packed, no blob removed", res, n)
	}
	// Every name's blob is still there, the packs' among them.
	bound, _, err := s.Scan(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bound {
		if ok, err := s.Has(ctx, b.Digest); err != nil || !ok {
			t.Errorf("after GC, the blob of %s: %v, %v; want it kept", b.Name, ok, err)
		}
	}
	st, err := study.Open(ctx, s, "lr", nil, study.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if snap, err := st.Curves(ctx); err != nil || len(snap.Trials) != n {
		t.Errorf("after GC, curves: %v; want %d trials", err, n)
	}

	local := t.TempDir()
	if err := os.MkdirAll(filepath.Join(local, "logs", "lr"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(local, "logs", "lr", "h.1.0.out"), []byte("out\n"), 0o666); err != nil {
		t.Fatal(err)
	}
	dry, err := Remove(ctx, s, "lr", RemoveOptions{DryRun: true, Local: local})
	if err != nil {
		t.Fatal(err)
	}
	if len(dry.Parts) != 2 || dry.Parts[0].Path != root+"/names/study/lr" || dry.Parts[1].What != "logs" || dry.Parts[1].Files != 1 || dry.Trials != n {
		t.Errorf("Remove --dry-run on a bucket: %+v; want the records in the bucket and 1 log file", dry)
	}
	rep, err := Remove(ctx, s, "lr", RemoveOptions{Local: local})
	if err != nil || !rep.Removed {
		t.Fatalf("Remove: %+v, %v", rep, err)
	}
	if left, err := s.List(ctx, "study/lr"); err != nil || len(left) != 0 {
		t.Errorf("after Remove, names under study/lr: %q, %v; want none", left, err)
	}
	if _, err := os.Stat(filepath.Join(local, "logs", "lr")); !os.IsNotExist(err) {
		t.Errorf("after Remove, the local logs: %v; want them gone", err)
	}
	names, err := study.List(ctx, s)
	if err != nil || strings.Join(names, ",") != "keep" {
		t.Errorf("studies after Remove: %q, %v; want only keep", names, err)
	}
}
