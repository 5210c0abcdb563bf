package fsstore

import (
	"errors"
	"fmt"
)

var (
	// ErrNotFound is returned for a name that is not bound or a blob that is
	// not stored.
	ErrNotFound = errors.New("fsstore: not found")
	// ErrDigestMismatch means a blob's bytes do not hash to its name.
	ErrDigestMismatch = errors.New("fsstore: blob bytes do not match their digest")
	// ErrNotStore is returned by Open for a non-empty folder without soma.json.
	ErrNotStore = errors.New("fsstore: not a soma store")
	// ErrNewerFormat is returned by Open for a store written by a newer soma.
	ErrNewerFormat = errors.New("fsstore: store format is newer than this soma")
)

// CorruptError reports a record or blob that exists but cannot be trusted:
// truncated, unparseable, or whose bytes do not match their digest; or a
// link or special file where one belongs (Err wraps ErrForeign, and Path
// is the link's). Readers
// report it and go on; it is never returned as data.
type CorruptError struct {
	Name   string // the name, for a record; "" for a blob
	Digest Digest // the digest, for a blob
	Path   string // the file on disk
	Err    error
}

func (e *CorruptError) Error() string {
	what := e.Name
	switch {
	case what != "":
	case !e.Digest.IsZero():
		what = "blob " + e.Digest.String()
	default:
		what = "entry"
	}
	kind := "corrupt"
	if errors.Is(e.Err, ErrForeign) {
		kind = "foreign"
	}
	return fmt.Sprintf("fsstore: %s %s (%s): %v", kind, what, e.Path, e.Err)
}

func (e *CorruptError) Unwrap() error { return e.Err }
