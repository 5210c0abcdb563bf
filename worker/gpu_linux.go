//go:build linux && cgo

package worker

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/dl"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// nvmlDefaultLibrary is the name go-nvml dlopens when no path is given:
// found through the loader's search path (LD_LIBRARY_PATH, ld.so.cache).
const nvmlDefaultLibrary = "libnvidia-ml.so.1"

// detectGPUs lists the GPUs NVML sees, in NVML index order, loading the
// NVIDIA library from path ("" = the loader's default search). A library
// that cannot be loaded is no error: it returns no GPUs and a note saying
// why. Every other NVML failure (a driver that is not loaded, a device that
// does not answer) is returned as an error, so that a broken GPU node is
// reported rather than silently offered as a CPU-only one.
//
// go-nvml binds its C calls to the first NVML library loaded in the
// process; detectGPUs is meant to be called once per process, at start.
func detectGPUs(path string) (gpus []GPU, note string, err error) {
	var opts []nvml.LibraryOption
	name := nvmlDefaultLibrary
	if path != "" {
		opts = append(opts, nvml.WithLibraryPath(path))
		name = path
	}
	lib := nvml.New(opts...)
	if ret := lib.Init(); ret != nvml.SUCCESS {
		if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
			return nil, "NVML library not found: " + loadError(name), nil
		}
		return nil, "", fmt.Errorf("worker: nvml init (%s): %s (nvml return %d)", name, errString(ret), int(ret))
	}
	defer lib.Shutdown()

	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, "", nvmlError("count devices", -1, ret)
	}
	for i := range n {
		g, err := describeGPU(lib, i)
		if err != nil {
			return nil, "", err
		}
		gpus = append(gpus, g)
	}
	if len(gpus) == 0 {
		note = "NVML reports no GPUs"
	}
	return gpus, note, nil
}

func describeGPU(lib nvml.Interface, i int) (GPU, error) {
	d, ret := lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return GPU{}, nvmlError("get device handle", i, ret)
	}
	g := GPU{Index: i}
	if g.UUID, ret = d.GetUUID(); ret != nvml.SUCCESS {
		return GPU{}, nvmlError("get UUID", i, ret)
	}
	if g.Name, ret = d.GetName(); ret != nvml.SUCCESS {
		return GPU{}, nvmlError("get name", i, ret)
	}
	mem, ret := d.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return GPU{}, nvmlError("get memory info", i, ret)
	}
	g.MemoryTotal, g.MemoryFree = mem.Total, mem.Free
	util, ret := d.GetUtilizationRates()
	switch ret {
	case nvml.SUCCESS:
		g.Utilization = int(util.Gpu)
	case nvml.ERROR_NOT_SUPPORTED:
		// Some GPUs (MIG mode, some older boards) have no utilisation
		// counter; that is a missing number, not a broken GPU.
		g.Utilization = -1
	default:
		return GPU{}, nvmlError("get utilization", i, ret)
	}
	return g, nil
}

func nvmlError(op string, index int, ret nvml.Return) error {
	if index >= 0 {
		return fmt.Errorf("worker: nvml %s of GPU %d: %s (nvml return %d)", op, index, errString(ret), int(ret))
	}
	return fmt.Errorf("worker: nvml %s: %s (nvml return %d)", op, errString(ret), int(ret))
}

// errString asks the loaded library for ret's text (go-nvml falls back to
// its own table when none is loaded).
func errString(ret nvml.Return) string { return ret.Error() }

// loadError says why the library at name cannot be loaded. go-nvml's Init
// returns only ERROR_LIBRARY_NOT_FOUND and drops dlopen's message, so open
// it once more to get dlerror's text (which names the missing file).
func loadError(name string) string {
	l := dl.New(name, dl.RTLD_LAZY|dl.RTLD_GLOBAL)
	err := l.Open()
	if err == nil {
		// Loaded now though go-nvml could not: say so rather than guess.
		_ = l.Close()
		return name + " could not be loaded by go-nvml"
	}
	return err.Error() // dlerror's text, e.g. "libnvidia-ml.so.1: cannot open shared object file: ..."
}
