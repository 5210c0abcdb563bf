package status

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/soma-hpc/soma/internal/studytest"
	"github.com/soma-hpc/soma/internal/testutil"
)

// The fixture is built once per test binary, by real soma-trial runs
// (studytest.Build), in a folder that outlives each test. Tests that
// change it work on a copy.
var (
	fixtureDir  string
	fixtureOnce sync.Once
	fixture     *studytest.Fixture
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "soma-status-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fixtureDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// fix returns the shared fixture, building it on first use.
func fix(t *testing.T) *studytest.Fixture {
	t.Helper()
	testutil.NeedPython(t, "argparse")
	fixtureOnce.Do(func() { fixture = studytest.Build(t, fixtureDir) })
	if fixture == nil {
		t.Fatal("the fixture could not be built (see the first test that failed)")
	}
	return fixture
}
