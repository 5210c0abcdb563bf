package study

import (
	"strings"
	"testing"
)

// Issue 16: "ünï" was refused with "byte 'Ã' is not allowed", the first
// byte of 'ü' read as Latin-1. The message names the character.
func TestValidateNameNamesTheCharacter(t *testing.T) {
	tests := []struct {
		name, want string
	}{
		{"ünï", `character 'ü' (at byte 0)`},
		{"a b", `character ' ' (at byte 1)`},
		{"a/b", `character '/' (at byte 1)`},
		{"ok\xff", `byte 0xff (at byte 2) is not UTF-8`},
		{"..", `starts with '.'`},
		{"", "empty"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateName(tc.name)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ValidateName(%q) = %v, want an error with %q", tc.name, err, tc.want)
			}
		})
	}
	for _, ok := range []string{"a", "lr-sweep_2.b", "0x"} {
		if err := ValidateName(ok); err != nil {
			t.Errorf("ValidateName(%q) = %v, want nil", ok, err)
		}
	}
}
