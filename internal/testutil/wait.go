package testutil

import (
	"testing"
	"time"
)

// WaitFor calls cond every poll until it reports true, and fails the
// test, naming what, if it has not within timeout. cond's error fails
// the test at once.
//
// It is for tests that wait for something another goroutine or process
// makes happen: a fixed sleep there is either too short on a loaded
// machine (2 CPUs shared by several test binaries under -race) or wastes
// time everywhere else. The timeout is a bound on a hang, not a timed
// assertion: make it generous.
func WaitFor(t testing.TB, timeout, poll time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v", what, timeout)
		}
		time.Sleep(poll)
	}
}
