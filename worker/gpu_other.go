//go:build !(linux && cgo)

package worker

// detectGPUs reports no GPUs: go-nvml needs cgo, and NVML ships for Linux.
func detectGPUs(string) ([]GPU, string, error) {
	return nil, "GPU detection needs a linux build with cgo; this soma-worker was built without", nil
}
