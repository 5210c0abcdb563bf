package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// httpClient returns a client of tw that runs plans over POST
// /plans?wait=1, as Run does with a worker that has no plan socket.
func httpClient(t testing.TB, tw *testWorker) *Client {
	t.Helper()
	c, err := NewClient(tw.srv.URL, testToken, tw.srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	c.noSocket = true
	return c
}

// newClient returns another client of tw, whose sockets close when the
// test ends.
func newClient(t testing.TB, url string, hc *http.Client) *Client {
	t.Helper()
	c, err := NewClient(url, testToken, hc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseIdle)
	return c
}

// rawSocket opens a plan socket by hand, with token (none if empty).
func rawSocket(t *testing.T, tw *testWorker, token string) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, tw.srv.URL+"/plans", &websocket.DialOptions{HTTPHeader: h, HTTPClient: tw.srv.Client()})
	if err == nil {
		c.SetReadLimit(maxPlanBody)
		t.Cleanup(func() { c.CloseNow() })
	}
	return c, resp, err
}

// sendRaw sends one message on a raw socket and returns the answer.
func sendRaw(t *testing.T, c *websocket.Conn, typ websocket.MessageType, b []byte) *SocketMessage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.Write(ctx, typ, b); err != nil {
		t.Fatal(err)
	}
	return readRaw(t, c)
}

func readRaw(t *testing.T, c *websocket.Conn) *SocketMessage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, b, err := c.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var m SocketMessage
	if err := DecodeFrame(b, &m); err != nil {
		t.Fatal(err)
	}
	return &m
}

func planMessage(t testing.TB, p *Plan) []byte {
	t.Helper()
	q := *p
	b, err := EncodeFrame(&SocketMessage{Kind: MsgPlan, Plan: &q})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// eventually polls cond until it holds (a minute at most): for the end
// of a connection's handler, which follows the client's close.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after a minute: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// comparable drops what differs between two runs of one plan.
func comparable(r *Result) Result {
	c := *r
	c.Version, c.DurationMS = 0, 0
	return c
}

// TestSocketSameResultsAsHTTP: plans of every kind (a fit and a forward
// over arrays, with trained states; a filter that prints, one that
// raises, one that crashes its interpreter, an invalid plan) give the
// same results over one plan socket as over POST /plans?wait=1; one
// connection carries them all; GET /plans/<id> shows a socket plan's
// result, kept like the others.
func TestSocketSameResultsAsHTTP(t *testing.T) {
	tw := newTestWorker(t, testOptions{noStore: true}) // states inline, comparable by bytes
	viaHTTP := httpClient(t, tw)
	x, y := twoClusters(20)
	type run func(context.Context, *Plan) (*Result, error)
	both := func(id string, mk func(id string) *Plan) (*Result, *Result) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var got [2]*Result
		for i, r := range []run{tw.client.Run, viaHTTP.Run} {
			res, err := r(ctx, mk(fmt.Sprintf("%s-%d", id, i)))
			if err != nil {
				t.Fatalf("plan %s, client %d: %v", id, i, err)
			}
			got[i] = res
		}
		a, b := comparable(got[0]), comparable(got[1])
		a.ID, b.ID = id, id
		if !reflect.DeepEqual(a, b) {
			t.Errorf("plan %s: over the socket\n%+v\nover HTTP\n%+v", id, a, b)
		}
		return got[0], got[1]
	}
	fit, _ := both("fit", func(id string) *Plan { return classifierPlan(t, id, Fit, x, &y) })
	mustSucceed(t, fit)
	if len(fit.States) == 0 {
		t.Fatal("the fit returned no states")
	}
	fwd, _ := both("forward", func(id string) *Plan {
		p := classifierPlan(t, id, Forward, x, nil)
		p.States = fit.States
		return p
	})
	mustSucceed(t, fwd)
	for _, class := range []string{"NoOp", "Printer", "Raiser", "Exiter"} {
		both(class, func(id string) *Plan { return behaviourPlan(t, id, class) })
	}
	if n := tw.server.openSockets(); n != 1 {
		t.Errorf("%d plan sockets open after the plans, want 1: one connection carries them all", n)
	}

	// A plan the worker refuses is a RemoteError with the status POST
	// would have answered, and the socket serves on.
	bad := behaviourPlan(t, "../bad", "NoOp")
	_, err := tw.client.Run(context.Background(), bad)
	var re *RemoteError
	if !errors.As(err, &re) || re.Status != http.StatusBadRequest || !strings.Contains(err.Error(), "invalid plan: id") {
		t.Fatalf("an invalid plan over the socket: %v; want a 400 naming the id", err)
	}
	_, herr := viaHTTP.Run(context.Background(), bad)
	if herr == nil || herr.Error() != err.Error() {
		t.Errorf("an invalid plan: %v over the socket, %v over HTTP; want the same", err, herr)
	}
	got, err := tw.client.Get(context.Background(), "Printer-0")
	if err != nil || got.State != StateSucceeded || !strings.Contains(got.LogTail, "printed by the filter") {
		t.Fatalf("GET of a plan that ran on the socket: %+v, %v", got, err)
	}
	if n := tw.server.openSockets(); n != 1 {
		t.Errorf("%d plan sockets open, want still 1", n)
	}
}

// TestSocketConcurrentRuns: Run calls at the same time on one Client
// take different sockets (two plans that each wait for the other finish,
// in two daemons), and later Runs reuse the idle sockets rather than
// open new ones.
func TestSocketConcurrentRuns(t *testing.T) {
	tw := newTestWorker(t, testOptions{})
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	pids := make([]any, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := behaviourPlan(t, fmt.Sprintf("gather-%d", i), "Gather")
			p.Nodes[0].Config = map[string]any{"dir": dir, "n": 2}
			res, err := tw.client.Run(ctx, p)
			if err == nil && res.State != StateSucceeded {
				err = fmt.Errorf("state %s: %s", res.State, res.Error)
			}
			if err == nil {
				pids[i] = res.Outputs["n"].Object
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(pids[0]) == fmt.Sprint(pids[1]) {
		t.Fatalf("both plans ran in daemon %v: they did not overlap", pids[0])
	}
	if n := tw.server.openSockets(); n != 2 {
		t.Fatalf("%d plan sockets open after two concurrent Runs, want 2", n)
	}
	// Many concurrent Runs of quick plans: each gets its own result.
	errc := make(chan error, 40)
	for g := range 4 {
		go func() {
			for i := range 10 {
				id := fmt.Sprintf("quick-%d-%d", g, i)
				res, err := tw.client.Run(ctx, behaviourPlan(t, id, "NoOp"))
				if err == nil && (res.ID != id || res.State != StateSucceeded) {
					err = fmt.Errorf("plan %s: result of %s, %s", id, res.ID, res.State)
				}
				errc <- err
			}
		}()
	}
	for range 40 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	if n := tw.server.openSockets(); n > 4 {
		t.Fatalf("%d plan sockets open after 4 concurrent callers, want at most 4", n)
	}
}

// TestSocketCancelByDelete: DELETE /plans/<id> cancels a plan running
// on a plan socket; Run returns its cancelled result, and the socket
// carries the next plan.
func TestSocketCancelByDelete(t *testing.T) {
	tw := newTestWorker(t, testOptions{})
	mustSucceed(t, run(t, tw, behaviourPlan(t, "warm", "NoOp")))
	type ran struct {
		res *Result
		err error
	}
	done := make(chan ran, 1)
	go func() {
		res, err := tw.client.Run(context.Background(), behaviourPlan(t, "sleepy", "Sleeper"))
		done <- ran{res, err}
	}()
	waitLog(t, tw, "sleepy")
	if err := httpClient(t, tw).Cancel(context.Background(), "sleepy"); err != nil {
		t.Fatal(err)
	}
	got := <-done
	if got.err != nil || got.res.State != StateCancelled {
		t.Fatalf("Run = %+v, %v; want the cancelled result", got.res, got.err)
	}
	mustSucceed(t, run(t, tw, behaviourPlan(t, "after", "NoOp")))
	if n := tw.server.openSockets(); n != 1 {
		t.Errorf("%d plan sockets open, want 1 (the same socket carries the plan after the cancelled one)", n)
	}
}

// TestSocketRunCancelledByContext: a Run whose context ends cancels its
// plan on the worker and returns once it has ended; its socket is closed,
// never reused (the worker's handler ends too), and the next Run works.
func TestSocketRunCancelledByContext(t *testing.T) {
	tw := newTestWorker(t, testOptions{})
	mustSucceed(t, run(t, tw, behaviourPlan(t, "warm", "NoOp")))
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
	st, err := tw.w.Status("sleepy")
	if err != nil || st.State != StateCancelled {
		t.Fatalf("when Run returned, the plan was %v (%v), want cancelled already", st, err)
	}
	eventually(t, "the cancelled Run's socket is still open on the worker", func() bool { return tw.server.openSockets() == 0 })
	mustSucceed(t, run(t, tw, behaviourPlan(t, "after", "NoOp")))
	if n := tw.server.openSockets(); n != 1 {
		t.Errorf("%d plan sockets open, want 1", n)
	}
}

// TestSocketClientDropsMidPlan: a client whose connection ends while its
// plan runs has the plan cancelled (the Python call interrupted), and
// the worker serves on.
func TestSocketClientDropsMidPlan(t *testing.T) {
	tw := newTestWorker(t, testOptions{})
	c, _, err := rawSocket(t, tw, testToken)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Write(context.Background(), websocket.MessageBinary, planMessage(t, behaviourPlan(t, "dropped", "Sleeper"))); err != nil {
		t.Fatal(err)
	}
	waitLog(t, tw, "dropped")
	c.CloseNow()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := tw.w.Wait(ctx, "dropped")
	if err != nil {
		t.Fatal(err)
	}
	if res.State != StateCancelled {
		t.Fatalf("plan of the dropped connection: %s (%s), want cancelled", res.State, res.Error)
	}
	eventually(t, "the dropped socket's handler has not ended", func() bool { return tw.server.openSockets() == 0 })
	if n := tw.w.Running(); n != 0 {
		t.Fatalf("%d plans running", n)
	}
	mustSucceed(t, run(t, tw, behaviourPlan(t, "after", "NoOp")))
}

// TestSocketAuth: the plan socket asks for the bearer token as every
// other endpoint does; a Client with a wrong token gets the worker's 401,
// not a silent turn to POST /plans.
func TestSocketAuth(t *testing.T) {
	tw := newTestWorker(t, testOptions{})
	for _, tc := range []struct{ name, token string }{{"no token", ""}, {"wrong token", "nope"}, {"same length", strings.Repeat("x", len(testToken))}} {
		t.Run(tc.name, func(t *testing.T) {
			_, resp, err := rawSocket(t, tw, tc.token)
			if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("dial: %v, %v; want 401", resp, err)
			}
		})
	}
	c, err := NewClient(tw.srv.URL, "wrong", tw.srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Run(context.Background(), behaviourPlan(t, "unauthorised", "NoOp"))
	var re *RemoteError
	if !errors.As(err, &re) || re.Status != http.StatusUnauthorized || !strings.Contains(err.Error(), "missing or wrong bearer token") {
		t.Fatalf("Run with a wrong token = %v, want the worker's 401", err)
	}
	if c.socketless() {
		t.Fatal("a 401 made the client give up the plan socket")
	}
	if _, err := tw.w.Status("unauthorised"); !errors.Is(err, ErrUnknownPlan) {
		t.Fatalf("the unauthorised plan is known to the worker: %v", err)
	}
}

// TestSocketBadMessages: a message that is not a plan of this version
// is answered with an error message naming what is wrong (400), a plan
// sent while another runs on the same socket with a 409, and the worker
// and the connection serve on.
func TestSocketBadMessages(t *testing.T) {
	tw := newTestWorker(t, testOptions{})
	c, _, err := rawSocket(t, tw, testToken)
	if err != nil {
		t.Fatal(err)
	}
	good := planMessage(t, behaviourPlan(t, "good", "NoOp"))
	chunk, _ := EncodeFrame(&SocketMessage{Kind: MsgChunk, ID: "x"})
	for _, tc := range []struct {
		name string
		typ  websocket.MessageType
		b    []byte
		msg  string
	}{
		{"text", websocket.MessageText, []byte("hello"), "binary msgpack frames"},
		{"not msgpack", websocket.MessageBinary, []byte("{json?}"), "malformed frame"},
		{"truncated", websocket.MessageBinary, good[:len(good)/2], "malformed frame"},
		{"empty", websocket.MessageBinary, nil, "malformed frame"},
		{"wrong version", websocket.MessageBinary, encodeMap(t, map[string]any{"version": 7, "kind": "plan"}), "peer speaks protocol version 7, this side speaks version 1"},
		{"a stream message", websocket.MessageBinary, encodeMap(t, map[string]any{"version": 1, "kind": "begin", "seq": 0}), "unknown field"},
		{"not a plan", websocket.MessageBinary, chunk, `got a "chunk" message, want "plan"`},
		{"invalid plan", websocket.MessageBinary, planMessage(t, behaviourPlan(t, "../x", "NoOp")), "invalid plan: id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := sendRaw(t, c, tc.typ, tc.b)
			if m.Kind != MsgError || m.Status != http.StatusBadRequest || !strings.Contains(m.Error, tc.msg) {
				t.Fatalf("answer %+v, want a 400 error containing %q", m, tc.msg)
			}
		})
	}
	m := sendRaw(t, c, websocket.MessageBinary, good)
	if m.Kind != MsgResult || m.Result.State != StateSucceeded {
		t.Fatalf("a good plan after the bad messages: %+v", m)
	}

	// One plan at a time: a second plan before the first's result is
	// refused, naming it; the first runs on.
	if err := c.Write(context.Background(), websocket.MessageBinary, planMessage(t, behaviourPlan(t, "first", "Sleeper"))); err != nil {
		t.Fatal(err)
	}
	waitLog(t, tw, "first")
	m = sendRaw(t, c, websocket.MessageBinary, planMessage(t, behaviourPlan(t, "second", "NoOp")))
	if m.Kind != MsgError || m.ID != "second" || m.Status != http.StatusConflict || !strings.Contains(m.Error, "one plan at a time") {
		t.Fatalf("a second plan while the first runs: %+v, want a 409 for it", m)
	}
	if err := httpClient(t, tw).Cancel(context.Background(), "first"); err != nil {
		t.Fatal(err)
	}
	m = readRaw(t, c)
	if m.Kind != MsgResult || m.Result.ID != "first" || m.Result.State != StateCancelled {
		t.Fatalf("the first plan's answer: %+v, want its cancelled result", m)
	}
	mustSucceed(t, run(t, tw, behaviourPlan(t, "after", "NoOp")))
}

// TestSocketNoLeak: many Runs on one Client use one socket and leave no
// goroutine behind, in the client or the worker; Runs cancelled midway
// leave none either.
func TestSocketNoLeak(t *testing.T) {
	tw := newTestWorker(t, testOptions{})
	mustSucceed(t, run(t, tw, behaviourPlan(t, "warm", "NoOp")))
	// The HTTP connection that waitLog's GETs and a cancelled Run's
	// DELETE use, open before counting.
	if _, err := tw.client.Get(context.Background(), "warm"); err != nil {
		t.Fatal(err)
	}
	settled := func() int {
		// Goroutines end a moment after the connections they serve.
		n := runtime.NumGoroutine()
		for range 50 {
			time.Sleep(20 * time.Millisecond)
			n = min(n, runtime.NumGoroutine())
		}
		return n
	}
	before := settled()
	for i := range 200 {
		mustSucceed(t, run(t, tw, behaviourPlan(t, fmt.Sprintf("p%d", i), "NoOp")))
	}
	for i := range 5 {
		ctx, cancel := context.WithCancel(context.Background())
		id := fmt.Sprintf("cancelled-%d", i)
		errc := make(chan error, 1)
		go func() {
			_, err := tw.client.Run(ctx, behaviourPlan(t, id, "Sleeper"))
			errc <- err
		}()
		waitLog(t, tw, id)
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("Run = %v", err)
		}
		mustSucceed(t, run(t, tw, behaviourPlan(t, fmt.Sprintf("after-%d", i), "NoOp")))
	}
	eventually(t, "more than one plan socket open", func() bool { return tw.server.openSockets() == 1 })
	if after := settled(); after > before {
		t.Fatalf("%d goroutines after 205 Runs, %d before", after, before)
	}
}

// TestSocketOlderWorker: a worker without the plan socket (a soma-worker
// older than the client: its mux answers GET /plans 405) runs the plans
// over POST /plans?wait=1, with the same results, and the Client says so
// once.
func TestSocketOlderWorker(t *testing.T) {
	tw := newTestWorker(t, testOptions{})
	for _, code := range []int{http.StatusMethodNotAllowed, http.StatusNotFound} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			h := tw.server.Handler()
			old := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet && r.URL.Path == "/plans" {
					http.Error(w, http.StatusText(code), code) // as net/http's mux answers it
					return
				}
				h.ServeHTTP(w, r)
			}))
			defer old.Close()
			c := newClient(t, old.URL, old.Client())
			var log bytes.Buffer
			c.Logger = slog.New(slog.NewTextHandler(&log, nil))
			for i := range 3 {
				res, err := c.Run(context.Background(), behaviourPlan(t, fmt.Sprintf("old-%d-%d", code, i), "NoOp"))
				if err != nil {
					t.Fatal(err)
				}
				mustSucceed(t, res)
			}
			if n := strings.Count(log.String(), "has no plan socket"); n != 1 {
				t.Fatalf("the client said %d times that the worker has no plan socket, want once:\n%s", n, log.String())
			}
			if !strings.Contains(log.String(), fmt.Sprintf("HTTP %d", code)) || !strings.Contains(log.String(), "POST /plans") {
				t.Errorf("the line does not say why and what instead: %s", log.String())
			}
		})
	}
}

// serveOn serves tw's worker on a real listener at addr ("" for a new
// port) until the returned stop is called; stop returns Serve's error.
func serveOn(t *testing.T, tw *testWorker, addr string) (string, func() error) {
	return serveGrace(t, tw, addr, 0)
}

// serveGrace is serveOn with the server's StopGrace (0: the default).
func serveGrace(t *testing.T, tw *testWorker, addr string, grace time.Duration) (string, func() error) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	srv := NewServer(tw.w, testToken)
	srv.StopGrace = grace
	go func() { served <- srv.Serve(ctx, ln) }()
	stop := sync.OnceValue(func() error {
		cancel()
		select {
		case err := <-served:
			return err
		case <-time.After(time.Minute):
			return errors.New("Serve did not return a minute after its context ended")
		}
	})
	t.Cleanup(func() { stop() })
	return ln.Addr().String(), stop
}

// TestSocketShutdown: a worker that shuts down closes its idle plan
// sockets, lets the plan running on another finish and answers it, then
// returns; a Run on a closed socket fails (nothing listens) rather than
// hangs.
func TestSocketShutdown(t *testing.T) {
	tw := newTestWorker(t, testOptions{})
	addr, stop := serveOn(t, tw, "127.0.0.1:0")
	idle := newClient(t, "http://"+addr, nil)
	mustSucceed(t, runBy(t, idle, behaviourPlan(t, "warm", "NoOp")))
	dir := t.TempDir()
	done := startGather(t, newClient(t, "http://"+addr, nil), "gather", dir)
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	// The plan ends on its own once the second mark is there.
	if err := os.WriteFile(filepath.Join(dir, "other"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	got := <-done
	if got.err != nil || got.res.State != StateSucceeded {
		t.Fatalf("the plan running at shutdown: %+v, %v; want its result", got.res, got.err)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("Serve = %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := idle.Run(ctx, behaviourPlan(t, "late", "NoOp")); err == nil || ctx.Err() != nil {
		t.Fatalf("Run after the worker shut down: %v (context: %v), want an error at once", err, ctx.Err())
	}
}

// ran is how a plan run in the background ended.
type ran struct {
	res *Result
	err error
}

// startGather runs a Gather plan through c in the background, one that
// waits for 2 marks in dir and leaves its own, and returns once it runs.
// Another mark in dir ends it.
func startGather(t *testing.T, c *Client, id, dir string) <-chan ran {
	t.Helper()
	done := make(chan ran, 1)
	go func() {
		p := behaviourPlan(t, id, "Gather")
		p.Nodes[0].Config = map[string]any{"dir": dir, "n": 2}
		res, err := c.Run(context.Background(), p)
		done <- ran{res, err}
	}()
	eventually(t, "the plan did not start", func() bool { n, _ := os.ReadDir(dir); return len(n) == 1 })
	return done
}

// TestSocketShutdownGrace: a plan still running on a plan socket when the
// stop grace ends is cancelled; its client gets that answer, and Serve
// returns. (The grace was a constant 10 s: this path had no test.)
func TestSocketShutdownGrace(t *testing.T) {
	tw := newTestWorker(t, testOptions{})
	addr, stop := serveGrace(t, tw, "127.0.0.1:0", 200*time.Millisecond)
	// Only the plan's own mark comes: it runs until it is cancelled.
	done := startGather(t, newClient(t, "http://"+addr, nil), "outlasts-grace", t.TempDir())
	if err := stop(); err != nil {
		t.Fatalf("Serve = %v", err)
	}
	select {
	case got := <-done:
		if got.err != nil || got.res.State != StateCancelled {
			t.Errorf("the plan that outlasted the grace: %+v, %v; want a cancelled result", got.res, got.err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the plan's client had no answer a minute after Serve returned")
	}
	if n := tw.w.Running(); n != 0 {
		t.Errorf("%d plans still running after Serve returned, want 0", n)
	}
}

// TestSocketWorkerRestarted: a socket kept idle across a restart of its
// worker (at the same address) is dropped, and the plan sent on it runs
// on a new socket: the new worker did not know it.
func TestSocketWorkerRestarted(t *testing.T) {
	tw := newTestWorker(t, testOptions{})
	addr, stop := serveOn(t, tw, "127.0.0.1:0")
	c := newClient(t, "http://"+addr, nil)
	mustSucceed(t, runBy(t, c, behaviourPlan(t, "before", "NoOp")))
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	serveOn(t, tw, addr)
	res, err := c.Run(context.Background(), behaviourPlan(t, "after-restart", "NoOp"))
	if err != nil {
		t.Fatalf("Run after the worker restarted: %v", err)
	}
	mustSucceed(t, res)
}

// runBy runs p through c and fails the test on an error.
func runBy(t *testing.T, c *Client, p *Plan) *Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := c.Run(ctx, p)
	if err != nil {
		t.Fatalf("Run(%s): %v", p.ID, err)
	}
	return res
}

// TestSocketRefusesBeyondSlots: the plan socket keeps the worker's
// limits: with every slot busy, a plan on it is refused with the 503 that
// POST /plans answers, and the socket carries the next plan once a slot
// is free.
func TestSocketRefusesBeyondSlots(t *testing.T) {
	tw := newTestWorker(t, testOptions{maxPlans: 2})
	mustSucceed(t, run(t, tw, behaviourPlan(t, "warm", "NoOp")))
	ctx := context.Background()
	viaHTTP := httpClient(t, tw)
	for i := range 2 {
		if _, err := viaHTTP.Submit(ctx, behaviourPlan(t, fmt.Sprintf("slot-%d", i), "Sleeper")); err != nil {
			t.Fatal(err)
		}
	}
	_, err := tw.client.Run(ctx, behaviourPlan(t, "one-too-many", "NoOp"))
	var re *RemoteError
	if !errors.As(err, &re) || re.Status != http.StatusServiceUnavailable || !strings.Contains(err.Error(), "every slot is busy") {
		t.Fatalf("a plan on the socket with every slot busy: %v; want the 503 POST answers", err)
	}
	if err := viaHTTP.Cancel(ctx, "slot-0"); err != nil {
		t.Fatal(err)
	}
	mustSucceed(t, run(t, tw, behaviourPlan(t, "after", "NoOp")))
	if n := tw.server.openSockets(); n != 1 {
		t.Errorf("%d plan sockets open, want 1", n)
	}
	_ = viaHTTP.Cancel(ctx, "slot-1")
}

// TestSocketLargePlanOverPOST: a plan with a megabyte or more of inline
// values goes over POST /plans?wait=1 (the worker reads a body of known
// length into one buffer), a small one over the socket.
func TestSocketLargePlanOverPOST(t *testing.T) {
	tw := newTestWorker(t, testOptions{})
	big := behaviourPlan(t, "big", "NoOp")
	big.Input = Value{Kind: KindBytes, Data: bytes.Repeat([]byte{7}, socketMaxPayload)}
	mustSucceed(t, run(t, tw, big))
	if n := tw.server.openSockets(); n != 0 {
		t.Fatalf("%d plan sockets open after a plan of %d inline bytes, want 0 (it goes over POST)", n, socketMaxPayload)
	}
	mustSucceed(t, run(t, tw, behaviourPlan(t, "small", "NoOp")))
	if n := tw.server.openSockets(); n != 1 {
		t.Fatalf("%d plan sockets open after a small plan, want 1", n)
	}
}

// TestSocketResultsOwnTheirBytes: the plan socket reads each message into
// a pooled buffer that the next message reuses; a result already returned
// must keep its own bytes (decoding copies them out), on both sides.
func TestSocketResultsOwnTheirBytes(t *testing.T) {
	tw := newTestWorker(t, testOptions{})
	addr, _ := serveOn(t, tw, "127.0.0.1:0")
	c := newClient(t, "http://"+addr, nil)
	plan := func(id string, fill byte) *Plan {
		p := behaviourPlan(t, id, "NoOp")
		p.Input = Value{Kind: KindBytes, Data: bytes.Repeat([]byte{fill}, 3000)}
		return p
	}
	first := runBy(t, c, plan("first", 'a'))
	mustSucceed(t, first)
	for i := range 3 {
		mustSucceed(t, runBy(t, c, plan(fmt.Sprintf("next-%d", i), byte('b'+i))))
	}
	out := first.Outputs["n"]
	if out.Kind != KindBytes || !bytes.Equal(out.Data, bytes.Repeat([]byte{'a'}, 3000)) {
		t.Errorf("the first result's output after three more plans: %s, %d bytes, starting %q; want its own 3000 a's", out.Kind, len(out.Data), out.Data[:min(8, len(out.Data))])
	}
}
