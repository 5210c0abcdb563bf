package worker

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/soma-hpc/soma/internal/testutil"
)

func envMap(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func writeFiles(t testing.TB, root string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestDetectMemory(t *testing.T) {
	const meminfo = "MemTotal:       16384000 kB\nMemFree:         1000 kB\n"
	const total = 16384000 * 1024
	tests := []struct {
		name    string
		files   map[string]string // under a root holding proc/ and cgroup/
		want    uint64
		wantErr string
	}{
		{name: "no cgroup file", files: map[string]string{"proc/meminfo": meminfo}, want: total},
		{name: "v2 unlimited", files: map[string]string{
			"proc/meminfo": meminfo, "proc/self/cgroup": "0::/slurm/job1\n",
			"cgroup/slurm/job1/memory.max": "max\n",
		}, want: total},
		{name: "v2 limit", files: map[string]string{
			"proc/meminfo": meminfo, "proc/self/cgroup": "0::/slurm/job1\n",
			"cgroup/slurm/job1/memory.max": "4294967296\n",
		}, want: 4 << 30},
		{name: "v2 parent's limit is tighter", files: map[string]string{
			"proc/meminfo": meminfo, "proc/self/cgroup": "0::/slurm/job1/step0\n",
			"cgroup/slurm/job1/step0/memory.max": "max\n",
			"cgroup/slurm/job1/memory.max":       "2147483648\n",
			"cgroup/slurm/memory.max":            "8589934592\n",
		}, want: 2 << 30},
		{name: "v2 limit above MemTotal", files: map[string]string{
			"proc/meminfo": meminfo, "proc/self/cgroup": "0::/a\n",
			"cgroup/a/memory.max": "99999999999999\n",
		}, want: total},
		{name: "v1 limit", files: map[string]string{
			"proc/meminfo": meminfo, "proc/self/cgroup": "4:memory:/slurm/uid_1/job_2\n3:cpuset:/\n",
			"cgroup/memory/slurm/uid_1/job_2/memory.limit_in_bytes": "1073741824\n",
			"cgroup/memory/memory.limit_in_bytes":                   "9223372036854771712\n",
		}, want: 1 << 30},
		{name: "v1 no limit", files: map[string]string{
			"proc/meminfo": meminfo, "proc/self/cgroup": "4:cpu,memory:/x\n",
			"cgroup/memory/x/memory.limit_in_bytes": "9223372036854771712\n",
		}, want: total},
		{name: "cgroup path not mounted here", files: map[string]string{
			"proc/meminfo": meminfo, "proc/self/cgroup": "0::/elsewhere/deep\n",
		}, want: total},
		{name: "garbage limit", files: map[string]string{
			"proc/meminfo": meminfo, "proc/self/cgroup": "0::/a\n",
			"cgroup/a/memory.max": "lots\n",
		}, wantErr: `"lots" is not a number`},
		{name: "no MemTotal", files: map[string]string{"proc/meminfo": "MemFree: 1 kB\n"}, wantErr: "no MemTotal"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			writeFiles(t, root, tc.files)
			got, err := detectMemory(filepath.Join(root, "proc"), filepath.Join(root, "cgroup"))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("detectMemory error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("detectMemory = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestDetectResourcesLimits(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, map[string]string{"proc/meminfo": "MemTotal: 8388608 kB\n"})
	o := ResourceOptions{
		Limits:    Limits{MaxCPUs: 1, MaxMemory: 1 << 30, MaxGPUs: -1},
		LookupEnv: envMap(nil), procRoot: filepath.Join(root, "proc"), cgroupRoot: filepath.Join(root, "cgroup"),
	}
	r, err := DetectResources(o)
	if err != nil {
		t.Fatal(err)
	}
	if r.CPUs != 1 || r.MemoryBytes != 1<<30 || len(r.GPUs) != 0 {
		t.Errorf("DetectResources = %+v, want 1 CPU, 1 GiB, no GPUs", r)
	}
	o.Limits = Limits{MaxCPUs: 1000, MaxMemory: 1 << 50, MaxGPUs: -1}
	if r, err = DetectResources(o); err != nil {
		t.Fatal(err)
	}
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	if r.CPUs != set.Count() || r.MemoryBytes != 8<<30 {
		t.Errorf("DetectResources with loose limits = %+v, want %d CPUs and 8 GiB", r, set.Count())
	}
	o.Limits = Limits{MaxCPUs: -2}
	if _, err := DetectResources(o); err == nil || !strings.Contains(err.Error(), "cannot be negative") {
		t.Errorf("DetectResources with MaxCPUs -2: error %v, want a refusal", err)
	}
}

// affinityChild is the child of TestDetectResourcesAffinity (the role
// "affinity"): it prints "CPUS <n>" as DetectResources counts them.
func affinityChild() error {
	r, err := DetectResources(ResourceOptions{Limits: Limits{MaxGPUs: -1}})
	if err != nil {
		return err
	}
	os.Stdout.WriteString("CPUS " + strconv.Itoa(r.CPUs) + "\n")
	return nil
}

// CPUs follow the affinity mask (what Slurm's cgroups and --cpu-bind
// give a job), not the machine's count: run the test binary again pinned
// to one CPU by taskset.
func TestDetectResourcesAffinity(t *testing.T) {
	taskset, err := exec.LookPath("taskset")
	if err != nil || runtime.NumCPU() < 2 {
		t.Skip("needs taskset (util-linux) and 2 CPUs")
	}
	cmd := testutil.Child(t, "affinity")
	// taskset -c 0 <the child's command line>
	cmd.Path, cmd.Args = taskset, append([]string{taskset, "-c", "0"}, cmd.Args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "CPUS 1\n") {
		t.Errorf("pinned to CPU 0, the helper reported:\n%s\nwant CPUS 1", out)
	}
}

func TestGPUSetAcquire(t *testing.T) {
	gpus := []GPU{{Index: 0, UUID: "GPU-a"}, {Index: 1, UUID: "GPU-b"}, {Index: 2, UUID: "GPU-c"}}
	s := NewGPUSet(gpus)
	two, rel2, err := s.Acquire(2, false)
	if err != nil || len(two) != 2 || two[0].UUID != "GPU-a" || two[1].UUID != "GPU-b" {
		t.Fatalf("Acquire(2) = %v, %v, want GPU-a, GPU-b", two, err)
	}
	if _, _, err := s.Acquire(2, false); !errors.Is(err, ErrNoFreeGPU) {
		t.Fatalf("Acquire(2) with 1 free: %v, want ErrNoFreeGPU", err)
	}
	if got := s.Free(); got != 1 {
		t.Errorf("Free after a refused Acquire = %d, want 1 (a refusal takes nothing)", got)
	}
	none, relNone, err := s.Acquire(0, false)
	if err != nil || len(none) != 0 {
		t.Fatalf("Acquire(0) = %v, %v, want nothing and no error", none, err)
	}
	relNone()
	rel2()
	rel2() // twice is harmless: it must not free GPUs someone else took
	one, rel1, err := s.Acquire(1, false)
	if err != nil || one[0].UUID != "GPU-a" {
		t.Fatalf("Acquire(1) after release = %v, %v, want GPU-a", one, err)
	}
	rel2()
	if got := s.Free(); got != 2 {
		t.Errorf("Free after a stale release = %d, want 2", got)
	}
	rel1()
	if _, _, err := s.Acquire(-1, false); err == nil {
		t.Error("Acquire(-1): no error")
	}
	if _, _, err := s.Acquire(4, false); !errors.Is(err, ErrNoFreeGPU) {
		t.Errorf("Acquire(4) of 3: %v, want ErrNoFreeGPU", err)
	}
}

// Under concurrency, no GPU is ever held by two callers at once unless
// both asked to share.
func TestGPUSetExclusive(t *testing.T) {
	checkExclusive(t, stubLikeGPUs(4))
}

// checkExclusive has 8 goroutines acquire and release gpus at random
// sizes, half of them sharing, and checks that a GPU held exclusively is
// held by no one else and that shared GPUs are shared only by sharers.
func checkExclusive(t *testing.T, gpus []GPU) {
	t.Helper()
	s := NewGPUSet(gpus)
	var mu sync.Mutex
	holder := map[string]int{} // exclusive holder
	sharers := map[string]int{}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			share := w%2 == 0
			for range 200 {
				n := 1 + w%3
				got, release, err := s.Acquire(n, share)
				if errors.Is(err, ErrNoFreeGPU) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				seen := map[string]bool{}
				for _, g := range got {
					if seen[g.UUID] {
						t.Errorf("%s handed twice to worker %d in one Acquire", g.UUID, w)
					}
					seen[g.UUID] = true
					if h, busy := holder[g.UUID]; busy {
						t.Errorf("%s handed to worker %d (share %v) while worker %d holds it exclusively", g.UUID, w, share, h)
					}
					if !share && sharers[g.UUID] > 0 {
						t.Errorf("%s handed exclusively to worker %d while %d sharers hold it", g.UUID, w, sharers[g.UUID])
					}
					if share {
						sharers[g.UUID]++
					} else {
						holder[g.UUID] = w
					}
				}
				mu.Unlock()
				runtime.Gosched()
				mu.Lock()
				for _, g := range got {
					if share {
						sharers[g.UUID]--
					} else {
						delete(holder, g.UUID)
					}
				}
				mu.Unlock()
				release()
			}
		})
	}
	wg.Wait()
	if got := s.Free(); got != len(gpus) {
		t.Errorf("Free after all released = %d, want %d", got, len(gpus))
	}
}

// Shared acquisitions pack onto GPUs already shared, never onto one held
// exclusively; an exclusive one never lands on a shared GPU.
func TestGPUSetShare(t *testing.T) {
	s := NewGPUSet([]GPU{{Index: 0, UUID: "GPU-a"}, {Index: 1, UUID: "GPU-b"}, {Index: 2, UUID: "GPU-c"}})
	uuids := func(gs []GPU) string {
		var u []string
		for _, g := range gs {
			u = append(u, g.UUID)
		}
		return strings.Join(u, ",")
	}
	ex, relEx, err := s.Acquire(1, false)
	if err != nil || uuids(ex) != "GPU-a" {
		t.Fatalf("exclusive Acquire(1) = %v, %v, want GPU-a", ex, err)
	}
	sh1, relSh1, err := s.Acquire(1, true)
	if err != nil || uuids(sh1) != "GPU-b" {
		t.Fatalf("shared Acquire(1) = %v, %v, want GPU-b (GPU-a is held exclusively)", sh1, err)
	}
	sh2, relSh2, err := s.Acquire(1, true)
	if err != nil || uuids(sh2) != "GPU-b" {
		t.Fatalf("second shared Acquire(1) = %v, %v, want GPU-b (already shared, leaving GPU-c whole)", sh2, err)
	}
	sh3, relSh3, err := s.Acquire(2, true)
	if err != nil || uuids(sh3) != "GPU-b,GPU-c" {
		t.Fatalf("shared Acquire(2) = %v, %v, want GPU-b,GPU-c", sh3, err)
	}
	if _, _, err := s.Acquire(3, true); !errors.Is(err, ErrNoFreeGPU) || !strings.Contains(err.Error(), "2 of 3 not held exclusively") {
		t.Fatalf("shared Acquire(3) with one GPU held exclusively: %v, want ErrNoFreeGPU, 2 of 3 not held exclusively", err)
	}
	if _, _, err := s.Acquire(1, false); !errors.Is(err, ErrNoFreeGPU) {
		t.Fatalf("exclusive Acquire(1) with every GPU held: %v, want ErrNoFreeGPU", err)
	}
	relSh3()
	if got := s.Free(); got != 1 {
		t.Fatalf("Free with GPU-a exclusive and GPU-b shared = %d, want 1", got)
	}
	ex2, relEx2, err := s.Acquire(1, false)
	if err != nil || uuids(ex2) != "GPU-c" {
		t.Fatalf("exclusive Acquire(1) = %v, %v, want GPU-c (GPU-b is still shared)", ex2, err)
	}
	relSh1()
	relSh1() // twice is harmless: GPU-b still has a sharer
	if _, _, err := s.Acquire(1, false); !errors.Is(err, ErrNoFreeGPU) {
		t.Fatalf("exclusive Acquire(1) while GPU-b keeps one sharer: %v, want ErrNoFreeGPU", err)
	}
	relSh2()
	ex3, relEx3, err := s.Acquire(1, false)
	if err != nil || uuids(ex3) != "GPU-b" {
		t.Fatalf("exclusive Acquire(1) after the sharers left = %v, %v, want GPU-b", ex3, err)
	}
	relEx()
	relEx2()
	relEx3()
	if got := s.Free(); got != 3 {
		t.Errorf("Free after all released = %d, want 3", got)
	}
}

func stubLikeGPUs(n int) []GPU {
	var gs []GPU
	for i := range n {
		gs = append(gs, GPU{Index: i, UUID: "GPU-" + strconv.Itoa(i)})
	}
	return gs
}
