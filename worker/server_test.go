package worker

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// TestFilesByDigest: a client that sees the worker's store ships files
// by digest; the worker fetches and checks them. A file neither inline
// nor in the store fails with the fix.
func TestFilesByDigest(t *testing.T) {
	tw := newTestWorker(t, testOptions{})
	c, err := NewClient(tw.srv.URL, testToken, tw.srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	c.Store = tw.store
	ctx := context.Background()
	res, err := c.Run(ctx, behaviourPlan(t, "by-digest", "NoOp"))
	if err != nil {
		t.Fatal(err)
	}
	mustSucceed(t, res)

	p := behaviourPlan(t, "nowhere", "NoOp")
	p.Files[0].Content = nil
	p.Files[0].Digest = "sha256:" + strings.Repeat("ab", 32)
	res = run(t, tw, p)
	if res.State != StateFailed || !strings.Contains(res.Error, "behaviour.py") {
		t.Fatalf("file in no store: %s %q, want failed naming the file", res.State, res.Error)
	}
	p = behaviourPlan(t, "mismatch", "NoOp")
	p.Files[0].Digest = "sha256:" + strings.Repeat("cd", 32)
	res = run(t, tw, p)
	if res.State != StateFailed || !strings.Contains(res.Error, "content has digest") {
		t.Fatalf("file with a wrong digest: %s %q", res.State, res.Error)
	}
}

// TestClientRunCancelledByContext: when the caller of Client.Run gives up
// (soma run's ^C), the plan is cancelled on the worker.
func TestClientRunCancelledByContext(t *testing.T) {
	tw := newTestWorker(t, testOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := tw.client.Run(ctx, behaviourPlan(t, "sleepy", "Sleeper"))
		errc <- err
	}()
	waitLog(t, tw, "sleepy")
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	res, err := tw.w.Wait(context.Background(), "sleepy")
	if err != nil {
		t.Fatal(err)
	}
	if res.State != StateCancelled {
		t.Fatalf("plan state %s, want cancelled", res.State)
	}
}

// TestServeShutdownEndsStreams: Serve returns when its context ends, even
// with a WebSocket stream open (http.Server.Shutdown does not wait for
// hijacked connections; Serve must end them itself), and the stream's
// plan is cancelled.
func TestServeShutdownEndsStreams(t *testing.T) {
	tw := newTestWorker(t, testOptions{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- NewServer(tw.w, testToken).Serve(ctx, ln) }()
	c, err := NewClient("http://"+ln.Addr().String(), testToken, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Stream(context.Background(), behaviourPlan(t, "streaming", "Sleeper"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Send(context.Background(), 0, Value{Kind: KindNone}, nil); err != nil {
		t.Fatal(err)
	}
	waitLog(t, tw, "streaming")
	stop()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve = %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Serve did not return after its context ended, with a stream open")
	}
	res, err := tw.w.Wait(context.Background(), "streaming")
	if err != nil {
		t.Fatal(err)
	}
	if res.State != StateCancelled {
		t.Fatalf("stream's plan: %s, want cancelled", res.State)
	}
}
