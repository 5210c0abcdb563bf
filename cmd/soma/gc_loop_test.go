package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/soma-hpc/soma/fsstore"
)

// Bug (issue 13, item 6): soma gc, documented as safe while trials run,
// could leave records pointing at a blob it removed: Put of bytes
// already stored did not refresh the blob's age, and study kept the
// empty curve's digest for the life of the process. soma gc runs in a
// loop while three soma-trial processes run a study whose objective
// reports nothing (every record points at the empty curve's blob, which
// starts out unreferenced and two hours old); afterwards every bound
// name's blob exists. The grace is a minute, the least soma gc takes (the
// blob is made old instead of waiting for it). The race itself is narrow here (between a process's
// first Put of the blob and the claim that binds it); the deterministic
// regression test is fsstore's TestGCKeepsABlobBeingBound, which fails
// without the fix. This one checks the whole: binaries, real processes,
// GC's default packing off.
func TestGCWhileTrialsRun(t *testing.T) {
	ctx := context.Background()
	bin := buildSomaTrial(t)
	root := filepath.Join(t.TempDir(), "root")
	trial := func(study string, args ...string) *exec.Cmd {
		c := exec.Command(bin, append([]string{"--root", root, "--study", study, "--param", "x=float:0:1",
			"--sampler", "random", "--no-wait"}, args...)...)
		c.Args = append(c.Args, "--", "/bin/echo", "1")
		return c
	}
	// The empty curve's blob: stored by a trial of another study, whose
	// record is then removed, and made old.
	if out, err := trial("warm", "--budget", "1").CombinedOutput(); err != nil {
		t.Fatalf("warm-up trial: %v\n%s", err, out)
	}
	s, err := fsstore.Open(root, fsstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := s.Resolve(ctx, "study/warm/trial/0/0")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(root, "names", "study", "warm")); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * time.Hour)
	h := rec.Digest.Hex()
	if err := os.Chtimes(filepath.Join(root, "blobs", "sha256", h[:2], h[2:]), old, old); err != nil {
		t.Fatal(err)
	}

	var done atomic.Bool
	var wg sync.WaitGroup
	gcs := 0
	wg.Go(func() {
		for !done.Load() {
			if code, out, errOut := soma("gc", root, "--older-than", "1m", "--no-pack"); code != exitOK {
				t.Errorf("soma gc: %d\n%s%s", code, out, errOut)
				return
			}
			gcs++
		}
	})
	var runners sync.WaitGroup
	for range 3 {
		runners.Go(func() {
			if out, err := trial("s1", "--budget", "30").CombinedOutput(); err != nil {
				t.Errorf("soma-trial: %v\n%s", err, out)
			}
		})
	}
	runners.Wait()
	done.Store(true)
	wg.Wait()

	bound, corrupt, err := s.Scan(ctx, "study/s1/trial")
	if err != nil || len(corrupt) > 0 {
		t.Fatalf("scan: %v %v", corrupt, err)
	}
	if len(bound) != 30 {
		t.Errorf("%d trial records, want 30", len(bound))
	}
	for _, b := range bound {
		if ok, err := s.Has(ctx, b.Digest); !ok || err != nil {
			t.Errorf("%s points at blob %s, which is gone (%v)", b.Name, b.Digest, err)
		}
	}
	t.Logf("%d gc runs while 30 trials ran", gcs)
}
