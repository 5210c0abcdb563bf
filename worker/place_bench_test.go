package worker

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// BenchmarkPlace measures placement from the folder (Place, then Release
// outside the latency) with 10 and 1000 registered workers, against the
// floor: what any placer through the folder must do at least — list the
// workers' and leases' folders and read every record with plain
// open/fstat/read (as many at once as fsstore reads), then make one
// claim (write a file, link(2); no fsync: a lease needs none, see
// fsstore.ClaimEphemeral; the floor was a durable claim while leases
// were) and remove it. The placer variant places through one Placer, which reads
// the registry and the leases once a second rather than for every
// placement (and keeps its view up to date with its own claims and
// releases).
// Each reports p50 and p99 latencies as metrics (scripts/bench-place.sh
// prints them as a table).
func BenchmarkPlace(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{10, 1000} {
		s := newRegStore(b)
		for i := range n {
			announce(b, s, testRecord("w"+strconv.Itoa(i), 4, 0, 0), time.Hour)
		}
		b.Run(fmt.Sprintf("workers=%d/soma", n), func(b *testing.B) {
			var lat []time.Duration
			for b.Loop() {
				t0 := time.Now()
				p, err := Place(ctx, s, Requirement{}, PlaceOptions{Timeout: time.Hour})
				lat = append(lat, time.Since(t0))
				if err != nil {
					b.Fatal(err)
				}
				if err := p.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
			reportLatency(b, lat)
		})
		b.Run(fmt.Sprintf("workers=%d/placer", n), func(b *testing.B) {
			// One Placer: the registry and the leases read once a
			// second (its default window).
			placer := NewPlacer(s, PlaceOptions{Timeout: time.Hour}, 0)
			var lat []time.Duration
			for b.Loop() {
				t0 := time.Now()
				p, err := placer.Place(ctx, Requirement{})
				lat = append(lat, time.Since(t0))
				if err != nil {
					b.Fatal(err)
				}
				if err := p.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
			reportLatency(b, lat)
		})
		b.Run(fmt.Sprintf("workers=%d/floor", n), func(b *testing.B) {
			names := filepath.Join(s.Root(), "names")
			var lat []time.Duration
			for b.Loop() {
				t0 := time.Now()
				if err := readAllRecords(filepath.Join(names, "workers"), filepath.Join(names, "leases")); err != nil {
					b.Fatal(err)
				}
				if err := rawClaim(filepath.Join(s.Root(), "tmp"), names); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			reportLatency(b, lat)
		})
	}
}

func reportLatency(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	q := func(f float64) float64 { return float64(lat[int(f*float64(len(lat)-1))].Microseconds()) }
	b.ReportMetric(q(0.50), "p50-us")
	b.ReportMetric(q(0.99), "p99-us")
}

// readAllRecords lists dirs (one level, and one more below for leases/)
// and reads every file in them with open+fstat+read, in parallel.
func readAllRecords(dirs ...string) error {
	var files []string
	for _, d := range dirs {
		es, err := os.ReadDir(d)
		if err != nil && !os.IsNotExist(err) {
			return err
		}
		for _, e := range es {
			p := filepath.Join(d, e.Name())
			if e.IsDir() {
				sub, err := os.ReadDir(p)
				if err != nil {
					return err
				}
				for _, f := range sub {
					files = append(files, filepath.Join(p, f.Name()))
				}
				continue
			}
			files = append(files, p)
		}
	}
	par := max(8, 4*runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	next := make(chan string)
	for range par {
		wg.Go(func() {
			for p := range next {
				err := readRecordFile(p)
				if err != nil {
					mu.Lock()
					first = err
					mu.Unlock()
				}
			}
		})
	}
	for _, p := range files {
		next <- p
	}
	close(next)
	wg.Wait()
	return first
}

func readRecordFile(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Stat(); err != nil {
		return err
	}
	_, err = io.ReadAll(f)
	return err
}

// rawClaim is a link(2) claim with the bare system calls: a new file
// written, linked to a name; then both names removed (outside what a
// claim needs, but cheap).
func rawClaim(tmp, dir string) error {
	src := filepath.Join(tmp, "bench-claim")
	dst := filepath.Join(dir, "bench-claim")
	f, err := os.OpenFile(src, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
	if err != nil {
		return err
	}
	if _, err := f.WriteString("v 1\n"); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	err = os.Link(src, dst)
	os.Remove(src)
	os.Remove(dst)
	return err
}
