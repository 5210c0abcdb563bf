package slurm

import (
	"os/exec"
	"testing"
)

// TestShellQuote pins the one POSIX quoting rule (issue 16: status had
// its own quoter, with its own rules, for `soma best --format args`) and
// checks that real shells read each word back unchanged: dash, which
// knows only POSIX quoting, and bash.
func TestShellQuote(t *testing.T) {
	tests := []struct{ in, want string }{
		{"adam", "adam"},
		{"-0.5", "-0.5"},
		{"1e-05", "1e-05"},
		{"a/b_c@d%e+f=g:h,i.j", "a/b_c@d%e+f=g:h,i.j"},
		{"", "''"},
		{"'", `''\'''`},
		{"it's", `'it'\''s'`},
		{"''", `''\'''\'''`},
		{"a\nb", "'a\nb'"},
		{"tab\there", "'tab\there'"},
		{"é ü 世界", "'é ü 世界'"},
		{"é", "'é'"},
		{"a b", "'a b'"},
		{"$HOME", "'$HOME'"},
		{"$(id)", "'$(id)'"},
		{"x;rm", "'x;rm'"},
		{`back\slash`, `'back\slash'`},
		{"trailing\\", `'trailing\'`},
		{"*", "'*'"},
		{"~", "'~'"},
	}
	for _, tt := range tests {
		got := ShellQuote(tt.in)
		if got != tt.want {
			t.Errorf("ShellQuote(%q) = %q, want %q", tt.in, got, tt.want)
		}
		for _, sh := range []string{"/bin/sh", "/bin/dash", "/bin/bash"} {
			back, err := exec.Command(sh, "-c", "printf %s "+got).Output()
			if err != nil || string(back) != tt.in {
				t.Errorf("%s reads %s as %q (%v), want %q", sh, got, back, err, tt.in)
			}
		}
	}
}
