package main

import (
	"testing"

	"github.com/soma-hpc/soma/study"
	"github.com/soma-hpc/soma/worker"
)

// TestGCGraceCoversLeaseBlobReuse: soma gc refuses a grace under
// study.MinGCAge, six times study.BlobReuse, so that a writer binds a
// name to a blob well within the grace of its Put (fsstore's GC, rule
// W). A worker.Placer (and soma-coordinator) claims leases referring to
// the lease blob up to worker.LeaseBlobReuse after it last stored it
// (issue 15: a Put for every placement was two of a placement's file
// operations), so that must be no longer than study.BlobReuse, or a gc
// with the least grace could remove the blob just before a lease is
// bound to it.
func TestGCGraceCoversLeaseBlobReuse(t *testing.T) {
	if worker.LeaseBlobReuse > study.BlobReuse {
		t.Errorf("worker.LeaseBlobReuse %s is longer than study.BlobReuse %s, which soma gc's least grace (%s) is six times", worker.LeaseBlobReuse, study.BlobReuse, study.MinGCAge)
	}
	if 6*worker.LeaseBlobReuse > study.MinGCAge {
		t.Errorf("soma gc's least grace %s is under six times worker.LeaseBlobReuse %s", study.MinGCAge, worker.LeaseBlobReuse)
	}
}
