package status

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/internal/tools/synth"
	"github.com/soma-hpc/soma/study"
)

// benchSizes returns the study sizes to benchmark: $SOMA_BENCH_SIZES
// (say "1000 10000 100000"), else 1k and 10k.
func benchSizes(b *testing.B) []int {
	env := os.Getenv("SOMA_BENCH_SIZES")
	if env == "" {
		return []int{1000, 10000}
	}
	var out []int
	for _, f := range strings.Fields(env) {
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			b.Fatalf("SOMA_BENCH_SIZES: %q is not a size", f)
		}
		out = append(out, n)
	}
	return out
}

// benchRoot returns a folder for benchmark stores: $SOMA_BENCH_DIR, else
// /dev/shm when there is one (writing 10k fsync'd records to a VM's disk
// takes longer than the benchmark), else the test's temp dir.
func benchRoot(b *testing.B) string {
	b.Helper()
	base := os.Getenv("SOMA_BENCH_DIR")
	if base == "" {
		if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
			base = "/dev/shm"
		}
	}
	if base == "" {
		return b.TempDir()
	}
	dir, err := os.MkdirTemp(base, "soma-status-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// benchStore writes a synthetic study of n ended trials, packed or not.
func benchStore(b *testing.B, n int, pack bool) string {
	b.Helper()
	ctx := context.Background()
	root := filepath.Join(benchRoot(b), "root")
	fs, err := fsstore.Open(root, fsstore.Options{Create: true})
	if err != nil {
		b.Fatal(err)
	}
	st, err := synth.Study(ctx, fs, "bench", n, synth.Options{Workers: synth.DefaultWorkers()})
	if err != nil {
		b.Fatal(err)
	}
	if pack {
		if _, err := st.Pack(ctx, study.PackOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	return root
}

// BenchmarkStatus measures what one `soma status ROOT --study bench`
// process does after it starts: open the store and the study (cold: it
// has read nothing), read the snapshot, compute the view, render it.
func BenchmarkStatus(b *testing.B) {
	ctx := context.Background()
	for _, n := range benchSizes(b) {
		for _, pack := range []bool{false, true} {
			name := strconv.Itoa(n)
			if pack {
				name += "/packed"
			}
			b.Run(name, func(b *testing.B) {
				root := benchStore(b, n, pack)
				var opened int64
				for b.Loop() {
					s, err := Open(root)
					if err != nil {
						b.Fatal(err)
					}
					if err := NewViewer(s, StatusOptions{Study: "bench", Top: 10}).Render(ctx, io.Discard); err != nil {
						b.Fatal(err)
					}
					opened = s.Opened().Total()
				}
				b.ReportMetric(float64(opened), "files/op")
			})
		}
	}
}

// BenchmarkTrialsJSON measures `soma trials --format json` on a packed
// study, cold.
func BenchmarkTrialsJSON(b *testing.B) {
	ctx := context.Background()
	for _, n := range benchSizes(b) {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			root := benchStore(b, n, true)
			for b.Loop() {
				s, err := Open(root)
				if err != nil {
					b.Fatal(err)
				}
				st, err := OpenStudy(ctx, s, "bench", 0)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := WriteTrials(ctx, st, io.Discard, TrialsOptions{Format: FormatJSON}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
