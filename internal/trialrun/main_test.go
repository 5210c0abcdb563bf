package trialrun

import (
	"os"
	"testing"

	"github.com/soma-hpc/soma/internal/objective"
)

// TestMain lets this test binary be the objectives' guard (Options.Guard).
func TestMain(m *testing.M) {
	objective.GuardMain()
	os.Exit(m.Run())
}

// self is this test binary, the guard of the objectives it runs.
const self = "/proc/self/exe"
