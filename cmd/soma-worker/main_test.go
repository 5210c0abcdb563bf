package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/soma-hpc/soma/internal/testutil"
	"github.com/soma-hpc/soma/worker"
)

func somaWorker(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(append([]string{"soma-worker"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

func TestHelpTeaches(t *testing.T) {
	code, out, _ := somaWorker("--help")
	for _, want := range []string{"EXIT STATUS", "--token-file", "chmod 600", "srun --ntasks-per-node=1", "SOMA_PYTHON", "30m0s"} {
		if !strings.Contains(out, want) {
			t.Errorf("--help lacks %q", want)
		}
	}
	if code != exitOK {
		t.Errorf("--help: exit %d", code)
	}
}

// TestRefusals: the worker refuses to start unsafely, naming the fix.
func TestRefusals(t *testing.T) {
	dir := t.TempDir()
	open := filepath.Join(dir, "open-token")
	os.WriteFile(open, []byte("tok\n"), 0o644)
	os.Chmod(open, 0o644)
	t.Setenv("SOMA_PYTHON", "")
	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"no python", []string{"--listen", "127.0.0.1:0"}, exitUsage, "pass --python"},
		{"beyond loopback without token", []string{"--python", "/usr/bin/python3", "--listen", "0.0.0.0:0"}, exitError, "refusing to listen on 0.0.0.0:0 without a token"},
		{"readable token file", []string{"--python", "/usr/bin/python3", "--token-file", open}, exitError, "run chmod 600 " + open},
		{"arguments", []string{"--python", "/usr/bin/python3", "extra"}, exitUsage, "takes only flags"},
		{"bad memory", []string{"--python", "/usr/bin/python3", "--max-memory", "lots"}, exitUsage, "--max-memory"},
		// --root names a file: should the grace pass, the worker fails
		// there rather than serve.
		{"no stop grace", []string{"--python", "/usr/bin/python3", "--root", open, "--stop-grace", "0s"}, exitUsage, "--stop-grace 0s: must be more than 0"},
		{"negative cancel grace", []string{"--python", "/usr/bin/python3", "--root", open, "--cancel-grace", "-1s"}, exitUsage, "--cancel-grace -1s: must be more than 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := somaWorker(tc.args...)
			if code != tc.code || !strings.Contains(errOut, tc.msg) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, errOut, tc.code, tc.msg)
			}
		})
	}
}

// startWorker builds and starts the real binary (tag cpu) in a folder of
// its own, serving on loopback with token testToken, and returns it
// with its URL and folder; the test's end kills it.
func startWorker(t *testing.T) (cmd *exec.Cmd, url, dir string) {
	t.Helper()
	testutil.NeedPython(t, "json")
	dir = t.TempDir()
	bin := filepath.Join(dir, "soma-worker")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	tokFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokFile, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd = exec.Command(bin, "--root", filepath.Join(dir, "root"), "--python", testutil.Python(),
		"--listen", "127.0.0.1:0", "--token-file", tokFile, "--tag", "cpu", "--env-dir", filepath.Join(dir, "envs"),
		"--zarr-cache", filepath.Join(dir, "zcache"))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	sc := bufio.NewScanner(stderr)
	re := regexp.MustCompile(`serving (http://\S+)`)
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			url = m[1]
			break
		}
	}
	if url == "" {
		t.Fatal("soma-worker never said where it serves")
	}
	go func() {
		for sc.Scan() {
		}
	}()
	return cmd, url, dir
}

// testToken is the bearer token startWorker's worker takes.
const testToken = "s3cret-0123456789"

// TestServesAndStops starts the real binary, asks it for its health and
// capabilities with the token, and stops it with SIGTERM (exit 0).
func TestServesAndStops(t *testing.T) {
	cmd, url, _ := startWorker(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := worker.NewClient(url, "s3cret-0123456789", nil)
	if err != nil {
		t.Fatal(err)
	}
	caps, err := c.Capabilities(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(caps.Tags) != 1 || caps.Tags[0] != "cpu" || !caps.HasStore || caps.CPUs < 1 {
		t.Errorf("capabilities = %+v, want tag cpu, a store, CPUs", caps)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("after SIGTERM: %v, want exit 0", err)
	}
}
