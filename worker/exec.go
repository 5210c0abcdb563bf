package worker

// Running a plan, one responsibility per function (the original's
// execute_plan was 324 lines across nine: seed debt D-02). A session
// holds what a plan has on the worker (a slot, GPUs, an env, a daemon
// with the filters built) from open to close; a one-shot plan and a
// stream both go open, feed, close.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/soma-hpc/soma/fsstore"
)

// session is one plan's hold on the worker.
type session struct {
	w     *Worker
	p     *Plan
	log   string // the plan's log file
	dir   string // the plan's files
	nodes map[string]pipeNodeInfo
	// hasTargets: the daemon holds targets for this feed.
	hasTargets bool

	releaseSlot func()
	releaseGPUs func()
	gpusHeld    []GPU
	env         *Env
	d           *daemon
}

// execute runs a one-shot plan and returns its result; running is called
// once the plan holds its resources.
func (w *Worker) execute(ctx context.Context, p *Plan, running func()) *Result {
	start := time.Now()
	s := &session{w: w, p: p}
	outputs, states, err := s.oneShot(ctx, running)
	return s.result(start, outputs, states, err)
}

func (s *session) oneShot(ctx context.Context, running func()) (map[string]Value, map[string]Value, error) {
	if err := s.open(ctx); err != nil {
		s.close(ctx)
		return nil, nil, err
	}
	running()
	outputs, err := s.feed(ctx, s.p.Input, s.p.Targets)
	if err == nil {
		outputs, err = s.deliver(ctx, outputs)
	}
	var states map[string]Value
	if err == nil && s.p.Mode == Fit {
		states, err = s.collectStates(ctx)
	}
	s.close(ctx)
	return outputs, states, err
}

// open takes a slot and the plan's GPUs, prepares its files and env, and
// builds its filters in a daemon, loading any states.
func (s *session) open(ctx context.Context) error {
	steps := []func(context.Context) error{
		s.acquireSlot, s.acquireGPUs, s.writeFiles, s.environment, s.daemon, s.build, s.loadStates,
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
	gpus, release, err := s.w.gpus.Acquire(s.p.Resources.GPUs)
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
	contents := make([][]byte, len(s.p.Files))
	names := make([]string, len(s.p.Files))
	for i, f := range s.p.Files {
		b, err := s.fileContent(ctx, f)
		if err != nil {
			return err
		}
		contents[i] = b
		names[i] = f.Name + "=" + fsstore.Sum(b).String()
	}
	sort.Strings(names)
	key := strings.TrimPrefix(fsstore.Sum([]byte(strings.Join(names, "\n"))).String(), fsstore.Algo+":")[:24]
	s.dir = filepath.Join(s.w.o.WorkDir, "files", key)
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return fmt.Errorf("worker: plan files: %w", err)
	}
	for i, f := range s.p.Files {
		// The folder is named by the files' digests and each file is
		// written atomically: one that exists is complete and right.
		if _, err := os.Lstat(filepath.Join(s.dir, f.Name)); err == nil {
			continue
		}
		if err := fsstore.WriteFileAtomic(filepath.Join(s.dir, f.Name), strings.NewReader(string(contents[i]))); err != nil {
			return fmt.Errorf("worker: plan file %s: %w", f.Name, err)
		}
	}
	s.log = filepath.Join(s.w.o.WorkDir, "plans", s.p.ID+".log")
	// A plan id run again starts a fresh log.
	if err := os.Remove(s.log); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("worker: plan log: %w", err)
	}
	return nil
}

// fileContent returns a shipped file's bytes, from the plan or the store,
// checked against its digest.
func (s *session) fileContent(ctx context.Context, f File) ([]byte, error) {
	var want fsstore.Digest
	if f.Digest != "" {
		d, err := fsstore.ParseDigest(f.Digest)
		if err != nil {
			return nil, fmt.Errorf("%w: file %s: digest: %v", ErrInvalidPlan, f.Name, err)
		}
		want = d
	}
	b := f.Content
	if b == nil {
		if s.w.o.Store == nil {
			return nil, fmt.Errorf("%w: file %s has no content and this worker has no store to fetch %s from (ship it inline)", ErrInvalidPlan, f.Name, f.Digest)
		}
		got, err := s.w.o.Store.Get(ctx, want)
		if err != nil {
			return nil, fmt.Errorf("worker: file %s: %w", f.Name, err)
		}
		b = got
	}
	if f.Digest != "" && fsstore.Sum(b) != want {
		return nil, fmt.Errorf("%w: file %s: content has digest %s, plan says %s", ErrInvalidPlan, f.Name, fsstore.Sum(b), f.Digest)
	}
	return b, nil
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
	return nil
}

// pipeNode is a node as the daemon's plan op takes it.
type pipeNode struct {
	ID     string         `json:"id"`
	File   string         `json:"file"`
	Class  string         `json:"class"`
	Config map[string]any `json:"config"`
}

func (s *session) build(ctx context.Context) error {
	nodes := make([]pipeNode, len(s.p.Nodes))
	for i, n := range s.p.Nodes {
		cfg, _ := jsonable(n.Config).(map[string]any)
		nodes[i] = pipeNode{ID: n.ID, File: n.File, Class: n.Class, Config: cfg}
	}
	head := map[string]any{"op": "plan", "plan": s.p.ID, "dir": s.dir, "log": s.log, "seed": s.p.Seed, "nodes": nodes}
	r, _, err := s.ask(ctx, "", "build", head, nil)
	if err != nil {
		return err
	}
	s.nodes = r.Nodes
	return nil
}

// loadStates gives each node its state from an earlier Fit. A state that
// fails to load fails the plan with the reason: never a silent start from
// scratch (seed debt D-25).
func (s *session) loadStates(ctx context.Context) error {
	for _, n := range s.p.Nodes {
		sv, ok := s.p.States[n.ID]
		if !ok {
			continue
		}
		v, err := s.w.res.resolve(ctx, sv)
		if err != nil {
			return fmt.Errorf("worker: node %q: state: %w", n.ID, err)
		}
		if v.Kind != KindBytes {
			return fmt.Errorf("%w: node %q: state is %s, want bytes", ErrInvalidPlan, n.ID, v.Kind)
		}
		if _, _, err := s.callNode(ctx, n.ID, "set_state", false, v); err != nil {
			var fe *FilterError
			if errors.As(err, &fe) {
				fe.Message = "state failed to load: " + fe.Message
			}
			return err
		}
	}
	return nil
}

// feed runs input (and targets, for Fit) through the nodes and returns
// the outputs the plan names, inline (their bytes lie in the daemon's
// reply frames).
func (s *session) feed(ctx context.Context, input Value, targets *Value) (map[string]Value, error) {
	if err := s.put(ctx, "input", input); err != nil {
		return nil, err
	}
	// Targets matter only to fit: a forward saves the round trip.
	s.hasTargets = targets != nil
	if targets != nil {
		if err := s.put(ctx, "targets", *targets); err != nil {
			return nil, err
		}
	}
	want := outputNodes(s.p)
	outputs := map[string]Value{}
	for _, n := range s.p.Nodes {
		out, err := s.runNode(ctx, n, want[n.ID])
		if err != nil {
			return nil, err
		}
		if want[n.ID] {
			outputs[n.ID] = out
		}
	}
	return outputs, nil
}

// deliver turns large outputs into blob references (resolver.deliver).
func (s *session) deliver(ctx context.Context, outputs map[string]Value) (map[string]Value, error) {
	out := make(map[string]Value, len(outputs))
	for id, v := range outputs {
		d, err := s.w.res.deliver(ctx, v, s.w.o.InlineLimit)
		if err != nil {
			return nil, err
		}
		out[id] = d
	}
	return out, nil
}

// runNode fits the node first when the plan is a Fit and the node is
// trainable, then runs forward on its input, keeping the output in the
// daemon for the nodes downstream.
func (s *session) runNode(ctx context.Context, n Node, reply bool) (Value, error) {
	in := slotValue(nodeInput(n))
	if s.p.Mode == Fit && s.nodes[n.ID].Trainable {
		y := Value{Kind: KindNone}
		if s.hasTargets {
			y = slotValue("targets")
		}
		if _, _, err := s.callNode(ctx, n.ID, "fit", false, in, y); err != nil {
			return Value{}, err
		}
	}
	v, _, err := s.callKeep(ctx, n.ID, "forward", n.ID, reply, in)
	return v, err
}

// collectStates returns the trained state of each trainable node, as a
// blob of the store when there is one.
func (s *session) collectStates(ctx context.Context) (map[string]Value, error) {
	states := map[string]Value{}
	for _, n := range s.p.Nodes {
		if !s.nodes[n.ID].Trainable {
			continue
		}
		v, _, err := s.callNode(ctx, n.ID, "get_state", true)
		if err != nil {
			return nil, err
		}
		if s.w.o.Store != nil {
			d, err := s.w.o.Store.Put(ctx, v.Data)
			if err != nil {
				return nil, fmt.Errorf("worker: store state of %q: %w", n.ID, err)
			}
			v = Value{Kind: KindBytes, Ref: BlobRef(d)}
		}
		states[n.ID] = v
	}
	return states, nil
}

// close ends the plan in the daemon and gives everything back. A daemon
// whose plan could not end cleanly is killed, not reused.
func (s *session) close(ctx context.Context) {
	if s.d != nil {
		if !s.d.broken {
			// A cancelled ctx must not stop the clean-up call.
			ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.w.o.CancelGrace)
			if r, _, err := s.d.call(ectx, map[string]any{"op": "end"}, nil); err != nil || !r.OK {
				s.d.broken = true
			}
			cancel()
		}
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

// put resolves v and keeps it in the daemon under slot.
func (s *session) put(ctx context.Context, slot string, v Value) error {
	rv, err := s.w.res.resolve(ctx, v)
	if err != nil {
		return fmt.Errorf("worker: %s: %w", slot, err)
	}
	var body pipeBody
	pv, err := body.value(rv)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrInvalidPlan, slot, err)
	}
	_, _, err = s.ask(ctx, "", "put "+slot, map[string]any{"op": "put", "slot": slot, "value": pv}, &body)
	return err
}

func (s *session) callNode(ctx context.Context, node, method string, reply bool, args ...Value) (Value, []byte, error) {
	return s.callKeep(ctx, node, method, "", reply, args...)
}

// callKeep calls method on node with args (slot values or inline ones),
// keeping the result in the daemon under keep when set.
func (s *session) callKeep(ctx context.Context, node, method, keep string, reply bool, args ...Value) (Value, []byte, error) {
	var body pipeBody
	pargs := make([]pipeValue, len(args))
	for i, a := range args {
		if a.Kind == kindSlot {
			pargs[i] = pipeValue{Kind: kindSlot, Slot: a.Ref}
			continue
		}
		pv, err := body.value(a)
		if err != nil {
			return Value{}, nil, err
		}
		pargs[i] = pv
	}
	head := map[string]any{"op": "call", "node": node, "method": method, "args": pargs, "reply": reply}
	if keep != "" {
		head["keep"] = keep
	}
	r, rbody, err := s.ask(ctx, node, method, head, &body)
	if err != nil {
		return Value{}, nil, err
	}
	v, err := fromPipe(r.Value, rbody)
	return v, rbody, err
}

// ask sends one request to the daemon and turns a failed reply into a
// *FilterError.
func (s *session) ask(ctx context.Context, node, what string, head any, body *pipeBody) (pipeReply, []byte, error) {
	r, rbody, err := s.d.call(ctx, head, body)
	if err != nil {
		if errors.Is(err, ErrDaemonDied) {
			return r, nil, fmt.Errorf("%w during %s of node %q", err, what, node)
		}
		return r, nil, err
	}
	if !r.OK {
		if r.Cancelled {
			return r, nil, context.Cause(ctx)
		}
		return r, nil, &FilterError{Node: node, Method: what, Message: r.Error, Traceback: r.Traceback}
	}
	return r, rbody, nil
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
	r.LogTail = tail(s.log, 8<<10)
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

// tail returns the last n bytes of the file at path ("" if none).
func tail(path string, n int64) string {
	if path == "" {
		return ""
	}
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(st.Size()-n, 0)
	b := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(b, off); err != nil && !errors.Is(err, io.EOF) {
		return ""
	}
	return string(b)
}
