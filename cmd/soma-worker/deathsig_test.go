package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/soma-hpc/soma/internal/testutil"
	"github.com/soma-hpc/soma/worker"
)

// alive says whether pid is a process that has not exited: a zombie (Z
// or X in /proc/<pid>/stat) has.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

// A soma-worker killed with SIGKILL takes its Python daemons along. (Bug:
// they ran on, reparented to init: a torch filter trained for another
// minute after its worker was gone, holding the node's CPUs or GPU, found
// running examples/digits-cut. The daemons now get Pdeathsig.)
func TestDaemonsDieWithTheWorker(t *testing.T) {
	testutil.NeedPython(t, "json")
	dir := t.TempDir()
	bin := filepath.Join(dir, "soma-worker")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	tokFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokFile, []byte("s3cret-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--root", filepath.Join(dir, "root"), "--python", testutil.Python(),
		"--listen", "127.0.0.1:0", "--token-file", tokFile, "--env-dir", filepath.Join(dir, "envs"),
		"--zarr-cache", filepath.Join(dir, "zcache"))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(stderr)
	re := regexp.MustCompile(`serving (http://\S+)`)
	var url string
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
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := worker.NewClient(url, "s3cret-0123456789", nil)
	if err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(dir, "daemon.pid")
	code := "import os, time\nopen(" + strconv.Quote(pidFile) + ", 'w').write(str(os.getpid()))\ntime.sleep(3600)\nclass Never:\n    pass\n"
	p := &worker.Plan{ID: "long", Files: []worker.File{{Name: "long.py", Content: []byte(code)}},
		Nodes: []worker.Node{{ID: "n", File: "long.py", Class: "Never"}}, Input: worker.Value{Kind: worker.KindNone}}
	if _, err := c.Submit(ctx, p); err != nil {
		t.Fatal(err)
	}
	pid := 0
	for pid == 0 {
		if b, err := os.ReadFile(pidFile); err == nil {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		if ctx.Err() != nil {
			t.Fatal("the plan's daemon never started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the daemon (pid %d) outlived its worker, killed with SIGKILL", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
