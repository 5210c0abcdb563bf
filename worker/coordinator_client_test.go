package worker

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
	"time"
)

// TestCoordinatorClient: placement through a real coordinator over
// loopback gives the same Placement as through the folder: the lease is
// in the folder, kept fresh by POST /renew, lost when someone else ends
// it, and freed by Release.
func TestCoordinatorClient(t *testing.T) {
	ctx := context.Background()
	s := newRegStore(t)
	const timeout = 600 * time.Millisecond
	w := announce(t, s, testRecord("gpu", 1, 1, 80*gib, "torch"), time.Hour)
	srv := httptest.NewServer(NewCoordinator(s, CoordinatorOptions{Token: testToken, Timeout: timeout}))
	defer srv.Close()
	c := &CoordinatorClient{URL: srv.URL, Token: testToken, HTTP: srv.Client()}
	beat := func() {
		if _, err := w.Heartbeat(ctx); err != nil {
			t.Fatal(err)
		}
	}

	bad := &CoordinatorClient{URL: srv.URL, Token: "wrong-token-wrong-token", HTTP: srv.Client()}
	if _, err := bad.Place(ctx, Requirement{}, PlaceOptions{}); !errors.Is(err, ErrUnauthorized) {
		t.Errorf("wrong token: %v, want ErrUnauthorized", err)
	}
	beat()
	if _, err := c.Place(ctx, Requirement{GPUs: 2}, PlaceOptions{}); !errors.Is(err, ErrNoMatch) {
		t.Errorf("2 GPUs: %v, want ErrNoMatch", err)
	}

	beat()
	p, err := c.Place(ctx, Requirement{GPUs: 1, Tags: []string{"torch"}}, PlaceOptions{Holder: "laptop"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Worker.Address != "http://127.0.0.1:1/gpu" || p.Lease.Name() != "leases/gpu/0" {
		t.Errorf("placement = %+v", p)
	}
	beat()
	if _, err := c.Place(ctx, Requirement{}, PlaceOptions{}); !errors.Is(err, ErrNoFreeSlot) {
		t.Errorf("busy: %v, want ErrNoFreeSlot", err)
	}
	// The client's renewals keep the lease fresh for longer than the
	// timeout (server times only).
	first, _ := s.Resolve(ctx, p.Lease.Name())
	for {
		b, err := s.Resolve(ctx, p.Lease.Name())
		if err != nil {
			t.Fatal(err)
		}
		if b.Time.Sub(first.Time) > timeout {
			break
		}
		select {
		case <-p.Lost():
			t.Fatalf("lease lost while renewing: %v", p.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Resolve(ctx, p.Lease.Name()); err == nil {
		t.Errorf("lease still bound after Release")
	}

	// Someone else ends the lease: the client's next renewal learns it.
	beat()
	p, err = c.Place(ctx, Requirement{}, PlaceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := ReleaseLease(ctx, s, p.Lease, timeout); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Lost():
	case <-time.After(30 * time.Second):
		t.Fatal("the client never noticed its lease was ended")
	}
	if !errors.Is(p.Err(), ErrLeaseLost) {
		t.Errorf("Err = %v, want ErrLeaseLost", p.Err())
	}
	_ = p.Release(ctx)

	sum, err := c.Summary(ctx)
	if err != nil || sum.Workers != 1 {
		t.Errorf("Summary = %+v, %v", sum, err)
	}
	rep, err := c.Workers(ctx)
	if err != nil || len(rep.Workers) != 1 {
		t.Errorf("Workers = %+v, %v", rep, err)
	}
}
