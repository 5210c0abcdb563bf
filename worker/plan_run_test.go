package worker

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/zarr"
)

// TestFitThenForward runs the two-filter plan (Standardize, then a
// nearest-centroid classifier) as a fit, sends the trained states back in
// a forward plan, and checks that the predictions are the labels, with the
// input given inline, by blob reference and by Zarr rows.
func TestFitThenForward(t *testing.T) {
	tw := newTestWorker(t, testOptions{})
	x, y := twoClusters(40)

	fit := run(t, tw, classifierPlan(t, "fit", Fit, x, &y))
	mustSucceed(t, fit)
	for _, id := range []string{"scale", "clf"} {
		s, ok := fit.States[id]
		if !ok || !strings.HasPrefix(s.Ref, "blob:sha256:") {
			t.Fatalf("fit states[%s] = %+v, want a blob reference", id, s)
		}
	}
	if got := resolved(t, tw, fit.Outputs["clf"]); !bytes.Equal(got.Data, y.Data) {
		t.Fatalf("fit predictions = %v, want the labels %v", got.Data, y.Data)
	}

	xBlob, err := tw.store.Put(context.Background(), x.Data)
	if err != nil {
		t.Fatal(err)
	}
	zpath := filepath.Join(tw.store.Root(), "data", "x.zarr")
	arr, err := zarr.Create(context.Background(), zpath, zarr.Spec{DataType: zarr.Float32, Shape: []int64{40, 3}, ChunkShape: []int64{16, 3}}, zarr.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := arr.WriteRegion(context.Background(), []int64{0, 0}, &zarr.Data{Type: zarr.Float32, Shape: []int64{40, 3}, Bytes: x.Data}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		input Value
		want  []byte // labels of the rows sent
	}{
		{"inline", x, y.Data},
		{"blob", Value{Kind: KindArray, DType: "float32", Shape: []int64{40, 3}, Ref: BlobRef(xBlob)}, y.Data},
		{"zarr rows", Value{Ref: ZarrRef("data/x.zarr", 10, 30)}, y.Data[10*8 : 30*8]},
		{"zarr absolute path", Value{Ref: "zarr:" + zpath + "?rows=-4:"}, y.Data[36*8:]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := classifierPlan(t, "forward-"+strings.ReplaceAll(tc.name, " ", "-"), Forward, tc.input, nil)
			p.States = fit.States
			res := run(t, tw, p)
			mustSucceed(t, res)
			if got := resolved(t, tw, res.Outputs["clf"]); !bytes.Equal(got.Data, tc.want) {
				t.Errorf("predictions = %v, want %v", got.Data, tc.want)
			}
			if got := res.Outputs["scale"]; got.DType != "float32" || len(got.Shape) != 2 || got.Shape[1] != 3 {
				t.Errorf("scale output = %s%v, want float32[n 3]", got.DType, got.Shape)
			}
		})
	}
	// Zarr rows are decoded into files the daemon maps; none may stay.
	if left, _ := os.ReadDir(filepath.Join(tw.w.o.WorkDir, "tmp")); len(left) != 0 {
		t.Errorf("%d temporary files left in the work folder, want 0", len(left))
	}
}

// TestStateRefused: a state that does not load fails the plan with the
// reason, naming the node; it never silently starts from a fresh filter
// (seed debt D-25).
func TestStateRefused(t *testing.T) {
	tw := newTestWorker(t, testOptions{})
	x, y := twoClusters(20)
	fit := run(t, tw, classifierPlan(t, "fit", Fit, x, &y))
	mustSucceed(t, fit)

	t.Run("garbage bytes", func(t *testing.T) {
		p := classifierPlan(t, "garbage", Forward, x, nil)
		p.States = map[string]Value{"scale": fit.States["scale"], "clf": {Kind: KindBytes, Data: []byte("not a state")}}
		res := run(t, tw, p)
		if res.State != StateFailed || !strings.Contains(res.Error, `node "clf"`) || !strings.Contains(res.Error, "state failed to load") {
			t.Fatalf("state %s, error %q; want failed naming node clf and the state", res.State, res.Error)
		}
		if res.Traceback == "" {
			t.Errorf("no traceback")
		}
	})
	t.Run("corrupted blob", func(t *testing.T) {
		d, err := fsstore.ParseDigest(strings.TrimPrefix(fit.States["clf"].Ref, "blob:"))
		if err != nil {
			t.Fatal(err)
		}
		corruptBlob(t, tw.store, d)
		p := classifierPlan(t, "corrupt", Forward, x, nil)
		p.States = fit.States
		res := run(t, tw, p)
		if res.State != StateFailed || !strings.Contains(res.Error, `node "clf": state`) || !strings.Contains(res.Error, "corrupt") {
			t.Fatalf("state %s, error %q; want failed, naming node clf's corrupt state", res.State, res.Error)
		}
	})
	t.Run("missing blob", func(t *testing.T) {
		p := classifierPlan(t, "missing", Forward, x, nil)
		p.States = map[string]Value{"scale": {Kind: KindBytes, Ref: BlobRef(fsstore.Sum([]byte("never stored")))}}
		res := run(t, tw, p)
		if res.State != StateFailed || !strings.Contains(res.Error, "unresolvable reference") {
			t.Fatalf("state %s, error %q; want failed on the reference", res.State, res.Error)
		}
	})
}

// corruptBlob flips the bytes of a stored blob on disk.
func corruptBlob(t *testing.T, s *fsstore.Store, d fsstore.Digest) {
	t.Helper()
	var path string
	hex := strings.TrimPrefix(d.String(), "sha256:")
	filepath.WalkDir(filepath.Join(s.Root(), "blobs"), func(p string, e os.DirEntry, err error) error {
		if err == nil && !e.IsDir() && strings.HasSuffix(p, hex[2:]) {
			path = p
		}
		return nil
	})
	if path == "" {
		t.Fatalf("blob %s not found under %s", d, s.Root())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	os.Chmod(path, 0o644)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestWithoutStore: a worker without --root returns states inline, and
// refuses a blob reference with the fix in the message.
func TestWithoutStore(t *testing.T) {
	tw := newTestWorker(t, testOptions{noStore: true})
	x, y := twoClusters(20)
	fit := run(t, tw, classifierPlan(t, "fit", Fit, x, &y))
	mustSucceed(t, fit)
	if s := fit.States["clf"]; s.Ref != "" || len(s.Data) == 0 {
		t.Fatalf("state = %+v, want inline bytes", s)
	}
	p := classifierPlan(t, "fwd", Forward, x, nil)
	p.States = fit.States
	res := run(t, tw, p)
	mustSucceed(t, res)
	if !bytes.Equal(res.Outputs["clf"].Data, y.Data) {
		t.Errorf("predictions = %v, want %v", res.Outputs["clf"].Data, y.Data)
	}
	p = classifierPlan(t, "blob", Forward, Value{Kind: KindArray, DType: "float32", Shape: []int64{1, 3}, Ref: BlobRef(fsstore.Sum(nil))}, nil)
	res = run(t, tw, p)
	if res.State != StateFailed || !strings.Contains(res.Error, "--root") {
		t.Fatalf("state %s, error %q; want failed, naming --root", res.State, res.Error)
	}
}

// TestLargeOutputByReference: outputs above the inline limit come back
// as blob references holding the same bytes.
func TestLargeOutputByReference(t *testing.T) {
	tw := newTestWorker(t, testOptions{})
	tw.w.o.InlineLimit = 1000
	x, _ := twoClusters(200) // 2400 bytes
	p := &Plan{ID: "big", Files: []File{readFilter(t, "numpy_filters.py")},
		Nodes: []Node{{ID: "d", File: "numpy_filters.py", Class: "Double"}}, Input: x,
		Env: EnvRequest{SystemSitePackages: true}} // numpy is Debian's
	res := run(t, tw, p)
	mustSucceed(t, res)
	out := res.Outputs["d"]
	if !strings.HasPrefix(out.Ref, "blob:") || out.Data != nil {
		t.Fatalf("output = ref %q with %d inline bytes, want a blob reference", out.Ref, len(out.Data))
	}
	got := resolved(t, tw, out)
	if len(got.Data) != len(x.Data) || got.DType != "float32" {
		t.Fatalf("output %s%v with %d bytes, want float32 %v", got.DType, got.Shape, len(got.Data), x.Shape)
	}
}

// TestResultsBounded: finished results are kept for GET /plans/<id> only
// up to a bound on their inline bytes (a worker without a store returns
// every output inline, and a long-running worker must not hold them all).
func TestResultsBounded(t *testing.T) {
	tw := newTestWorker(t, testOptions{noStore: true})
	tw.w.keepBytes = 4000
	x, _ := twoClusters(200) // 2400 bytes in, 2400 bytes out
	p := func(id string) *Plan {
		return &Plan{ID: id, Files: []File{readFilter(t, "numpy_filters.py")},
			Nodes: []Node{{ID: "d", File: "numpy_filters.py", Class: "Double"}}, Input: x,
			Env: EnvRequest{SystemSitePackages: true}} // numpy is Debian's
	}
	mustSucceed(t, run(t, tw, p("first")))
	mustSucceed(t, run(t, tw, p("second")))
	ctx := context.Background()
	if _, err := tw.client.Get(ctx, "first"); err == nil || !strings.Contains(err.Error(), "unknown plan") {
		t.Fatalf("Get(first) = %v, want unknown plan (forgotten past the bound)", err)
	}
	if res, err := tw.client.Get(ctx, "second"); err != nil || len(res.Outputs["d"].Data) != 2400 {
		t.Fatalf("Get(second) = %v, want its 2400-byte output", err)
	}
}
