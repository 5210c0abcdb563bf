package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

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
	cmd, url, dir := startWorker(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := worker.NewClient(url, testToken, nil)
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
