package worker

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/internal/testutil"
)

// placeSendChild, the role "place-send" of the children of
// TestPlacedPlansNeverOverbook, places N no-op plans one after another, sends each to
// the worker it was placed on and releases the lease when it is done:
// with Place, with PLACER=1 through one Placer for all of them, or with
// PLACER=keep through one that keeps released leases (KeepFor), closed
// at the end.
func placeSendChild() (err error) {
	ctx := context.Background()
	s, err := fsstore.Open(os.Getenv("ROOT"), fsstore.Options{})
	if err != nil {
		return err
	}
	n, _ := strconv.Atoi(os.Getenv("N"))
	b, err := os.ReadFile(filepath.Join("testdata", "filters", "behaviour.py"))
	if err != nil {
		return err
	}
	f := File{Name: "behaviour.py", Digest: fsstore.Sum(b).String(), Content: b}
	clients := map[string]*Client{}
	opts := PlaceOptions{Wait: true, WaitInterval: 2 * time.Millisecond, Holder: "pid " + strconv.Itoa(os.Getpid())}
	popts := opts
	if os.Getenv("PLACER") == "keep" {
		popts.KeepFor = DefaultLeaseKeep
	}
	placer := NewPlacer(s, popts, 0)
	defer func() {
		if cerr := placer.Close(ctx); err == nil {
			err = cerr
		}
	}()
	nonces := map[string]bool{}
	defer func() {
		if err == nil {
			// The parent checks that a keeping Placer did keep leases.
			fmt.Printf("reused %d\n", n-len(nonces))
		}
	}()
	for i := range n {
		var p *Placement
		if os.Getenv("PLACER") != "0" {
			p, err = placer.Place(ctx, Requirement{})
		} else {
			p, err = Place(ctx, s, Requirement{}, opts)
		}
		if err != nil {
			return err
		}
		nonces[p.Lease.Nonce] = true
		c := clients[p.Worker.Address]
		if c == nil {
			if c, err = NewClient(p.Worker.Address, testToken, nil); err != nil {
				return err
			}
			clients[p.Worker.Address] = c
		}
		plan := &Plan{
			ID: fmt.Sprintf("%s-%d-%d", os.Getenv("ME"), os.Getpid(), i), Mode: Forward, Files: []File{f},
			Nodes: []Node{{ID: "n", File: "behaviour.py", Class: "NoOp"}},
			Input: Value{Kind: KindObject, Object: "x"},
		}
		res, err := c.Run(ctx, plan)
		if rerr := p.Release(ctx); err == nil {
			err = rerr
		}
		if err != nil {
			return fmt.Errorf("plan %s on %s: %w", plan.ID, p.Worker.ID, err)
		}
		if res.State != StateSucceeded {
			return fmt.Errorf("plan %s on %s: %s: %s", plan.ID, p.Worker.ID, res.State, res.Error)
		}
	}
	return nil
}

// TestPlacedPlansNeverOverbook: 8 OS processes place 200 no-op plans at
// once through the folder on 3 real workers with 2 slots each, and send
// each plan to the worker it was placed on. Overbooking is checked by the
// workers, not by the placers: a worker refuses a third plan at once (503,
// ErrFull), and the child that sent it fails. Every plan runs. Each
// process places with Place, again with one Placer that keeps its
// view of the registry and the leases between its placements, and again
// with one that also keeps its released leases for its next placement.
func TestPlacedPlansNeverOverbook(t *testing.T) {
	for _, placer := range []string{"0", "1", "keep"} {
		t.Run("placer="+placer, func(t *testing.T) { placedPlansNeverOverbook(t, placer) })
	}
}

func placedPlansNeverOverbook(t *testing.T, placer string) {
	const procs, perProc, slots = 8, 25, 2
	s := newRegStore(t)
	var ws []*testWorker
	for i := range 3 {
		tw := newTestWorker(t, testOptions{maxPlans: slots})
		r := testRecord("w"+strconv.Itoa(i), slots, 0, 0)
		r.Address = tw.srv.URL
		announce(t, s, r, time.Hour)
		ws = append(ws, tw)
	}
	var cmds []*exec.Cmd
	var outs [procs]bytes.Buffer
	for i := range procs {
		c := testutil.Child(t, "place-send", "ROOT="+s.Root(), "N="+strconv.Itoa(perProc), "ME=c"+strconv.Itoa(i), "PLACER="+placer)
		c.Stderr = os.Stderr
		c.Stdout = &outs[i]
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, c)
	}
	for i, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Errorf("placer %d: %v (a worker refused a plan: overbooked?)", i, err)
		}
	}
	reused := 0
	for i := range outs {
		var n int
		if _, err := fmt.Sscanf(outs[i].String(), "reused %d", &n); err != nil {
			t.Errorf("placer %d said %q, want \"reused N\"", i, outs[i].String())
		}
		reused += n
	}
	t.Logf("%d of %d placements took a kept lease", reused, procs*perProc)
	if placer == "keep" && reused == 0 {
		t.Errorf("no placement took a kept lease: the test did not exercise keeping")
	}
	if placer != "keep" && reused != 0 {
		t.Errorf("%d placements got a lease another had, with no Placer keeping leases", reused)
	}
	total := 0
	for i, tw := range ws {
		n := tw.w.pool.started() // warm: at most its slots' Pythons
		ran := 0
		for c := range procs {
			for k := range perProc {
				if _, err := tw.w.Status(fmt.Sprintf("c%d-%d-%d", c, cmds[c].Process.Pid, k)); err == nil {
					ran++
				}
			}
		}
		t.Logf("worker w%d: %d plans, %d Pythons", i, ran, n)
		total += ran
	}
	if total != procs*perProc {
		t.Errorf("%d plans ran on the workers, want %d", total, procs*perProc)
	}
	if names, _ := s.List(context.Background(), "leases"); len(names) != 0 {
		t.Errorf("names left under leases/: %v", names)
	}
}
