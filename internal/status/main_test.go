package status

import (
	"os"
	"testing"

	"github.com/soma-hpc/soma/internal/studytest"
)

// shared is the fixture of this test binary: real soma-trial runs,
// built once (studytest.Shared).
var shared studytest.Shared

func TestMain(m *testing.M) { os.Exit(shared.Main(m)) }

// fix returns the shared fixture.
func fix(t *testing.T) *studytest.Fixture { return shared.Get(t) }
