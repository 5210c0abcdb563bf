package worker

import (
	"cmp"
	"context"
	"encoding/binary"
	"math"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/internal/testutil"
)

const testToken = "test-token-0123456789"

// testWorker is a real worker behind a real loopback HTTP server.
type testWorker struct {
	w      *Worker
	store  *fsstore.Store
	srv    *httptest.Server
	server *Server
	client *Client
}

type testOptions struct {
	noStore     bool
	root        string // the store's root, to share one between workers; "" means a new one
	planTimeout time.Duration
	gpus        []GPU // fake GPUs the worker offers (no NVML involved)
	maxPlans    int   // the worker's slots; 0 means 4
	idleDaemons int   // warm daemons kept per environment; 0 means the worker's default
}

// newTestWorker starts a worker with Debian's Python, a store under
// t.TempDir() and a small cancel grace (STYLE rule 19: make grace periods
// small in tests rather than sleeping long).
func newTestWorker(t testing.TB, to testOptions) *testWorker {
	t.Helper()
	testutil.NeedPython(t, "numpy")
	dir := t.TempDir()
	var store *fsstore.Store
	if !to.noStore {
		var err error
		store, err = fsstore.Open(cmp.Or(to.root, filepath.Join(dir, "root")), fsstore.Options{Create: true})
		if err != nil {
			t.Fatal(err)
		}
	}
	envs, err := NewEnvPool(EnvOptions{Dir: filepath.Join(dir, "envs"), Python: testutil.Python()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := New(Options{
		Store:       store,
		Envs:        envs,
		Python:      testutil.Python(),
		WorkDir:     filepath.Join(dir, "work"),
		Resources:   Resources{CPUs: 2, MemoryBytes: 1 << 30, GPUs: to.gpus},
		Limits:      Limits{MaxPlans: cmp.Or(to.maxPlans, 4)},
		IdleDaemons: to.idleDaemons,
		PlanTimeout: to.planTimeout,
		CancelGrace: 300 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	server := NewServer(w, testToken)
	srv := httptest.NewServer(server.Handler())
	c, err := NewClient(srv.URL, testToken, srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	tw := &testWorker{w: w, store: store, srv: srv, server: server, client: c}
	t.Cleanup(func() {
		c.CloseIdle()
		srv.CloseClientConnections()
		srv.Close()
		w.Close()
	})
	return tw
}

// readFilter returns the shipped File for testdata/filters/name.
func readFilter(t testing.TB, name string) File {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "filters", name))
	if err != nil {
		t.Fatal(err)
	}
	return File{Name: name, Digest: fsstore.Sum(b).String(), Content: b}
}

// behaviourPlan is a one-node plan running class of behaviour.py.
func behaviourPlan(t testing.TB, id, class string) *Plan {
	return &Plan{
		ID:    id,
		Mode:  Forward,
		Files: []File{readFilter(t, "behaviour.py")},
		Nodes: []Node{{ID: "n", File: "behaviour.py", Class: class}},
		Input: Value{Kind: KindObject, Object: "x"},
	}
}

// twoClusters returns rows of 3 float32 features around 0 (label 0) and
// around 10 (label 1), alternating, deterministically.
func twoClusters(rows int) (Value, Value) {
	x := make([]byte, 0, rows*3*4)
	y := make([]byte, 0, rows*8)
	for i := 0; i < rows; i++ {
		label := i % 2
		for j := 0; j < 3; j++ {
			f := float32(label*10) + float32((i*7+j*3)%5)/10
			x = binary.LittleEndian.AppendUint32(x, math.Float32bits(f))
		}
		y = binary.LittleEndian.AppendUint64(y, uint64(label))
	}
	return Value{Kind: KindArray, DType: "float32", Shape: []int64{int64(rows), 3}, Data: x},
		Value{Kind: KindArray, DType: "int64", Shape: []int64{int64(rows)}, Data: y}
}

// classifierPlan is Standardize then Centroid from numpy_filters.py.
func classifierPlan(t testing.TB, id string, mode Mode, input Value, targets *Value) *Plan {
	return &Plan{
		ID:      id,
		Mode:    mode,
		Files:   []File{readFilter(t, "numpy_filters.py")},
		Nodes:   []Node{{ID: "scale", File: "numpy_filters.py", Class: "Standardize"}, {ID: "clf", File: "numpy_filters.py", Class: "Centroid", Inputs: []string{"scale"}}},
		Outputs: []string{"scale", "clf"},
		Input:   input,
		Targets: targets,
		Seed:    1,
		Env:     EnvRequest{SystemSitePackages: true},
	}
}

func run(t *testing.T, tw *testWorker, p *Plan) *Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := tw.client.Run(ctx, p)
	if err != nil {
		t.Fatalf("Run(%s): %v", p.ID, err)
	}
	return res
}

func mustSucceed(t *testing.T, res *Result) {
	t.Helper()
	if res.State != StateSucceeded {
		t.Fatalf("plan %s: state %s, error %q\ntraceback:\n%s\nlog:\n%s", res.ID, res.State, res.Error, res.Traceback, res.LogTail)
	}
}

// resolved returns v's bytes, fetching a blob reference from the store.
func resolved(t *testing.T, tw *testWorker, v Value) Value {
	t.Helper()
	r := &resolver{store: tw.store}
	got, err := r.resolve(context.Background(), v)
	if err != nil {
		t.Fatal(err)
	}
	return got
}
