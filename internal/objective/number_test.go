package objective

import (
	"strings"
	"testing"
)

// Issue 16: a score of 1e400 was refused as "not a number"; it is a
// number, out of float64's range, and the message says so.
func TestOutOfRangeIsNotNotANumber(t *testing.T) {
	tests := []struct {
		line, want string
	}{
		{"final 1e400", "score is out of float64's range"},
		{"report 3 -1e400", "value is out of float64's range"},
		{"final abc", "score is not a number"},
		{"report 3 x", "value is not a number"},
	}
	for _, tc := range tests {
		_, _, _, err := parseLine(tc.line)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseLine(%q) = %v, want %q", tc.line, err, tc.want)
		}
	}
}
