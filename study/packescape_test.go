package study

import (
	"bytes"
	"testing"
)

// TestPackEscape pins how a pack writes a field: packs are blobs kept in
// stores, so the bytes must not change. Issue 16: the escaping was
// written twice (here and in fsstore's records); it is fsstore's now,
// with a pack's own mark for an empty field.
func TestPackEscape(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "%"},
		{"lr", "lr"},
		{"%", "%25"},
		{"100%", "100%25"},
		{"a b", "a%20b"},
		{"a\nb", "a%0Ab"},
		{"tab\t", "tab%09"},
		{"\x7f", "%7F"},
		{"é", "é"},
		{`{"x":1}`, `{"x":1}`},
	}
	for _, tt := range tests {
		var b bytes.Buffer
		packEscape(&b, tt.in)
		if got := b.String(); got != tt.want {
			t.Errorf("packEscape(%q) = %q, want %q", tt.in, got, tt.want)
		}
		back, err := packUnescape(tt.want)
		if err != nil || back != tt.in {
			t.Errorf("packUnescape(%q) = %q, %v, want %q", tt.want, back, err, tt.in)
		}
	}
	for _, bad := range []string{"%2", "%zz", "a b", "%0a"} {
		if got, err := packUnescape(bad); err == nil {
			t.Errorf("packUnescape(%q) = %q, want an error", bad, got)
		}
	}
}
