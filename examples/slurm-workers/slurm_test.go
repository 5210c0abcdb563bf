package slurmworkers_test

// TestJobOnSlurm submits job.sh to the local Slurm (scripts/slurm-local.sh
// start; make test starts it) and checks the issue-15 contract of the
// example: every task's worker registers, soma run ROOT places plans on
// all of them, and scancel of the job takes them out of placement.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/soma-hpc/soma/internal/testutil"
	"github.com/soma-hpc/soma/slurm"
)

// workerTimeout is the workers' --timeout and the readers' --timeout:
// short, so that a worker Slurm SIGKILLs goes dead soon after.
const workerTimeout = 3 * time.Second

// build builds soma and soma-worker into a fresh bin folder.
func build(t *testing.T) string {
	t.Helper()
	bin := t.TempDir()
	for _, cmd := range []string{"soma", "soma-worker"} {
		out, err := exec.Command("go", "build", "-o", filepath.Join(bin, cmd), "github.com/soma-hpc/soma/cmd/"+cmd).CombinedOutput()
		if err != nil {
			t.Fatalf("go build %s: %v\n%s", cmd, err, out)
		}
	}
	return bin
}

// nodes is the number of nodes sinfo reports in the default partition.
func nodes(t *testing.T) int {
	t.Helper()
	out, err := exec.Command("sinfo", "-h", "-o", "%D").Output()
	if err != nil {
		t.Fatalf("sinfo: %v", err)
	}
	n := 0
	for _, f := range strings.Fields(string(out)) {
		k, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("sinfo -o %%D: %q", out)
		}
		n += k
	}
	return n
}

type workersDoc struct {
	Workers []struct {
		ID        string `json:"id"`
		Alive     bool   `json:"alive"`
		SlurmJob  string `json:"slurm_job"`
		SlurmNode string `json:"slurm_node"`
	} `json:"workers"`
}

// poll calls cond until it is true or limit has passed: waiting for an
// event, not asserting on time.
func poll(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("gave up after %v waiting: %s", limit, what)
}

func TestJobOnSlurm(t *testing.T) {
	testutil.NeedPython(t, "numpy")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := slurm.Client{}
	err := c.Ping(ctx)
	what := "a running Slurm (scripts/slurm-local.sh start)"
	if err != nil {
		what += "; " + err.Error()
	}
	testutil.Need(t, err == nil, what)
	// Two emulated nodes (scripts/slurm-local.sh start --min-nodes 2, as
	// make test does) give one worker per node, as on a cluster. With one
	// node, two tasks on it still check registration, placement and
	// scancel, but not the spread: allowed when run by hand, a failure
	// under SOMA_REQUIRE=1, where the one-per-node check must not quietly
	// drop out (make test's Slurm had one node, so CI only ever ran the
	// two-tasks-on-one-node variant).
	n := nodes(t)
	perNode := n >= 2
	if !perNode && testutil.Required() {
		t.Fatalf("Slurm has %d node(s), want 2 or more (SOMA_REQUIRE=1: make test starts them with scripts/slurm-local.sh start --min-nodes 2; see scripts/test-deps.sh)", n)
	}

	bin := build(t)
	dir := t.TempDir()
	for _, f := range []string{"job.sh", "worker.sh", "plan.toml", "filters.py"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	root := filepath.Join(dir, "root")
	token := filepath.Join(dir, "token") // job.sh makes it
	env := []string{
		"PATH=" + bin + ":" + os.Getenv("PATH"),
		"SOMA_ROOT=" + root,
		"SOMA_TOKEN_FILE=" + token,
		"SOMA_EXAMPLE_DIR=" + dir,
		"SOMA_PYTHON=" + testutil.Python(),
		// Emulated nodes share this host and their names do not resolve.
		"SOMA_LISTEN_HOST=127.0.0.1",
		"SOMA_WORKER_PORT=0",
		"SOMA_WORKER_TIMEOUT=" + workerTimeout.String(),
		"SOMA_RUNS=2",
		"SOMA_HOLD=1",
		"TMPDIR=" + dir, // the workers' scratch (venvs, logs)
	}
	args := []string{"--chdir=" + dir, "--output=" + filepath.Join(dir, "job.out")}
	if !perNode {
		t.Logf("Slurm has one node: running two workers on it (scripts/slurm-local.sh start --nodes 2 checks one per node)")
		args = append(args, "--nodes=1", "--ntasks-per-node=2")
		env = append(env, "SOMA_WORKER_SRUN=--ntasks-per-node=2")
	}
	args = append(args, "--export=ALL,"+strings.Join(env, ","))
	// Its own deadline: the ping's ran on through build(t), which takes
	// tens of seconds on a loaded 2-core machine (the submission failed
	// with "context deadline exceeded" before sbatch had a chance).
	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer scancel()
	id, err := c.Submit(sctx, filepath.Join(dir, "job.sh"), args...)
	if err != nil {
		t.Fatalf("sbatch job.sh: %v", err)
	}
	jobLog := func() string { b, _ := os.ReadFile(filepath.Join(dir, "job.out")); return string(b) }
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = c.Cancel(ctx, slurm.Ref{Job: id}, slurm.CancelOptions{})
		_, _ = c.Wait(ctx, id, 200*time.Millisecond)
		if t.Failed() {
			t.Logf("job %s output:\n%s", id, jobLog())
		}
	})

	soma := func(args ...string) (string, string, error) {
		cmd := exec.Command(filepath.Join(bin, "soma"), args...)
		cmd.Env = append(os.Environ(), "SOMA_PYTHON="+testutil.Python())
		var out, errOut strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		return out.String(), errOut.String(), err
	}
	// registered is false until the first worker has made the folder:
	// until then soma workers fails (no folder, or no soma.json yet).
	registered := false
	listed := func() workersDoc {
		var doc workersDoc
		out, errOut, err := soma("workers", root, "--json", "--timeout", workerTimeout.String())
		if err != nil {
			if !registered {
				return doc
			}
			t.Fatalf("soma workers: %v: %s", err, errOut)
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatalf("soma workers --json: %v\n%s", err, out)
		}
		return doc
	}
	ofJob := func(alive bool) map[string]string { // id -> node
		got := map[string]string{}
		for _, w := range listed().Workers {
			if strings.SplitN(w.SlurmJob, "@", 2)[0] == id.String() && w.Alive == alive {
				got[w.ID] = w.SlurmNode
			}
		}
		return got
	}

	// Both workers register (sbatch may queue the job behind others).
	var alive map[string]string
	poll(t, 2*time.Minute, "two workers of job "+id.String()+" alive", func() bool {
		alive = ofJob(true)
		return len(alive) == 2
	})
	registered = true
	t.Logf("workers of job %s (id: node): %v", id, alive)
	if perNode {
		nodesSeen := map[string]bool{}
		for _, n := range alive {
			nodesSeen[n] = true
		}
		if len(nodesSeen) != 2 {
			t.Errorf("workers %v: want one on each of two nodes", alive)
		}
	}

	// Placement uses both: each worker has one slot (SOMA_MAX_PLANS=1) and
	// each plan sleeps 2 s, so plans started together cannot all wait for
	// one worker while the other is free.
	const runs = 4
	placedOn := regexp.MustCompile(`placed on worker (\S+) `)
	var mu sync.Mutex
	used := map[string]int{}
	var wg sync.WaitGroup
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, errOut, err := soma("run", root, filepath.Join(dir, "plan.toml"), "--token-file", token, "--timeout", workerTimeout.String())
			if err != nil || !strings.Contains(out, "2 4 6 8 10 12") {
				t.Errorf("soma run %d: %v\nstdout:\n%s\nstderr:\n%s", i, err, out, errOut)
				return
			}
			m := placedOn.FindStringSubmatch(errOut)
			if m == nil {
				t.Errorf("soma run %d: no placement in stderr:\n%s", i, errOut)
				return
			}
			mu.Lock()
			used[m[1]]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	for w := range alive {
		if used[w] == 0 {
			t.Errorf("worker %s ran none of %d plans (placements %v)", w, runs, used)
		}
	}
	for w := range used {
		if _, ok := alive[w]; !ok {
			t.Errorf("a plan was placed on %s, not one of the job's workers %v", w, alive)
		}
	}

	// The job's own study ran on them too.
	poll(t, 2*time.Minute, "job.sh to finish its study", func() bool {
		return strings.Contains(jobLog(), "job.sh: study done, 0 of 2 plans failed")
	})

	// scancel: Slurm sends SIGTERM, each worker removes its record (or, if
	// killed first, goes dead after workerTimeout). Either way it leaves
	// placement: soma run would no longer pick it.
	cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer ccancel()
	if err := c.Cancel(cctx, slurm.Ref{Job: id}, slurm.CancelOptions{}); err != nil {
		t.Fatalf("scancel %s: %v", id, err)
	}
	poll(t, time.Minute, fmt.Sprintf("workers of job %s to leave placement after scancel", id), func() bool {
		return len(ofJob(true)) == 0
	})
	if dead := ofJob(false); len(dead) != 0 {
		t.Logf("workers listed dead (killed before they could unbind): %v", dead)
	}
}
