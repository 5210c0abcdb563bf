package worker

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestGPUsExclusive: a plan that asks for N GPUs gets N of the worker's
// GPUs to itself and sees only those, by UUID; while they are held,
// another plan gets the others or fails with the reason. The GPUs here
// are given to the worker directly (detection is tested with the NVML
// stub, in the GPU detection tests).
func TestGPUsExclusive(t *testing.T) {
	tw := newTestWorker(t, testOptions{gpus: []GPU{
		{Index: 0, UUID: "GPU-fake-000", Name: "Fake 80GB"},
		{Index: 1, UUID: "GPU-fake-001", Name: "Fake 80GB"},
	}})
	ctx := context.Background()
	hold := behaviourPlan(t, "hold", "HoldGPU")
	hold.Resources.GPUs = 1
	if _, err := tw.client.Submit(ctx, hold); err != nil {
		t.Fatal(err)
	}
	held := strings.TrimSpace(strings.TrimPrefix(waitLog(t, tw, "hold"), "holding "))
	if held != "GPU-fake-000" && held != "GPU-fake-001" {
		t.Fatalf("the holding plan sees CUDA_VISIBLE_DEVICES=%q, want one fake UUID", held)
	}

	other := behaviourPlan(t, "other", "Env")
	other.Resources.GPUs = 1
	res := run(t, tw, other)
	mustSucceed(t, res)
	if got := res.Outputs["n"].Object; got == held || !strings.HasPrefix(got.(string), "GPU-fake-00") {
		t.Fatalf("second plan sees %q while the first holds %q: want the other GPU", got, held)
	}
	both := behaviourPlan(t, "both", "Env")
	both.Resources.GPUs = 2
	res = run(t, tw, both)
	if res.State != StateFailed || !strings.Contains(res.Error, "not enough free GPUs") {
		t.Fatalf("plan asking 2 GPUs while 1 is held: %s %q, want failed: not enough free GPUs", res.State, res.Error)
	}

	if err := tw.client.Cancel(ctx, "hold"); err != nil {
		t.Fatal(err)
	}
	// Cancel returns before the plan has ended and given its GPU back.
	waitGPUsFree(t, tw, 2)
	both.ID = "both-again"
	res = run(t, tw, both)
	mustSucceed(t, res)
	if got := res.Outputs["n"].Object.(string); len(strings.Split(got, ",")) != 2 {
		t.Fatalf("plan asking 2 GPUs sees %q, want both UUIDs", got)
	}

	greedy := behaviourPlan(t, "greedy", "NoOp")
	greedy.Resources.CPUs = 64
	res = run(t, tw, greedy)
	if res.State != StateFailed || !strings.Contains(res.Error, "asks for 64 CPUs, this worker offers 2") {
		t.Fatalf("plan asking 64 CPUs: %s %q", res.State, res.Error)
	}
}

// TestGPUsShared: plans that set share_gpus may run on one GPU at once,
// each seeing it by UUID; a plan that did not ask to share is refused
// while a sharer holds the GPU, and sharers are refused while a plan
// holds it alone.
func TestGPUsShared(t *testing.T) {
	tw := newTestWorker(t, testOptions{gpus: []GPU{{Index: 0, UUID: "GPU-fake-000", Name: "Fake 80GB"}}})
	ctx := context.Background()
	hold := behaviourPlan(t, "hold", "HoldGPU")
	hold.Resources = Ask{GPUs: 1, ShareGPUs: true}
	if _, err := tw.client.Submit(ctx, hold); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(strings.TrimPrefix(waitLog(t, tw, "hold"), "holding ")); got != "GPU-fake-000" {
		t.Fatalf("the sharing plan sees CUDA_VISIBLE_DEVICES=%q, want GPU-fake-000", got)
	}

	shared := behaviourPlan(t, "shared", "Env")
	shared.Resources = Ask{GPUs: 1, ShareGPUs: true}
	res := run(t, tw, shared)
	mustSucceed(t, res)
	if got := res.Outputs["n"].Object; got != "GPU-fake-000" {
		t.Fatalf("second sharing plan sees %q while the first holds the GPU: want GPU-fake-000", got)
	}

	alone := behaviourPlan(t, "alone", "Env")
	alone.Resources = Ask{GPUs: 1}
	res = run(t, tw, alone)
	if res.State != StateFailed || !strings.Contains(res.Error, "not enough free GPUs") {
		t.Fatalf("exclusive plan while a sharer holds the only GPU: %s %q, want failed: not enough free GPUs", res.State, res.Error)
	}

	if err := tw.client.Cancel(ctx, "hold"); err != nil {
		t.Fatal(err)
	}
	waitGPUsFree(t, tw, 1)
	alone.ID = "alone-hold"
	alone.Nodes[0].Class = "HoldGPU"
	if _, err := tw.client.Submit(ctx, alone); err != nil {
		t.Fatal(err)
	}
	waitLog(t, tw, "alone-hold")
	shared.ID = "shared-again"
	res = run(t, tw, shared)
	if res.State != StateFailed || !strings.Contains(res.Error, "0 of 1 not held exclusively") {
		t.Fatalf("sharing plan while a plan holds the only GPU alone: %s %q, want failed: 0 of 1 not held exclusively", res.State, res.Error)
	}
}

// waitGPUsFree waits until n of tw's GPUs are free: Cancel returns before
// the cancelled plan has given its GPUs back. Polling for an event, not
// asserting on time.
func waitGPUsFree(t *testing.T, tw *testWorker, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if tw.w.gpus.Free() == n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%d of the worker's GPUs free after a minute, want %d", tw.w.gpus.Free(), n)
}
