package zarr

import (
	"os"
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"
)

// TestProcessGoneZombie: a writer that has exited but is not yet reaped
// by its parent (a zombie) writes nothing more, so its temp files are
// stale. Issue 16: processGone asked kill(pid, 0), which succeeds on a
// zombie, and kept such a writer's temp files until the stale-age limit.
func TestProcessGoneZombie(t *testing.T) {
	cmd := exec.Command("/bin/true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	// Wait for the child's exit without reaping it (WNOWAIT): it stays a
	// zombie until cmd.Wait below.
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		t.Fatalf("waitid: %v", err)
	}
	if got := processGone(pid); !got {
		t.Errorf("processGone(zombie %d) = false, want true", pid)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if got := processGone(pid); !got {
		t.Errorf("processGone(reaped %d) = false, want true", pid)
	}
	if got := processGone(os.Getpid()); got {
		t.Errorf("processGone(self) = true, want false")
	}
	if got := processGone(os.Getppid()); got {
		t.Errorf("processGone(parent) = true, want false")
	}
}
