package s3store

import (
	"net/http"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/soma-hpc/soma/fsstore"
)

// Client returns the store's S3 client: the benchmarks' raw requests go
// through the same client, so that they measure the store, not the SDK.
func (s *Store) Client() *s3.Client { return s.client }

// Bucket returns the store's bucket and key prefix ("" or "p/").
func (s *Store) Bucket() (bucket, prefix string) { return s.bucket, s.prefix }

// CountRequests makes the store's client count the HTTP requests it
// sends (for the store's calls and for raw requests through Client),
// and returns the counter. Not for concurrent use with other calls.
func (s *Store) CountRequests() *atomic.Int64 {
	var n atomic.Int64
	opts := s.client.Options()
	opts.HTTPClient = countingClient{opts.HTTPClient, &n}
	s.client = s3.New(opts)
	return &n
}

type countingClient struct {
	c interface {
		Do(*http.Request) (*http.Response, error)
	}
	n *atomic.Int64
}

func (c countingClient) Do(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.c.Do(r)
}

// SetRefreshAfter sets the age past which Put rewrites a blob already
// stored (RefreshAfter): tests age blobs by seconds, not minutes.
func (s *Store) SetRefreshAfter(d time.Duration) { s.refreshAfter = d }

// SetGCBeforeDelete makes GC call f after it took a blob's lock and read
// its age again, just before deleting it.
func (s *Store) SetGCBeforeDelete(f func(d fsstore.Digest)) { s.gcBeforeDelete = f }

// SetLockWait makes Put call f each time it waits for a GC's lock on a
// blob it refreshed.
func (s *Store) SetLockWait(f func(d fsstore.Digest)) { s.lockWait = f }
