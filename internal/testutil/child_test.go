package testutil

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestMain(m *testing.M) {
	RunChild(map[string]func() int{
		// echo prints the variable GREETING, and whether the role's own
		// variable is still set (it must not be: see RunChild).
		"echo": func() int {
			_, inherited := os.LookupEnv(childEnv)
			fmt.Printf("%s %v\n", os.Getenv("GREETING"), inherited)
			return 0
		},
		"exit3": func() int {
			fmt.Fprintln(os.Stderr, "exit3 says goodbye")
			return 3
		},
	})
	os.Exit(m.Run())
}

// A child runs its role, with the env it was given, and not the tests:
// the tests would print "PASS" (or run this test again, without end).
func TestChildRunsItsRole(t *testing.T) {
	cmd := Child(t, "echo", "GREETING=hello")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("echo child: %v", err)
	}
	if got, want := string(out), "hello false\n"; got != want {
		t.Errorf("echo child printed %q, want %q", got, want)
	}
}

// The role's return value is the child's exit status, and its stderr
// is the caller's to read.
func TestChildExitStatus(t *testing.T) {
	for _, tc := range []struct {
		role       string
		wantCode   int
		wantStderr string
	}{
		{"exit3", 3, "exit3 says goodbye"},
		{"no-such-role", 2, `SOMA_TEST_CHILD="no-such-role" is not a role of this test binary (roles: [echo exit3])`},
	} {
		t.Run(tc.role, func(t *testing.T) {
			cmd := Child(t, tc.role)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != tc.wantCode {
				t.Fatalf("child %s: %v, want exit status %d\n%s", tc.role, err, tc.wantCode, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.wantStderr) {
				t.Errorf("child %s wrote %q to stderr, want %q in it", tc.role, stderr.String(), tc.wantStderr)
			}
		})
	}
}
