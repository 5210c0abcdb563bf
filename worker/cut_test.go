package worker

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// cutPlan builds a plan of nodes n0..n(k-1), each reading the previous one, at
// the given tags ("" keeps the plan's requirement).
func cutPlan(tags ...string) *Plan {
	p := &Plan{ID: "p", Mode: Forward, Files: []File{{Name: "f.py", Content: []byte("#")}}, Input: Value{Kind: KindObject, Object: 1}}
	for i, tag := range tags {
		n := Node{ID: "n" + string(rune('0'+i)), File: "f.py", Class: "C"}
		if i > 0 {
			n.Inputs = []string{p.Nodes[i-1].ID}
		}
		if tag != "" {
			n.At = &Ask{Tags: []string{tag}}
		}
		p.Nodes = append(p.Nodes, n)
	}
	return p
}

func TestCutPlan(t *testing.T) {
	for _, tc := range []struct {
		name string
		plan func() *Plan
		// want: per segment, "NODES<FROM>REFOUTPUTS/OUTPUTS"
		want []string
		err  string
	}{
		{"no at: one segment", func() *Plan { return cutPlan("", "", "") }, []string{"n0,n1,n2<input>/"}, ""},
		{"same at everywhere: one segment", func() *Plan { return cutPlan("a", "a") }, []string{"n0,n1<input>/"}, ""},
		{"a b a: three segments", func() *Plan { return cutPlan("a", "b", "a") },
			[]string{"n0<input>n0/n0", "n1<n0>n1/n1", "n2<n1>/n2"}, ""},
		{"plan output crossing a cut stays an output", func() *Plan {
			p := cutPlan("", "b")
			p.Outputs = []string{"n0", "n1"}
			return p
		}, []string{"n0<input>n0/n0", "n1<n0>/n1"}, ""},
		{"node with at equal to the plan's resources joins it", func() *Plan {
			p := cutPlan("", "a")
			p.Resources = Ask{Tags: []string{"a"}}
			return p
		}, []string{"n0,n1<input>/"}, ""},
		{"segment reading input and an earlier segment", func() *Plan {
			p := cutPlan("a", "b", "b")
			p.Nodes[2].Inputs = []string{"input"}
			return p
		}, nil, `reads both "n0" and "input" from outside`},
		{"node order not topological", func() *Plan {
			p := cutPlan("a", "b")
			p.Nodes[0].Inputs = []string{"n1"}
			return p
		}, nil, `input "n1" is neither "input" nor an earlier node`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			segs, err := CutPlan(tc.plan())
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("CutPlan: err %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, s := range segs {
				got = append(got, nodeIDs(s.Plan.Nodes)+"<"+s.From+">"+strings.Join(s.Plan.RefOutputs, ",")+"/"+strings.Join(s.Plan.Outputs, ","))
				for _, n := range s.Plan.Nodes {
					if n.At != nil {
						t.Errorf("segment %s: node %s keeps At %+v; the segment's Resources say it", s.Plan.ID, n.ID, n.At)
					}
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("segments = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestCutPlanEnv: a node's Env picks its segment's env, and a change of
// env alone cuts the plan (issue 15's digits-cut: a bare venv where
// import torch fails, then the torch worker's env with system packages).
// Segments' nodes carry no Env; a plan whose nodes share one env runs
// with it.
func TestCutPlanEnv(t *testing.T) {
	bare := &EnvRequest{}
	sys := EnvRequest{SystemSitePackages: true}
	for _, tc := range []struct {
		name string
		plan func() *Plan
		want []string // per segment: nodes and whether its env sees system packages
	}{
		{"env alone cuts", func() *Plan {
			p := cutPlan("", "", "")
			p.Env = sys
			p.Nodes[0].Env = bare
			return p
		}, []string{"n0 false", "n1,n2 true"}},
		{"every node's env the same: one segment with it", func() *Plan {
			p := cutPlan("a", "a")
			p.Env = sys
			p.Nodes[0].Env, p.Nodes[1].Env = bare, &EnvRequest{}
			return p
		}, []string{"n0,n1 false"}},
		{"node env equal to the plan's joins it", func() *Plan {
			p := cutPlan("", "")
			p.Env = sys
			p.Nodes[1].Env = &EnvRequest{SystemSitePackages: true}
			return p
		}, []string{"n0,n1 true"}},
		{"at and env cut together", func() *Plan {
			p := cutPlan("cpu", "torch", "torch")
			p.Env = sys
			p.Nodes[0].Env = bare
			return p
		}, []string{"n0 false", "n1,n2 true"}},
		{"client is a place of its own", func() *Plan {
			p := cutPlan("", "", "")
			p.Nodes[1].At = &Ask{Client: true}
			p.Nodes[2].At = &Ask{Client: true}
			return p
		}, []string{"n0 false", "n1,n2 false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			segs, err := CutPlan(tc.plan())
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, s := range segs {
				got = append(got, nodeIDs(s.Plan.Nodes)+" "+strconv.FormatBool(s.Plan.Env.SystemSitePackages))
				for _, n := range s.Plan.Nodes {
					if n.Env != nil || n.At != nil {
						t.Errorf("segment %s: node %s keeps Env %+v, At %+v", s.Plan.ID, n.ID, n.Env, n.At)
					}
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("segments = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestCutPlanRoutesStates: each state goes to the segment of its node,
// with that segment's requirement.
func TestCutPlanRoutesStates(t *testing.T) {
	p := cutPlan("a", "b")
	p.States = map[string]Value{"n0": {Kind: KindBytes, Ref: "blob:x0"}, "n1": {Kind: KindBytes, Ref: "blob:x1"}}
	segs, err := CutPlan(p)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range segs {
		id := "n" + string(rune('0'+i))
		if len(s.Plan.States) != 1 || s.Plan.States[id].Ref != "blob:x"+string(rune('0'+i)) {
			t.Errorf("segment %d states = %+v, want only %s", i+1, s.Plan.States, id)
		}
		if tags := s.Plan.Requirement().Tags; len(tags) != 1 || tags[0] != string(rune('a'+i)) {
			t.Errorf("segment %d requirement tags %v", i+1, tags)
		}
	}
}

func TestParsePlanAt(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"f.py": "#"})
	text := `id = "p"
tags = ["cpu"]
[[nodes]]
id = "a"
file = "f.py"
class = "C"
[[nodes]]
id = "b"
file = "f.py"
class = "C"
inputs = ["a"]
at = { tags = ["torch"], gpus = 1, cpus = 2, memory = 1024 }
`
	p, err := ParsePlan([]byte(text), dir)
	if err != nil {
		t.Fatal(err)
	}
	if p.Nodes[0].At != nil || p.Nodes[1].At == nil || p.Nodes[1].At.GPUs != 1 || p.Nodes[1].At.CPUs != 2 || p.Nodes[1].At.Memory != 1024 || !slices.Equal(p.Nodes[1].At.Tags, []string{"torch"}) {
		t.Fatalf("nodes = %+v %+v", p.Nodes[0], p.Nodes[1].At)
	}
	p, err = ParsePlan([]byte(strings.Replace(text, `memory = 1024`, `memory = "16GiB"`, 1)), dir)
	if err != nil || p.Nodes[1].At.Memory != 16<<30 {
		t.Fatalf("memory = \"16GiB\": %v, %+v", err, p)
	}
	p, err = ParsePlan([]byte(strings.Replace(text, `at = { tags = ["torch"], gpus = 1, cpus = 2, memory = 1024 }`, "at = { client = true }\n[nodes.env]\nrequirements = [\"x==1\"]\nno_index = true", 1)), dir)
	if err != nil || !p.Nodes[1].At.Client || p.Nodes[0].Env != nil || p.Nodes[1].Env == nil || !p.Nodes[1].Env.NoIndex || !slices.Equal(p.Nodes[1].Env.Requirements, []string{"x==1"}) {
		t.Fatalf("at client and [nodes.env]: %v, %+v", err, p)
	}
	for _, bad := range []struct{ text, want string }{
		{strings.Replace(text, `tags = ["torch"]`, `tags = ["a b"]`, 1), `node "b": at.tags: tag "a b"`},
		{strings.Replace(text, `gpus = 1`, `gpus = -1`, 1), `at: gpus -1`},
		{strings.Replace(text, `gpus = 1`, `gpu = 1`, 1), `unknown keys nodes.at.gpu`},
		{"ref_outputs = [\"a\"]\n" + text, `ref_outputs: "a" is not one of the plan's outputs`},
		{strings.Replace(text, `memory = 1024`, `memory = "lots"`, 1), `node "b": at.memory = lots: want bytes or a size`},
		{strings.Replace(text, `memory = 1024`, `memory = -1`, 1), `at.memory = -1`},
		{strings.Replace(text, `gpus = 1,`, `client = true, gpus = 1,`, 1), `node "b": at = { client = true } with tags`},
		{text + "[nodes.env]\nsystem_site_package = true\n", `unknown keys nodes.env.system_site_package`},
	} {
		if _, err := ParsePlan([]byte(bad.text), dir); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("ParsePlan: err %v, want one containing %q", err, bad.want)
		}
	}
}

// TestRunCut runs the classifier plan cut in two (scale at a, clf at b)
// through a real worker: fit, then forward with the fit's states; both
// equal the same plan run unsplit, and the value crossing the cut comes
// back to the client as a blob reference only (no bytes).
func TestRunCut(t *testing.T) {
	tw := newTestWorker(t, testOptions{})
	x, y := twoClusters(40)
	plan := func(id string, mode Mode, states map[string]Value, cut bool) *Plan {
		p := classifierPlan(t, id, mode, x, &y)
		p.Outputs = []string{"clf"}
		p.States = states
		if cut {
			p.Nodes[0].At = &Ask{Tags: []string{"a"}}
			p.Nodes[1].At = &Ask{Tags: []string{"b"}}
		}
		return p
	}
	var received []*Result
	runSeg := func(ctx context.Context, p *Plan) (*Result, error) {
		r, err := tw.client.Run(ctx, p)
		if err == nil {
			received = append(received, r)
		}
		return r, err
	}
	runCut := func(p *Plan) *Result {
		t.Helper()
		segs, err := CutPlan(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(segs) != 2 {
			t.Fatalf("%d segments, want 2", len(segs))
		}
		res, err := RunCut(context.Background(), p, segs, runSeg)
		if err != nil {
			t.Fatal(err)
		}
		mustSucceed(t, res)
		return res
	}
	fitWhole := run(t, tw, plan("fit-whole", Fit, nil, false))
	mustSucceed(t, fitWhole)
	fitCut := runCut(plan("fit-cut", Fit, nil, true))
	if len(fitCut.States) != 2 || fitCut.States["scale"].Ref == "" || fitCut.States["clf"].Ref == "" {
		t.Fatalf("cut fit states = %+v, want refs for scale and clf", fitCut.States)
	}
	fwdWhole := run(t, tw, plan("fwd-whole", Forward, fitWhole.States, false))
	mustSucceed(t, fwdWhole)
	fwdCut := runCut(plan("fwd-cut", Forward, fitCut.States, true))
	for _, tc := range []struct {
		name      string
		got, want *Result
	}{{"fit", fitCut, fitWhole}, {"forward", fwdCut, fwdWhole}} {
		g, w := resolved(t, tw, tc.got.Outputs["clf"]), resolved(t, tw, tc.want.Outputs["clf"])
		if len(tc.got.Outputs) != 1 || !bytes.Equal(g.Data, w.Data) || !slices.Equal(g.Shape, w.Shape) {
			t.Errorf("%s: cut output clf = %v %v, unsplit %v %v", tc.name, g.Shape, g.Data, w.Shape, w.Data)
		}
	}
	crossed := 0
	for _, r := range received {
		if v, ok := r.Outputs["scale"]; ok {
			crossed++
			if v.Ref == "" || len(v.Data) != 0 {
				t.Errorf("segment %s sent the crossing value scale to the client: %d bytes inline, ref %q", r.ID, len(v.Data), v.Ref)
			}
		}
	}
	if crossed != 2 {
		t.Errorf("the crossing value came back %d times, want 2 (fit and forward)", crossed)
	}
}

// TestRefOutputsNeedStore: a worker without a store cannot keep a
// crossing value off the client, so it fails the plan rather than
// returning the bytes.
func TestRefOutputsNeedStore(t *testing.T) {
	tw := newTestWorker(t, testOptions{noStore: true})
	x, y := twoClusters(8)
	p := classifierPlan(t, "no-store", Fit, x, &y)
	p.RefOutputs = []string{"scale"}
	res := run(t, tw, p)
	if res.State != StateFailed || !strings.Contains(res.Error, `output "scale" must come back as a blob reference`) {
		t.Fatalf("state %s, error %q; want failed naming ref_outputs", res.State, res.Error)
	}
	if _, err := CutPlan(&Plan{ID: "x", Nodes: []Node{{ID: "a", File: "f.py", Class: "C"}}, Files: []File{{Name: "f.py"}}, RefOutputs: []string{"b"}}); !errors.Is(err, ErrInvalidPlan) {
		t.Errorf("CutPlan with a ref_outputs naming no output: %v, want ErrInvalidPlan", err)
	}
}

// FuzzCutPlan: for any chain-or-tree plan (each byte pair is a node: its
// tag and which earlier node it reads), CutPlan either refuses it or
// returns segments that hold the plan's nodes in order, one requirement
// each, every segment reading "input" or a node of an earlier segment
// that that segment returns as a blob reference.
func FuzzCutPlan(f *testing.F) {
	f.Add([]byte{0, 0, 1, 0, 0, 1})
	f.Add([]byte{0, 0, 1, 1, 1, 0, 2, 2})
	f.Add([]byte{2, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 40 {
			b = b[:40]
		}
		p := &Plan{ID: "f", Files: []File{{Name: "f.py"}}}
		for i := 0; i+1 < len(b); i += 2 {
			n := Node{ID: "n" + strconv.Itoa(i/2), File: "f.py", Class: "C"}
			if tag := b[i] % 3; tag > 0 {
				n.At = &Ask{Tags: []string{"t" + strconv.Itoa(int(tag))}}
			}
			if k := int(b[i+1]) % (len(p.Nodes) + 1); k < len(p.Nodes) {
				n.Inputs = []string{p.Nodes[k].ID}
			}
			p.Nodes = append(p.Nodes, n)
		}
		segs, err := CutPlan(p)
		if err != nil {
			if len(p.Nodes) > 0 && !errors.Is(err, ErrCut) {
				t.Fatalf("CutPlan: %v, want ErrCut", err)
			}
			return
		}
		var ids []string
		segOf := map[string]int{}
		for k, s := range segs {
			for _, n := range s.Plan.Nodes {
				ids = append(ids, n.ID)
				segOf[n.ID] = k
				if n.At != nil {
					t.Fatalf("node %s keeps At", n.ID)
				}
			}
			if s.From != "input" {
				j, ok := segOf[s.From]
				if !ok || j >= k || !slices.Contains(segs[j].Plan.RefOutputs, s.From) {
					t.Fatalf("segment %d reads %q: earlier segment %d (known %v), ref outputs %v", k, s.From, j, ok, segs[j].Plan.RefOutputs)
				}
			}
		}
		if want := strings.Split(nodeIDs(p.Nodes), ","); !slices.Equal(ids, want) {
			t.Fatalf("segments hold %v, want %v", ids, want)
		}
		for i := 1; i < len(p.Nodes); i++ {
			a, b := p.Nodes[i-1], p.Nodes[i]
			same := sameAsk(askOf(p, a), askOf(p, b))
			if same != (segOf[a.ID] == segOf[b.ID]) {
				t.Fatalf("nodes %s and %s: same requirement %v, segments %d and %d", a.ID, b.ID, same, segOf[a.ID], segOf[b.ID])
			}
		}
	})
}

func askOf(p *Plan, n Node) Ask {
	if n.At != nil {
		return *n.At
	}
	return p.Resources
}
