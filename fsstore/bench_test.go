package fsstore

// Benchmarks pair each store operation ("soma") with the bare syscalls it
// is built on ("raw"); `make bench` prints them side by side.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

func BenchmarkPut(b *testing.B) {
	ctx := context.Background()
	data := make([]byte, 1<<20)
	b.Run("soma", func(b *testing.B) {
		s := newStore(b)
		b.SetBytes(int64(len(data)))
		i := 0
		for b.Loop() {
			i++
			copy(data, strconv.Itoa(i)) // new bytes: a real write each time
			if _, err := s.Put(ctx, data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("raw", func(b *testing.B) { // sha256 + write + fsync + link
		dir := b.TempDir()
		b.SetBytes(int64(len(data)))
		i := 0
		for b.Loop() {
			i++
			copy(data, strconv.Itoa(i))
			sum := sha256.Sum256(data)
			tmp := filepath.Join(dir, "tmp"+strconv.Itoa(i))
			rawWrite(b, tmp, data)
			if err := os.Link(tmp, filepath.Join(dir, fmt.Sprintf("%x", sum))); err != nil && !os.IsExist(err) {
				b.Fatal(err)
			}
			os.Remove(tmp)
		}
	})
}

func BenchmarkGet(b *testing.B) {
	ctx := context.Background()
	data := bytes.Repeat([]byte("soma"), 1<<18)
	s := newStore(b)
	d, _ := s.Put(ctx, data)
	b.Run("soma", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if _, err := s.Get(ctx, d); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("raw", func(b *testing.B) { // read + sha256
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			got, err := os.ReadFile(s.blobPath(d))
			if err != nil {
				b.Fatal(err)
			}
			sha256.Sum256(got)
		}
	})
}

func rawWrite(b *testing.B, path string, data []byte) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		b.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
}

func rawSyncDir(b *testing.B, dir string) {
	f, err := os.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	f.Sync()
	f.Close()
}

var benchMeta = Meta{{"state", "running"}, {"point", "lr=0.001,batch=64,opt=adam"}, {"who", "node7 4242_17 pid 1234"}}

func BenchmarkClaim(b *testing.B) {
	ctx := context.Background()
	b.Run("soma", func(b *testing.B) {
		s := newStore(b)
		d, _ := s.Put(ctx, []byte("x"))
		i := 0
		for b.Loop() {
			i++
			if won, err := s.Claim(ctx, "t/"+strconv.Itoa(i), d, benchMeta); !won || err != nil {
				b.Fatal(won, err)
			}
		}
	})
	b.Run("raw", func(b *testing.B) { // write + fsync + link + fsync dir
		dir := b.TempDir()
		os.Mkdir(filepath.Join(dir, "t"), 0o777)
		rec := encodeRecord(Sum([]byte("x")), benchMeta)
		i := 0
		for b.Loop() {
			i++
			tmp := filepath.Join(dir, "tmp"+strconv.Itoa(i))
			rawWrite(b, tmp, rec)
			if err := os.Link(tmp, filepath.Join(dir, "t", strconv.Itoa(i))); err != nil {
				b.Fatal(err)
			}
			rawSyncDir(b, filepath.Join(dir, "t"))
			os.Remove(tmp)
		}
	})
}

func BenchmarkBind(b *testing.B) {
	ctx := context.Background()
	b.Run("soma", func(b *testing.B) {
		s := newStore(b)
		d, _ := s.Put(ctx, []byte("x"))
		for b.Loop() {
			if _, err := s.Bind(ctx, "t/0", d, benchMeta); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("raw", func(b *testing.B) { // write + fsync + rename + fsync dir
		dir := b.TempDir()
		rec := encodeRecord(Sum([]byte("x")), benchMeta)
		i := 0
		for b.Loop() {
			i++
			tmp := filepath.Join(dir, "tmp"+strconv.Itoa(i))
			rawWrite(b, tmp, rec)
			if err := os.Rename(tmp, filepath.Join(dir, "rec")); err != nil {
				b.Fatal(err)
			}
			rawSyncDir(b, dir)
		}
	})
}

func BenchmarkResolve(b *testing.B) {
	ctx := context.Background()
	s := newStore(b)
	d, _ := s.Put(ctx, []byte("x"))
	s.Bind(ctx, "t/0", d, benchMeta)
	b.Run("soma", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.Resolve(ctx, "t/0"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("raw", func(b *testing.B) { // open + fstat + read
		p := s.namePath("t/0")
		buf := make([]byte, 1024)
		for b.Loop() {
			f, err := os.Open(p)
			if err != nil {
				b.Fatal(err)
			}
			f.Stat()
			f.Read(buf)
			f.Close()
		}
	})
}

// seedTrials writes n records laid out as a study's trials
// (study/s/trial/<n>/0), without fsync: only reading is measured.
func seedTrials(b *testing.B, s *Store, n int) {
	rec := encodeRecord(Sum([]byte("x")), benchMeta)
	for i := range n {
		dir := filepath.Join(s.names, "study", "s", "trial", strconv.Itoa(i))
		if err := os.MkdirAll(dir, 0o777); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "0"), rec, 0o666); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkScan(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{1000, 10_000, 100_000} {
		if testing.Short() && n > 10_000 {
			continue
		}
		s := newStore(b)
		seedTrials(b, s, n)
		b.Run(fmt.Sprintf("%dk/soma", n/1000), func(b *testing.B) {
			for b.Loop() {
				got, _, err := s.Scan(ctx, "study/s")
				if err != nil || len(got) != n {
					b.Fatal(len(got), err)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "names/s")
		})
		b.Run(fmt.Sprintf("%dk/raw", n/1000), func(b *testing.B) { // readdir + read, one thread
			root := filepath.Join(s.names, "study", "s", "trial")
			for b.Loop() {
				trials, err := os.ReadDir(root)
				if err != nil {
					b.Fatal(err)
				}
				for _, t := range trials {
					atts, _ := os.ReadDir(filepath.Join(root, t.Name()))
					for _, a := range atts {
						if _, err := os.ReadFile(filepath.Join(root, t.Name(), a.Name())); err != nil {
							b.Fatal(err)
						}
					}
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "names/s")
		})
	}
}
