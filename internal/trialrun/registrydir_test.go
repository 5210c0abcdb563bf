package trialrun

import (
	"os"
	"path/filepath"
	"testing"
)

// The node-local registry folder's name is shared by every soma-trial of
// a study on a node, whatever its version: its hash must never change
// (it was FNV-1a written out by hand, now hash/fnv's).
func TestRegistryDirIsStable(t *testing.T) {
	got := registryDir("/scratch/u/soma", "quadratic")
	want := filepath.Join(os.TempDir(), "soma-workers-ba9cba44a20e774b")
	if got != want {
		t.Errorf("registryDir = %s, want %s", got, want)
	}
}
