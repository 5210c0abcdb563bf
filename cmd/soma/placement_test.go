package main

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/soma-hpc/soma/internal/testutil"
)

// workerBin builds cmd/soma-worker once per test binary.
var workerBin = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "soma-worker-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "soma-worker")
	if out, err := exec.Command("go", "build", "-o", bin, "../soma-worker").CombinedOutput(); err != nil {
		return "", &exec.ExitError{Stderr: out}
	}
	return bin, nil
})

// startedWorker is a real soma-worker process registered under a root.
type startedWorker struct {
	cmd *exec.Cmd
	url string
	mu  sync.Mutex
	log strings.Builder // its stderr
}

func (w *startedWorker) stderr() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.log.String()
}

// startWorker starts the soma-worker binary with --root root, a small
// heartbeat timeout and extra flags, and waits until it has registered.
func startWorker(t *testing.T, root string, args ...string) *startedWorker {
	t.Helper()
	testutil.NeedPython(t, "numpy")
	bin, err := workerBin()
	if err != nil {
		t.Fatalf("go build soma-worker: %v", err)
	}
	dir := t.TempDir()
	all := append([]string{"--root", root, "--python", testutil.Python(), "--listen", "127.0.0.1:0",
		"--env-dir", filepath.Join(dir, "envs"), "--zarr-cache", filepath.Join(dir, "zcache"), "--verbose"}, args...)
	cmd := exec.Command(bin, all...)
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &startedWorker{cmd: cmd}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	sc := bufio.NewScanner(pipe)
	serving := regexp.MustCompile(`serving (http://\S+)`)
	for sc.Scan() {
		line := sc.Text()
		w.mu.Lock()
		w.log.WriteString(line + "\n")
		w.mu.Unlock()
		if m := serving.FindStringSubmatch(line); m != nil {
			w.url = m[1]
		}
		if strings.Contains(line, "registered as") {
			break
		}
	}
	if w.url == "" || !strings.Contains(w.stderr(), "registered as") {
		t.Fatalf("soma-worker never registered; stderr:\n%s", w.stderr())
	}
	go func() {
		for sc.Scan() {
			w.mu.Lock()
			w.log.WriteString(sc.Text() + "\n")
			w.mu.Unlock()
		}
	}()
	return w
}

type workersDoc struct {
	Workers []struct {
		ID      string   `json:"id"`
		Address string   `json:"address"`
		Alive   bool     `json:"alive"`
		Tags    []string `json:"tags"`
		Slots   int      `json:"slots"`
	} `json:"workers"`
}

func readWorkersJSON(t *testing.T, root string, timeout time.Duration) workersDoc {
	t.Helper()
	code, out, errOut := soma("workers", root, "--json", "--timeout", timeout.String())
	if code != exitOK {
		t.Fatalf("soma workers: exit %d: %s", code, errOut)
	}
	var doc workersDoc
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("soma workers --json: %v\n%s", err, out)
	}
	return doc
}

// poll calls cond until it is true or a minute has passed: waiting for
// an event, not asserting on time.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("gave up waiting: %s", what)
}

// TestWorkerRegisters: a soma-worker started with --root is listed alive
// by soma workers with its tags, slots and address; SIGTERM removes its
// record; a SIGKILLed one is listed dead once its heartbeat is older than
// --timeout.
func TestWorkerRegisters(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	const timeout = 2 * time.Second
	a := startWorker(t, root, "--timeout", timeout.String(), "--tag", "torch", "--tag", "a100", "--max-plans", "3", "--worker-id", "alpha")
	b := startWorker(t, root, "--timeout", timeout.String(), "--worker-id", "beta")

	doc := readWorkersJSON(t, root, timeout)
	if len(doc.Workers) != 2 {
		t.Fatalf("soma workers lists %d workers, want 2: %+v", len(doc.Workers), doc)
	}
	for _, w := range doc.Workers {
		if !w.Alive {
			t.Errorf("worker %s is not alive", w.ID)
		}
		if w.ID == "alpha" && (w.Address != a.url || strings.Join(w.Tags, ",") != "torch,a100" || w.Slots != 3) {
			t.Errorf("alpha = %+v; want address %s, tags torch,a100, 3 slots", w, a.url)
		}
	}

	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := a.cmd.Wait(); err != nil {
		t.Fatalf("alpha after SIGTERM: %v, want exit 0\n%s", err, a.stderr())
	}
	doc = readWorkersJSON(t, root, timeout)
	if len(doc.Workers) != 1 || doc.Workers[0].ID != "beta" {
		t.Fatalf("after SIGTERM of alpha: %+v, want only beta", doc.Workers)
	}

	if err := b.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	poll(t, "beta listed dead after SIGKILL", func() bool {
		doc := readWorkersJSON(t, root, timeout)
		return len(doc.Workers) == 1 && doc.Workers[0].ID == "beta" && !doc.Workers[0].Alive
	})
}
