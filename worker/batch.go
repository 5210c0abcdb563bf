package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
)

// batch is several daemon requests sent as one frame (daemon.py's batch
// op): a plan costs one round trip on the pipe, not one per call (a warm
// no-op plan made five). The daemon runs them in order and stops at the
// first failure, except for an end op, which always runs.
type batch struct {
	ops   []pipeOp
	refs  []opRef
	body  pipeBody
	temps []string // files to remove once the batch has run (the daemon maps them)
}

// opRef says what an op was, for error messages.
type opRef struct{ node, method string }

// pipeOp is one request of a batch, as daemon.py's ops read it (see
// its docstring); fields an op does not use are left out. A struct, not
// a map: encoding/json encodes maps by reflection on every key and sorts
// them, which was about 40 µs of a warm no-op plan (pprof).
type pipeOp struct {
	Op string `json:"op"`
	// plan
	Plan  string     `json:"plan,omitempty"`
	Dir   string     `json:"dir,omitempty"`
	Seed  int64      `json:"seed,omitempty"`
	Nodes []pipeNode `json:"nodes,omitempty"`
	// put
	Slot  string     `json:"slot,omitempty"`
	Value *pipeValue `json:"value,omitempty"`
	// call
	Node        string      `json:"node,omitempty"`
	Method      string      `json:"method,omitempty"`
	Args        []pipeValue `json:"args,omitempty"`
	Reply       bool        `json:"reply"`
	Keep        string      `json:"keep,omitempty"`
	IfTrainable bool        `json:"if_trainable,omitempty"`
	// end
	Always bool `json:"always,omitempty"`
}

// pipeBatch is the batch op itself.
type pipeBatch struct {
	Op  string   `json:"op"`
	Ops []pipeOp `json:"ops"`
}

func (b *batch) add(node, method string, head pipeOp) {
	b.ops = append(b.ops, head)
	b.refs = append(b.refs, opRef{node, method})
}

// put keeps an inline value in the daemon under slot.
func (b *batch) put(slot string, v Value) error {
	pv, err := b.body.value(v)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrInvalidPlan, slot, err)
	}
	b.add("", "put "+slot, pipeOp{Op: "put", Slot: slot, Value: &pv})
	return nil
}

// call calls method on node with args (slot values or inline ones),
// keeping the result in the daemon under keep when set, and sending it
// back when reply. ifTrainable skips nodes without fit and get_state.
func (b *batch) call(node, method, keep string, reply, ifTrainable bool, args ...Value) error {
	pargs := make([]pipeValue, len(args))
	for i, a := range args {
		if a.Kind == kindSlot {
			pargs[i] = pipeValue{Kind: kindSlot, Slot: a.Ref}
			continue
		}
		pv, err := b.body.value(a)
		if err != nil {
			return err
		}
		pargs[i] = pv
	}
	b.add(node, method, pipeOp{Op: "call", Node: node, Method: method, Args: pargs, Reply: reply, Keep: keep, IfTrainable: ifTrainable})
	return nil
}

// end ends the plan in the daemon; it runs even after a failed op.
func (b *batch) end() {
	b.add("", "end", pipeOp{Op: "end", Always: true})
}

// batchReply is one op's reply with the body its values refer to.
type batchReply struct {
	pipeReply
	body []byte
}

// send runs b in the daemon. The first failed op becomes the error: a
// cancelled call the ctx's cause, a filter's exception a *FilterError.
func (s *session) send(ctx context.Context, b *batch) ([]batchReply, error) {
	// A mapped file stays readable after its name is gone.
	defer b.removeTemps()
	r, body, err := s.d.call(ctx, &pipeBatch{Op: "batch", Ops: b.ops}, &b.body)
	if err != nil {
		if errors.Is(err, ErrDaemonDied) {
			return nil, fmt.Errorf("%w during %s", err, describeOps(b.refs))
		}
		return nil, err
	}
	if !r.OK || len(r.Replies) != len(b.ops) {
		s.d.broken = true
		return nil, fmt.Errorf("%w: batch of %d ops answered with %d replies (%s)", ErrPipe, len(b.ops), len(r.Replies), r.Error)
	}
	out := make([]batchReply, len(r.Replies))
	var first error
	for i, rr := range r.Replies {
		out[i] = batchReply{rr, body}
		ref := b.refs[i]
		if ref.method == "end" {
			if rr.OK {
				s.ended = true
			} else {
				s.d.broken = true
			}
		}
		if first != nil || rr.OK || rr.NotRun {
			continue
		}
		switch {
		case rr.Cancelled:
			first = context.Cause(ctx)
			if first == nil {
				first = ErrCancelled
			}
		case ref.method == "set_state":
			first = &FilterError{Node: ref.node, Method: ref.method, Message: "state failed to load: " + rr.Error, Traceback: rr.Traceback}
		default:
			first = &FilterError{Node: ref.node, Method: ref.method, Message: rr.Error, Traceback: rr.Traceback}
		}
	}
	return out, first
}

// pick returns the values of the replies at idx, by name; skipped ops
// (a node that is not trainable) are left out.
func pick(replies []batchReply, idx map[string]int) map[string]Value {
	if len(idx) == 0 {
		return nil
	}
	out := map[string]Value{}
	for name, i := range idx {
		r := replies[i]
		if r.Skipped {
			continue
		}
		v, err := fromPipe(r.Value, r.body)
		if err != nil {
			v = Value{Kind: KindNone}
		}
		out[name] = v
	}
	return out
}

// describeOps names the ops of a batch for a crash message: the plan's
// calls, e.g. `fit of node "clf"`.
func describeOps(refs []opRef) string {
	calls := ""
	n := 0
	for _, r := range refs {
		if r.node == "" {
			continue
		}
		n++
		if n <= 3 {
			if calls != "" {
				calls += ", "
			}
			calls += fmt.Sprintf("%s of node %q", r.method, r.node)
		}
	}
	switch {
	case n == 0:
		return "the plan's set-up"
	case n == 1:
		return calls
	case n > 3:
		calls += fmt.Sprintf(" (and %d more calls)", n-3)
	}
	return "one of: " + calls
}

// track makes v's file the batch's to remove, if it is temporary.
func (b *batch) track(v Value) Value {
	if v.temp {
		b.temps = append(b.temps, v.file)
	}
	return v
}

// removeTemps removes the batch's temporary files; it may run twice.
func (b *batch) removeTemps() {
	for _, p := range b.temps {
		os.Remove(p)
	}
	b.temps = nil
}
