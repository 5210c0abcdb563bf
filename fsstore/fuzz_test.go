package fsstore

import (
	"strings"
	"testing"
)

func FuzzValidateName(f *testing.F) {
	for _, s := range []string{"study/a/trial/0/0", "", "/abs", "a//b", "..", "a/../b", "a/.x", "ok-._+@=", "a\x00", "é", "a/b/", strings.Repeat("a", 300)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if ValidateName(name) != nil {
			return
		}
		// A valid name never escapes the root and has no odd bytes.
		if strings.HasPrefix(name, "/") || strings.Contains(name, "//") {
			t.Fatalf("accepted %q", name)
		}
		for seg := range strings.SplitSeq(name, "/") {
			if seg == "" || seg[0] == '.' {
				t.Fatalf("accepted %q with segment %q", name, seg)
			}
		}
		for _, c := range []byte(name) {
			if c < 0x21 || c > 0x7e || c == '\\' {
				t.Fatalf("accepted %q with byte %q", name, c)
			}
		}
	})
}

func FuzzDecodeRecord(f *testing.F) {
	d := Sum([]byte("x"))
	f.Add(encodeRecord(d, Meta{{"state", "done"}, {"point", "lr=0.1"}}))
	f.Add(encodeRecord(d, nil))
	f.Add(encodeRecord(d, Meta{{"", ""}, {"%", "\n\x00 "}}))
	f.Add([]byte("soma-record 1\ndigest sha256:00\nend 00000000\n"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, meta, err := decodeRecord(b)
		if err != nil {
			return
		}
		// Whatever decodes re-encodes to something that decodes the same.
		d2, meta2, err := decodeRecord(encodeRecord(d, meta))
		if err != nil || d2 != d || !equalMeta(meta, meta2) {
			t.Fatalf("re-encode of %q: %v %v %q", b, err, d2, meta2)
		}
	})
}

func FuzzMetaRoundTrip(f *testing.F) {
	f.Add("state", "done", "point", "lr=0.001,batch=64")
	f.Add("", "", "%41", "\n\r\t\x00\x7f é")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		meta := Meta{{k1, v1}, {k2, v2}}
		d := Sum([]byte(k1))
		gd, got, err := decodeRecord(encodeRecord(d, meta))
		if err != nil || gd != d || !equalMeta(got, meta) {
			t.Fatalf("round trip of %q = %q, %v", meta, got, err)
		}
	})
}
