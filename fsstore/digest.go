package fsstore

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// Algo is the digest algorithm used by this format version.
const Algo = "sha256"

// Digest is the SHA-256 of a blob's bytes. Its text form is "sha256:<64 hex>".
// The zero Digest is invalid and prints as the empty string.
type Digest struct {
	sum [sha256.Size]byte
	ok  bool
}

// Sum returns the digest of b.
func Sum(b []byte) Digest {
	return Digest{sum: sha256.Sum256(b), ok: true}
}

// ParseDigest parses the text form "sha256:<64 lowercase hex>".
func ParseDigest(s string) (Digest, error) {
	hexPart, found := strings.CutPrefix(s, Algo+":")
	if !found {
		return Digest{}, fmt.Errorf("fsstore: digest %q: want %q followed by 64 hex digits", s, Algo+":")
	}
	if len(hexPart) != 2*sha256.Size {
		return Digest{}, fmt.Errorf("fsstore: digest %q: want 64 hex digits, got %d", s, len(hexPart))
	}
	var d Digest
	if _, err := hex.Decode(d.sum[:], []byte(hexPart)); err != nil {
		return Digest{}, fmt.Errorf("fsstore: digest %q: %v", s, err)
	}
	if hex.EncodeToString(d.sum[:]) != hexPart {
		return Digest{}, fmt.Errorf("fsstore: digest %q: hex must be lowercase", s)
	}
	d.ok = true
	return d, nil
}

// IsZero reports whether d is the zero (invalid) Digest.
func (d Digest) IsZero() bool { return !d.ok }

// String returns "sha256:<hex>", or "" for the zero Digest.
func (d Digest) String() string {
	if !d.ok {
		return ""
	}
	return Algo + ":" + hex.EncodeToString(d.sum[:])
}

// Hex returns the 64 hex digits without the algorithm prefix.
func (d Digest) Hex() string { return hex.EncodeToString(d.sum[:]) }

// MarshalText implements encoding.TextMarshaler.
func (d Digest) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Digest) UnmarshalText(b []byte) error {
	p, err := ParseDigest(string(b))
	if err != nil {
		return err
	}
	*d = p
	return nil
}
