package worker

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestStreamedPlanAcrossACutIsRefused: a plan sent whole as a stream
// whose nodes must run in different places (at = {...}) is refused,
// naming the two nodes, why, and StreamCut, before anything runs; one
// whose nodes share one placement streams as before. Bug (issue 15): the worker ran every node of a
// streamed plan itself, ignoring their at, so a node meant for a torch
// worker ran on whatever worker the stream was opened on.
func TestStreamedPlanAcrossACutIsRefused(t *testing.T) {
	tw := newTestWorker(t, testOptions{})
	x, y := twoClusters(20)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	cut := classifierPlan(t, "cut", Fit, x, &y)
	cut.Nodes[len(cut.Nodes)-1].At = &Ask{Tags: []string{"torch"}}
	s, err := tw.client.Stream(ctx, cut)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	last := cut.Nodes[len(cut.Nodes)-1].ID
	_, err = s.Next(ctx)
	if err == nil {
		t.Fatal("a streamed plan across a cut ran; want it refused")
	}
	for _, want := range []string{"a stream runs on one worker", `"` + last + `" (needs tags torch)`, "worker.StreamCut"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Next = %v; want it to say %q", err, want)
		}
	}
	if _, err := tw.w.Status(cut.ID); !errors.Is(err, ErrUnknownPlan) {
		t.Errorf("Status(%q) after the refusal = %v, want ErrUnknownPlan (it never started)", cut.ID, err)
	}

	one := classifierPlan(t, "one", Fit, x, &y)
	for i := range one.Nodes {
		one.Nodes[i].At = &Ask{Tags: []string{"torch"}}
	}
	if err := errStreamCut(one); err != nil {
		t.Fatalf("errStreamCut(nodes with one placement) = %v, want nil", err)
	}
	_, res := streamPlan(t, tw, one, x, &y, 8)
	mustSucceed(t, res)
	if !errors.Is(errStreamCut(cut), ErrCut) {
		t.Errorf("errStreamCut = %v, want ErrCut", errStreamCut(cut))
	}
}
