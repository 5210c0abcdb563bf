package slowfs_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/soma-hpc/soma/internal/testutil"
	"github.com/soma-hpc/soma/internal/tools/slowfs"
)

// TestClaimTestsOnSlowFS runs the exactly-once and kill -9 tests of
// fsstore, study and soma-trial with their folders on the slow filesystem
// at 1 ms per metadata operation and no kernel caching (issue 18): a fast
// local disk hides races that a file server's round trips open, and an
// open file that stays readable after its name is replaced hides ESTALE.
// (Run so, study's process tests failed 2 runs in 3 until fsstore read a
// replaced record again: TestReadWhileRebound.) Each package's tests are
// built into a test binary and run with TMPDIR on the mount, so their
// t.TempDir folders, stores and objectives live there.
func TestClaimTestsOnSlowFS(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs other packages' process tests")
	}
	err := slowfs.Available()
	testutil.Need(t, err == nil, "FUSE: "+errString(err))
	dir, backing := t.TempDir(), t.TempDir()
	m, err := slowfs.New(dir, backing, slowfs.Options{Delay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unmount(t, m) })
	bin := t.TempDir()
	for _, tc := range []struct{ pkg, run string }{
		{"fsstore", "TestClaimRaceProcesses|TestKillWriterNeverTears|TestConcurrentCreate"},
		{"study", "TestProcessesRunBudgetExactlyOnce|TestProcessesRetryStaleOnce|TestConcurrentNextExactlyOnce|TestStaleRetriedExactlyOnce"},
		{"cmd/soma-trial", "TestFourProcessesRunTheBudgetOnce|TestKill9MidTrialIsRetriedElsewhere"},
	} {
		t.Run(tc.pkg, func(t *testing.T) {
			exe := filepath.Join(bin, strings.ReplaceAll(tc.pkg, "/", "-")+".test")
			pkgDir := filepath.Join("..", "..", "..", filepath.FromSlash(tc.pkg))
			if out, err := exec.Command("go", "test", "-c", "-o", exe, "./"+filepath.ToSlash(pkgDir)).CombinedOutput(); err != nil {
				t.Fatalf("go test -c %s: %v\n%s", tc.pkg, err, out)
			}
			m.Reset()
			c := exec.Command(exe, "-test.run", "^("+tc.run+")$", "-test.count=1", "-test.v")
			c.Dir = pkgDir // for their testdata
			// TMPDIR puts their folders on the mount; the go command's
			// GOTMPDIR would win over it in t.TempDir, so it goes.
			c.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool {
				return strings.HasPrefix(kv, "GOTMPDIR=") || strings.HasPrefix(kv, "TMPDIR=")
			}), "TMPDIR="+dir)
			out, err := c.CombinedOutput()
			if err != nil {
				t.Fatalf("%s on the slow filesystem: %v\n%s", tc.pkg, err, tail(string(out), 4000))
			}
			for _, name := range strings.Split(tc.run, "|") {
				if !strings.Contains(string(out), "--- PASS: "+name+" ") {
					t.Errorf("%s: %s did not pass (skipped?):\n%s", tc.pkg, name, tail(string(out), 4000))
				}
			}
			if got := m.Counts(); got["LINK"] == 0 {
				t.Errorf("%s: no LINK reached the slow filesystem (%v): the tests did not run on it", tc.pkg, got)
			}
		})
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
