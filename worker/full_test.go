package worker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestRefusesBeyondSlots: a worker with MaxPlans slots refuses the next
// plan with 503 and a message naming the fix, instead of queueing it
// (issue 15: overbooking is checked by the workers too, not only by
// placement's leases). Once a plan ends, a slot is free again.
func TestRefusesBeyondSlots(t *testing.T) {
	tw := newTestWorker(t, testOptions{}) // MaxPlans 4
	ctx := context.Background()
	for i := range 4 {
		if _, err := tw.client.Submit(ctx, behaviourPlan(t, fmt.Sprintf("slot-%d", i), "Sleeper")); err != nil {
			t.Fatal(err)
		}
	}
	_, err := tw.client.Submit(ctx, behaviourPlan(t, "one-too-many", "NoOp"))
	var re *RemoteError
	if !errors.As(err, &re) || re.Status != http.StatusServiceUnavailable || !strings.Contains(err.Error(), "every slot is busy") || !strings.Contains(err.Error(), "--max-plans") {
		t.Fatalf("fifth plan: %v; want a 503 saying every slot is busy and naming --max-plans", err)
	}
	if got := tw.w.Active(); len(got) != 4 {
		t.Errorf("Active() = %v, want the 4 sleepers", got)
	}
	if err := tw.client.Cancel(ctx, "slot-0"); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.w.Wait(ctx, "slot-0"); err != nil {
		t.Fatal(err)
	}
	mustSucceed(t, run(t, tw, behaviourPlan(t, "after-one-ended", "NoOp")))
	// The id of a plan that runs is refused; an ended plan's id may be
	// used again (its old result is forgotten).
	if _, err := tw.client.Submit(ctx, behaviourPlan(t, "slot-1", "NoOp")); !errors.As(err, &re) || re.Status != http.StatusConflict {
		t.Errorf("a second plan slot-1 while the first runs: %v; want 409", err)
	}
	if got := tw.w.Running(); got != 3 {
		t.Errorf("Running() = %d, want the 3 sleepers left", got)
	}
	mustSucceed(t, run(t, tw, behaviourPlan(t, "slot-0", "NoOp")))
	for i := 1; i < 4; i++ {
		_ = tw.client.Cancel(ctx, fmt.Sprintf("slot-%d", i))
	}
}
