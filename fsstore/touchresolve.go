package fsstore

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// TouchResolve is Touch, returning the record it touched: name's time is
// set to the file server's now and the record is read from the same open
// file, so the Bound is the record whose time was set, with that time.
// One open, where a Touch and then a Resolve make two (and, on NFS, two
// lookups): a placement lease's release is a touch, a check of the
// lease's nonce and an unbind (issue 15: the Resolve was 6 of a
// placement's 22 system calls, and the heaviest).
//
// Errors are Touch's: ErrNotFound if name is not bound, a *CorruptError
// wrapping ErrForeign for a link at the name or above it (nothing
// touched). A record whose bytes cannot be decoded was touched all the
// same: its *CorruptError comes back with the Bound's Name and Time set.
func (s *Store) TouchResolve(ctx context.Context, name string) (Bound, error) {
	if err := ctx.Err(); err != nil {
		return Bound{}, err
	}
	if err := ValidateName(name); err != nil {
		return Bound{}, fmt.Errorf("touch: %w", err)
	}
	for try := 1; ; try++ {
		b, err := s.touchResolveOnce(name)
		if errors.Is(err, errReplaced) && try < replacedTries {
			continue // rebound between the open and the read: touch what is bound now
		}
		return b, err
	}
}

func (s *Store) touchResolveOnce(name string) (Bound, error) {
	path := s.namePath(name)
	fd, err := s.openBeneath("names/"+name, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	switch {
	case isForeign(err):
		return Bound{}, fmt.Errorf("touch %s: %w", name, s.foreign(name, Digest{}, "names/"+name))
	case errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ESTALE) || errors.Is(err, syscall.ENOTDIR):
		return Bound{}, fmt.Errorf("touch %s: %w", name, ErrNotFound)
	case err != nil:
		return Bound{}, fmt.Errorf("touch %s: %w", name, err)
	}
	defer unix.Close(fd)
	// As Touch: the times first, the kind after (one fstat).
	if err := futimesNow(fd); err != nil {
		return Bound{}, fmt.Errorf("touch %s: %w", name, replaced(err))
	}
	b, err := readOpenRecord(fd, "touch", name, path)
	if errors.Is(err, ErrForeign) {
		// Named as the open's foreign error above is.
		return Bound{}, fmt.Errorf("touch %s: %w", name, err)
	}
	return b, err
}
