package worker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gofrs/flock"
	"github.com/soma-hpc/soma/internal/testutil"
)

// markerTime returns the use time of env (its marker's mtime).
func markerTime(t *testing.T, env *Env) time.Time {
	t.Helper()
	st, err := os.Stat(filepath.Join(env.Dir, markerFile))
	if err != nil {
		t.Fatal(err)
	}
	return st.ModTime()
}

// TestEnvUseTimeRefreshedWhenStale: a use of an env refreshes its use
// time (which least-recently-used eviction reads) at most once per
// envTouchEvery, not at every plan (a warm no-op plan paid two
// utimensat(2) for it, at Get and at Release), and still refreshes it
// once it is stale: at Get, and at the Release that ends a long use.
func TestEnvUseTimeRefreshedWhenStale(t *testing.T) {
	testutil.NeedPython(t, "venv")
	ctx := context.Background()
	p, _ := newTestPool(t, t.TempDir(), 0)
	env, err := p.Get(ctx, EnvSpec{}) // builds
	if err != nil {
		t.Fatal(err)
	}
	env.Release()
	clock := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	p.now = func() time.Time { return clock }
	use := func() *Env {
		t.Helper()
		e, err := p.Get(ctx, EnvSpec{})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	steps := []struct {
		name    string
		advance time.Duration
		release bool // the step releases the env it took at the previous step
		want    time.Time
	}{
		{"stale since the build: refreshed", 0, false, clock},
		{"released 30 s later: not refreshed", 30 * time.Second, true, clock},
		{"used 30 s later: not refreshed", 0, false, clock},
		{"released after a 2 min use: refreshed", 2 * time.Minute, true, clock.Add(2*time.Minute + 30*time.Second)},
		{"used 61 s later: refreshed", 61 * time.Second, false, clock.Add(3*time.Minute + 31*time.Second)},
	}
	var held *Env
	for _, st := range steps {
		clock = clock.Add(st.advance)
		if st.release {
			held.Release()
		} else {
			if held != nil {
				held.Release()
			}
			held = use()
		}
		if got := markerTime(t, env); !got.Equal(st.want) {
			t.Fatalf("%s: use time %v, want %v", st.name, got, st.want)
		}
	}
	held.Release()
}

// TestEnvHeldBetweenPlans: after its last Release this process keeps an
// env's in-use lock for envLinger (so that the next plan takes no lock),
// during which no other process may evict it, then lets it go; and this
// pool's own Prune lets it go at once.
func TestEnvHeldBetweenPlans(t *testing.T) {
	testutil.NeedPython(t, "venv")
	ctx := context.Background()
	p, _ := newTestPool(t, t.TempDir(), 0)
	env, err := p.Get(ctx, EnvSpec{})
	if err != nil {
		t.Fatal(err)
	}
	env.Release()
	// What an evicting process does (flock(2) locks of two descriptors
	// conflict even within one process).
	evictable := func() bool {
		l := flock.New(filepath.Join(env.Dir, inUseFile), flock.SetFlag(os.O_RDONLY))
		ok, err := l.TryLock()
		if err != nil {
			t.Fatal(err)
		}
		l.Close()
		return ok
	}
	if evictable() {
		t.Fatal("the env's in-use lock was let go at Release: the next plan must lock again")
	}
	again, err := p.Get(ctx, EnvSpec{})
	if err != nil {
		t.Fatal(err)
	}
	if again.hold != env.hold {
		t.Error("the next Get took a new lock instead of the held one")
	}
	again.Release()

	p.dropIdle() // what Prune does first
	if !evictable() {
		t.Fatal("dropIdle kept the lock of an env no plan uses")
	}

	p.linger = time.Millisecond
	third, err := p.Get(ctx, EnvSpec{})
	if err != nil {
		t.Fatal(err)
	}
	third.Release()
	deadline := time.Now().Add(time.Minute)
	for !evictable() {
		if time.Now().After(deadline) {
			t.Fatal("the in-use lock was never let go after the linger")
		}
		time.Sleep(5 * time.Millisecond)
	}
	p.mu.Lock()
	n := len(p.holds)
	p.mu.Unlock()
	if n != 0 {
		t.Errorf("%d holds left after the linger, want 0", n)
	}

	// A linger timer armed by a release and firing while the env is in
	// use again lets nothing go (the timer is armed once per idle spell
	// now, not reset at every release); the next release arms it again.
	fourth, err := p.Get(ctx, EnvSpec{})
	if err != nil {
		t.Fatal(err)
	}
	fourth.Release() // arms the 1 ms timer
	fifth, err := p.Get(ctx, EnvSpec{})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the timer fires: in use
	if evictable() {
		t.Fatal("the in-use lock was let go while a plan used the env")
	}
	fifth.Release()
	deadline = time.Now().Add(time.Minute)
	for !evictable() {
		if time.Now().After(deadline) {
			t.Fatal("the in-use lock was never let go after the last release")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestEnvKeyRemembered: the keys Get remembers per spelling are the keys
// computed afresh, and specs that differ in any one field keep distinct
// keys.
func TestEnvKeyRemembered(t *testing.T) {
	testutil.NeedPython(t, "venv")
	p, _ := newTestPool(t, t.TempDir(), 0)
	links := t.TempDir()
	specs := []EnvSpec{
		{},
		{SystemSitePackages: true},
		{NoIndex: true, FindLinks: []string{links}},
		{FindLinks: []string{links}},
		{Requirements: []string{"a", "b"}},
		{Requirements: []string{"a\x01b"}},
		{IndexURL: "https://example.org/simple"},
	}
	seen := map[string]int{}
	for i, spec := range specs {
		n, err := normaliseSpec(spec)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 { // computed, then remembered
			if got, want := p.key(n), p.computeKey(n); got != want {
				t.Fatalf("spec %d: key %s, computed afresh %s", i, got, want)
			}
		}
		k := p.key(n)
		if j, dup := seen[k]; dup {
			t.Errorf("specs %d and %d share key %s", j, i, k)
		}
		seen[k] = i
	}
}

// TestWarmDaemonEndsWithItsEnv: once the worker lets go of an env's in-use
// lock (after envLinger, or when Prune drops idle holds), the idle daemons
// running out of that env end, and a plan after the env was evicted and
// rebuilt starts a daemon in the new folder. The bug this pins: idle
// daemons were keyed by the env's key, which survives an eviction and a
// rebuild, so a warm daemon whose venv had been deleted under it was
// handed the next plan.
func TestWarmDaemonEndsWithItsEnv(t *testing.T) {
	testutil.NeedPython(t, "venv")
	tw := newTestWorker(t, testOptions{})
	ctx := context.Background()
	run := func(id string) {
		t.Helper()
		res, err := tw.w.Run(ctx, behaviourPlan(t, id, "NoOp"))
		if err != nil || res.State != StateSucceeded {
			t.Fatalf("plan %s: %v %+v", id, err, res)
		}
	}
	run("a")
	run("b")
	if got := tw.w.DaemonsStarted(); got != 1 {
		t.Fatalf("%d daemons started for two plans of one env, want 1 (warm reuse)", got)
	}
	tw.w.pool.mu.Lock()
	var idle []*daemon
	for _, list := range tw.w.pool.idle {
		idle = append(idle, list...)
	}
	tw.w.pool.mu.Unlock()
	if len(idle) != 1 {
		t.Fatalf("%d idle daemons, want 1", len(idle))
	}
	envs := tw.w.o.Envs
	envs.maxBytes = 1 // Prune evicts every env not in use
	if err := envs.Prune(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-idle[0].exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("the idle daemon (pid %d) still runs after its env was let go and evicted", idle[0].hello.PID)
	}
	run("c")
	if got := tw.w.DaemonsStarted(); got != 2 {
		t.Fatalf("%d daemons started, want 2: the plan after the rebuild must start one in the new env", got)
	}
}

// TestIdleDaemonsPerSlot: by default a worker keeps as many idle daemons
// of one environment as it has slots, so a second burst of plans as wide
// as the first starts no Python. The default was 2 whatever the slots: a
// worker of 3 slots then started a daemon again in every burst.
func TestIdleDaemonsPerSlot(t *testing.T) {
	const slots = 3
	tw := newTestWorker(t, testOptions{maxPlans: slots})
	burst := func(round int) map[any]bool {
		dir := t.TempDir()
		pids := map[any]bool{}
		results := make(chan *Result, slots)
		for i := range slots {
			p := behaviourPlan(t, fmt.Sprintf("r%d-%d", round, i), "Gather")
			p.Nodes[0].Config = map[string]any{"dir": dir, "n": slots}
			go func() {
				res, err := tw.w.Run(context.Background(), p)
				if err != nil {
					t.Error(err)
				}
				results <- res
			}()
		}
		for range slots {
			res := <-results
			if res == nil {
				t.FailNow()
			}
			mustSucceed(t, res)
			pids[res.Outputs["n"].Object] = true
		}
		return pids
	}
	first := burst(1)
	second := burst(2)
	if len(first) != slots {
		t.Fatalf("the first burst ran in %d daemons, want %d (one per overlapping plan)", len(first), slots)
	}
	if got := tw.w.DaemonsStarted(); got != slots {
		t.Fatalf("%d daemons started over two bursts of %d plans, want %d: the second burst found only some warm (daemons %v, then %v)", got, slots, slots, first, second)
	}
}
