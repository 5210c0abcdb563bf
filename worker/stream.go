package worker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/coder/websocket"
)

// errStreamGone: the client went away (or broke the protocol) before end.
var errStreamGone = errors.New("worker: stream client went away")

// stream serves GET /plans/stream: one plan fed in chunks over a
// WebSocket (the message flow is documented at StreamMessage).
func (s *Server) stream(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		s.fail(w, http.StatusServiceUnavailable, ErrClosed)
		return
	}
	s.streams.Add(1)
	ctx, cancel := context.WithCancel(context.Background())
	s.cancels[&cancel] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.cancels, &cancel)
		s.mu.Unlock()
		cancel()
		s.streams.Done()
	}()
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return // Accept has answered the client
	}
	defer c.CloseNow()
	c.SetReadLimit(maxPlanBody)
	msgs, readerDone := readMessages(ctx, cancel, c)
	err = s.w.runStream(ctx, msgs, func(m *StreamMessage) error { return writeMessage(ctx, c, m) })
	if err != nil && !errors.Is(err, errStreamGone) {
		_ = writeMessage(ctx, c, &StreamMessage{Kind: MsgError, Error: err.Error()})
	}
	_ = c.Close(websocket.StatusNormalClosure, "")
	cancel()
	<-readerDone
}

// readMessages reads the client's messages into a channel until the
// connection ends; a read error cancels the stream, so that a client that
// disconnects mid-chunk interrupts its plan at once.
func readMessages(ctx context.Context, cancel context.CancelFunc, c *websocket.Conn) (<-chan *StreamMessage, <-chan struct{}) {
	msgs := make(chan *StreamMessage)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(msgs)
		for {
			typ, b, err := c.Read(ctx)
			if err != nil {
				cancel()
				return
			}
			m := &StreamMessage{}
			if typ != websocket.MessageBinary {
				m = &StreamMessage{Kind: MsgError, Error: "worker: stream messages are binary msgpack frames"}
			} else if err := DecodeFrame(b, m); err != nil {
				m = &StreamMessage{Kind: MsgError, Error: err.Error()}
			}
			select {
			case msgs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	return msgs, done
}

func writeMessage(ctx context.Context, c *websocket.Conn, m *StreamMessage) error {
	b, err := EncodeFrame(m)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return c.Write(wctx, websocket.MessageBinary, b)
}

// runStream runs one streamed plan: begin, chunks, end. The plan is in
// the plan table while it runs, so DELETE /plans/<id> cancels it too.
func (w *Worker) runStream(ctx context.Context, msgs <-chan *StreamMessage, send func(*StreamMessage) error) error {
	next := func(pctx context.Context) (*StreamMessage, error) {
		select {
		case m, ok := <-msgs:
			if !ok {
				return nil, errStreamGone
			}
			if m.Kind == MsgError {
				return nil, errors.New(m.Error)
			}
			return m, nil
		case <-pctx.Done():
			return nil, context.Cause(pctx)
		}
	}
	m, err := next(ctx)
	if err != nil {
		return err
	}
	if m.Kind != MsgBegin || m.Plan == nil {
		return fmt.Errorf("worker: stream: first message is %q, want %q with a plan", m.Kind, MsgBegin)
	}
	p := m.Plan
	if err := errStreamCut(p); err != nil {
		return err
	}
	rec, pctx, stop, err := w.register(p)
	if err != nil {
		return err
	}
	w.changed()
	defer w.running.Done()
	defer stop()
	// The stream's end (client gone, server closing) ends the plan.
	go func() {
		select {
		case <-ctx.Done():
			rec.cancel(ErrCancelled)
		case <-pctx.Done():
		}
	}()
	start := time.Now()
	s := &session{w: w, p: p}
	outputs, states, err := s.streamed(pctx, next, send, func(out func() string) { w.started(rec, out) })
	res := s.result(start, outputs, states, err)
	w.finish(rec, res)
	if ctx.Err() != nil {
		return errStreamGone
	}
	return send(&StreamMessage{Kind: MsgComplete, Result: res})
}

// streamed opens the plan, feeds each chunk as it comes (Forward) or
// gathers them (Fit), and closes at end. Its outputs are those of the
// one-shot plan on the concatenated chunks.
func (s *session) streamed(ctx context.Context, next func(context.Context) (*StreamMessage, error), send func(*StreamMessage) error, running func(output func() string)) (map[string]Value, map[string]Value, error) {
	defer s.close(ctx)
	if err := s.open(ctx); err != nil {
		return nil, nil, err
	}
	running(s.output())
	b := &batch{}
	defer b.removeTemps()
	if err := s.addBuild(ctx, b); err != nil {
		return nil, nil, err
	}
	if _, err := s.send(ctx, b); err != nil {
		return nil, nil, err
	}
	var inputs, targets []Value
	perNode := map[string][]Value{}
	for {
		m, err := next(ctx)
		if err != nil {
			return nil, nil, err
		}
		if m.Kind == MsgEnd {
			break
		}
		if m.Kind != MsgChunk || m.Input == nil {
			return nil, nil, fmt.Errorf("worker: stream: got %q, want %q with an input or %q", m.Kind, MsgChunk, MsgEnd)
		}
		if s.p.Mode == Fit {
			in, err := s.w.res.resolve(ctx, *m.Input)
			if err != nil {
				return nil, nil, err
			}
			inputs = append(inputs, in)
			if m.Targets != nil {
				t, err := s.w.res.resolve(ctx, *m.Targets)
				if err != nil {
					return nil, nil, err
				}
				targets = append(targets, t)
			}
			if err := send(&StreamMessage{Kind: MsgChunkResult, Seq: m.Seq}); err != nil {
				return nil, nil, err
			}
			continue
		}
		outs, err := s.feedChunk(ctx, *m.Input)
		if err != nil {
			return nil, nil, err
		}
		for id, v := range outs {
			perNode[id] = append(perNode[id], v)
		}
		delivered, err := s.deliver(ctx, outs)
		if err != nil {
			return nil, nil, err
		}
		if err := send(&StreamMessage{Kind: MsgChunkResult, Seq: m.Seq, Outputs: delivered}); err != nil {
			return nil, nil, err
		}
	}
	if s.p.Mode == Fit {
		return s.fitGathered(ctx, inputs, targets)
	}
	outputs := map[string]Value{}
	for id, vs := range perNode {
		v, err := concatRows(vs)
		if err != nil {
			return nil, nil, fmt.Errorf("worker: stream output of %q: %w", id, err)
		}
		outputs[id] = v
	}
	outputs, err := s.deliver(ctx, outputs)
	return outputs, nil, err
}

// feedChunk runs one chunk through the built filters (one round trip).
func (s *session) feedChunk(ctx context.Context, input Value) (map[string]Value, error) {
	b := &batch{}
	defer b.removeTemps()
	outs, err := s.addFeed(ctx, b, input, nil)
	if err != nil {
		return nil, err
	}
	replies, err := s.send(ctx, b)
	if err != nil {
		return nil, err
	}
	return pick(replies, outs), nil
}

// fitGathered fits on the concatenated chunks, as the one-shot plan does.
func (s *session) fitGathered(ctx context.Context, inputs, targets []Value) (map[string]Value, map[string]Value, error) {
	if len(inputs) == 0 {
		return nil, nil, errors.New("worker: stream: a fit needs at least one chunk")
	}
	in, err := concatRows(inputs)
	if err != nil {
		return nil, nil, err
	}
	var tp *Value
	if len(targets) > 0 {
		if len(targets) != len(inputs) {
			return nil, nil, fmt.Errorf("worker: stream: %d chunks with targets out of %d (give targets with every chunk of a fit, or none)", len(targets), len(inputs))
		}
		t, err := concatRows(targets)
		if err != nil {
			return nil, nil, err
		}
		tp = &t
	}
	b := &batch{}
	defer b.removeTemps()
	outs, err := s.addFeed(ctx, b, in, tp)
	if err != nil {
		return nil, nil, err
	}
	states := s.addStates(b)
	return s.sendBatch(ctx, b, outs, states)
}
