//go:build !(linux && cgo)

package worker

// nvmlRoles: the NVML tests and their children are in gpu_linux_test.go.
func nvmlRoles() map[string]func() int { return nil }
