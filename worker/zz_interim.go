package worker

// TEMPORARY: a minimal stand-in for the env pool (env.go) and resource
// detection (resources.go, gpu*.go) that branch env14 builds. The lead
// deletes this file when that branch is merged. It creates no venv: Get
// returns the configured interpreter; DetectResources finds no GPU.

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
)

type EnvSpec struct {
	Requirements       []string
	SystemSitePackages bool
	NoIndex            bool
	FindLinks          []string
	IndexURL           string
}

type EnvOptions struct {
	Dir      string
	Python   string
	MaxBytes int64
	Logger   *slog.Logger
}

type EnvPool struct{ o EnvOptions }

func NewEnvPool(o EnvOptions) (*EnvPool, error) {
	if o.Python == "" {
		return nil, errors.New("worker: no python interpreter configured")
	}
	return &EnvPool{o: o}, nil
}

func (p *EnvPool) Get(ctx context.Context, spec EnvSpec) (*Env, error) {
	h := sha256.Sum256([]byte(fmt.Sprintf("%q|%v|%s", spec.Requirements, spec.SystemSitePackages, p.o.Python)))
	return &Env{Key: hex.EncodeToString(h[:8]), Python: p.o.Python}, nil
}

type Env struct {
	Key    string
	Dir    string
	Python string
}

func (e *Env) Release() {}

type GPU struct {
	Index       int
	UUID        string
	Name        string
	MemoryTotal uint64
	MemoryFree  uint64
	Utilization int
}

type Resources struct {
	CPUs        int
	MemoryBytes uint64
	GPUs        []GPU
	GPUNote     string
}

type Limits struct {
	MaxCPUs, MaxGPUs, MaxPlans int
	MaxMemory                  uint64
}

type ResourceOptions struct {
	Limits   Limits
	NVMLPath string
	Env      func(string) string
}

func DetectResources(o ResourceOptions) (Resources, error) {
	r := Resources{CPUs: runtime.NumCPU(), GPUNote: "GPU detection not built yet (interim)"}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
				kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
				r.MemoryBytes = kb << 10
			}
		}
	}
	return r, nil
}

type GPUSet struct {
	mu   sync.Mutex
	free []GPU
}

func NewGPUSet(gpus []GPU) *GPUSet { return &GPUSet{free: append([]GPU(nil), gpus...)} }

func (s *GPUSet) Acquire(n int) ([]GPU, func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n > len(s.free) {
		return nil, nil, ErrNoFreeGPU
	}
	got := append([]GPU(nil), s.free[:n]...)
	s.free = s.free[n:]
	return got, func() { s.mu.Lock(); s.free = append(s.free, got...); s.mu.Unlock() }, nil
}

var ErrNoFreeGPU = errors.New("worker: not enough free GPUs")
