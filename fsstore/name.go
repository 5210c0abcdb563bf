package fsstore

import (
	"fmt"
	"strings"
)

const (
	maxNameLen    = 1024
	maxSegmentLen = 255
)

// ValidateName reports whether name is a valid store name, and if not, why.
// See the package documentation for the alphabet.
func ValidateName(name string) error {
	if name == "" {
		return fmt.Errorf("fsstore: name is empty")
	}
	if len(name) > maxNameLen {
		return fmt.Errorf("fsstore: name %.40q...: %d bytes, the limit is %d", name, len(name), maxNameLen)
	}
	if name[0] == '/' {
		return fmt.Errorf("fsstore: name %q is absolute (drop the leading '/')", name)
	}
	for seg := range strings.SplitSeq(name, "/") {
		if err := validateSegment(seg); err != nil {
			return fmt.Errorf("fsstore: name %q: %w", name, err)
		}
	}
	return nil
}

// ValidatePrefix is ValidateName for scan prefixes: the empty prefix (the
// whole store) and a trailing '/' are allowed.
func ValidatePrefix(prefix string) error {
	p := strings.TrimSuffix(prefix, "/")
	if p == "" {
		if prefix == "" {
			return nil
		}
		return fmt.Errorf("fsstore: prefix %q is absolute", prefix)
	}
	return ValidateName(p)
}

func validateSegment(seg string) error {
	switch {
	case seg == "":
		return fmt.Errorf("empty segment (no '//' and no trailing '/')")
	case seg == "." || seg == "..":
		return fmt.Errorf("segment %q is not allowed", seg)
	case len(seg) > maxSegmentLen:
		return fmt.Errorf("segment of %d bytes, the limit is %d", len(seg), maxSegmentLen)
	case seg[0] == '.':
		return fmt.Errorf("segment %q starts with '.'", seg)
	}
	for i := 0; i < len(seg); i++ {
		if !segmentByte(seg[i]) {
			return fmt.Errorf("segment %q: byte %q at %d is not allowed (use letters, digits and -_.+@=)", seg, seg[i], i)
		}
	}
	return nil
}

func segmentByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("-_.+@=", c) >= 0
}

// SanitizeSegment maps s to a valid name segment by replacing every byte
// outside the alphabet with '_' (and a leading '.' too). It is for building
// names from outside text such as host names; an empty s becomes "_".
func SanitizeSegment(s string) string {
	if s == "" {
		return "_"
	}
	if len(s) > maxSegmentLen {
		s = s[:maxSegmentLen]
	}
	b := []byte(s)
	for i, c := range b {
		if !segmentByte(c) || (i == 0 && c == '.') {
			b[i] = '_'
		}
	}
	return string(b)
}
