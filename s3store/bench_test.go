package s3store_test

// Benchmarks pair each store operation ("soma") with the bare S3
// requests it is built on, sent through the same client ("raw"), on the
// test server (scripts/s3-local.sh); `make bench` prints them side by
// side (scripts/bench-s3.sh). Goal (issue 17): soma within 1.3x of raw.

import (
	"bytes"
	"context"
	"io"
	"os"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"golang.org/x/sync/errgroup"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/s3store"
)

// benchStore opens a store under a fresh prefix (removed at the end).
func benchStore(b *testing.B) *s3store.Store {
	b.Helper()
	root := freshPrefix(b)
	s, err := s3store.Open(context.Background(), root, s3store.Options{Create: true})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

func BenchmarkBucketClaim(b *testing.B) {
	ctx := context.Background()
	s := benchStore(b)
	d, _ := s.Put(ctx, []byte("x"))
	meta := fsstore.Meta{{Key: "state", Value: "running"}, {Key: "who", Value: "host 1234"}}
	body := fsstore.EncodeRecord(d, meta)
	reqs := s.CountRequests() // before rawOf: the raw requests go through the counting client too
	c, bucket, prefix := rawOf(s)
	// Names numbered across every call of each side: the framework calls
	// a side again with a larger b.N unless -benchtime is a count, and a
	// name claimed before is not won again.
	var i, j int
	pair(b, func(b *testing.B) {
		defer perOp(b, reqs)()
		for b.Loop() {
			i++
			if won, err := s.Claim(ctx, "c/soma/"+strconv.Itoa(i), d, meta); err != nil || !won {
				b.Fatal(won, err)
			}
		}
	}, func(b *testing.B) { // one PUT with If-None-Match: *, the SDK's retries off as the store sends claims
		defer perOp(b, reqs)()
		for b.Loop() {
			j++
			_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: aws.String(prefix + "names/c/raw/" + strconv.Itoa(j)),
				Body: bytes.NewReader(body), ContentLength: aws.Int64(int64(len(body))), IfNoneMatch: aws.String("*")}, func(o *s3.Options) { o.Retryer = aws.NopRetryer{} })
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkBucketBind(b *testing.B) {
	ctx := context.Background()
	s := benchStore(b)
	d, _ := s.Put(ctx, []byte("x"))
	meta := fsstore.Meta{{Key: "state", Value: "running"}, {Key: "beat", Value: "1"}}
	body := fsstore.EncodeRecord(d, meta)
	reqs := s.CountRequests() // before rawOf: the raw requests go through the counting client too
	c, bucket, prefix := rawOf(s)
	pair(b, func(b *testing.B) {
		defer perOp(b, reqs)()
		for b.Loop() {
			if _, err := s.Bind(ctx, "b/soma", d, meta); err != nil {
				b.Fatal(err)
			}
		}
	}, func(b *testing.B) {
		defer perOp(b, reqs)() // one PUT
		for b.Loop() {
			_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: aws.String(prefix + "names/b/raw"),
				Body: bytes.NewReader(body), ContentLength: aws.Int64(int64(len(body)))})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkBucketResolve(b *testing.B) {
	ctx := context.Background()
	s := benchStore(b)
	d, _ := s.Put(ctx, []byte("x"))
	if _, err := s.Bind(ctx, "r/1", d, fsstore.Meta{{Key: "state", Value: "done"}}); err != nil {
		b.Fatal(err)
	}
	reqs := s.CountRequests() // before rawOf: the raw requests go through the counting client too
	c, bucket, prefix := rawOf(s)
	pair(b, func(b *testing.B) {
		defer perOp(b, reqs)()
		for b.Loop() {
			if _, err := s.Resolve(ctx, "r/1"); err != nil {
				b.Fatal(err)
			}
		}
	}, func(b *testing.B) {
		defer perOp(b, reqs)() // one GET, body read
		for b.Loop() {
			if _, err := rawGetBody(ctx, c, bucket, prefix+"names/r/1"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkBucketScan: Scan of SOMA_BENCH_NAMES names (default 10000)
// against the same requests by hand: ListObjectsV2 page after page, then
// the GETs on as many goroutines as the store uses (32).
func BenchmarkBucketScan(b *testing.B) {
	ctx := context.Background()
	n := 10000
	if v, err := strconv.Atoi(os.Getenv("SOMA_BENCH_NAMES")); err == nil && v > 0 {
		n = v
	}
	s := benchStore(b)
	d, _ := s.Put(ctx, []byte("x"))
	var g errgroup.Group
	g.SetLimit(32)
	for i := range n {
		g.Go(func() error {
			_, err := s.Bind(ctx, "s/"+strconv.Itoa(i), d, fsstore.Meta{{Key: "state", Value: "done"}})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	reqs := s.CountRequests() // before rawOf: the raw requests go through the counting client too
	c, bucket, prefix := rawOf(s)
	pair(b, func(b *testing.B) {
		defer perOp(b, reqs)()
		for b.Loop() {
			bound, corrupt, err := s.Scan(ctx, "s")
			if err != nil || len(bound) != n || len(corrupt) != 0 {
				b.Fatal(len(bound), len(corrupt), err)
			}
		}
	}, func(b *testing.B) {
		defer perOp(b, reqs)()
		for b.Loop() {
			var keys []string
			p := s3.NewListObjectsV2Paginator(c, &s3.ListObjectsV2Input{Bucket: &bucket, Prefix: aws.String(prefix + "names/s/")})
			for p.HasMorePages() {
				page, err := p.NextPage(ctx)
				if err != nil {
					b.Fatal(err)
				}
				for _, o := range page.Contents {
					keys = append(keys, *o.Key)
				}
			}
			var g errgroup.Group
			g.SetLimit(32)
			for _, k := range keys {
				g.Go(func() error { _, err := rawGetBody(ctx, c, bucket, k); return err })
			}
			if err := g.Wait(); err != nil || len(keys) != n {
				b.Fatal(len(keys), err)
			}
		}
	})
}

// pair runs the store's side ("soma") and the raw requests' side
// ("raw") of a benchmark, soma first, or raw first when
// SOMA_BENCH_RAW_FIRST=1: the side that runs second creates its keys in
// a server folder the first side just filled, and was measured slower
// for it (Claim: 2.9 vs 3.7 ms soma first, 3.5 vs 5.2 ms raw first), so
// scripts/bench-s3.sh runs both orders.
func pair(b *testing.B, soma, raw func(b *testing.B)) {
	if os.Getenv("SOMA_BENCH_RAW_FIRST") == "1" {
		b.Run("raw", raw)
		b.Run("soma", soma)
		return
	}
	b.Run("soma", soma)
	b.Run("raw", raw)
}

// perOp zeroes reqs and returns a function that reports the requests
// sent per operation: how many round trips each side costs, which the
// times on a shared 2-CPU machine cannot show reliably.
func perOp(b *testing.B, reqs *atomic.Int64) func() {
	reqs.Store(0)
	return func() { b.ReportMetric(float64(reqs.Load())/float64(b.N), "req/op") }
}

func rawOf(s *s3store.Store) (*s3.Client, string, string) {
	bucket, prefix := s.Bucket()
	return s.Client(), bucket, prefix
}

func rawGetBody(ctx context.Context, c *s3.Client, bucket, key string) ([]byte, error) {
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: &key})
	if err != nil {
		return nil, err
	}
	defer out.Body.Close()
	return io.ReadAll(out.Body)
}
