package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// CutStream is a streamed plan cut across workers (StreamCut): one
// stream per segment of CutPlan, on a worker that fits it, with what
// crosses a cut passed on by blob reference through the store. It is
// driven from one goroutine: Chunk, then End (or Close).
type CutStream struct {
	p     *Plan
	segs  []Segment
	open  func(context.Context, *Plan) (*Stream, func(), error)
	want  map[string]bool
	plans []*Plan   // each segment's plan as sent (Input set for a fit's later segments)
	strs  []*Stream // nil until opened, and again once done
	dones []func()  // what open took for each, called once it is done

	targets []Value // a fit's targets, chunk by chunk, for its later segments
	chunks  int
	ended   bool
}

// ErrStreamOver is returned by CutStream's Chunk and End once a segment
// has ended the stream (its plan failed) or End or Close was called.
var ErrStreamOver = errors.New("worker: cut stream is over")

// StreamCut begins p, cut into segs by CutPlan, as a stream across
// workers. open begins one segment's plan as a stream on a worker that
// fits it (the caller places it: Place, then Client.Stream) and returns
// a function that gives back what it took (the lease), which StreamCut
// calls once that segment's stream is over.
//
// A Forward opens every segment's stream at once, and each chunk goes
// through them in order: the output of segment k that segment k+1 reads
// comes back from segment k's worker as a blob reference (the store
// holds the bytes, as in RunCut; an inline value is an error, since it
// would have passed through the client) and is that chunk's input to
// segment k+1. Chunk returns the chunk's outputs of p's output nodes;
// End returns the result, which is RunCut's on the concatenated chunks.
//
// A Fit gathers its chunks on the first segment's worker, as a one-shot
// fit does, and its later segments can only start once the first has
// fitted on all of them: at End, the first segment fits, and every later
// one is opened then and fed the crossing value as one chunk (with the
// gathered targets), in order. The result is RunCut's fit on the
// concatenated chunks; its chunks' results carry no outputs.
func StreamCut(ctx context.Context, p *Plan, segs []Segment, open func(context.Context, *Plan) (*Stream, func(), error)) (*CutStream, error) {
	if len(segs) == 0 {
		return nil, fmt.Errorf("%w %s: no segments (cut it with CutPlan)", ErrCut, p.ID)
	}
	c := &CutStream{p: p, segs: segs, open: open, want: outputNodes(p),
		plans: make([]*Plan, len(segs)), strs: make([]*Stream, len(segs)), dones: make([]func(), len(segs))}
	for k, s := range segs {
		sp := *s.Plan
		if s.From != "input" {
			// Its chunks come from the segment before; a stream's
			// plan input is never read.
			sp.Input = Value{Kind: KindNone}
		}
		c.plans[k] = &sp
	}
	opening := len(segs)
	if p.Mode == Fit {
		opening = 1
	}
	for k := range opening {
		if err := c.openSeg(ctx, k); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

func (c *CutStream) openSeg(ctx context.Context, k int) error {
	sp := c.plans[k]
	s, done, err := c.open(ctx, sp)
	if err != nil {
		return fmt.Errorf("segment %s (nodes %s, needing %s): %w", sp.ID, nodeIDs(sp.Nodes), askText(sp.Resources), err)
	}
	c.strs[k], c.dones[k] = s, done
	return nil
}

// closeSeg ends segment k's stream (mid-stream, that cancels its plan)
// and gives back what open took for it.
func (c *CutStream) closeSeg(k int) {
	if c.strs[k] != nil {
		c.strs[k].Close()
		c.strs[k] = nil
	}
	if c.dones[k] != nil {
		c.dones[k]()
		c.dones[k] = nil
	}
}

// Close ends every segment's stream still open (cancelling their plans
// if End has not been called) and gives back what open took. Calling it
// more than once, or after End, is harmless.
func (c *CutStream) Close() error {
	c.ended = true
	for k := range c.segs {
		c.closeSeg(k)
	}
	return nil
}

// Chunk sends one chunk through the segments (targets only for a Fit)
// and returns its outputs of p's output nodes (none for a Fit). If a
// segment's plan ended on it instead (it failed), Chunk returns that
// segment's result, its ID naming the segment, and the stream is over.
func (c *CutStream) Chunk(ctx context.Context, seq int64, input Value, targets *Value) (map[string]Value, *Result, error) {
	if c.ended {
		return nil, nil, ErrStreamOver
	}
	c.chunks++
	if c.p.Mode == Fit {
		if targets != nil {
			c.targets = append(c.targets, *targets)
		}
		m, err := c.exchange(ctx, 0, seq, input, targets)
		if err != nil || m.Kind == MsgComplete {
			return nil, c.over(m), err
		}
		return nil, nil, nil
	}
	got := map[string]Value{} // crossing values of this chunk, by node
	out := map[string]Value{}
	for k, s := range c.segs {
		in := input
		if s.From != "input" {
			v, ok := got[s.From]
			if !ok {
				c.Close()
				return nil, nil, fmt.Errorf("%w %s: segment %s needs the output of %q, which no earlier segment returned", ErrCut, c.p.ID, c.plans[k].ID, s.From)
			}
			in = v
		}
		m, err := c.exchange(ctx, k, seq, in, nil)
		if err != nil || m.Kind == MsgComplete {
			return nil, c.over(m), err
		}
		if err := c.crossing(k, m.Outputs, got); err != nil {
			return nil, nil, err
		}
		for id, v := range m.Outputs {
			if c.want[id] {
				out[id] = v
			}
		}
	}
	return out, nil, nil
}

// exchange sends one chunk to segment k and reads the answer: its
// chunk_result, or complete if its plan ended on it. An error closes
// the whole stream.
func (c *CutStream) exchange(ctx context.Context, k int, seq int64, input Value, targets *Value) (*StreamMessage, error) {
	s := c.strs[k]
	if err := s.Send(ctx, seq, input, targets); err != nil {
		// A plan that failed before this chunk (its filters would not
		// open) has sent complete and closed: read that if it is there.
		if m, nerr := s.Next(ctx); nerr == nil && m.Kind == MsgComplete && m.Result != nil {
			return m, nil
		}
		c.Close()
		return nil, c.segErr(k, err)
	}
	m, err := s.Next(ctx)
	switch {
	case err != nil:
		c.Close()
		return nil, c.segErr(k, err)
	case m.Kind == MsgComplete && m.Result != nil:
		return m, nil
	case m.Kind != MsgChunkResult || m.Seq != seq:
		c.Close()
		return nil, c.segErr(k, fmt.Errorf("got %q (seq %d), want %q of chunk %d", m.Kind, m.Seq, MsgChunkResult, seq))
	}
	return m, nil
}

// over closes the stream after a segment ended it early and returns
// that segment's result.
func (c *CutStream) over(m *StreamMessage) *Result {
	if m == nil {
		return nil
	}
	c.Close()
	return m.Result
}

func (c *CutStream) segErr(k int, err error) error {
	sp := c.plans[k]
	return fmt.Errorf("segment %s (nodes %s, needing %s): %w", sp.ID, nodeIDs(sp.Nodes), askText(sp.Resources), err)
}

// crossing takes segment k's values that later segments read out of
// outs into got, refusing one that came back inline.
func (c *CutStream) crossing(k int, outs map[string]Value, got map[string]Value) error {
	for _, id := range c.plans[k].RefOutputs {
		v := outs[id]
		if v.Ref == "" {
			c.Close()
			return fmt.Errorf("%w %s: segment %s returned %q inline, not as a blob reference; a value crossing a cut must go through the store (is the worker started with --root?)", ErrCut, c.p.ID, c.plans[k].ID, id)
		}
		got[id] = v
	}
	return nil
}

// End says there are no more chunks, waits for every segment's result
// and returns the plan's, merged as RunCut merges them: p's outputs
// (over all chunks), every segment's states, the logs in order. A
// segment that does not succeed stops it, and its result (its ID naming
// the segment) is returned. Every stream is closed when End returns.
func (c *CutStream) End(ctx context.Context) (*Result, error) {
	if c.ended {
		return nil, ErrStreamOver
	}
	defer c.Close()
	merged := &Result{Version: ProtocolVersion, ID: c.p.ID, State: StateSucceeded, Outputs: map[string]Value{}}
	var logs []string
	got := map[string]Value{}
	for k, s := range c.segs {
		if c.strs[k] == nil {
			// A fit's later segment: one chunk, the crossing value
			// over all the chunks (with all their targets).
			if err := c.openSeg(ctx, k); err != nil {
				return nil, err
			}
			in, ok := got[s.From]
			if !ok {
				return nil, fmt.Errorf("%w %s: segment %s needs the output of %q, which no earlier segment returned", ErrCut, c.p.ID, c.plans[k].ID, s.From)
			}
			var tp *Value
			if len(c.targets) > 0 {
				t, err := concatRows(c.targets)
				if err != nil {
					return nil, fmt.Errorf("worker: cut stream %s: targets: %w", c.p.ID, err)
				}
				tp = &t
			}
			m, err := c.exchange(ctx, k, 0, in, tp)
			if err != nil {
				return nil, err
			}
			if m.Kind == MsgComplete {
				return c.failed(m.Result, logs), nil
			}
		}
		r, err := c.finish(ctx, k)
		if err != nil {
			return nil, err
		}
		merged.DurationMS += r.DurationMS
		if r.LogTail != "" {
			logs = append(logs, r.LogTail)
		}
		if r.State != StateSucceeded {
			return c.failed(r, logs), nil
		}
		if k+1 < len(c.segs) {
			if err := c.crossing(k, r.Outputs, got); err != nil {
				return nil, err
			}
		}
		mergeSegment(merged, r, c.want)
	}
	merged.LogTail = strings.Join(logs, "")
	return merged, nil
}

// finish ends segment k's stream and returns its result.
func (c *CutStream) finish(ctx context.Context, k int) (*Result, error) {
	s := c.strs[k]
	if err := s.End(ctx); err != nil {
		return nil, c.segErr(k, err)
	}
	for {
		m, err := s.Next(ctx)
		if err != nil {
			return nil, c.segErr(k, err)
		}
		if m.Kind == MsgComplete && m.Result != nil {
			c.closeSeg(k)
			return m.Result, nil
		}
		if m.Kind != MsgChunkResult {
			return nil, c.segErr(k, fmt.Errorf("got %q, want %q", m.Kind, MsgComplete))
		}
	}
}

func (c *CutStream) failed(r *Result, logs []string) *Result {
	if r.LogTail != "" && (len(logs) == 0 || logs[len(logs)-1] != r.LogTail) {
		logs = append(logs, r.LogTail)
	}
	r.LogTail = strings.Join(logs, "")
	return r
}
