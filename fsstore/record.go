package fsstore

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
)

// RecordVersion is the version of the name record's text encoding.
const RecordVersion = 1

// Pair is one key/value pair of Meta.
type Pair struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// Meta is an ordered list of text pairs attached to a name. The store writes
// it down and hands it back; it never interprets it. Keys may repeat; Get
// returns the first.
type Meta []Pair

// Get returns the value of the first pair with key k.
func (m Meta) Get(k string) (string, bool) {
	for _, p := range m {
		if p.Key == k {
			return p.Value, true
		}
	}
	return "", false
}

// Value returns the value of key k, or "" when absent.
func (m Meta) Value(k string) string {
	v, _ := m.Get(k)
	return v
}

// Set returns m with the first pair of key k set to v, or with (k, v)
// appended. It does not modify m's backing array.
func (m Meta) Set(k, v string) Meta {
	out := make(Meta, len(m), len(m)+1)
	copy(out, m)
	for i := range out {
		if out[i].Key == k {
			out[i].Value = v
			return out
		}
	}
	return append(out, Pair{k, v})
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// encodeRecord writes a name record:
//
//	soma-record 1
//	digest sha256:<hex>
//	m <key> <value>        (one line per pair; %XX-escaped)
//	end <crc32c of everything above, 8 hex>
//
// The trailing checksum makes truncation and bit rot detectable, which a
// reader reports as a CorruptError instead of returning wrong data.
func encodeRecord(d Digest, meta Meta) []byte {
	var b bytes.Buffer
	b.Grow(64 + 32*len(meta))
	b.WriteString("soma-record ")
	b.WriteString(strconv.Itoa(RecordVersion))
	b.WriteString("\ndigest ")
	b.WriteString(d.String())
	b.WriteByte('\n')
	for _, p := range meta {
		b.WriteString("m ")
		EscapeField(&b, p.Key)
		b.WriteByte(' ')
		EscapeField(&b, p.Value)
		b.WriteByte('\n')
	}
	sum := crc32.Checksum(b.Bytes(), castagnoli)
	fmt.Fprintf(&b, "end %08x\n", sum)
	return b.Bytes()
}

// errRecord explains why a record could not be parsed; it is wrapped in a
// CorruptError by the caller, which knows the path.
var errRecord = errors.New("malformed record")

func decodeRecord(b []byte) (Digest, Meta, error) {
	endAt := bytes.LastIndex(b, []byte("end "))
	if endAt < 0 || !bytes.HasSuffix(b, []byte("\n")) || (endAt > 0 && b[endAt-1] != '\n') {
		return Digest{}, nil, fmt.Errorf("%w: no end line (truncated?)", errRecord)
	}
	trailer := strings.TrimSuffix(string(b[endAt+4:]), "\n")
	want, err := strconv.ParseUint(trailer, 16, 32)
	if err != nil || len(trailer) != 8 {
		return Digest{}, nil, fmt.Errorf("%w: bad end line %q", errRecord, trailer)
	}
	body := b[:endAt]
	if got := crc32.Checksum(body, castagnoli); uint64(got) != want {
		return Digest{}, nil, fmt.Errorf("%w: checksum %08x, want %08x", errRecord, got, want)
	}
	lines := strings.Split(strings.TrimSuffix(string(body), "\n"), "\n")
	if len(lines) < 2 {
		return Digest{}, nil, fmt.Errorf("%w: too short", errRecord)
	}
	ver, ok := strings.CutPrefix(lines[0], "soma-record ")
	if !ok {
		return Digest{}, nil, fmt.Errorf("%w: first line %q is not a soma record header", errRecord, lines[0])
	}
	if v, err := strconv.Atoi(ver); err != nil || v != RecordVersion {
		return Digest{}, nil, fmt.Errorf("%w: record version %q, this soma reads version %d (upgrade soma)", errRecord, ver, RecordVersion)
	}
	ds, ok := strings.CutPrefix(lines[1], "digest ")
	if !ok {
		return Digest{}, nil, fmt.Errorf("%w: second line %q is not a digest", errRecord, lines[1])
	}
	d, err := ParseDigest(ds)
	if err != nil {
		return Digest{}, nil, fmt.Errorf("%w: %v", errRecord, err)
	}
	var meta Meta
	if n := len(lines) - 2; n > 0 {
		meta = make(Meta, 0, n)
	}
	for _, ln := range lines[2:] {
		rest, ok := strings.CutPrefix(ln, "m ")
		if !ok {
			return Digest{}, nil, fmt.Errorf("%w: line %q", errRecord, ln)
		}
		k, v, ok := strings.Cut(rest, " ")
		if !ok {
			return Digest{}, nil, fmt.Errorf("%w: meta line %q has no value", errRecord, ln)
		}
		key, err1 := UnescapeField(k)
		val, err2 := UnescapeField(v)
		if err := errors.Join(err1, err2); err != nil {
			return Digest{}, nil, fmt.Errorf("%w: %v", errRecord, err)
		}
		meta = append(meta, Pair{key, val})
	}
	return d, meta, nil
}

const hexDigits = "0123456789ABCDEF"

func needsEscape(c byte) bool { return c <= ' ' || c == '%' || c == 0x7f }

// EscapeField writes s to b as one field of a line of fields separated
// by single spaces: every space, control character, DEL and '%' is
// written as %XX, in upper-case hex, and every other byte as is (UTF-8
// included). The result has no space and no newline; the empty string
// stays empty, so a format that splits on runs of spaces, or cannot tell
// an empty field at the end of a line, marks it itself. It is how a
// record's meta lines are written, and study's packs write their fields
// with it too, so that the two formats cannot drift apart.
func EscapeField(b *bytes.Buffer, s string) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if needsEscape(c) {
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&15])
			continue
		}
		b.WriteByte(c)
	}
}

// UnescapeField reads back a field written by EscapeField. It refuses
// what EscapeField never writes: a byte that should have been escaped, an
// escape that is short, not hex or in lower case.
func UnescapeField(s string) (string, error) {
	if strings.IndexByte(s, '%') < 0 {
		for i := 0; i < len(s); i++ {
			if needsEscape(s[i]) {
				return "", fmt.Errorf("unescaped byte %q", s[i])
			}
		}
		return s, nil
	}
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '%' {
			if needsEscape(c) {
				return "", fmt.Errorf("unescaped byte %q", c)
			}
			out = append(out, c)
			continue
		}
		if i+3 > len(s) {
			return "", fmt.Errorf("short escape in %q", s)
		}
		v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil || strings.ToUpper(s[i+1:i+3]) != s[i+1:i+3] {
			return "", fmt.Errorf("bad escape %q", s[i:i+3])
		}
		out = append(out, byte(v))
		i += 2
	}
	return string(out), nil
}
