package testutil

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"testing"
)

// childEnv names the role a re-run test binary plays (see Child).
const childEnv = "SOMA_TEST_CHILD"

// Child returns a command that runs this test binary again as a child
// process playing role, with env ("NAME=value") added to this process's
// environment. The child runs no tests (-test.run=^$): the package's
// TestMain must call RunChild first, which runs the role and exits. Tests
// use children where the claim under test is about OS processes: link(2)
// races between processes, a kill -9 in the middle of a write, a lock held
// by a process that dies.
//
// Stdin, Stdout and Stderr are left nil (the null device), for the caller
// to set. Test flags (-test.v, -test.timeout...) are not passed on, so the
// testing package prints nothing into the child's output.
func Child(t testing.TB, role string, env ...string) *exec.Cmd {
	t.Helper()
	if role == "" {
		t.Fatal("testutil.Child: empty role")
	}
	// os.Executable, not os.Args[0]: the latter may be a relative path.
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("testutil.Child: find this test binary: %v", err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(append(os.Environ(), childEnv+"="+role), env...)
	return cmd
}

// RunChild, called first in a package's TestMain, makes a process started
// by Child play its role: it runs roles[role] and exits with the status
// that returns. In a process not started by Child it returns at once, and
// TestMain goes on to run the tests. An unknown role exits 2, naming the
// roles there are.
//
// The role's variable is removed from the environment before the role
// runs, so that processes the role starts (this test binary again
// included) are not children too.
func RunChild(roles map[string]func() int) {
	role := os.Getenv(childEnv)
	if role == "" {
		return
	}
	os.Unsetenv(childEnv)
	run, ok := roles[role]
	if !ok {
		fmt.Fprintf(os.Stderr, "testutil: %s=%q is not a role of this test binary (roles: %v)\n",
			childEnv, role, slices.Sorted(maps.Keys(roles)))
		os.Exit(2)
	}
	os.Exit(run())
}
