package slowfs_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/internal/testutil"
)

// helper runs the body of a helper process of this test binary (the
// roles init, bind and read of testutil.Child: see TestMain) and returns
// its exit code.
func helper(mode string) int {
	ctx := context.Background()
	root, stop := os.Getenv("ROOT"), os.Getenv("STOP")
	s, err := fsstore.Open(root, fsstore.Options{Create: mode == "init"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	d := fsstore.Sum([]byte("x"))
	switch mode {
	case "init":
		if _, err := s.Put(ctx, []byte("x")); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if _, err := s.Bind(ctx, "a/0", d, fsstore.Meta{{Key: "v", Value: "first"}}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	case "bind":
		for i := 0; ; i++ {
			if _, err := os.Stat(stop); err == nil {
				fmt.Println("binds", i)
				return 0
			}
			if _, err := s.Bind(ctx, "a/0", d, fsstore.Meta{{Key: "v", Value: fmt.Sprint(i)}}); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
	case "read":
		for range 2000 {
			if p, err := s.Probe(ctx, "a/0"); err != nil || p == fsstore.Missing {
				fmt.Fprintf(os.Stderr, "Probe(a/0) while rebound = %v, %v; want Present\n", p, err)
				return 1
			}
			if _, err := s.Resolve(ctx, "a/0"); err != nil {
				fmt.Fprintf(os.Stderr, "Resolve(a/0) while rebound: %v\n", err)
				return 1
			}
		}
		return 0
	}
	fmt.Fprintf(os.Stderr, "unknown helper %q\n", mode)
	return 2
}

// A name read by one process while another rebinds it is read, old or
// new, never an error. Bug (found on this harness, issue 18): Probe and
// Resolve open the record and then fstat (and read) it; when a rebind
// replaces the file in between, the open file is gone on the server,
// which answers ESTALE on NFS (and here), and the error reached the trial
// loop ("take trial 36: probe study/s/trial/36/0: no such file or
// directory"): soma-trial exited at P=4 and P=8 on the 1 ms harness, and
// study's process tests failed there. A local disk keeps an open file
// readable after its name is replaced, so only a filesystem like this one
// shows it.
func TestReadWhileRebound(t *testing.T) {
	m, _ := mount(t)
	root := filepath.Join(m.Dir(), "root")
	stop := filepath.Join(t.TempDir(), "stop")
	start := func(mode string) (*exec.Cmd, *strings.Builder) {
		c := testutil.Child(t, mode, "ROOT="+root, "STOP="+stop)
		out := new(strings.Builder)
		c.Stdout, c.Stderr = out, out
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		return c, out
	}
	// Each process its own Store, as on a cluster; and a Store's open
	// descriptors in this process would keep the mount busy.
	init, iout := start("init")
	if err := init.Wait(); err != nil {
		t.Fatalf("init: %v\n%s", err, iout)
	}
	writer, wout := start("bind")
	reader, rout := start("read")
	rerr := reader.Wait()
	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writer.Wait(); err != nil {
		t.Errorf("writer: %v\n%s", err, wout)
	}
	if rerr != nil {
		t.Errorf("reader: %v\n%s", rerr, rout)
	}
	t.Logf("writer: %s", strings.TrimSpace(wout.String()))
}
