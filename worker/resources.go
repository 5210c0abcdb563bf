package worker

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Resources is what a worker offers to plans: what the node (or the Slurm
// allocation it runs in) has, after CUDA_VISIBLE_DEVICES and the
// configured Limits.
type Resources struct {
	CPUs        int    `json:"cpus" msgpack:"cpus"`                             // CPUs this process may run on (sched_getaffinity), after MaxCPUs
	MemoryBytes uint64 `json:"memory_bytes" msgpack:"memory_bytes"`             // MemTotal bounded by the cgroup's memory.max, after MaxMemory
	GPUs        []GPU  `json:"gpus" msgpack:"gpus"`                             // after CUDA_VISIBLE_DEVICES and MaxGPUs, in CUDA_VISIBLE_DEVICES's order, else NVML's
	GPUNote     string `json:"gpu_note,omitempty" msgpack:"gpu_note,omitempty"` // why there are no GPUs, if none ("NVML library not found: ..."), said once by the caller
}

// Limits bound what a worker offers. A zero field means no bound, except
// that MaxGPUs < 0 means "offer no GPUs" (and NVML is then not loaded at
// all, for a node whose NVIDIA library misbehaves). MaxPlans is carried
// for the daemon, which runs at most that many plans at once;
// DetectResources ignores it.
type Limits struct {
	MaxCPUs   int    `json:"max_cpus" msgpack:"max_cpus"`
	MaxGPUs   int    `json:"max_gpus" msgpack:"max_gpus"`
	MaxPlans  int    `json:"max_plans" msgpack:"max_plans"`
	MaxMemory uint64 `json:"max_memory" msgpack:"max_memory"` // bytes
}

// ResourceOptions configures DetectResources.
type ResourceOptions struct {
	Limits Limits
	// NVMLPath is the NVIDIA management library to load; "" lets the
	// dynamic loader find libnvidia-ml.so.1 (LD_LIBRARY_PATH, ld.so.cache).
	NVMLPath string
	// Env reads CUDA_VISIBLE_DEVICES; nil means os.Getenv. Through Env an
	// empty value cannot be told from an unset one and counts as unset;
	// set LookupEnv to tell them apart (an empty value hides every GPU).
	Env func(string) string
	// LookupEnv, if set, is used instead of Env; nil (with Env nil)
	// means os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// NVMLTimeout bounds GPU detection; 0 = DefaultNVMLTimeout. NVML can
	// block for good on a GPU that fell off the bus (nvidia-smi hangs
	// there too); a worker then fails to start with an error instead.
	NVMLTimeout time.Duration

	// procRoot and cgroupRoot replace "/proc" and "/sys/fs/cgroup" in tests.
	procRoot, cgroupRoot string
}

// DefaultNVMLTimeout is how long DetectResources waits for NVML when
// ResourceOptions.NVMLTimeout is 0. A healthy node answers in well under
// a second; initialising many GPUs without persistence mode can take
// several.
const DefaultNVMLTimeout = 30 * time.Second

// DetectResources reports the CPUs, memory and GPUs this process may use.
//
// CPUs come from sched_getaffinity, not the machine's count, because
// Slurm confines a job step to its cores with an affinity mask and a
// cpuset cgroup (both show in the mask). Memory is /proc/meminfo's
// MemTotal bounded by the tightest memory.max (cgroup v2) or
// memory.limit_in_bytes (v1) on the path of this process's cgroup, which
// is where Slurm's --mem lands. GPUs come from NVML (see GPU); a missing
// NVIDIA library gives no GPUs and a GPUNote, while any other NVML failure
// is an error. DetectResources loads NVML, so call it once, at start.
func DetectResources(o ResourceOptions) (Resources, error) {
	l := o.Limits
	if l.MaxCPUs < 0 || l.MaxPlans < 0 {
		return Resources{}, fmt.Errorf("worker: limits: max CPUs %d, max plans %d: a limit cannot be negative (0 means none)", l.MaxCPUs, l.MaxPlans)
	}
	procRoot, cgroupRoot := o.procRoot, o.cgroupRoot
	if procRoot == "" {
		procRoot = "/proc"
	}
	if cgroupRoot == "" {
		cgroupRoot = "/sys/fs/cgroup"
	}
	var r Resources

	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return Resources{}, fmt.Errorf("worker: sched_getaffinity: %w", err)
	}
	r.CPUs = set.Count()
	if l.MaxCPUs > 0 && l.MaxCPUs < r.CPUs {
		r.CPUs = l.MaxCPUs
	}

	mem, err := detectMemory(procRoot, cgroupRoot)
	if err != nil {
		return Resources{}, err
	}
	r.MemoryBytes = mem
	if l.MaxMemory > 0 && l.MaxMemory < r.MemoryBytes {
		r.MemoryBytes = l.MaxMemory
	}

	if l.MaxGPUs < 0 {
		r.GPUNote = "GPUs turned off by the limit on GPUs"
		return r, nil
	}
	all, note, err := detectGPUsWithin(o.NVMLPath, o.NVMLTimeout)
	if err != nil {
		return Resources{}, err
	}
	value, set2 := lookupEnv(o)("CUDA_VISIBLE_DEVICES")
	gpus, visNote := filterVisible(all, value, set2)
	if note == "" {
		note = visNote
	}
	if l.MaxGPUs > 0 && l.MaxGPUs < len(gpus) {
		gpus = gpus[:l.MaxGPUs]
	}
	r.GPUs = gpus
	if len(gpus) == 0 {
		r.GPUNote = note
	}
	return r, nil
}

// detectGPUsWithin runs detectGPUs, giving up after timeout. A call that
// never returns keeps its goroutine (and OS thread) blocked in C: there
// is no way to interrupt NVML, and the worker is expected to exit.
func detectGPUsWithin(path string, timeout time.Duration) ([]GPU, string, error) {
	if timeout <= 0 {
		timeout = DefaultNVMLTimeout
	}
	type result struct {
		gpus []GPU
		note string
		err  error
	}
	done := make(chan result, 1)
	go func() {
		g, n, err := detectGPUs(path)
		done <- result{g, n, err}
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case r := <-done:
		return r.gpus, r.note, r.err
	case <-timer.C:
		return nil, "", fmt.Errorf("worker: NVML did not answer within %v: a GPU or its driver is stuck (check nvidia-smi and dmesg for Xid errors), or set the GPU limit to -1 to run without GPUs", timeout)
	}
}

func lookupEnv(o ResourceOptions) func(string) (string, bool) {
	switch {
	case o.LookupEnv != nil:
		return o.LookupEnv
	case o.Env != nil:
		return func(k string) (string, bool) {
			v := o.Env(k)
			return v, v != ""
		}
	}
	return os.LookupEnv
}

// detectMemory returns MemTotal bounded by the cgroup limits on this
// process's cgroup path.
func detectMemory(procRoot, cgroupRoot string) (uint64, error) {
	total, err := memTotal(filepath.Join(procRoot, "meminfo"))
	if err != nil {
		return 0, err
	}
	limit, err := cgroupMemoryLimit(filepath.Join(procRoot, "self", "cgroup"), cgroupRoot)
	if err != nil {
		return 0, err
	}
	if limit > 0 && limit < total {
		return limit, nil
	}
	return total, nil
}

// memTotal reads MemTotal (in kB, meaning KiB: proc(5)) from a meminfo file.
func memTotal(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("worker: read memory size: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			break
		}
		kb, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			break
		}
		return kb * 1024, nil
	}
	return 0, fmt.Errorf("worker: %s: no MemTotal line in kB", path)
}

// cgroupMemoryLimit returns the tightest memory limit on the cgroup path
// of this process (read from selfCgroup, /proc/self/cgroup: cgroups(7)),
// walking from its own cgroup up to the root, since a parent's limit
// bounds its children; 0 means no limit found. Both the unified
// hierarchy (v2: "0::/path", memory.max, "max" = none) and the v1 memory
// controller ("N:memory:/path", memory.limit_in_bytes) are read. A cgroup
// file that does not exist (not mounted, or another namespace) is no limit.
func cgroupMemoryLimit(selfCgroup, cgroupRoot string) (uint64, error) {
	b, err := os.ReadFile(selfCgroup)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("worker: read cgroup: %w", err)
	}
	var best uint64
	tighten := func(v uint64) {
		if v > 0 && (best == 0 || v < best) {
			best = v
		}
	}
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		var dir, file string
		switch {
		case parts[0] == "0" && parts[1] == "":
			dir, file = cgroupRoot, "memory.max"
		case slices.Contains(strings.Split(parts[1], ","), "memory"):
			dir, file = filepath.Join(cgroupRoot, "memory"), "memory.limit_in_bytes"
		default:
			continue
		}
		for p := filepath.Clean("/" + parts[2]); ; p = filepath.Dir(p) {
			v, err := readLimit(filepath.Join(dir, p, file))
			if err != nil {
				return 0, err
			}
			tighten(v)
			if p == "/" {
				break
			}
		}
	}
	return best, nil
}

// readLimit reads one cgroup memory limit file; "max", an absent file and
// v1's "no limit" (a huge page-rounded number) are 0.
func readLimit(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("worker: read cgroup memory limit: %w", err)
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("worker: cgroup memory limit %s: %q is not a number or \"max\"", path, s)
	}
	// cgroup v1 spells "no limit" as PAGE_COUNTER_MAX pages, 2^63-4096 on
	// 4 KiB pages; anything from 2^62 up is no real bound.
	if v >= 1<<62 {
		return 0, nil
	}
	return v, nil
}
