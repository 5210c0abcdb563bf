package worker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/internal/testutil"
)

// TestPlacePicksMatching: two workers with different tags and GPUs; each
// requirement lands on the one that meets it, or fails naming what is
// missing and who came closest.
func TestPlacePicksMatching(t *testing.T) {
	ctx := context.Background()
	s := newRegStore(t)
	announce(t, s, testRecord("cpu1", 4, 0, 0, "sklearn"), 0)
	announce(t, s, testRecord("node12", 4, 1, 80*gib, "torch"), 0)
	for _, tc := range []struct {
		name    string
		req     Requirement
		want    string // worker id, or "" for an error
		wantErr string
	}{
		{"gpu", Requirement{GPUs: 1}, "node12", ""},
		{"gpu memory", Requirement{GPUs: 1, GPUMemory: 40 * gib}, "node12", ""},
		{"torch tag", Requirement{Tags: []string{"torch"}}, "node12", ""},
		{"sklearn tag", Requirement{Tags: []string{"sklearn"}}, "cpu1", ""},
		{"too many GPUs", Requirement{GPUs: 2, GPUMemory: 40 * gib}, "",
			"needs 2 GPUs with 40 GiB each; closest: node12 has 1 GPU with 80 GiB; cpu1 has 0 GPUs"},
		{"too much GPU memory", Requirement{GPUs: 1, GPUMemory: 100 * gib}, "", "node12 has 1 GPU with 80 GiB (0 with 100 GiB or more)"},
		{"tag nobody has", Requirement{Tags: []string{"jax"}}, "", "lacks tag jax"},
		{"cpus", Requirement{CPUs: 64}, "", "has 8 CPUs"},
		{"memory", Requirement{Memory: 128 * gib}, "", "has 64 GiB of memory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Place(ctx, s, tc.req, PlaceOptions{})
			if tc.wantErr != "" {
				var nm *NoMatchError
				if !errors.As(err, &nm) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Place(%v) = %v, want a NoMatchError containing %q", tc.req, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer p.Release(ctx)
			if got := p.Worker.ID.String(); got != tc.want {
				t.Errorf("Place(%v) on %s, want %s", tc.req, got, tc.want)
			}
			if !strings.HasPrefix(p.Lease.Name(), "leases/"+tc.want+"/") {
				t.Errorf("lease %s is not on %s", p.Lease.Name(), tc.want)
			}
		})
	}
	if _, err := Place(ctx, s, Requirement{GPUs: -1}, PlaceOptions{}); err == nil {
		t.Errorf("a negative requirement was accepted")
	}
}

// TestPlaceLeastLoadedAndFull: placements spread to the least loaded
// worker; a full registry is ErrNoFreeSlot (a GPU held by a lease counts);
// a released slot is free again at once.
func TestPlaceLeastLoadedAndFull(t *testing.T) {
	ctx := context.Background()
	s := newRegStore(t)
	announce(t, s, testRecord("a", 2, 0, 0), 0)
	announce(t, s, testRecord("b", 2, 0, 0), 0)
	var ps []*Placement
	count := map[string]int{}
	for i := range 4 {
		p, err := Place(ctx, s, Requirement{}, PlaceOptions{})
		if err != nil {
			t.Fatalf("placement %d: %v", i, err)
		}
		count[p.Worker.ID.String()]++
		ps = append(ps, p)
		if i == 1 && (count["a"] != 1 || count["b"] != 1) {
			t.Errorf("after 2 placements: %v, want one on each (least loaded wins)", count)
		}
	}
	_, err := Place(ctx, s, Requirement{}, PlaceOptions{})
	if !errors.Is(err, ErrNoFreeSlot) {
		t.Fatalf("fifth Place = %v, want ErrNoFreeSlot", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = Place(wctx, s, Requirement{}, PlaceOptions{Wait: true, WaitInterval: 10 * time.Millisecond})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("waiting Place = %v, want the context's deadline", err)
	}
	if err := ps[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ps[0].Release(ctx); err != nil {
		t.Errorf("second Release: %v", err)
	}
	p, err := Place(ctx, s, Requirement{}, PlaceOptions{})
	if err != nil {
		t.Fatalf("Place after a release: %v", err)
	}
	if p.Worker.ID != ps[0].Worker.ID {
		t.Errorf("placed on %s, want %s, the one with a free slot", p.Worker.ID, ps[0].Worker.ID)
	}
	for _, p := range append(ps[1:], p) {
		_ = p.Release(ctx)
	}

	// GPUs: one worker, 1 GPU, 2 slots. A GPU plan takes the GPU; a second
	// GPU plan finds no free GPU though a slot is free; a CPU plan fits.
	s2 := newRegStore(t)
	announce(t, s2, testRecord("g", 2, 1, 80*gib), 0)
	p1, err := Place(ctx, s2, Requirement{GPUs: 1}, PlaceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Place(ctx, s2, Requirement{GPUs: 1}, PlaceOptions{}); !errors.Is(err, ErrNoFreeSlot) {
		t.Errorf("second GPU plan = %v, want ErrNoFreeSlot", err)
	}
	p2, err := Place(ctx, s2, Requirement{}, PlaceOptions{})
	if err != nil {
		t.Errorf("CPU plan beside a GPU plan: %v", err)
	} else {
		_ = p2.Release(ctx)
	}
	_ = p1.Release(ctx)
}

// TestDeadWorkerNotPlaced: a worker whose heartbeat stopped (its process
// was killed: no Close) leaves placement once its record is older than
// the timeout; the live one takes everything.
func TestDeadWorkerNotPlaced(t *testing.T) {
	ctx := context.Background()
	s := newRegStore(t)
	const timeout = 150 * time.Millisecond
	announce(t, s, testRecord("dies", 100, 0, 0), timeout)
	live := announce(t, s, testRecord("lives", 100, 0, 0), timeout)
	time.Sleep(timeout + 50*time.Millisecond)
	if _, err := live.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := live.Heartbeat(ctx); err != nil {
			t.Fatal(err)
		}
		p, err := Place(ctx, s, Requirement{}, PlaceOptions{Timeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		if p.Worker.ID.String() != "lives" {
			t.Fatalf("placement %d on %s, a worker silent for longer than the timeout", i, p.Worker.ID)
		}
		_ = p.Release(ctx)
	}
	ws, _, _ := ListWorkers(ctx, s, ListOptions{Timeout: timeout})
	if len(ws) != 2 || ws[0].Alive || !ws[1].Alive {
		t.Errorf("workers = %+v, want dies dead and lives alive", ws)
	}
	// With every worker dead, the error says so.
	time.Sleep(timeout + 50*time.Millisecond)
	_, err := Place(ctx, s, Requirement{}, PlaceOptions{Timeout: timeout})
	if !strings.Contains(fmt.Sprint(err), "no live worker is registered (2 dead") {
		t.Errorf("Place with only dead workers = %v", err)
	}
}

// TestStaleLeaseReclaimed: a holder that died (no heartbeat, no release)
// leaves a stale lease; the next placer takes the slot over, and the dead
// holder's late Release does not free the new holder's lease.
func TestStaleLeaseReclaimed(t *testing.T) {
	ctx := context.Background()
	s := newRegStore(t)
	const timeout = 300 * time.Millisecond
	w := announce(t, s, testRecord("w", 1, 0, 0), time.Hour)
	old, err := Place(ctx, s, Requirement{}, PlaceOptions{Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	// The holder "dies": its heartbeat goroutine stops, nothing is released.
	old.stop()
	<-old.done
	if _, err := Place(ctx, s, Requirement{}, PlaceOptions{Timeout: time.Hour}); !errors.Is(err, ErrNoFreeSlot) {
		t.Fatalf("Place while the lease is fresh = %v, want ErrNoFreeSlot", err)
	}
	time.Sleep(timeout + 50*time.Millisecond)
	// The worker is alive (its heartbeat is not what this test stops).
	if _, err := w.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := Place(ctx, s, Requirement{}, PlaceOptions{Timeout: timeout})
	if err != nil {
		t.Fatalf("Place over a stale lease: %v", err)
	}
	if p.Lease.Name() != old.Lease.Name() || p.Lease.Nonce == old.Lease.Nonce {
		t.Fatalf("new lease %+v, old %+v: want the same slot, a new nonce", p.Lease, old.Lease)
	}
	if _, err := RenewLease(ctx, s, old.Lease, timeout); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("renewing the reclaimed lease = %v, want ErrLeaseLost", err)
	}
	// The old holder wakes up and releases: the new lease stays.
	if err := ReleaseLease(ctx, s, old.Lease, timeout); err != nil {
		t.Fatal(err)
	}
	b, err := s.Resolve(ctx, p.Lease.Name())
	if err != nil || b.Meta.Value(leaseMetaNonce) != p.Lease.Nonce {
		t.Fatalf("after the old holder's release: %v %v, want the new lease bound", b.Meta, err)
	}
	if _, err := RenewLease(ctx, s, p.Lease, timeout); err != nil {
		t.Errorf("renewing the live lease: %v", err)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// No end marker is left behind.
	names, _ := s.List(ctx, "leases")
	if len(names) != 0 {
		t.Errorf("names left under leases/: %v", names)
	}
}

// TestHolderLearnsItLostTheLease: a holder that was paused for longer
// than the timeout (its lease reclaimed meanwhile) finds out from the gap
// between its own heartbeats, closes Lost, and stops touching.
func TestHolderLearnsItLostTheLease(t *testing.T) {
	ctx := context.Background()
	s := newRegStore(t)
	const timeout = 300 * time.Millisecond
	w := announce(t, s, testRecord("w", 1, 0, 0), time.Hour)
	old, err := Place(ctx, s, Requirement{}, PlaceOptions{Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Resolve(ctx, old.Lease.Name())
	if err != nil {
		t.Fatal(err)
	}
	last := b.Time // the holder's last heartbeat before the pause
	old.stop()
	<-old.done
	time.Sleep(timeout + 50*time.Millisecond)
	if _, err := w.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := Place(ctx, s, Requirement{}, PlaceOptions{Timeout: timeout})
	if err != nil {
		t.Fatalf("reclaim: %v", err)
	}
	defer p.Release(ctx)
	// The old holder wakes up and resumes heartbeating.
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	old.done = make(chan struct{})
	old.last = last
	go old.heartbeat(hctx)
	select {
	case <-old.Lost():
	case <-time.After(30 * time.Second):
		t.Fatal("the paused holder never noticed it lost its lease")
	}
	<-old.done
	if !errors.Is(old.Err(), ErrLeaseLost) {
		t.Errorf("Err = %v, want ErrLeaseLost", old.Err())
	}
	got, err := s.Resolve(ctx, p.Lease.Name())
	if err != nil || got.Meta.Value(leaseMetaNonce) != p.Lease.Nonce {
		t.Errorf("the new lease: %v, %v", got.Meta, err)
	}
}

// TestConcurrentReclaim: 8 placers see the same stale lease at once and
// all try to take it over; exactly one gets the slot. (Unbind-then-claim
// would let several win: each unbinds the previous winner's lease.)
func TestConcurrentReclaim(t *testing.T) {
	ctx := context.Background()
	const timeout = 200 * time.Millisecond
	for round := range 5 {
		s := newRegStore(t)
		announce(t, s, testRecord("w", 1, 0, 0), time.Hour)
		old, err := Place(ctx, s, Requirement{}, PlaceOptions{Timeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		old.stop()
		<-old.done
		time.Sleep(timeout + 50*time.Millisecond)
		// All see the stale lease in the same listing, then race.
		infos, _, err := ListWorkers(ctx, s, ListOptions{Timeout: timeout})
		if err != nil || len(infos[0].stale) != 1 {
			t.Fatalf("ListWorkers: %v %+v", err, infos)
		}
		stale := infos[0].stale[0]
		var wg sync.WaitGroup
		var mu sync.Mutex
		var won []Lease
		start := make(chan struct{})
		for range 8 {
			wg.Go(func() {
				<-start
				l, ok, err := claimLease(ctx, s, mustID("w"), 0, &stale, "t", Requirement{}, timeout)
				if err != nil {
					t.Error(err)
				}
				if ok {
					mu.Lock()
					won = append(won, l)
					mu.Unlock()
				}
			})
		}
		close(start)
		wg.Wait()
		if len(won) != 1 {
			t.Fatalf("round %d: %d placers won the stale slot, want 1", round, len(won))
		}
		b, _ := s.Resolve(ctx, "leases/w/0")
		if b.Meta.Value(leaseMetaNonce) != won[0].Nonce {
			t.Errorf("round %d: the bound lease is not the winner's", round)
		}
	}
}

// monotonic reads CLOCK_MONOTONIC, which every process on one host
// shares (clock_gettime(2)), so the children's intervals can be compared.
func monotonic() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

// placeChild, the role "place" of TestPlaceProcesses's children, places N plans one after another, holds each for a short
// random time, and writes "lease begin end" for each into its own file.
func placeChild() error {
	ctx := context.Background()
	s, err := fsstore.Open(os.Getenv("ROOT"), fsstore.Options{})
	if err != nil {
		return err
	}
	n, _ := strconv.Atoi(os.Getenv("N"))
	f, err := os.Create(os.Getenv("OUT"))
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	opts := PlaceOptions{Wait: true, WaitInterval: 2 * time.Millisecond, Holder: "pid " + strconv.Itoa(os.Getpid())}
	placer := NewPlacer(s, opts, time.Hour) // PLACER=1: one view of the registry and the leases for the whole run
	for range n {
		var p *Placement
		if os.Getenv("PLACER") == "1" {
			p, err = placer.Place(ctx, Requirement{})
		} else {
			p, err = Place(ctx, s, Requirement{}, opts)
		}
		if err != nil {
			return err
		}
		begin := monotonic()
		time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
		end := monotonic()
		if err := p.Release(ctx); err != nil {
			return err
		}
		fmt.Fprintf(w, "%s %d %d\n", p.Lease.Name(), begin, end)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return f.Close()
}

// TestPlaceProcesses: 8 OS processes place 200 plans at once on 3 workers
// with 2 slots each, holding each for a short random time. Every plan is
// placed, and no worker ever has more than 2 plans running at once
// (checked from the holders' CLOCK_MONOTONIC intervals, which nest inside
// the lease: begin after the claim, end before the release). Each process
// places with Place, and again with one Placer that reads the registry
// once for all its placements.
func TestPlaceProcesses(t *testing.T) {
	for _, placer := range []string{"0", "1"} {
		t.Run("placer="+placer, func(t *testing.T) { placeProcesses(t, placer) })
	}
}

func placeProcesses(t *testing.T, placer string) {
	const procs, perProc, slots = 8, 25, 2
	s := newRegStore(t)
	for _, id := range []string{"w1", "w2", "w3"} {
		announce(t, s, testRecord(id, slots, 0, 0), time.Hour)
	}
	dir := t.TempDir()
	var cmds []*exec.Cmd
	for i := range procs {
		c := testutil.Child(t, "place", "ROOT="+s.Root(), "N="+strconv.Itoa(perProc), fmt.Sprintf("OUT=%s/%d", dir, i), "PLACER="+placer)
		c.Stderr = os.Stderr
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, c)
	}
	for i, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatalf("placer %d: %v", i, err)
		}
	}
	type event struct {
		at    int64
		delta int // +1 begin, -1 end
	}
	perWorker := map[string][]event{}
	perLease := map[string][]event{}
	total := 0
	for i := range procs {
		b, err := os.ReadFile(filepath.Join(dir, strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		for ln := range strings.Lines(string(b)) {
			var name string
			var begin, end int64
			if _, err := fmt.Sscan(ln, &name, &begin, &end); err != nil {
				t.Fatalf("line %q: %v", ln, err)
			}
			id, _, err := ParseLeaseName(name)
			if err != nil {
				t.Fatal(err)
			}
			total++
			perWorker[id.String()] = append(perWorker[id.String()], event{begin, +1}, event{end, -1})
			perLease[name] = append(perLease[name], event{begin, +1}, event{end, -1})
		}
	}
	if total != procs*perProc {
		t.Fatalf("%d plans placed, want %d", total, procs*perProc)
	}
	maxHeld := func(evs []event) int {
		// Ends sort before begins at the same instant: back-to-back is
		// not overlap.
		slices.SortFunc(evs, func(a, b event) int {
			if a.at != b.at {
				return int(a.at - b.at)
			}
			return a.delta - b.delta
		})
		n, m := 0, 0
		for _, e := range evs {
			n += e.delta
			m = max(m, n)
		}
		return m
	}
	for w, evs := range perWorker {
		if m := maxHeld(evs); m > slots {
			t.Errorf("worker %s had %d plans at once, want at most %d", w, m, slots)
		}
		t.Logf("worker %s: %d plans", w, len(evs)/2)
	}
	for l, evs := range perLease {
		if m := maxHeld(evs); m > 1 {
			t.Errorf("lease %s held by %d placers at once", l, m)
		}
	}
	names, _ := s.List(context.Background(), "leases")
	if len(names) != 0 {
		t.Errorf("names left under leases/: %v", names)
	}
}
