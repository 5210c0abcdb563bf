package worker

import (
	"fmt"
	"maps"
	"os"
	"testing"

	"github.com/soma-hpc/soma/internal/testutil"
)

// TestMain sends a child process that a multi-process test started
// (testutil.Child) to its role, and otherwise runs the tests.
func TestMain(m *testing.M) {
	roles := map[string]func() int{
		"affinity":        childRole(affinityChild),
		"env-get":         childRole(func() error { return envChild("get") }),
		"env-hang":        childRole(func() error { return envChild("hang") }),
		"env-hold":        childRole(func() error { return envChild("hold") }),
		"place":           childRole(placeChild),
		"place-send":      childRole(placeSendChild),
		"registry-worker": childRole(registryChild),
	}
	maps.Copy(roles, nvmlRoles())
	testutil.RunChild(roles)
	os.Exit(m.Run())
}

// childRole makes body a child's role: an error goes to stderr and exits 1.
func childRole(body func() error) func() int {
	return func() int {
		if err := body(); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			return 1
		}
		return 0
	}
}
