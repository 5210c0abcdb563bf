package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/internal/status"
	"github.com/soma-hpc/soma/internal/studytest"
	"github.com/soma-hpc/soma/internal/testutil"
	"github.com/soma-hpc/soma/worker"
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

// somaBin builds this command once per test binary, for tests that need
// soma runs in processes of their own.
var somaBin = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "soma-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "soma")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
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
			break // printed once registered
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

	// Only a dead worker left: soma run runs the plan here, saying why.
	t.Setenv("TMPDIR", t.TempDir())
	code, out, errOut := soma("run", root, placedPlan(t, "after-death"), "--timeout", timeout.String(), "--python", testutil.Python())
	if code != exitOK || !strings.Contains(out, "succeeded") || !strings.Contains(errOut, "the 1 worker(s) registered in") || !strings.Contains(errOut, "are dead") {
		t.Fatalf("with only a dead worker: exit %d\n%s\n%s", code, out, errOut)
	}
}

// placedPlan writes a fit plan of runFilters that needs tags, and returns
// its path.
func placedPlan(t *testing.T, id string, tags ...string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f.py"), []byte(runFilters), 0o644); err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(strings.Replace(runPlanText, "%s", id, 1), "%s", "fit", 1)
	if len(tags) > 0 {
		text = `tags = ["` + strings.Join(tags, `", "`) + `"]` + "\n" + text
	}
	p := filepath.Join(dir, id+".toml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRunPlaced: soma run ROOT plan.toml sends a plan to a live worker
// carrying the plan's tags (two real workers with different tags), the
// same through a real soma-coordinator, and runs it here when no worker
// is alive.
func TestRunPlaced(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	startWorker(t, root, "--tag", "x", "--worker-id", "wx")
	startWorker(t, root, "--tag", "y", "--worker-id", "wy")

	for _, tc := range []struct{ tag, want string }{{"x", "wx"}, {"y", "wy"}, {"x", "wx"}} {
		code, out, errOut := soma("run", root, placedPlan(t, "on-"+tc.tag, tc.tag))
		if code != exitOK || !strings.Contains(out, "succeeded") {
			t.Fatalf("tags [%s]: exit %d\n%s\n%s", tc.tag, code, out, errOut)
		}
		if !strings.Contains(errOut, "placed on worker "+tc.want+" ") {
			t.Errorf("tags [%s]: stderr %q, want placed on worker %s", tc.tag, errOut, tc.want)
		}
	}
	if code, _, errOut := soma("run", root, placedPlan(t, "on-z", "z")); code != exitError || !strings.Contains(errOut, "no live worker meets the requirement") || !strings.Contains(errOut, "tags z") {
		t.Errorf("tags [z]: exit %d, %q; want no live worker meets tags z", code, errOut)
	}

	t.Run("coordinator", func(t *testing.T) {
		dir := t.TempDir()
		bin := filepath.Join(dir, "soma-coordinator")
		if out, err := exec.Command("go", "build", "-o", bin, "../soma-coordinator").CombinedOutput(); err != nil {
			t.Fatalf("go build soma-coordinator: %v\n%s", err, out)
		}
		cmd := exec.Command(bin, "--root", root, "--listen", "127.0.0.1:0")
		pipe, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		sc := bufio.NewScanner(pipe)
		re := regexp.MustCompile(`on (http://\S+)`)
		url := ""
		for url == "" && sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				url = m[1]
			}
		}
		if url == "" {
			t.Fatal("soma-coordinator never said where it serves")
		}
		go func() {
			for sc.Scan() {
			}
		}()
		code, out, errOut := soma("run", "--coordinator", url, placedPlan(t, "via-coordinator", "y"))
		if code != exitOK || !strings.Contains(out, "succeeded") || !strings.Contains(errOut, "placed on worker wy ") {
			t.Fatalf("--coordinator: exit %d\n%s\n%s", code, out, errOut)
		}
	})

	t.Run("no live worker runs locally", func(t *testing.T) {
		empty := filepath.Join(t.TempDir(), "empty")
		if _, err := fsstore.Open(empty, fsstore.Options{Create: true}); err != nil {
			t.Fatal(err)
		}
		t.Setenv("TMPDIR", t.TempDir())
		code, out, errOut := soma("run", empty, placedPlan(t, "local", "x"), "--python", testutil.Python())
		if code != exitOK || !regexp.MustCompile(`plan local-[0-9a-f]{8}: succeeded`).MatchString(out) {
			t.Fatalf("local: exit %d\n%s\n%s", code, out, errOut)
		}
		if !strings.Contains(errOut, "no worker has registered in") || !regexp.MustCompile(`running plan local-[0-9a-f]{8} here`).MatchString(errOut) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("local: stderr %q, want one line saying it ran here and why", errOut)
		}
		t.Setenv("SOMA_PYTHON", "")
		if code, _, errOut := soma("run", empty, placedPlan(t, "nopython")); code != exitError || !strings.Contains(errOut, "pass --python") {
			t.Errorf("no python: exit %d, %q; want an error naming --python", code, errOut)
		}
	})
}

// TestStatusListsWorkers: soma status shows a short workers section, as
// text and JSON (checked against JSONShape), when workers have
// registered in the root; none otherwise.
func TestStatusListsWorkers(t *testing.T) {
	// 2 s, and the live workers heartbeat just before each view: with
	// 300 ms and no heartbeat after setting up, a loaded machine (the CI's
	// 2 CPUs running other packages' tests) saw them dead (flaky, seen at
	// load 23).
	const timeout = 2 * time.Second
	root, live := workersRoot(t, timeout)
	beat := func() { heartbeatAll(t, live) }
	beat()
	code, out, errOut := soma("status", root, "--worker-timeout", timeout.String())
	if code != exitOK {
		t.Fatalf("soma status: exit %d: %s", code, errOut)
	}
	for _, want := range []string{"workers  2 alive, 1 dead; 1 of 4 slots held", "node12  alive  1/2  torch  http://node12:7070", "node3  dead ", "1 worker record(s) cannot be read"} {
		if !strings.Contains(out, want) {
			t.Errorf("soma status lacks %q:\n%s", want, out)
		}
	}
	beat()
	code, out, errOut = soma("status", root, "--json", "--worker-timeout", timeout.String())
	if code != exitOK {
		t.Fatalf("soma status --json: exit %d: %s", code, errOut)
	}
	for _, e := range studytest.CheckShape(status.JSONShape, []byte(out)) {
		t.Error(e)
	}
	var doc struct {
		Workers *struct {
			Alive, Dead int
			List        []struct{ ID string }
		}
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Workers == nil || doc.Workers.Alive != 2 || doc.Workers.Dead != 1 || len(doc.Workers.List) != 3 {
		t.Errorf("--json workers = %+v, want 2 alive, 1 dead, 3 listed", doc.Workers)
	}

	empty := filepath.Join(t.TempDir(), "empty")
	if _, err := fsstore.Open(empty, fsstore.Options{Create: true}); err != nil {
		t.Fatal(err)
	}
	if _, out, _ := soma("status", empty); strings.Contains(out, "workers") {
		t.Errorf("a root without workers shows a workers section:\n%s", out)
	}
	if _, out, _ := soma("status", empty, "--json"); strings.Contains(out, `"workers"`) {
		t.Errorf("a root without workers has workers in --json:\n%s", out)
	}
}

const sleepyFilter = `
import time
class Sleepy:
    def forward(self, X):
        print("sleeping")
        time.sleep(600)
        return X
`

// TestWorkerRecordFollowsPlans: a registered soma-worker's record lists a
// running plan among its active plans (soma workers --json), and drops it
// once the plan ends.
func TestWorkerRecordFollowsPlans(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	w := startWorker(t, root, "--worker-id", "busy")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "s.py"), []byte(sleepyFilter), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := worker.ParsePlan([]byte(`id = "long"
mode = "forward"
[input]
object = 1
[[nodes]]
id = "n"
file = "s.py"
class = "Sleepy"
`), dir)
	if err != nil {
		t.Fatal(err)
	}
	c, err := worker.NewClient(w.url, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.Submit(ctx, p); err != nil {
		t.Fatal(err)
	}
	active := func() string {
		code, out, errOut := soma("workers", root, "--json")
		if code != exitOK {
			t.Fatalf("soma workers: %s", errOut)
		}
		var doc struct {
			Workers []struct {
				ActivePlans []string `json:"active_plans"`
			} `json:"workers"`
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil || len(doc.Workers) != 1 {
			t.Fatalf("soma workers --json: %v\n%s", err, out)
		}
		return strings.Join(doc.Workers[0].ActivePlans, ",")
	}
	poll(t, "the record lists plan long", func() bool { return active() == "long" })
	if err := c.Cancel(ctx, "long"); err != nil {
		t.Fatal(err)
	}
	poll(t, "the record drops plan long", func() bool { return active() == "" })
}

// TestRunCancelsOnLostLease: when soma run's lease disappears while the
// plan runs (here unbound by hand, as a placer that reclaimed it would),
// the plan is cancelled on the worker and soma run fails saying why.
func TestRunCancelsOnLostLease(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	w := startWorker(t, root, "--worker-id", "lossy", "--timeout", "1s")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "s.py"), []byte(sleepyFilter), 0o644); err != nil {
		t.Fatal(err)
	}
	plan := filepath.Join(dir, "long.toml")
	if err := os.WriteFile(plan, []byte("id = \"long\"\nmode = \"forward\"\n[input]\nobject = 1\n[[nodes]]\nid = \"n\"\nfile = \"s.py\"\nclass = \"Sleepy\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	type ran struct {
		code        int
		out, errOut string
	}
	done := make(chan ran, 1)
	go func() {
		code, out, errOut := soma("run", root, plan, "--timeout", "1s", "--id", "long")
		done <- ran{code, out, errOut}
	}()
	c, err := worker.NewClient(w.url, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	poll(t, "plan long running on the worker", func() bool {
		res, err := c.Get(ctx, "long")
		return err == nil && res.State == worker.StateRunning
	})
	store, err := fsstore.Open(root, fsstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Placement picks a free slot at random among equals: unbind
	// whichever holds the lease.
	unbound := 0
	for slot := range 64 {
		err := store.Unbind(ctx, fmt.Sprintf("leases/lossy/%d", slot))
		switch {
		case err == nil:
			unbound++
		case !errors.Is(err, fsstore.ErrNotFound):
			t.Fatal(err)
		}
	}
	if unbound != 1 {
		t.Fatalf("unbound %d leases of worker lossy, want the plan's 1", unbound)
	}
	var r ran
	select {
	case r = <-done:
	case <-time.After(2 * time.Minute): // a deadline for the event, not a timing assertion
		t.Fatal("soma run did not end after its lease was lost")
	}
	if r.code != exitError || !strings.Contains(r.errOut, "lease lost") {
		t.Fatalf("soma run: exit %d\n%s\n%s; want exit 1 naming the lost lease", r.code, r.out, r.errOut)
	}
	poll(t, "plan long cancelled on the worker", func() bool {
		res, err := c.Get(ctx, "long")
		return err == nil && res.State == worker.StateCancelled
	})
}

// TestRunPlacedWithToken: a placed plan carries --token-file to the
// worker; without it the worker's refusal names the flag.
func TestRunPlacedWithToken(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("tok-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	startWorker(t, root, "--token-file", tok)
	if code, _, errOut := soma("run", root, placedPlan(t, "no-token")); code != exitError || !strings.Contains(errOut, "--token-file") {
		t.Errorf("without a token: exit %d, %q; want a refusal naming --token-file", code, errOut)
	}
	if code, out, errOut := soma("run", root, placedPlan(t, "with-token"), "--token-file", tok); code != exitOK || !strings.Contains(out, "succeeded") {
		t.Errorf("with the token: exit %d\n%s\n%s", code, out, errOut)
	}
}

// barrierFilter returns its input once two plans have reached it (each
// leaves a file in dir), or after a minute: a plan that finishes proves
// another ran beside it.
const barrierFilter = `
import os, time, uuid
class Barrier:
    def __init__(self, dir):
        self.dir = dir
    def forward(self, X):
        open(os.path.join(self.dir, uuid.uuid4().hex), "w").close()
        deadline = time.time() + 60
        while len(os.listdir(self.dir)) < 2 and time.time() < deadline:
            time.sleep(0.02)
        return X
`

// TestRunSamePlanTwiceAtOnce: two soma run of one plan file at once, on
// a worker of two slots, both succeed, under two ids. Bug (issue 15):
// both ran under the file's id, and the worker refused the second (409,
// a plan of that id is running) unless each was given --id.
func TestRunSamePlanTwiceAtOnce(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	startWorker(t, root, "--worker-id", "twice", "--max-plans", "2")
	dir, met := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "b.py"), []byte(barrierFilter), 0o644); err != nil {
		t.Fatal(err)
	}
	plan := filepath.Join(dir, "twice.toml")
	text := fmt.Sprintf("id = \"twice\"\nmode = \"forward\"\n[input]\nobject = 1\n[[nodes]]\nid = \"n\"\nfile = \"b.py\"\nclass = \"Barrier\"\n[nodes.config]\ndir = %q\n", met)
	if err := os.WriteFile(plan, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	type ran struct {
		code        int
		out, errOut string
	}
	// Two OS processes, as a study's objectives are (urfave/cli's flags
	// are package variables: two runs in one process race).
	bin, err := somaBin()
	if err != nil {
		t.Fatalf("go build soma: %v", err)
	}
	done := make(chan ran, 2)
	for range 2 {
		go func() {
			var out, errOut strings.Builder
			cmd := exec.Command(bin, "run", root, plan)
			cmd.Stdout, cmd.Stderr = &out, &errOut
			code := 0
			if err := cmd.Run(); err != nil {
				code = -1
				if cmd.ProcessState != nil {
					code = cmd.ProcessState.ExitCode()
				}
				errOut.WriteString(err.Error())
			}
			done <- ran{code, out.String(), errOut.String()}
		}()
	}
	idRe := regexp.MustCompile(`plan (twice-[0-9a-f]{8}): succeeded`)
	ids := map[string]bool{}
	for range 2 {
		r := <-done
		m := idRe.FindStringSubmatch(r.out)
		if r.code != exitOK || m == nil {
			t.Errorf("soma run: exit %d\n%s\n%s\nwant success under twice-<suffix>", r.code, r.out, r.errOut)
			continue
		}
		ids[m[1]] = true
	}
	if len(ids) == 2 {
		if entries, _ := os.ReadDir(met); len(entries) != 2 {
			t.Errorf("%d plans reached the barrier, want 2", len(entries))
		}
	} else if !t.Failed() {
		t.Errorf("ids %v, want two different ones", ids)
	}
}
