package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/worker"
)

// workersRoot makes a folder with two workers (one with a GPU plan
// placed on it), one that stops heartbeating, and a corrupt record.
func workersRoot(t *testing.T, timeout time.Duration) (root string, live []*worker.Registration) {
	t.Helper()
	ctx := context.Background()
	root = filepath.Join(t.TempDir(), "root")
	s, err := fsstore.Open(root, fsstore.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	rec := func(id string, gpus int, tags ...string) worker.WorkerRecord {
		wid, err := worker.ParseWorkerID(id)
		if err != nil {
			t.Fatal(err)
		}
		r := worker.WorkerRecord{ID: wid, Address: "http://" + id + ":7070", Slots: 2, Tags: tags,
			Capabilities: worker.RecordCapabilities{CPUs: 16, MemoryBytes: 64 << 30}, SlurmJob: "4242", SlurmNode: id}
		for i := range gpus {
			r.Capabilities.GPUs = append(r.Capabilities.GPUs, worker.RecordGPU{Index: i, UUID: "GPU-" + id, Name: "A100", MemoryBytes: 80 << 30})
		}
		return r
	}
	dead, err := worker.Announce(ctx, s, rec("node3", 0), worker.RegistryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = dead // never heartbeats again
	time.Sleep(timeout + 50*time.Millisecond)
	for _, r := range []worker.WorkerRecord{rec("node12", 2, "torch"), rec("node7", 0, "sklearn")} {
		g, err := worker.Announce(ctx, s, r, worker.RegistryOptions{})
		if err != nil {
			t.Fatal(err)
		}
		live = append(live, g)
	}
	p, err := worker.Place(ctx, s, worker.Requirement{GPUs: 1}, worker.PlaceOptions{Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Release(context.Background()) })
	if err := os.WriteFile(filepath.Join(root, "names", "workers", "broken"), []byte("garbage"), 0o666); err != nil {
		t.Fatal(err)
	}
	return root, live
}

// heartbeatAll renews every registration in live.
func heartbeatAll(t *testing.T, live []*worker.Registration) {
	t.Helper()
	for _, g := range live {
		if _, err := g.Heartbeat(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

func TestWorkersCommand(t *testing.T) {
	// 2 s, not 300 ms: a loaded CI machine saw live workers dead between
	// a heartbeat and the view (TestStatusListsWorkers, at load 23).
	const timeout = 2 * time.Second
	root, live := workersRoot(t, timeout)
	beat := func() { heartbeatAll(t, live) }
	beat()
	code, out, errOut := soma("workers", root, "--timeout", timeout.String())
	if code != exitOK {
		t.Fatalf("soma workers: %d %s", code, errOut)
	}
	for _, want := range []string{
		"workers  2 alive, 1 dead; 1 of 4 slots held; 1 of 2 GPUs in use",
		"node12", "alive", "1/2", "2×A100 80GiB (1 used)", "torch", "4242@node12", "http://node12:7070",
		"node3", "dead",
		"problem  workers/broken: corrupt record",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("soma workers lacks %q:\n%s", want, out)
		}
	}

	beat()
	code, out, errOut = soma("workers", root, "--json", "--timeout", timeout.String())
	if code != exitOK {
		t.Fatalf("soma workers --json: %d %s", code, errOut)
	}
	var rep worker.WorkersReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	alive := map[string]bool{}
	for _, w := range rep.Workers {
		alive[w.ID.String()] = w.Alive
	}
	if len(rep.Workers) != 3 || !alive["node12"] || !alive["node7"] || alive["node3"] || len(rep.Problems) != 1 {
		t.Errorf("--json = %+v", rep)
	}
	// The document has the fields --help promises.
	var raw map[string]any
	_ = json.Unmarshal([]byte(out), &raw)
	w0 := raw["workers"].([]any)[0].(map[string]any)
	for _, k := range []string{"id", "address", "alive", "last_heartbeat", "age_s", "slots", "leases", "load", "gpus_used", "tags", "cpus", "memory_bytes", "gpus", "active_plans", "soma_version", "host", "pid"} {
		if _, ok := w0[k]; !ok {
			t.Errorf("worker JSON lacks %q: %v", k, w0)
		}
	}

	if code, _, errOut := soma("workers", root, "--interval", "1s"); code != exitUsage || !strings.Contains(errOut, "--watch") {
		t.Errorf("--interval without --watch: %d %q", code, errOut)
	}
	if code, _, errOut := soma("workers", t.TempDir()+"/none"); code != exitError || errOut == "" {
		t.Errorf("missing root: %d %q", code, errOut)
	}
}

func TestWorkersWatch(t *testing.T) {
	root, _ := workersRoot(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 1200*time.Millisecond)
	defer cancel()
	var out, errb bytes.Buffer
	app := newApp(&out, &errb)
	if err := app.RunContext(ctx, reorder(app, []string{"soma", "workers", root, "--watch", "--interval", "200ms", "--json"})); err != nil {
		t.Fatalf("watch: %v\n%s", err, errb.String())
	}
	docs := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(docs) < 2 {
		t.Errorf("%d documents in 1.2 s of polling every 200ms, want several", len(docs))
	}
	for _, d := range docs {
		var rep worker.WorkersReport
		if err := json.Unmarshal([]byte(d), &rep); err != nil || len(rep.Workers) != 3 {
			t.Errorf("watch document %q: %v", d, err)
		}
	}
}

// soma workers --prune removes the dead worker (node3) and keeps the
// live ones; --dry-run removes nothing.
func TestWorkersPrune(t *testing.T) {
	const timeout = 2 * time.Second // see TestWorkersCommand
	root, live := workersRoot(t, timeout)
	for _, g := range live {
		if _, err := g.Heartbeat(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if code, _, errOut := soma("workers", root, "--prune", "--older-than", "100ms", "--timeout", timeout.String()); code != exitUsage || !strings.Contains(errOut, "--older-than") {
		t.Errorf("--older-than below --timeout: %d %q, want a usage error naming it", code, errOut)
	}
	if code, _, errOut := soma("workers", root, "--dry-run"); code != exitUsage || !strings.Contains(errOut, "--prune") {
		t.Errorf("--dry-run without --prune: %d %q", code, errOut)
	}
	code, out, errOut := soma("workers", root, "--prune", "--older-than", timeout.String(), "--timeout", timeout.String(), "--dry-run")
	if code != exitOK || !strings.Contains(out, "would remove worker node3") || !strings.Contains(out, "would remove 1 dead workers") {
		t.Fatalf("--prune --dry-run: %d %q %s", code, out, errOut)
	}
	code, out, errOut = soma("workers", root, "--prune", "--older-than", timeout.String(), "--timeout", timeout.String(), "--json")
	if code != exitOK {
		t.Fatalf("--prune --json: %d %s", code, errOut)
	}
	var rep worker.PruneReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Workers) != 1 || rep.Workers[0].ID != "node3" || rep.Kept != 2 {
		t.Fatalf("--prune --json = %+v (%v)\n%s", rep, err, out)
	}
	code, out, _ = soma("workers", root, "--json", "--timeout", time.Hour.String())
	var after worker.WorkersReport
	if err := json.Unmarshal([]byte(out), &after); code != exitOK || err != nil {
		t.Fatalf("soma workers after pruning: %d %v", code, err)
	}
	for _, w := range after.Workers {
		if w.ID.String() == "node3" {
			t.Errorf("node3 is still listed after pruning")
		}
	}
	if len(after.Workers) != 2 {
		t.Errorf("%d workers after pruning, want node12 and node7", len(after.Workers))
	}
}
