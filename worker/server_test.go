package worker

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/soma-hpc/soma/fsstore"
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

// TestWarmPlanReadsNoStore: a plan whose files are already in the
// worker's files folder reads nothing from the store, and a client ships
// a file it stored moments ago by digest without storing it again. The
// blob is removed after the first plan: the second plan, from the same
// client, still runs (the worker did a Get of every file at every plan,
// and the client a Put: issue 14's round trip), and a new client stores
// it again.
func TestWarmPlanReadsNoStore(t *testing.T) {
	tw := newTestWorker(t, testOptions{})
	c, err := NewClient(tw.srv.URL, testToken, tw.srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	c.Store = tw.store
	ctx := context.Background()
	p := behaviourPlan(t, "first", "NoOp")
	d := fsstore.Sum(p.Files[0].Content)
	res, err := c.Run(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	mustSucceed(t, res)
	removeBlob(t, tw.store, d)

	res, err = c.Run(ctx, behaviourPlan(t, "second", "NoOp"))
	if err != nil {
		t.Fatal(err)
	}
	mustSucceed(t, res)
	if _, err := tw.store.Get(ctx, d); !errors.Is(err, fsstore.ErrNotFound) {
		t.Errorf("after a second plan from the same client, Get of the removed file's blob = %v, want not found (stored again within fileReuse)", err)
	}

	c2, err := NewClient(tw.srv.URL, testToken, tw.srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	c2.Store = tw.store
	res, err = c2.Run(ctx, behaviourPlan(t, "third", "NoOp"))
	if err != nil {
		t.Fatal(err)
	}
	mustSucceed(t, res)
	if _, err := tw.store.Get(ctx, d); err != nil {
		t.Errorf("a new client did not store the file: Get = %v", err)
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

// TestWorkerRunCancelledByContext: Worker.Run runs the plan in the
// caller's goroutine; when the caller's context ends the plan is
// cancelled, as Submit's plans are by Cancel, and the worker serves the
// next plan with the same daemon.
func TestWorkerRunCancelledByContext(t *testing.T) {
	tw := newTestWorker(t, testOptions{})
	mustSucceed(t, run(t, tw, behaviourPlan(t, "warm", "NoOp")))
	ctx, cancel := context.WithCancel(context.Background())
	type ran struct {
		res *Result
		err error
	}
	done := make(chan ran, 1)
	go func() {
		res, err := tw.w.Run(ctx, behaviourPlan(t, "sleepy", "Sleeper"))
		done <- ran{res, err}
	}()
	waitLog(t, tw, "sleepy")
	if st, err := tw.w.Status("sleepy"); err != nil || st.State != StateRunning {
		t.Fatalf("Status of the running plan: %v, %v; want running", st, err)
	}
	cancel()
	got := <-done
	if got.err != nil || got.res.State != StateCancelled {
		t.Fatalf("Run = %v, %v; want a cancelled result", got.res, got.err)
	}
	mustSucceed(t, run(t, tw, behaviourPlan(t, "after", "NoOp")))
	if n := tw.w.DaemonsStarted(); n != 1 {
		t.Errorf("%d daemons started, want 1 (Sleeper answers SIGINT; its daemon serves on)", n)
	}
}

// TestWaitingClientGoesAway: POST /plans?wait=1 runs the plan in the
// request's handler, but a client that goes away does not cancel it: the
// plan runs to its own end (here its timeout), and GET shows it.
func TestWaitingClientGoesAway(t *testing.T) {
	tw := newTestWorker(t, testOptions{})
	mustSucceed(t, run(t, tw, behaviourPlan(t, "warm", "NoOp"))) // the env build is not the plan's time
	p := behaviourPlan(t, "left", "Sleeper")
	p.TimeoutSeconds = 3
	ctx, cancel := context.WithCancel(context.Background())
	body, err := tw.client.encodePlan(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		var res Result
		errc <- tw.client.do(ctx, http.MethodPost, "/plans?wait=1", body, &res)
	}()
	waitLog(t, tw, "left")
	cancel() // the client goes away without DELETE
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("the request ended with %v, want context.Canceled", err)
	}
	res, err := tw.w.Wait(context.Background(), "left")
	if err != nil {
		t.Fatal(err)
	}
	if res.State != StateFailed || !strings.Contains(res.Error, "timed out") {
		t.Fatalf("plan ended %s (%q), want failed by its timeout, not cancelled", res.State, res.Error)
	}
	got, err := tw.client.Get(context.Background(), "left")
	if err != nil || got.State != StateFailed {
		t.Fatalf("GET after the client left: %v, %v", got, err)
	}
}

// removeBlob removes a stored blob's file.
func removeBlob(t *testing.T, s *fsstore.Store, d fsstore.Digest) {
	t.Helper()
	hex := strings.TrimPrefix(d.String(), "sha256:")
	n := 0
	filepath.WalkDir(filepath.Join(s.Root(), "blobs"), func(p string, e os.DirEntry, err error) error {
		if err == nil && !e.IsDir() && strings.HasSuffix(p, hex[2:]) {
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			n++
		}
		return nil
	})
	if n != 1 {
		t.Fatalf("removed %d files of blob %s under %s, want 1", n, d, s.Root())
	}
}
