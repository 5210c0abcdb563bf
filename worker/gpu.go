package worker

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// GPU is one NVIDIA GPU as NVML reports it when the worker starts.
type GPU struct {
	Index       int    `json:"index" msgpack:"index"`               // NVML (physical, PCI bus order) index
	UUID        string `json:"uuid" msgpack:"uuid"`                 // "GPU-…"; what a plan's CUDA_VISIBLE_DEVICES names
	Name        string `json:"name" msgpack:"name"`                 // the board, e.g. "NVIDIA H100 80GB HBM3"
	MemoryTotal uint64 `json:"memory_total" msgpack:"memory_total"` // bytes
	MemoryFree  uint64 `json:"memory_free" msgpack:"memory_free"`   // bytes, at detection
	Utilization int    `json:"utilization" msgpack:"utilization"`   // percent at detection; -1 where NVML does not support it
}

// ErrNoFreeGPU is returned by GPUSet.Acquire when fewer GPUs are free than
// asked for.
var ErrNoFreeGPU = errors.New("worker: not enough free GPUs")

// GPUSet hands out a fixed set of GPUs. By default a GPU acquired by one
// caller is not handed to another until it is released. A caller may
// instead ask to share: shared acquisitions may land on GPUs already held
// by other shared acquisitions, never on a GPU held exclusively, and an
// exclusive acquisition never lands on a GPU held by anyone. It is safe
// for concurrent use. It lives in one process; it is the worker's own
// bookkeeping, not a lock other processes see.
type GPUSet struct {
	mu      sync.Mutex
	gpus    []GPU  // in the order given
	busy    []bool // busy[i] is true while gpus[i] is held exclusively
	sharers []int  // sharers[i] is how many shared acquisitions hold gpus[i]
}

// NewGPUSet returns a set offering gpus, all free. It copies the slice.
func NewGPUSet(gpus []GPU) *GPUSet {
	return &GPUSet{gpus: slices.Clone(gpus), busy: make([]bool, len(gpus)), sharers: make([]int, len(gpus))}
}

// Len returns how many GPUs the set offers in all.
func (s *GPUSet) Len() int { return len(s.gpus) }

// Free returns how many GPUs nobody holds now, exclusively or shared.
func (s *GPUSet) Free() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for i, b := range s.busy {
		if !b && s.sharers[i] == 0 {
			n++
		}
	}
	return n
}

// Acquire takes n GPUs, or takes none and returns an error wrapping
// ErrNoFreeGPU. It never waits. Without share it takes the first GPUs
// nobody holds, in the set's order. With share it takes GPUs nobody holds
// exclusively, those already shared first (fewest sharers first, then the
// set's order): packing shared plans onto GPUs that are already shared
// keeps whole GPUs free for plans that need one to themselves, which
// could not run otherwise. The n GPUs are distinct. The returned release
// gives them back; calling it more than once is harmless. Acquire(0)
// succeeds with no GPUs; a negative n is an error.
func (s *GPUSet) Acquire(n int, share bool) (gpus []GPU, release func(), err error) {
	if n < 0 {
		return nil, nil, fmt.Errorf("worker: acquire %d GPUs: a count cannot be negative", n)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var fit []int
	for i := range s.gpus {
		if !s.busy[i] && (share || s.sharers[i] == 0) {
			fit = append(fit, i)
		}
	}
	if share {
		// Already shared GPUs first (fewest sharers first); free ones last.
		rank := func(i int) int {
			if s.sharers[i] == 0 {
				return math.MaxInt
			}
			return s.sharers[i]
		}
		slices.SortStableFunc(fit, func(a, b int) int { return cmp.Compare(rank(a), rank(b)) })
	}
	if len(fit) < n {
		how := "free"
		if share {
			how = "not held exclusively"
		}
		return nil, nil, fmt.Errorf("%w: asked for %d, %d of %d %s", ErrNoFreeGPU, n, len(fit), len(s.gpus), how)
	}
	taken := fit[:n]
	for _, i := range taken {
		if share {
			s.sharers[i]++
		} else {
			s.busy[i] = true
		}
		gpus = append(gpus, s.gpus[i])
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			for _, i := range taken {
				if share {
					s.sharers[i]--
				} else {
					s.busy[i] = false
				}
			}
		})
	}
	return gpus, release, nil
}

// filterVisible applies CUDA_VISIBLE_DEVICES to the GPUs NVML found.
// NVML ignores the variable and numbers GPUs physically, so the worker
// maps each entry itself. The rules are CUDA's (CUDA C Programming Guide,
// "CUDA Environment Variables"): entries are comma-separated indexes or
// UUIDs ("GPU-…", a unique prefix is enough); the first entry that names
// no GPU hides itself and every entry after it; an empty value hides all.
// A repeated GPU is treated as invalid too, so one GPU is never offered
// twice. MIG entries ("MIG-…") name a slice of a GPU that this worker
// does not hand out; they stop the list like an invalid entry, and the
// returned note says so.
//
// Indexes are taken as NVML indexes. CUDA numbers fastest-first unless
// CUDA_DEVICE_ORDER=PCI_BUS_ID, which matches NVML only on nodes whose
// GPUs are all alike; Slurm writes indexes in its own (NVML) order, so
// this is what a Slurm job means.
func filterVisible(all []GPU, value string, set bool) (visible []GPU, note string) {
	if !set {
		return all, ""
	}
	if strings.TrimSpace(value) == "" {
		return nil, "CUDA_VISIBLE_DEVICES is set and empty: it hides every GPU"
	}
	seen := map[int]bool{}
	for _, entry := range strings.Split(value, ",") {
		entry = strings.TrimSpace(entry)
		i, why := lookupVisible(all, entry)
		if why == "" && seen[i] {
			why = "names a GPU already listed"
		}
		if why != "" {
			if len(visible) == 0 {
				note = fmt.Sprintf("CUDA_VISIBLE_DEVICES=%q: entry %q %s, which hides it and every entry after it", value, entry, why)
			}
			break
		}
		seen[i] = true
		visible = append(visible, all[i])
	}
	return visible, note
}

// lookupVisible returns the position in all of the GPU that entry names,
// or why it names none.
func lookupVisible(all []GPU, entry string) (int, string) {
	if strings.HasPrefix(entry, "MIG-") {
		return -1, "is a MIG device, which soma-worker does not hand out"
	}
	if strings.HasPrefix(entry, "GPU-") {
		found := -1
		for i, g := range all {
			if strings.HasPrefix(g.UUID, entry) {
				if found >= 0 {
					return -1, "is a UUID prefix that matches more than one GPU"
				}
				found = i
			}
		}
		if found < 0 {
			return -1, "matches no GPU's UUID"
		}
		return found, ""
	}
	n, err := strconv.Atoi(entry)
	if err != nil || n < 0 {
		return -1, "is neither an index nor a GPU UUID"
	}
	for i, g := range all {
		if g.Index == n {
			return i, ""
		}
	}
	return -1, fmt.Sprintf("is past the %d GPUs NVML reports", len(all))
}
