package workerdigits_test

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/internal/testutil"
	"github.com/soma-hpc/soma/worker"
)

// TestFitThenForward runs the example's two plans through a real worker
// (in process, over loopback HTTP) and checks the test accuracy.
func TestFitThenForward(t *testing.T) {
	testutil.NeedPython(t, "numpy", "sklearn")
	dir := t.TempDir()
	for _, f := range []string{"filters.py", "fit.toml", "forward.toml", "make_data.py"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command(testutil.Python(), filepath.Join(dir, "make_data.py"), dir).CombinedOutput(); err != nil {
		t.Fatalf("make_data.py: %v\n%s", err, out)
	}
	store, err := fsstore.Open(filepath.Join(dir, "root"), fsstore.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	envs, err := worker.NewEnvPool(worker.EnvOptions{Dir: filepath.Join(dir, "envs"), Python: testutil.Python()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(worker.Options{Store: store, Envs: envs, Python: testutil.Python(), WorkDir: filepath.Join(dir, "work")})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	srv := httptest.NewServer(worker.NewServer(w, "").Handler())
	defer srv.Close()
	c, err := worker.NewClient(srv.URL, "", srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	fit, err := worker.ParsePlanFile(filepath.Join(dir, "fit.toml"))
	if err != nil {
		t.Fatal(err)
	}
	fr, err := c.Run(ctx, fit)
	if err != nil {
		t.Fatal(err)
	}
	if fr.State != worker.StateSucceeded || len(fr.States) != 2 {
		t.Fatalf("fit: %s %q, %d states\n%s", fr.State, fr.Error, len(fr.States), fr.Traceback)
	}
	fwd, err := worker.ParsePlanFile(filepath.Join(dir, "forward.toml"))
	if err != nil {
		t.Fatal(err)
	}
	fwd.States = fr.States
	res, err := c.Run(ctx, fwd)
	if err != nil {
		t.Fatal(err)
	}
	if res.State != worker.StateSucceeded {
		t.Fatalf("forward: %s %q\n%s", res.State, res.Error, res.Traceback)
	}
	yb, err := os.ReadFile(filepath.Join(dir, "test_y.npy"))
	if err != nil {
		t.Fatal(err)
	}
	y, err := worker.ParseNpy(yb)
	if err != nil {
		t.Fatal(err)
	}
	pred := res.Outputs["clf"].Data
	if len(pred) != len(y.Data) {
		t.Fatalf("%d bytes of predictions, want %d", len(pred), len(y.Data))
	}
	right := 0
	for i := 0; i < len(pred); i += 8 {
		if bytes.Equal(pred[i:i+8], y.Data[i:i+8]) {
			right++
		}
	}
	if acc := float64(right) / float64(len(pred)/8); acc < 0.85 {
		t.Fatalf("test accuracy %.3f, want at least 0.85 (the README says about 0.91)", acc)
	}
}
