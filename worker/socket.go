package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// The plan socket: GET /plans upgraded to a WebSocket that carries many
// one-shot plans over one connection, one after another (the message
// flow is documented at SocketMessage). It exists for the warm round
// trip of issue 14: a plan over POST /plans?wait=1 pays HTTP's request
// parsing, header maps, the server's per-request background read and the
// connection's goroutine hand-offs at every plan. Measured with nothing
// of soma in between (BenchmarkRoundTrip, 2 cores at load 4.4): a bare
// handler that sends each message to a running Python over a pipe, p50
// 0.039-0.046 ms over one WebSocket (ws-to-pipe), 0.087-0.135 ms over
// HTTP requests (http-to-pipe).

// errSocketGone: the plan socket's connection ended (the client went
// away, or the worker hung up); it cancels the plan running on it.
var errSocketGone = errors.New("worker: plan socket closed")

// planSocket is one connection of GET /plans.
type planSocket struct {
	s *Server
	c *websocket.Conn // set once accepted, under mu
	// planCtx is the context plans on this connection run under: it ends
	// when the connection ends, or when Serve stops waiting for the
	// running plan.
	planCtx  context.Context
	stopPlan context.CancelCauseFunc
	// readers counts the goroutines in read (one at a time reads; see
	// read) and the one the running plan's timer may start.
	readers sync.WaitGroup

	mu      sync.Mutex
	busy    bool // a plan runs
	closing bool // the server shuts down: refuse plans, hang up once idle
	hungUp  bool // hangup was called (before the connection was accepted, maybe)
}

// hangup ends the connection: a read or write blocked on it returns,
// which ends the socket (read). Called before the connection is
// accepted, it closes it as soon as it is.
//
// It closes the connection rather than cancel a context its reads and
// writes run under: coder/websocket registers a context.AfterFunc on
// every Read and Write with a cancellable context, and each write's
// timeout took a timer, which woke an idle thread: together about 15% of
// a warm no-op plan's Go CPU (medians of 8 alternating runs at load ~1:
// 278 -> 236 us a plan; p50 / http-to-pipe 1.78 -> 1.66).
func (ps *planSocket) hangup() {
	ps.mu.Lock()
	ps.hungUp = true
	c := ps.c
	ps.mu.Unlock()
	if c != nil {
		_ = c.CloseNow()
	}
}

// planSocket serves GET /plans.
func (s *Server) planSocket(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		s.fail(w, http.StatusServiceUnavailable, ErrClosed)
		return
	}
	ps := &planSocket{s: s}
	ps.planCtx, ps.stopPlan = context.WithCancelCause(context.Background())
	s.sockets[ps] = struct{}{}
	s.socketsWG.Add(1)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.sockets, ps)
		s.mu.Unlock()
		ps.hangup()
		ps.stopPlan(errSocketGone)
		s.socketsWG.Done()
	}()
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return // Accept has answered the client
	}
	defer c.CloseNow()
	c.SetReadLimit(maxPlanBody)
	ps.mu.Lock()
	ps.c = c
	hungUp := ps.hungUp
	ps.mu.Unlock()
	if hungUp {
		return // shut down while accepting
	}
	ps.serve()
}

// slowPlans starts what a plan socket's read asks for (a successor
// reader) once the plan it runs has outlasted a tick, 10 to 20 ms: from
// one goroutine per Server, which ticks only while plans run on sockets
// and ends after watchIdle ticks without one. (Until then the socket is
// not read: a client that goes away, or a plan sent before the last one's
// result, is seen that much later.)
//
// It was a time.AfterFunc per plan. A new timer that is due before any
// other wakes an idle thread to watch it (the runtime's wakeNetPoller),
// and this one always was: with the other timers of a plan gone, that
// wake-up cost a warm no-op plan about a quarter of its Go CPU and of its
// round trip (8 alternating runs at load ~1, with no watch at all:
// 231-336 -> 157-257 us a plan; p50 / http-to-pipe 1.54-1.91 ->
// 1.09-1.44). A ticker already running is re-armed by the thread that
// runs it: no wake-up. A 1 ms tick still cost a third of that gain (p50
// / http-to-pipe median 1.59 against 1.30 with 10 ms, 8 alternating runs
// each).
type slowPlans struct {
	mu      sync.Mutex
	next    uint64
	plans   map[uint64]*slowPlan
	ticking bool
}

type slowPlan struct {
	ticked bool   // a tick has passed since the plan began
	start  func() // run in a new goroutine at the next tick after that
}

const (
	watchTick = 10 * time.Millisecond
	watchIdle = 20 // ticks with no plan before the ticking goroutine ends
)

// add watches a plan that begins now; once it has outlasted a tick, start
// runs in a new goroutine. It returns the plan's watch id.
func (w *slowPlans) add(start func()) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.plans == nil {
		w.plans = map[uint64]*slowPlan{}
	}
	w.next++
	w.plans[w.next] = &slowPlan{start: start}
	if !w.ticking {
		w.ticking = true
		go w.tick()
	}
	return w.next
}

// remove ends the watch of plan id. It reports false when the plan's
// start has been (or is being) started.
func (w *slowPlans) remove(id uint64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, watched := w.plans[id]
	delete(w.plans, id)
	return watched
}

func (w *slowPlans) tick() {
	t := time.NewTicker(watchTick)
	defer t.Stop()
	idle := 0
	for range t.C {
		var starts []func()
		w.mu.Lock()
		for id, p := range w.plans {
			if p.ticked {
				starts = append(starts, p.start)
				delete(w.plans, id)
			} else {
				p.ticked = true
			}
		}
		if len(w.plans) == 0 && len(starts) == 0 {
			idle++
		} else {
			idle = 0
		}
		if idle >= watchIdle {
			w.ticking = false
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		for _, f := range starts {
			go f()
		}
	}
}

// serve reads and runs the connection's plans until it ends, and returns
// once every goroutine it started has.
func (ps *planSocket) serve() {
	ps.readers.Add(1)
	ps.read()
	ps.readers.Wait()
}

// read reads plan messages until the connection ends, answers the ones it
// refuses, and runs each plan itself. A plan that outlasts a tick of the
// server's slowPlans hands the reading to a new goroutine, which carries on this loop while
// this one finishes the plan and ends: the connection is always read, so
// a client that goes away mid-plan is seen at once and its plan
// cancelled (and a plan sent before the last one's result is refused),
// while a plan that ends sooner runs with no goroutine started and no
// hand-off. Was: every plan handed to a runner goroutine over a channel,
// which cost a warm no-op plan p50 0.254 ms against 0.218 now (Go CPU 248
// against 235 µs a plan; medians of 6 runs of 2000 plans, two binaries
// alternating, 2 cores at load 10-11); and before that a goroutine
// started per plan, which cost 10-20 µs more to grow its stack
// (copystack: ValidatePlan's regexps, msgpack's reflection) and to end it
// (pprof). When read returns for any reason other than the hand-off, it
// cancels the plan running then.
func (ps *planSocket) read() {
	defer ps.readers.Done()
	for {
		// No context to end the read: hangup closes the connection.
		typ, b, done, err := readMessage(context.Background(), ps.c)
		if err != nil {
			ps.stopPlan(errSocketGone)
			return
		}
		p, refusal := decodeSocketPlan(typ, b)
		done()
		if refusal == nil {
			refusal = ps.begin(p)
		}
		if refusal != nil {
			if err := ps.write(refusal); err != nil {
				ps.stopPlan(errSocketGone)
				return
			}
			continue
		}
		// Counted before the timer can start the successor, so that
		// serve's Wait cannot see zero between this goroutine's end and
		// the successor's start.
		ps.readers.Add(1)
		watch := ps.s.slow.add(ps.read)
		ps.run(p)
		if !ps.s.slow.remove(watch) {
			return // the successor reads now
		}
		ps.readers.Done()
	}
}

// readMessage reads c's next message into a pooled buffer; done gives the
// buffer back, so b must not be used after it (decoding copies what it
// keeps: msgpack reads a frame's bytes and strings out of it). It stands
// for websocket.Conn.Read, whose io.ReadAll grew a new buffer for every
// message, 512 bytes up to 8 KiB for a plan of 3: a quarter of the bytes
// a warm no-op plan allocated, client and worker sides together (pprof).
func readMessage(ctx context.Context, c *websocket.Conn) (websocket.MessageType, []byte, func(), error) {
	typ, r, err := c.Reader(ctx)
	if err != nil {
		return 0, nil, nil, err
	}
	buf := messageBufs.Get().(*bytes.Buffer)
	buf.Reset()
	if _, err := buf.ReadFrom(r); err != nil {
		putMessageBuf(buf)
		return 0, nil, nil, err
	}
	return typ, buf.Bytes(), func() { putMessageBuf(buf) }, nil
}

// putMessageBuf gives buf back to messageBufs, unless it grew past
// maxPooledMessage.
func putMessageBuf(buf *bytes.Buffer) {
	if buf.Cap() <= maxPooledMessage {
		messageBufs.Put(buf)
	}
}

// messageBufs are readMessage's buffers; one that grew past
// maxPooledMessage (a plan with a large inline value) is left to the GC.
var messageBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const maxPooledMessage = 1 << 20

// decodeSocketPlan reads a plan message. A message that is not one
// yields the error message that answers it.
func decodeSocketPlan(typ websocket.MessageType, b []byte) (*Plan, *SocketMessage) {
	if typ != websocket.MessageBinary {
		return nil, &SocketMessage{Kind: MsgError, Status: http.StatusBadRequest, Error: "worker: plan socket messages are binary msgpack frames (a text message came)"}
	}
	var m SocketMessage
	if err := DecodeFrame(b, &m); err != nil {
		return nil, &SocketMessage{Kind: MsgError, Status: http.StatusBadRequest, Error: err.Error()}
	}
	if m.Kind != MsgPlan || m.Plan == nil {
		return nil, &SocketMessage{Kind: MsgError, ID: m.ID, Status: http.StatusBadRequest, Error: fmt.Sprintf("worker: plan socket: got a %q message, want %q with a plan", m.Kind, MsgPlan)}
	}
	return m.Plan, nil
}

// begin marks the socket busy with p, or says why p is refused.
func (ps *planSocket) begin(p *Plan) *SocketMessage {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	switch {
	case ps.closing:
		return refusal(p.ID, ErrClosed)
	case ps.busy:
		return &SocketMessage{Kind: MsgError, ID: p.ID, Status: http.StatusConflict, Error: fmt.Sprintf("worker: plan %q came on a plan socket whose plan still runs (one plan at a time per connection: wait for the result, or open another connection)", p.ID)}
	}
	ps.busy = true
	return nil
}

// run runs p as POST /plans?wait=1 does, and answers with its result.
func (ps *planSocket) run(p *Plan) {
	var m *SocketMessage
	res, err := ps.s.w.Run(ps.planCtx, p)
	if err != nil {
		m = refusal(p.ID, err)
	} else {
		m = &SocketMessage{Kind: MsgResult, Result: res}
	}
	// Not busy before the answer is written: a client may send its next
	// plan the moment it reads this one's result.
	ps.mu.Lock()
	ps.busy = false
	closing := ps.closing
	ps.mu.Unlock()
	if err := ps.write(m); err != nil || closing {
		ps.hangup()
	}
}

// refusal is the error message for a plan Worker.Run refused.
func refusal(id string, err error) *SocketMessage {
	return &SocketMessage{Kind: MsgError, ID: id, Status: statusOf(err), Error: err.Error()}
}

// write sends m. A large message gets a deadline, for a client that stops
// reading (the write would block, and with it the plan's goroutine); a
// small one fits the connection's send buffer (16 KiB at least: the
// kernel's default, tcp_wmem), which holds nothing else once the client
// has read every earlier answer, as it has before it sends a plan. A
// write blocked all the same (a client that sent bad frames and reads no
// answer) ends at hangup, at shutdown or when the client goes.
func (ps *planSocket) write(m *SocketMessage) error {
	b, done, err := encodeSmallFrame(m)
	if err != nil {
		ps.s.log.Error("encode plan socket message", "err", err)
		b, done, err = encodeSmallFrame(&SocketMessage{Kind: MsgError, ID: m.ID, Status: http.StatusInternalServerError, Error: err.Error()})
		if err != nil {
			return err
		}
	}
	defer done()
	if len(b) <= smallWrite {
		return ps.c.Write(context.Background(), websocket.MessageBinary, b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return ps.c.Write(ctx, websocket.MessageBinary, b)
}

// smallWrite is the largest message write sends with no deadline (less
// the frame's header: see write).
const smallWrite = 16<<10 - 64

// shutdown refuses further plans; an idle socket hangs up now, a busy
// one after its plan's result.
func (ps *planSocket) shutdown() {
	ps.mu.Lock()
	ps.closing = true
	busy := ps.busy
	ps.mu.Unlock()
	if !busy {
		ps.hangup()
	}
}

// waitSockets waits for the plan sockets to end until ctx ends, then
// cancels the plans still running on them and waits for those.
func (s *Server) waitSockets(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		s.socketsWG.Wait()
		close(done)
	}()
	select {
	case <-done:
		return
	case <-ctx.Done():
	}
	s.mu.Lock()
	for ps := range s.sockets {
		ps.stopPlan(ErrClosed)
	}
	s.mu.Unlock()
	<-done
}

// openSockets returns how many plan sockets are open.
func (s *Server) openSockets() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sockets)
}
