package worker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/internal/testutil"
)

func newRegStore(t testing.TB) *fsstore.Store {
	t.Helper()
	s, err := fsstore.Open(filepath.Join(t.TempDir(), "root"), fsstore.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const gib = 1 << 30

// testRecord is a worker record with n GPUs of mem bytes each.
func testRecord(id string, slots, gpus int, mem uint64, tags ...string) WorkerRecord {
	r := WorkerRecord{
		ID:      mustID(id),
		Address: "http://127.0.0.1:1/" + id,
		Slots:   slots,
		Tags:    tags,
		Capabilities: RecordCapabilities{
			CPUs: 8, MemoryBytes: 64 * gib,
		},
		SomaVersion: "test",
		Host:        "localhost",
		PID:         os.Getpid(),
	}
	for i := range gpus {
		r.Capabilities.GPUs = append(r.Capabilities.GPUs, RecordGPU{Index: i, UUID: "GPU-" + id + "-" + string(rune('0'+i)), Name: "Fake", MemoryBytes: mem})
	}
	return r
}

func mustID(s string) WorkerID {
	id, err := ParseWorkerID(s)
	if err != nil {
		panic(err)
	}
	return id
}

func announce(t testing.TB, s *fsstore.Store, rec WorkerRecord, timeout time.Duration) *Registration {
	t.Helper()
	g, err := Announce(context.Background(), s, rec, RegistryOptions{Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestParseWorkerID(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"node12-7070", true},
		{"a", true},
		{"gpu_3.lab", true},
		{"", false},
		{".hidden", false},
		{"-x", false},
		{"a/b", false},
		{"a b", false},
		{strings.Repeat("x", 65), false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			id, err := ParseWorkerID(tc.in)
			if (err == nil) != tc.ok {
				t.Fatalf("ParseWorkerID(%q) error = %v, want ok %v", tc.in, err, tc.ok)
			}
			if !tc.ok {
				return
			}
			b, _ := id.MarshalText()
			var back WorkerID
			if err := back.UnmarshalText(b); err != nil || back != id {
				t.Errorf("round trip %q = %v, %v", tc.in, back, err)
			}
		})
	}
	if got := DefaultWorkerID("node 12/x", 7070).String(); got != "node_12_x-7070" {
		t.Errorf("DefaultWorkerID = %q, want node_12_x-7070", got)
	}
}

func TestAnnounceListUpdateClose(t *testing.T) {
	ctx := context.Background()
	s := newRegStore(t)
	g := announce(t, s, testRecord("w1", 2, 1, 80*gib, "torch"), 0)

	ws, probs, err := ListWorkers(ctx, s, ListOptions{})
	if err != nil || len(probs) != 0 || len(ws) != 1 {
		t.Fatalf("ListWorkers = %v, %v, %v; want one worker", ws, probs, err)
	}
	if !ws[0].Alive || ws[0].Record.ID.String() != "w1" || !ws[0].Record.HasTag("torch") || ws[0].Record.Version != WorkerRecordVersion {
		t.Errorf("worker = %+v", ws[0])
	}

	// An unchanged record is not rebound; a changed one is.
	before, _ := s.Resolve(ctx, "workers/w1")
	if err := g.Update(ctx, testRecord("w1", 2, 1, 80*gib, "torch")); err != nil {
		t.Fatal(err)
	}
	same, _ := s.Resolve(ctx, "workers/w1")
	if same.Digest != before.Digest {
		t.Errorf("an equal record was rebound")
	}
	rec := testRecord("w1", 2, 1, 80*gib, "torch")
	rec.Load, rec.ActivePlans = 1, []string{"plan-1"}
	if err := g.Update(ctx, rec); err != nil {
		t.Fatal(err)
	}
	ws, _, _ = ListWorkers(ctx, s, ListOptions{})
	if ws[0].Record.Load != 1 || len(ws[0].Record.ActivePlans) != 1 {
		t.Errorf("after Update: %+v", ws[0].Record)
	}
	// The blob behind the record holds the same JSON (one fetch for tools
	// that want the blob; placement never fetches it).
	b, _ := s.Resolve(ctx, "workers/w1")
	blob, err := s.Get(ctx, b.Digest)
	if err != nil || string(blob) != b.Meta.Value(metaRecord) {
		t.Errorf("blob = %q, %v; want the meta's record", blob, err)
	}
	other := testRecord("w2", 1, 0, 0)
	if err := g.Update(ctx, other); err == nil {
		t.Errorf("Update with another id succeeded")
	}

	if _, err := g.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(ctx); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := g.Heartbeat(ctx); !errors.Is(err, ErrRegistrationClosed) {
		t.Errorf("Heartbeat after Close = %v, want ErrRegistrationClosed", err)
	}
	ws, _, _ = ListWorkers(ctx, s, ListOptions{})
	if len(ws) != 0 {
		t.Errorf("after Close: %d workers, want 0", len(ws))
	}
}

// TestAnnounceSameID: a second daemon with a live worker's id is refused;
// once the first is silent for longer than the timeout, the id is taken
// over.
func TestAnnounceSameID(t *testing.T) {
	ctx := context.Background()
	s := newRegStore(t)
	const timeout = 100 * time.Millisecond
	announce(t, s, testRecord("w1", 1, 0, 0), timeout)
	_, err := Announce(ctx, s, testRecord("w1", 1, 0, 0), RegistryOptions{Timeout: timeout})
	if !errors.Is(err, ErrWorkerIDInUse) || !strings.Contains(err.Error(), "--id") {
		t.Fatalf("second Announce = %v, want ErrWorkerIDInUse naming --id", err)
	}
	time.Sleep(2 * timeout)
	rec := testRecord("w1", 3, 0, 0)
	if _, err := Announce(ctx, s, rec, RegistryOptions{Timeout: timeout}); err != nil {
		t.Fatalf("Announce over a dead worker: %v", err)
	}
	ws, _, _ := ListWorkers(ctx, s, ListOptions{Timeout: timeout})
	if len(ws) != 1 || ws[0].Record.Slots != 3 {
		t.Errorf("workers = %+v, want the new record", ws)
	}
}

// TestHeartbeatRebindsLostRecord: a record removed from under a live
// worker comes back with its next heartbeat.
func TestHeartbeatRebindsLostRecord(t *testing.T) {
	ctx := context.Background()
	s := newRegStore(t)
	g := announce(t, s, testRecord("w1", 1, 0, 0), 0)
	if err := s.Unbind(ctx, "workers/w1"); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Resolve(ctx, "workers/w1"); err != nil {
		t.Errorf("record after heartbeat: %v", err)
	}
}

// TestRunKeepsRecordFresh: Run touches the record; the heartbeat it
// leaves is later than the announcement. (Compares server times only.)
func TestRunKeepsRecordFresh(t *testing.T) {
	ctx := context.Background()
	s := newRegStore(t)
	const timeout = 60 * time.Millisecond
	g := announce(t, s, testRecord("w1", 1, 0, 0), timeout)
	first, _ := s.Resolve(ctx, "workers/w1")
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- g.Run(rctx) }()
	for {
		b, err := s.Resolve(ctx, "workers/w1")
		if err != nil {
			t.Fatal(err)
		}
		if b.Time.After(first.Time) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v, want nil after cancel", err)
	}
	_ = g.Close(ctx)
	if err := g.Run(ctx); !errors.Is(err, ErrRegistrationClosed) && err != nil {
		t.Errorf("Run after Close = %v", err)
	}
}

// TestListWorkersProblems: records that are corrupt, of a newer version,
// not worker records, or bound under another id are reported by name,
// never listed as workers and never placed on; the scan goes on.
func TestListWorkersProblems(t *testing.T) {
	ctx := context.Background()
	s := newRegStore(t)
	announce(t, s, testRecord("good", 1, 0, 0), 0)
	d, _ := s.Put(ctx, []byte("x"))
	newer := testRecord("newer", 1, 0, 0)
	nb, _ := json.Marshal(newer)
	misnamed, _ := testRecord("other", 1, 0, 0).encode()
	badJSON := fsstore.Meta{}.Set(metaVersion, "1").Set(metaRecord, "{not json")
	binds := map[string]fsstore.Meta{
		"workers/newer":    fsstore.Meta{}.Set(metaVersion, "2").Set(metaRecord, string(nb)),
		"workers/plain":    fsstore.Meta{}.Set("hello", "world"),
		"workers/misnamed": fsstore.Meta{}.Set(metaVersion, "1").Set(metaRecord, string(misnamed)),
		"workers/badjson":  badJSON,
		"workers/noslots":  fsstore.Meta{}.Set(metaVersion, "1").Set(metaRecord, `{"version":1,"id":"noslots","address":"http://x","slots":0}`),
	}
	for name, m := range binds {
		if _, err := s.Bind(ctx, name, d, m); err != nil {
			t.Fatal(err)
		}
	}
	// A record file that fsstore itself cannot parse.
	if err := os.WriteFile(filepath.Join(s.Root(), "names", "workers", "garbage"), []byte("\x00\x01garbage"), 0o666); err != nil {
		t.Fatal(err)
	}

	ws, probs, err := ListWorkers(ctx, s, ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 1 || ws[0].Record.ID.String() != "good" {
		t.Errorf("workers = %v, want only good", ws)
	}
	got := map[string]string{}
	for _, p := range probs {
		got[p.Name] = p.Reason
	}
	for name, want := range map[string]string{
		"workers/newer":    "newer soma",
		"workers/plain":    "not a worker record",
		"workers/misnamed": "bound under",
		"workers/badjson":  "record:",
		"workers/noslots":  "slots 0",
		"workers/garbage":  "corrupt record",
	} {
		if !strings.Contains(got[name], want) {
			t.Errorf("problem %s = %q, want it to contain %q", name, got[name], want)
		}
	}
	// Only "good" can be placed on, whatever is asked.
	for range 3 {
		p, err := Place(ctx, s, Requirement{}, PlaceOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Worker.ID.String() != "good" {
			t.Errorf("placed on %s", p.Worker.ID)
		}
		if err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// registryChild is the worker process of TestKilledWorkerLeavesPlacement
// (the role "registry-worker"): it announces itself, says "ready" and
// heartbeats until it is killed.
func registryChild() error {
	s, err := fsstore.Open(os.Getenv("ROOT"), fsstore.Options{})
	if err != nil {
		return err
	}
	timeout, _ := time.ParseDuration(os.Getenv("TIMEOUT"))
	g, err := Announce(context.Background(), s, testRecord("child", 2, 0, 0, "child"), RegistryOptions{Timeout: timeout})
	if err != nil {
		return err
	}
	os.Stdout.WriteString("ready\n")
	_ = g.Run(context.Background()) // until SIGKILL
	return nil
}

// TestKilledWorkerLeavesPlacement: a worker process heartbeating through
// Run stays placeable for longer than the timeout; killed with SIGKILL (no
// Close), it is judged dead and no longer placed on once its last
// heartbeat is older than the timeout.
func TestKilledWorkerLeavesPlacement(t *testing.T) {
	ctx := context.Background()
	s := newRegStore(t)
	const timeout = 1200 * time.Millisecond
	c := testutil.Child(t, "registry-worker", "ROOT="+s.Root(), "TIMEOUT="+timeout.String())
	c.Stderr = os.Stderr
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer c.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("child said %q, %v", line, err)
	}
	req := Requirement{Tags: []string{"child"}}
	// Alive across several timeouts: its heartbeats land.
	for range 3 {
		time.Sleep(timeout / 2)
		p, err := Place(ctx, s, req, PlaceOptions{Timeout: timeout})
		if err != nil {
			t.Fatalf("Place on the live worker: %v", err)
		}
		_ = p.Release(ctx)
	}
	if err := c.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = c.Wait()
	// Its record stays (nobody closed it) but goes dead within the
	// timeout plus one heartbeat interval.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ws, _, err := ListWorkers(ctx, s, ListOptions{Timeout: timeout})
		if err != nil || len(ws) != 1 {
			t.Fatalf("ListWorkers = %v, %v; want the killed worker listed", ws, err)
		}
		if !ws[0].Alive {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the killed worker is still alive after 30 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	var nm *NoMatchError
	if _, err := Place(ctx, s, req, PlaceOptions{Timeout: timeout}); !errors.As(err, &nm) {
		t.Errorf("Place after the kill = %v, want a NoMatchError", err)
	}
}
