package fsstore

import (
	"context"
	"fmt"
	"io"
)

// VerifiedBlobFile checks blob d's digest by reading it through and
// returns the path of its file and its size, for a reader that maps the
// file instead of copying it (soma-worker hands large inputs to its
// Python this way). A blob's file never changes once written, so the
// check stays true for as long as the store keeps the blob. A mismatch is
// a *CorruptError; a missing blob ErrNotFound.
func (s *Store) VerifiedBlobFile(ctx context.Context, d Digest) (path string, size int64, err error) {
	rc, err := s.OpenBlob(ctx, d)
	if err != nil {
		return "", 0, err
	}
	defer rc.Close()
	// The reader checks the digest at EOF; one small buffer keeps this a
	// read through the page cache, not a copy of the blob. (Not
	// io.Copy into io.Discard: its ReadFrom reads 8 KiB at a time.)
	buf := make([]byte, 1<<20)
	for {
		n, err := rc.Read(buf)
		size += int64(n)
		if err == io.EOF {
			return s.blobPath(d), size, nil
		}
		if err != nil {
			return "", 0, fmt.Errorf("get %s: %w", d, err)
		}
	}
}
