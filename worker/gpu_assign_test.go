package worker

import (
	"context"
	"strings"
	"testing"
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
	waitLog(t, tw, "hold")
	held := strings.TrimSpace(strings.TrimPrefix(tail(tw.w.o.WorkDir+"/plans/hold.log", 4096), "holding "))
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
