package worker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Segment is one piece of a cut plan (CutPlan): a sub-plan whose nodes
// share one requirement, and where its input comes from.
type Segment struct {
	// Plan is the sub-plan. Its Resources are the segment's requirement;
	// its Input is the whole plan's input when From is "input", and must
	// be set to the blob reference of node From's output otherwise
	// (RunCut does).
	Plan *Plan
	// From is "input" or the id of a node of an earlier segment.
	From string
}

// ErrCut is a plan that cannot be cut into segments by placement.
var ErrCut = errors.New("worker: cannot cut plan")

// CutPlan cuts p into consecutive segments of nodes with the same
// requirement (a node's At, or the plan's Resources when it has none)
// and the same Python environment (a node's Env, or the plan's Env), in
// the plan's node order. A plan whose nodes all have one requirement and
// one env comes back as one segment: the plan with that requirement as
// its Resources and that env as its Env. Segments' nodes carry no At and
// no Env: a segment's Resources and Env say them.
//
// A value that crosses a cut is an output of an earlier segment listed in
// that segment's RefOutputs, so that its worker stores it as a blob and
// only the reference passes through the client. Each segment takes one
// value from outside (a filter takes one input): a segment whose nodes
// read both the plan's input and an earlier segment's output, or two
// earlier nodes, is refused, as is a plan whose node order is not
// topological (a value would cross to a segment that is not later).
// Every segment carries the plan's files, env, seed, mode, targets and
// timeout, and the states of its own nodes.
func CutPlan(p *Plan) ([]Segment, error) {
	if err := ValidatePlan(p); err != nil {
		return nil, err
	}
	reqs := make([]Ask, len(p.Nodes))
	envs := make([]EnvRequest, len(p.Nodes))
	for i, n := range p.Nodes {
		reqs[i], envs[i] = p.Resources, p.Env
		if n.At != nil {
			reqs[i] = *n.At
		}
		if n.Env != nil {
			envs[i] = *n.Env
		}
	}
	// bounds[k] is the first node of segment k.
	bounds := []int{0}
	for i := 1; i < len(p.Nodes); i++ {
		if !sameAsk(reqs[i], reqs[i-1]) || !sameEnv(envs[i], envs[i-1]) {
			bounds = append(bounds, i)
		}
	}
	if len(bounds) == 1 {
		// One segment: the plan as it is, placed by the one requirement
		// its nodes share (every node may say at = {...}).
		one := *p
		one.Resources, one.Env = reqs[0], envs[0]
		one.Nodes = slices.Clone(p.Nodes)
		for i := range one.Nodes {
			one.Nodes[i].At, one.Nodes[i].Env = nil, nil
		}
		return []Segment{{Plan: &one, From: "input"}}, nil
	}
	bounds = append(bounds, len(p.Nodes))
	segOf := map[string]int{}
	for k := 0; k+1 < len(bounds); k++ {
		for _, n := range p.Nodes[bounds[k]:bounds[k+1]] {
			segOf[n.ID] = k
		}
	}
	want := outputNodes(p)
	segs := make([]Segment, len(bounds)-1)
	crossing := map[string]bool{}
	for k := range segs {
		nodes := p.Nodes[bounds[k]:bounds[k+1]]
		from := ""
		sub := make([]Node, len(nodes))
		for i, n := range nodes {
			n.Inputs = slices.Clone(n.Inputs)
			n.At, n.Env = nil, nil // the segment's Resources and Env say them
			in := nodeInput(n)
			if in == "input" || segOf[in] != k {
				if in != "input" && segOf[in] > k {
					return nil, fmt.Errorf("%w %s: node %q (segment %d) reads %q of a later segment %d; list the nodes in the order they run", ErrCut, p.ID, n.ID, k+1, in, segOf[in]+1)
				}
				if from != "" && from != in {
					return nil, fmt.Errorf("%w %s: segment %d (nodes %s, on %s) reads both %q and %q from outside; a segment takes one value across a cut (give the nodes the same at, or reorder them)",
						ErrCut, p.ID, k+1, nodeIDs(nodes), askText(reqs[bounds[k]]), from, in)
				}
				from = in
				n.Inputs = nil // the segment's input
				if in != "input" {
					crossing[in] = true
				}
			}
			sub[i] = n
		}
		sp := &Plan{
			Version: p.Version, ID: fmt.Sprintf("%s.%d", p.ID, k+1), Nodes: sub, Files: p.Files, Env: envs[bounds[k]],
			Mode: p.Mode, Seed: p.Seed, Targets: p.Targets, Resources: reqs[bounds[k]],
			TimeoutSeconds: p.TimeoutSeconds, Metadata: p.Metadata,
		}
		if from == "input" {
			sp.Input = p.Input
		}
		for _, n := range sub {
			if st, ok := p.States[n.ID]; ok {
				if sp.States == nil {
					sp.States = map[string]Value{}
				}
				sp.States[n.ID] = st
			}
			if want[n.ID] {
				sp.Outputs = append(sp.Outputs, n.ID)
			}
		}
		segs[k] = Segment{Plan: sp, From: from}
	}
	for _, s := range segs {
		for _, n := range s.Plan.Nodes {
			if crossing[n.ID] {
				if !slices.Contains(s.Plan.Outputs, n.ID) {
					s.Plan.Outputs = append(s.Plan.Outputs, n.ID)
				}
				s.Plan.RefOutputs = append(s.Plan.RefOutputs, n.ID)
			}
		}
		if len(s.Plan.Outputs) == 0 {
			// No output of the plan here and nothing crossing out: the
			// segment's last node still must run (its state may be
			// trained), so it is the output, as in any plan.
			s.Plan.Outputs = []string{s.Plan.Nodes[len(s.Plan.Nodes)-1].ID}
		}
		if err := ValidatePlan(s.Plan); err != nil {
			return nil, fmt.Errorf("%w %s: segment %s: %w", ErrCut, p.ID, s.Plan.ID, err)
		}
	}
	return segs, nil
}

// RunCut runs segs (from CutPlan of p) in order with run, passing each
// crossing value on as the blob reference the earlier segment's worker
// stored, and merges the results: p's outputs and every segment's
// states. It stops at the first segment that does not succeed and
// returns that result, its ID naming the segment. A crossing value that
// comes back inline (not a reference) is an error: it would have passed
// through the client.
func RunCut(ctx context.Context, p *Plan, segs []Segment, run func(context.Context, *Plan) (*Result, error)) (*Result, error) {
	if len(segs) == 1 {
		return run(ctx, segs[0].Plan)
	}
	want := outputNodes(p)
	got := map[string]Value{} // crossing values, by node
	merged := &Result{Version: ProtocolVersion, ID: p.ID, State: StateSucceeded, Outputs: map[string]Value{}}
	var logs []string
	for _, s := range segs {
		sp := *s.Plan
		if s.From != "input" {
			v, ok := got[s.From]
			if !ok {
				return nil, fmt.Errorf("%w %s: segment %s needs the output of %q, which no earlier segment returned", ErrCut, p.ID, sp.ID, s.From)
			}
			sp.Input = v
		}
		r, err := run(ctx, &sp)
		if err != nil {
			return nil, fmt.Errorf("segment %s (nodes %s, needing %s): %w", sp.ID, nodeIDs(sp.Nodes), askText(sp.Resources), err)
		}
		merged.DurationMS += r.DurationMS
		if r.LogTail != "" {
			logs = append(logs, r.LogTail)
		}
		if r.State != StateSucceeded {
			r.LogTail = strings.Join(logs, "")
			return r, nil
		}
		for _, id := range sp.RefOutputs {
			v := r.Outputs[id]
			if v.Ref == "" {
				return nil, fmt.Errorf("%w %s: segment %s returned %q inline, not as a blob reference; a value crossing a cut must go through the store (is the worker started with --root?)", ErrCut, p.ID, sp.ID, id)
			}
			got[id] = v
		}
		mergeSegment(merged, r, want)
	}
	merged.LogTail = strings.Join(logs, "")
	return merged, nil
}

func sameAsk(a, b Ask) bool {
	if a.GPUs != b.GPUs || a.CPUs != b.CPUs || a.Memory != b.Memory || a.Client != b.Client {
		return false
	}
	x, y := slices.Clone(a.Tags), slices.Clone(b.Tags)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(slices.Compact(x), slices.Compact(y))
}

// sameEnv compares two envs as written: requirements listed in another
// order make another segment, which costs a cut, never a wrong env.
func sameEnv(a, b EnvRequest) bool {
	return a.SystemSitePackages == b.SystemSitePackages && a.NoIndex == b.NoIndex && a.IndexURL == b.IndexURL &&
		slices.Equal(a.Requirements, b.Requirements) && slices.Equal(a.FindLinks, b.FindLinks)
}

func askText(a Ask) string {
	if a.Client {
		return "the client"
	}
	return Requirement{GPUs: a.GPUs, CPUs: a.CPUs, Memory: a.Memory, Tags: a.Tags}.String()
}

func nodeIDs(nodes []Node) string {
	ids := make([]string, len(nodes))
	for i, n := range nodes {
		ids[i] = n.ID
	}
	return strings.Join(ids, ",")
}

// errStreamCut is a plan sent whole as a stream whose nodes need
// different placements. A stream runs on the one worker it was opened
// on; a plan across a cut is streamed by the client with StreamCut, one
// stream per segment. Refused rather than run whole on the stream's
// worker, which would ignore the nodes' at and run them where they must
// not (issue 15).
func errStreamCut(p *Plan) error {
	for i := 1; i < len(p.Nodes); i++ {
		a, b := p.Resources, p.Resources
		if n := p.Nodes[i-1]; n.At != nil {
			a = *n.At
		}
		if n := p.Nodes[i]; n.At != nil {
			b = *n.At
		}
		if !sameAsk(a, b) {
			return fmt.Errorf("%w %s: a stream runs on one worker, and nodes %q (needs %s) and %q (needs %s) must run in different places: stream it cut (worker.CutPlan, then worker.StreamCut, which opens one stream per segment on a worker that fits and passes what crosses a cut through the store), or give all its nodes one placement",
				ErrCut, p.ID, p.Nodes[i-1].ID, askText(a), p.Nodes[i].ID, askText(b))
		}
	}
	return nil
}

// mergeSegment adds what segment result r brings to the cut plan's
// merged result: its outputs that the plan returns (want), and the
// trained states of its filters.
func mergeSegment(merged, r *Result, want map[string]bool) {
	for id, v := range r.Outputs {
		if want[id] {
			merged.Outputs[id] = v
		}
	}
	if len(r.States) > 0 {
		if merged.States == nil {
			merged.States = map[string]Value{}
		}
		maps.Copy(merged.States, r.States)
	}
}
