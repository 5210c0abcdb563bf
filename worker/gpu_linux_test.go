//go:build linux && cgo

package worker

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/soma-hpc/soma/internal/testutil"
)

// buildNVMLStub compiles testdata/nvmlstub into a libnvidia-ml.so.1 under
// a temporary folder and returns its path.
//
// Every test may build its own copy: go-nvml's C calls are bound to the
// first copy loaded, and glibc never unloads a library that the main
// program's symbols were bound to (dl-lookup.c, add_dependency: "If the
// object with the undefined reference cannot be removed ever just make
// sure the same is true for the object which contains the definition"),
// so later copies are opened but the first one answers. The stub reads
// its configuration from the environment at each call, so whichever copy
// answers behaves as the test asks.
func buildNVMLStub(t *testing.T) string {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	testutil.Need(t, err == nil, "gcc (Debian package gcc), to build the NVML stub")
	dir := t.TempDir()
	lib := filepath.Join(dir, "libnvidia-ml.so.1")
	out, err := exec.Command(gcc, "-shared", "-fPIC", "-Wall", "-Werror",
		"-Wl,-soname,libnvidia-ml.so.1", "-o", lib, "testdata/nvmlstub/nvml_stub.c").CombinedOutput()
	if err != nil {
		t.Fatalf("build NVML stub: %v\n%s", err, out)
	}
	return lib
}

// stubGPU is what the stub reports for GPU i.
func stubGPU(i int) GPU {
	const gib = 1 << 30
	return GPU{
		Index:       i,
		UUID:        "GPU-5f0a0000-0000-4000-8000-00000000000" + string(rune('0'+i)),
		Name:        "Soma Stub GPU " + string(rune('0'+i)),
		MemoryTotal: 80 * gib,
		MemoryFree:  uint64(80-i) * gib,
		Utilization: 10 * i,
	}
}

func stubGPUs(idx ...int) []GPU {
	var gs []GPU
	for _, i := range idx {
		gs = append(gs, stubGPU(i))
	}
	return gs
}

func TestDetectResourcesStub(t *testing.T) {
	lib := buildNVMLStub(t)
	tests := []struct {
		name      string
		stubEnv   map[string]string // the stub's configuration
		env       map[string]string // what the worker sees (CUDA_VISIBLE_DEVICES)
		limits    Limits
		want      []GPU
		wantNote  string // a substring of GPUNote; "" = GPUNote must be empty
		wantError string // a substring of the error
	}{
		{name: "discovery", want: stubGPUs(0, 1)},
		{name: "four GPUs", stubEnv: map[string]string{"SOMA_NVML_STUB_COUNT": "4"}, want: stubGPUs(0, 1, 2, 3)},
		{name: "no GPUs", stubEnv: map[string]string{"SOMA_NVML_STUB_COUNT": "0"}, wantNote: "NVML reports no GPUs"},
		{name: "visible by index", env: map[string]string{"CUDA_VISIBLE_DEVICES": "1"}, want: stubGPUs(1)},
		{name: "visible by index, reordered", env: map[string]string{"CUDA_VISIBLE_DEVICES": "1,0"}, want: stubGPUs(1, 0)},
		{name: "visible by UUID", env: map[string]string{"CUDA_VISIBLE_DEVICES": stubGPU(1).UUID}, want: stubGPUs(1)},
		{name: "visible by UUID prefix", env: map[string]string{"CUDA_VISIBLE_DEVICES": "GPU-5f0a0000-0000-4000-8000-000000000001"}, want: stubGPUs(1)},
		{name: "ambiguous UUID prefix stops the list", env: map[string]string{"CUDA_VISIBLE_DEVICES": "GPU-5f0a"}, wantNote: "more than one GPU"},
		{
			name: "unknown UUID hides it and every entry after it",
			env:  map[string]string{"CUDA_VISIBLE_DEVICES": stubGPU(1).UUID + ",GPU-00000000-dead-beef-0000-000000000000," + stubGPU(0).UUID},
			want: stubGPUs(1),
		},
		{name: "unknown UUID first hides all", env: map[string]string{"CUDA_VISIBLE_DEVICES": "GPU-00000000-dead-beef-0000-000000000000,0"}, wantNote: "matches no GPU's UUID"},
		{name: "index past the end", env: map[string]string{"CUDA_VISIBLE_DEVICES": "0,7,1"}, want: stubGPUs(0)},
		{name: "repeated GPU stops the list", env: map[string]string{"CUDA_VISIBLE_DEVICES": "0," + stubGPU(0).UUID + ",1"}, want: stubGPUs(0)},
		{name: "empty value hides all", env: map[string]string{"CUDA_VISIBLE_DEVICES": ""}, wantNote: "set and empty"},
		{name: "Slurm's NoDevFiles hides all", env: map[string]string{"CUDA_VISIBLE_DEVICES": "NoDevFiles"}, wantNote: "neither an index nor a GPU UUID"},
		{name: "MIG entry", env: map[string]string{"CUDA_VISIBLE_DEVICES": "MIG-5f0a0000-0000-4000-8000-000000000000"}, wantNote: "MIG device"},
		{name: "max GPUs", limits: Limits{MaxGPUs: 1}, want: stubGPUs(0)},
		{name: "max GPUs after visible", env: map[string]string{"CUDA_VISIBLE_DEVICES": "1,0"}, limits: Limits{MaxGPUs: 1}, want: stubGPUs(1)},
		{name: "max GPUs above count", limits: Limits{MaxGPUs: 5}, want: stubGPUs(0, 1)},
		{name: "GPUs turned off", limits: Limits{MaxGPUs: -1}, wantNote: "turned off"},
		{name: "utilisation not supported", stubEnv: map[string]string{"SOMA_NVML_STUB_UTIL_ERROR": "3"}, want: func() []GPU {
			gs := stubGPUs(0, 1)
			for i := range gs {
				gs[i].Utilization = -1
			}
			return gs
		}()},
		// NVML errors other than a missing library are the caller's to see.
		{name: "driver not loaded", stubEnv: map[string]string{"SOMA_NVML_STUB_INIT_ERROR": "9"}, wantError: "Driver Not Loaded"},
		{name: "device error", stubEnv: map[string]string{"SOMA_NVML_STUB_UUID_ERROR": "999"}, wantError: "get UUID of GPU 0: Unknown Error"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []string{"SOMA_NVML_STUB_COUNT", "SOMA_NVML_STUB_INIT_ERROR", "SOMA_NVML_STUB_UUID_ERROR", "SOMA_NVML_STUB_UTIL_ERROR"} {
				t.Setenv(k, tc.stubEnv[k])
			}
			env := tc.env
			if env == nil {
				env = map[string]string{}
			}
			r, err := DetectResources(ResourceOptions{Limits: tc.limits, NVMLPath: lib, LookupEnv: envMap(env)})
			if tc.wantError != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantError) {
					t.Fatalf("DetectResources error = %v, want one containing %q", err, tc.wantError)
				}
				return
			}
			if err != nil {
				t.Fatalf("DetectResources: %v", err)
			}
			if !slices.Equal(r.GPUs, tc.want) {
				t.Errorf("GPUs = %+v, want %+v", r.GPUs, tc.want)
			}
			if tc.wantNote == "" && r.GPUNote != "" || !strings.Contains(r.GPUNote, tc.wantNote) {
				t.Errorf("GPUNote = %q, want %q", r.GPUNote, tc.wantNote)
			}
		})
	}
}

// nvmlRoles are the children of the NVML tests that need a process of
// their own (see TestMain; gpu_other_test.go has none).
func nvmlRoles() map[string]func() int {
	return map[string]func() int{
		// DetectResources with $SOMA_NVML_LIB; prints "RESULT <error>".
		"nvml-hang": func() int {
			_, err := DetectResources(ResourceOptions{NVMLPath: os.Getenv("SOMA_NVML_LIB"), LookupEnv: envMap(nil), NVMLTimeout: 50 * time.Millisecond})
			fmt.Printf("RESULT %v\n", err)
			return 0
		},
		// DetectResources with go-nvml's default loading; prints
		// "RESULT <Resources as JSON>".
		"nvml-default": childRole(func() error {
			r, err := DetectResources(ResourceOptions{})
			if err != nil {
				return err
			}
			b, _ := json.Marshal(r)
			_, err = os.Stdout.Write(append(append([]byte("RESULT "), b...), '\n'))
			return err
		}),
	}
}

// An NVML that never answers makes DetectResources fail, not hang. The
// stuck call stays blocked in C for good, so it runs in a process of its
// own.
func TestDetectResourcesNVMLHangs(t *testing.T) {
	lib := buildNVMLStub(t)
	cmd := testutil.Child(t, "nvml-hang", "SOMA_NVML_LIB="+lib, "SOMA_NVML_STUB_INIT_HANG=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "RESULT worker: NVML did not answer within 50ms") {
		t.Errorf("helper with a hanging NVML printed:\n%s\nwant the timeout error", out)
	}
}

// GPUs discovered through go-nvml are handed out exclusively.
func TestDetectedGPUsExclusive(t *testing.T) {
	lib := buildNVMLStub(t)
	t.Setenv("SOMA_NVML_STUB_COUNT", "4")
	r, err := DetectResources(ResourceOptions{NVMLPath: lib, LookupEnv: envMap(nil)})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.GPUs) != 4 {
		t.Fatalf("GPUs = %+v, want 4", r.GPUs)
	}
	checkExclusive(t, r.GPUs)
}

// The absent-library case: no GPUs, a note naming the file and dlopen's
// reason, and no error.
func TestDetectResourcesNoNVML(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "libnvidia-ml.so.1")
	r, err := DetectResources(ResourceOptions{NVMLPath: missing, LookupEnv: envMap(nil)})
	if err != nil {
		t.Fatalf("DetectResources with no NVML library: %v, want no error", err)
	}
	if len(r.GPUs) != 0 {
		t.Errorf("GPUs = %+v, want none", r.GPUs)
	}
	if !strings.HasPrefix(r.GPUNote, "NVML library not found: ") || !strings.Contains(r.GPUNote, missing) {
		t.Errorf("GPUNote = %q, want the reason naming %s", r.GPUNote, missing)
	}
	if r.CPUs < 1 || r.MemoryBytes == 0 {
		t.Errorf("CPUs = %d, MemoryBytes = %d, want both > 0", r.CPUs, r.MemoryBytes)
	}
}

// go-nvml's default loading (NVMLPath "") finds the stub through
// LD_LIBRARY_PATH, which the dynamic loader reads at process start; so
// run the test binary again with it set.
func TestDetectResourcesDefaultLoader(t *testing.T) {
	lib := buildNVMLStub(t)
	cmd := testutil.Child(t, "nvml-default", "LD_LIBRARY_PATH="+filepath.Dir(lib), "SOMA_NVML_STUB_COUNT=2")
	cmd.Env = slices.DeleteFunc(cmd.Env, func(s string) bool { return strings.HasPrefix(s, "CUDA_VISIBLE_DEVICES=") })
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	var r Resources
	for _, line := range strings.Split(string(out), "\n") {
		if b, ok := strings.CutPrefix(line, "RESULT "); ok {
			if err := json.Unmarshal([]byte(b), &r); err != nil {
				t.Fatal(err)
			}
		}
	}
	if want := stubGPUs(0, 1); !slices.Equal(r.GPUs, want) {
		t.Errorf("GPUs through LD_LIBRARY_PATH = %+v, want %+v\n%s", r.GPUs, want, out)
	}
}

// TestNVMLCheck prints what DetectResources reports on this machine with
// the default loader and the real environment; scripts/nvml-check.sh runs
// it on a GPU machine, where its output goes into the README.
func TestNVMLCheck(t *testing.T) {
	if os.Getenv("SOMA_NVML_CHECK") != "1" {
		t.Skip("set SOMA_NVML_CHECK=1 (scripts/nvml-check.sh) to report this machine's GPUs")
	}
	r, err := DetectResources(ResourceOptions{})
	if err != nil {
		t.Fatalf("DetectResources: %v", err)
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("CUDA_VISIBLE_DEVICES=%q\n%s", os.Getenv("CUDA_VISIBLE_DEVICES"), b)
}
