package zarr

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/internal/testutil"
)

// TestMain lets a test re-run this binary as a worker process (see
// runWorkers): testutil.Child starts it, and RunChild runs its role and
// exits instead of running tests.
func TestMain(m *testing.M) {
	testutil.RunChild(map[string]func() int{
		"cache":       workerRole(cacheWorker),
		"reader":      workerRole(readerWorker),
		"cachebound":  workerRole(cacheBoundWorker),
		"cachewriter": workerRole(cacheWriterWorker),
	})
	os.Exit(m.Run())
}

// runPython runs testdata/zarr_helper.py with Debian's python3 (skipping
// the test if zarr or numpy is missing) and returns its stdout.
func runPython(t *testing.T, args ...string) []byte {
	t.Helper()
	testutil.NeedPython(t, "zarr", "numpy")
	helper, err := filepath.Abs("testdata/zarr_helper.py")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(context.Background(), testutil.Python(), append([]string{helper}, args...)...)
	// No __pycache__ in testdata: the tests must not write to the tree.
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("zarr_helper.py %v: %v\n%s", args, err, stderr.Bytes())
	}
	return out
}

// genData returns deterministic test data of type dt and shape: a
// different value in every element (modulo the type's range), never equal
// to the typical fill values used in tests (which use -7 and NaN).
func genData(t testing.TB, dt DataType, shape []int64, seed uint64) *Data {
	t.Helper()
	d, err := NewData(dt, shape)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(seed, 7))
	es := dt.Size()
	for i := 0; i < len(d.Bytes)/es; i++ {
		b := d.Bytes[i*es : (i+1)*es]
		switch dt {
		case Bool:
			b[0] = byte(r.IntN(2))
		case Float32:
			binary.LittleEndian.PutUint32(b, math.Float32bits(float32(i%1000)+float32(r.IntN(8))/8))
		case Float64:
			binary.LittleEndian.PutUint64(b, math.Float64bits(float64(i)+r.Float64()))
		default:
			v := r.Uint64()
			for j := range b {
				b[j] = byte(v >> (8 * j))
			}
			if dt.isSigned() && getUint(dt, b) == getUint(dt, []byte{0xf9, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}) {
				b[0] = 0 // avoid -7, the fill of several tests
			}
		}
	}
	return d
}

// region extracts the box [start, start+shape) of d, as the expected
// value of a read.
func region(d *Data, start, shape []int64) *Data {
	out := &Data{Type: d.Type, Shape: append([]int64(nil), shape...), Bytes: make([]byte, prod(shape)*int64(d.Type.Size()))}
	copyBox(out.Bytes, shape, make([]int64, len(shape)), d.Bytes, d.Shape, start, shape, d.Type.Size())
	return out
}

// filled returns a Data of shape holding fill everywhere.
func filled(dt DataType, shape []int64, fill []byte) *Data {
	d := &Data{Type: dt, Shape: append([]int64(nil), shape...), Bytes: make([]byte, prod(shape)*int64(dt.Size()))}
	fillPattern(d.Bytes, fill)
	return d
}

func mustCreate(t testing.TB, path string, spec Spec, opts Options) *Array {
	t.Helper()
	a, err := Create(context.Background(), path, spec, opts)
	if err != nil {
		t.Fatalf("Create(%s): %v", path, err)
	}
	return a
}

func fsstoreWrite(path string, b []byte) error {
	return fsstore.WriteFileAtomic(path, bytes.NewReader(b))
}

func nan() float64 { return math.NaN() }
func inf() float64 { return math.Inf(1) }
