package worker

// Running a plan, one responsibility per function (the original's
// execute_plan was 324 lines across nine: seed debt D-02). A session
// holds what a plan has on the worker (a slot, GPUs, an env, a daemon
// with the filters built) from open to close; a one-shot plan and a
// stream both go open, feed, close.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/soma-hpc/soma/fsstore"
)

// session is one plan's hold on the worker.
type session struct {
	w   *Worker
	p   *Plan
	dir string // the plan's files
	// logStart is where this plan's output begins in its daemon's log,
	// and logTail the end of that output, read before the daemon goes.
	logStart int64
	logTail  string

	releaseSlot func()
	releaseGPUs func()
	gpusHeld    []GPU
	env         *Env
	d           *daemon
	ended       bool // the daemon has ended the plan (an end op ran)
}

// execute runs a one-shot plan and returns its result; running is called
// once the plan holds its resources.
func (w *Worker) execute(ctx context.Context, p *Plan, running func(output func() string)) *Result {
	start := time.Now()
	s := &session{w: w, p: p}
	outputs, states, err := s.oneShot(ctx, running)
	return s.result(start, outputs, states, err)
}

// oneShot runs the whole plan in the daemon as one batch: build the
// filters, load their states, feed the input, collect the trained states,
// end. One round trip on the pipe, however many nodes.
func (s *session) oneShot(ctx context.Context, running func(output func() string)) (map[string]Value, map[string]Value, error) {
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
	outs, err := s.addFeed(ctx, b, s.p.Input, s.p.Targets)
	if err != nil {
		return nil, nil, err
	}
	var states map[string]int
	if s.p.Mode == Fit {
		states = s.addStates(b)
	}
	b.end()
	return s.sendBatch(ctx, b, outs, states)
}

// open takes a slot and the plan's GPUs, prepares its files and env, and
// takes a daemon for it.
func (s *session) open(ctx context.Context) error {
	steps := []func(context.Context) error{
		s.acquireSlot, s.acquireGPUs, s.writeFiles, s.environment, s.daemon,
	}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (s *session) acquireSlot(ctx context.Context) error {
	select {
	case s.w.slots <- struct{}{}:
		s.releaseSlot = func() { <-s.w.slots }
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func (s *session) acquireGPUs(ctx context.Context) error {
	if err := s.checkAsk(); err != nil {
		return err
	}
	if s.p.Resources.GPUs == 0 {
		return nil
	}
	gpus, release, err := s.w.gpus.Acquire(s.p.Resources.GPUs, s.p.Resources.ShareGPUs)
	if err != nil {
		return fmt.Errorf("plan asks for %d GPUs, this worker offers %d: %w", s.p.Resources.GPUs, len(s.w.o.Resources.GPUs), err)
	}
	s.releaseGPUs = release
	s.gpusHeld = gpus
	return nil
}

// checkAsk refuses a plan that asks for more CPUs or memory than the
// worker offers at all (it would never fit; placement should have sent it
// elsewhere). CPUs and memory are not reserved per plan: they bound what
// one plan may ask.
func (s *session) checkAsk() error {
	a, r := s.p.Resources, s.w.o.Resources
	if a.CPUs > 0 && r.CPUs > 0 && a.CPUs > r.CPUs {
		return fmt.Errorf("%w: plan asks for %d CPUs, this worker offers %d", ErrInvalidPlan, a.CPUs, r.CPUs)
	}
	if a.Memory > 0 && r.MemoryBytes > 0 && a.Memory > r.MemoryBytes {
		return fmt.Errorf("%w: plan asks for %d bytes of memory, this worker offers %d", ErrInvalidPlan, a.Memory, r.MemoryBytes)
	}
	return nil
}

// writeFiles puts the plan's Python files in a folder named by their
// digests: immutable once written, shared by plans that ship the same
// files, so that a warm daemon imports them again only when they change.
func (s *session) writeFiles(ctx context.Context) error {
	// The folder's name comes from the files' names and digests, known
	// without their bytes for a file shipped by digest: a warm plan finds
	// its files there and reads nothing from the store. (It did a Get of
	// each file, an open, fstat, read and close, and hashed the bytes
	// again, at every plan: issue 14's round trip.)
	names := make([]string, len(s.p.Files))
	contents := make([][]byte, len(s.p.Files))
	for i, f := range s.p.Files {
		var d fsstore.Digest
		switch {
		case f.Content != nil:
			b, sum, err := s.fileContent(ctx, f)
			if err != nil {
				return err
			}
			contents[i], d = b, sum
		default:
			var err error
			if d, err = fsstore.ParseDigest(f.Digest); err != nil {
				return fmt.Errorf("%w: file %s: digest: %v", ErrInvalidPlan, f.Name, err)
			}
		}
		names[i] = f.Name + "=" + d.String()
	}
	sort.Strings(names)
	key := strings.TrimPrefix(fsstore.Sum([]byte(strings.Join(names, "\n"))).String(), fsstore.Algo+":")[:24]
	s.dir = filepath.Join(s.w.o.WorkDir, "files", key)
	made := false
	for i, f := range s.p.Files {
		// The folder is named by the files' digests and each file is
		// written atomically, after its bytes were checked against its
		// digest: one that exists is complete and right.
		if _, err := os.Lstat(filepath.Join(s.dir, f.Name)); err == nil {
			continue
		}
		b := contents[i]
		if b == nil {
			var err error
			if b, _, err = s.fileContent(ctx, f); err != nil {
				return err
			}
		}
		if !made { // only when a file is missing: a stat less for a warm plan
			if err := os.MkdirAll(s.dir, 0o755); err != nil {
				return fmt.Errorf("worker: plan files: %w", err)
			}
			made = true
		}
		if err := fsstore.WriteFileAtomic(filepath.Join(s.dir, f.Name), bytes.NewReader(b)); err != nil {
			return fmt.Errorf("worker: plan file %s: %w", f.Name, err)
		}
	}
	return nil
}

// fileContent returns a shipped file's bytes, from the plan or the store,
// checked against its digest, and their digest (hashed once).
func (s *session) fileContent(ctx context.Context, f File) ([]byte, fsstore.Digest, error) {
	var want fsstore.Digest
	if f.Digest != "" {
		d, err := fsstore.ParseDigest(f.Digest)
		if err != nil {
			return nil, fsstore.Digest{}, fmt.Errorf("%w: file %s: digest: %v", ErrInvalidPlan, f.Name, err)
		}
		want = d
	}
	b := f.Content
	if b == nil {
		if s.w.o.Store == nil {
			return nil, fsstore.Digest{}, fmt.Errorf("%w: file %s has no content and this worker has no store to fetch %s from (ship it inline)", ErrInvalidPlan, f.Name, f.Digest)
		}
		got, err := s.w.o.Store.Get(ctx, want)
		if err != nil {
			return nil, fsstore.Digest{}, fmt.Errorf("worker: file %s: %w", f.Name, err)
		}
		b = got
	}
	sum := fsstore.Sum(b)
	if f.Digest != "" && sum != want {
		return nil, fsstore.Digest{}, fmt.Errorf("%w: file %s: content has digest %s, plan says %s", ErrInvalidPlan, f.Name, sum, f.Digest)
	}
	return b, sum, nil
}

func (s *session) environment(ctx context.Context) error {
	e := s.p.Env
	//lint:ignore S1016 EnvSpec belongs to env.go and may grow fields the wire does not have
	env, err := s.w.o.Envs.Get(ctx, EnvSpec{
		Requirements:       e.Requirements,
		SystemSitePackages: e.SystemSitePackages,
		NoIndex:            e.NoIndex,
		FindLinks:          e.FindLinks,
		IndexURL:           e.IndexURL,
	})
	if err != nil {
		return fmt.Errorf("worker: environment: %w", err)
	}
	s.env = env
	return nil
}

func (s *session) daemon(ctx context.Context) error {
	d, warm, err := s.w.pool.get(ctx, s.env, s.gpusHeld)
	if err != nil {
		return err
	}
	s.w.log.Debug("daemon", "plan", s.p.ID, "warm", warm, "pid", d.hello.PID)
	s.d = d
	// The plan's output is what the daemon's log receives from here on:
	// one fstat, where a log file per plan cost a truncate here, an open,
	// four dup2 and a close in the daemon and a stat after (and left a
	// file behind per plan id).
	s.logStart = d.logStart()
	return nil
}

// pipeNode is a node as the daemon's plan op takes it.
type pipeNode struct {
	ID     string         `json:"id"`
	File   string         `json:"file"`
	Class  string         `json:"class"`
	Config map[string]any `json:"config"`
}

// addBuild adds the ops that build the plan's filters and give each its
// state from an earlier Fit. A state that fails to load fails the plan
// with the reason: never a silent start from scratch (seed debt D-25).
func (s *session) addBuild(ctx context.Context, b *batch) error {
	nodes := make([]pipeNode, len(s.p.Nodes))
	for i, n := range s.p.Nodes {
		cfg, _ := jsonable(n.Config).(map[string]any)
		nodes[i] = pipeNode{ID: n.ID, File: n.File, Class: n.Class, Config: cfg}
	}
	b.add("", "build", pipeOp{Op: "plan", Plan: s.p.ID, Dir: s.dir, Seed: s.p.Seed, Nodes: nodes})
	for _, n := range s.p.Nodes {
		sv, ok := s.p.States[n.ID]
		if !ok {
			continue
		}
		v, err := s.w.res.resolveForPipe(ctx, sv)
		if err != nil {
			return fmt.Errorf("worker: node %q: state: %w", n.ID, err)
		}
		b.track(v)
		if v.Kind != KindBytes {
			return fmt.Errorf("%w: node %q: state is %s, want bytes", ErrInvalidPlan, n.ID, v.Kind)
		}
		if err := b.call(n.ID, "set_state", "", false, false, v); err != nil {
			return err
		}
	}
	return nil
}

// addFeed adds the ops that run input (and targets, for Fit) through the
// nodes: each node is fit first when the plan is a Fit and the node is
// trainable, then runs forward on its input; outputs stay in the daemon
// for the nodes downstream. It returns the reply index of each output the
// plan names.
func (s *session) addFeed(ctx context.Context, b *batch, input Value, targets *Value) (map[string]int, error) {
	in, err := s.w.res.resolveForPipe(ctx, input)
	if err != nil {
		return nil, fmt.Errorf("worker: input: %w", err)
	}
	b.track(in)
	if err := b.put("input", in); err != nil {
		return nil, err
	}
	y := Value{Kind: KindNone}
	if targets != nil {
		t, err := s.w.res.resolveForPipe(ctx, *targets)
		if err != nil {
			return nil, fmt.Errorf("worker: targets: %w", err)
		}
		b.track(t)
		// Targets matter only to fit: a forward does not send them.
		if s.p.Mode == Fit {
			if err := b.put("targets", t); err != nil {
				return nil, err
			}
			y = slotValue("targets")
		}
	}
	want := outputNodes(s.p)
	outs := map[string]int{}
	for _, n := range s.p.Nodes {
		x := slotValue(nodeInput(n))
		if s.p.Mode == Fit {
			if err := b.call(n.ID, "fit", "", false, true, x, y); err != nil {
				return nil, err
			}
		}
		if err := b.call(n.ID, "forward", n.ID, want[n.ID], false, x); err != nil {
			return nil, err
		}
		if want[n.ID] {
			outs[n.ID] = len(b.ops) - 1
		}
	}
	return outs, nil
}

// addStates adds a get_state op for each trainable node and returns their
// reply indexes (the daemon skips the nodes that are not trainable).
func (s *session) addStates(b *batch) map[string]int {
	idx := map[string]int{}
	for _, n := range s.p.Nodes {
		_ = b.call(n.ID, "get_state", "", true, true)
		idx[n.ID] = len(b.ops) - 1
	}
	return idx
}

// deliver turns large outputs into blob references (resolver.deliver).
func (s *session) deliver(ctx context.Context, outputs map[string]Value) (map[string]Value, error) {
	out := make(map[string]Value, len(outputs))
	for id, v := range outputs {
		limit := s.w.o.InlineLimit
		if slices.Contains(s.p.RefOutputs, id) {
			// A value crossing a cut must not reach the client
			// (Plan.RefOutputs): store it whatever its size.
			switch {
			case s.w.o.Store == nil:
				return nil, fmt.Errorf("%w: output %q must come back as a blob reference (ref_outputs) but this worker has no store (start it with --root)", ErrInvalidPlan, id)
			case v.Kind != KindArray && v.Kind != KindBytes:
				return nil, fmt.Errorf("%w: output %q is %s; only arrays and bytes can be blob references (ref_outputs; a value crossing a cut of the plan)", ErrInvalidPlan, id, v.Kind)
			}
			limit = -1
		}
		d, err := s.w.res.deliver(ctx, v, limit)
		if err != nil {
			return nil, err
		}
		out[id] = d
	}
	return out, nil
}

// storeStates keeps each trained state as a blob of the store when there
// is one (inline otherwise).
func (s *session) storeStates(ctx context.Context, states map[string]Value) (map[string]Value, error) {
	if len(states) == 0 {
		return nil, nil
	}
	out := make(map[string]Value, len(states))
	for id, v := range states {
		if s.w.o.Store != nil {
			d, err := s.w.o.Store.Put(ctx, v.Data)
			if err != nil {
				return nil, fmt.Errorf("worker: store state of %q: %w", id, err)
			}
			v = Value{Kind: KindBytes, Ref: BlobRef(d)}
		}
		out[id] = v
	}
	return out, nil
}

// close ends the plan in the daemon (unless a batch did) and gives
// everything back. A daemon whose plan could not end cleanly is killed,
// not reused.
func (s *session) close(ctx context.Context) {
	if s.d != nil {
		if !s.d.broken && !s.ended {
			// A cancelled ctx must not stop the clean-up call.
			ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.w.o.CancelGrace)
			if r, _, err := s.d.call(ectx, map[string]any{"op": "end"}, nil); err != nil || !r.OK {
				s.d.broken = true
			}
			cancel()
		}
		// After the end op (which flushed), before the daemon goes back
		// or away: a crash's dump is in the log too.
		s.logTail = s.d.logSince(s.logStart, maxLogTail)
		s.w.pool.put(s.d)
		s.d = nil
	}
	if s.env != nil {
		s.env.Release()
		s.env = nil
	}
	if s.releaseGPUs != nil {
		s.releaseGPUs()
		s.releaseGPUs = nil
	}
	if s.releaseSlot != nil {
		s.releaseSlot()
		s.releaseSlot = nil
	}
}

// kindSlot marks an argument that names a value kept in the daemon (its
// name in Ref); it never crosses the network.
const kindSlot Kind = "slot"

func slotValue(name string) Value { return Value{Kind: kindSlot, Ref: name} }

func nodeInput(n Node) string {
	if len(n.Inputs) == 0 {
		return "input"
	}
	return n.Inputs[0]
}

// outputNodes is the set of nodes whose outputs a plan returns.
func outputNodes(p *Plan) map[string]bool {
	want := map[string]bool{}
	for _, id := range p.Outputs {
		want[id] = true
	}
	if len(want) == 0 && len(p.Nodes) > 0 {
		want[p.Nodes[len(p.Nodes)-1].ID] = true
	}
	return want
}

// result turns how the plan ended into its Result.
func (s *session) result(start time.Time, outputs, states map[string]Value, err error) *Result {
	r := &Result{Version: ProtocolVersion, ID: s.p.ID, DurationMS: float64(time.Since(start).Microseconds()) / 1000}
	r.LogTail = s.logTail
	switch {
	case err == nil:
		r.State, r.Outputs, r.States = StateSucceeded, outputs, states
		return r
	case errors.Is(err, ErrCancelled) || errors.Is(err, ErrClosed):
		r.State, r.Error = StateCancelled, err.Error()
	default:
		r.State, r.Error = StateFailed, err.Error()
	}
	var fe *FilterError
	if errors.As(err, &fe) {
		r.Traceback = fe.Traceback
	}
	s.w.log.Info("plan ended", "plan", s.p.ID, "state", r.State, "error", r.Error)
	return r
}

// output returns a function that reads the end of what the plan has
// printed so far (for the status of a running plan): its daemon's log
// from logStart. Safe to call from any goroutine, also once the plan has
// ended (then it may find the log closed and return "").
func (s *session) output() func() string {
	d, start := s.d, s.logStart
	return func() string { return d.logSince(start, maxLogTail) }
}

// maxLogTail is how much of a plan's output its result carries (the end).
const maxLogTail = 8 << 10

// sendBatch sends the batch b to the daemon and turns its replies into
// the plan's outputs (outs: output name -> reply index) and stored states
// (states: node -> reply index). One place for the one-shot and the
// streamed plan, so both end the same way.
func (s *session) sendBatch(ctx context.Context, b *batch, outs, states map[string]int) (map[string]Value, map[string]Value, error) {
	replies, err := s.send(ctx, b)
	if err != nil {
		return nil, nil, err
	}
	outputs, err := s.deliver(ctx, pick(replies, outs))
	if err != nil {
		return nil, nil, err
	}
	stateValues, err := s.storeStates(ctx, pick(replies, states))
	return outputs, stateValues, err
}
