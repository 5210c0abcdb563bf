package worker

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestStreamCutEqualsOneShotCut streams the classifier plan cut in two
// (scale on a worker tagged a, clf on one tagged b: two real workers on
// loopback sharing one store, each segment placed through the folder)
// and checks it against the same plan run one-shot through RunCut: a
// Fit's result, and a Forward's per-chunk outputs (concatenated) and
// result. Every lease is released at the end. Before (issue 15), a
// streamed plan whose nodes needed different placements was refused.
func TestStreamCutEqualsOneShotCut(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	wa := newTestWorker(t, testOptions{root: root})
	wb := newTestWorker(t, testOptions{root: root})
	clients := map[string]*Client{}
	for _, w := range []struct {
		tw  *testWorker
		id  string
		tag string
	}{{wa, "wa", "a"}, {wb, "wb", "b"}} {
		r := testRecord(w.id, 2, 0, 0, w.tag)
		r.Address = w.tw.srv.URL
		announce(t, wa.store, r, time.Hour)
		clients[r.Address] = w.tw.client
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	x, y := twoClusters(50)
	plan := func(id string, mode Mode, states map[string]Value) *Plan {
		p := classifierPlan(t, id, mode, x, &y)
		p.Outputs = []string{"clf"}
		p.States = states
		p.Nodes[0].At = &Ask{Tags: []string{"a"}}
		p.Nodes[1].At = &Ask{Tags: []string{"b"}}
		return p
	}
	place := func(sp *Plan) (*Placement, *Client) {
		pl, err := Place(ctx, wa.store, sp.Requirement(), PlaceOptions{Timeout: time.Hour})
		if err != nil {
			t.Fatalf("place %s: %v", sp.ID, err)
		}
		return pl, clients[pl.Worker.Address]
	}
	var placedOn []string
	runSeg := func(ctx context.Context, sp *Plan) (*Result, error) {
		pl, c := place(sp)
		defer pl.Release(ctx)
		return c.Run(ctx, sp)
	}
	openSeg := func(ctx context.Context, sp *Plan) (*Stream, func(), error) {
		pl, c := place(sp)
		placedOn = append(placedOn, pl.Worker.ID.String())
		s, err := c.Stream(ctx, sp)
		if err != nil {
			pl.Release(ctx)
			return nil, nil, err
		}
		return s, func() { pl.Release(ctx) }, nil
	}
	segsOf := func(p *Plan) []Segment {
		t.Helper()
		segs, err := CutPlan(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(segs) != 2 {
			t.Fatalf("%d segments, want 2", len(segs))
		}
		return segs
	}
	oneShot := func(p *Plan) *Result {
		t.Helper()
		res, err := RunCut(ctx, p, segsOf(p), runSeg)
		if err != nil {
			t.Fatal(err)
		}
		mustSucceed(t, res)
		return res
	}
	// streamed feeds x in chunks of n rows and returns the chunks'
	// outputs of clf and the result.
	streamed := func(p *Plan, n int64) ([]Value, *Result) {
		t.Helper()
		placedOn = nil
		cs, err := StreamCut(ctx, p, segsOf(p), openSeg)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		var chunks []Value
		for seq, a := int64(0), int64(0); a < x.Shape[0]; seq, a = seq+1, a+n {
			b := min(a+n, x.Shape[0])
			var tp *Value
			if p.Mode == Fit {
				tv := sliceRows(y, a, b)
				tp = &tv
			}
			outs, ended, err := cs.Chunk(ctx, seq, sliceRows(x, a, b), tp)
			if err != nil || ended != nil {
				t.Fatalf("chunk %d: %v, ended %+v", seq, err, ended)
			}
			if p.Mode == Fit {
				if len(outs) != 0 {
					t.Errorf("fit chunk %d: outputs %v, want none (a fit gathers its chunks)", seq, outs)
				}
				continue
			}
			if len(outs) != 1 {
				t.Fatalf("chunk %d: outputs %v, want clf only (the crossing value is not an output)", seq, outs)
			}
			chunks = append(chunks, resolved(t, wa, outs["clf"]))
		}
		res, err := cs.End(ctx)
		if err != nil {
			t.Fatal(err)
		}
		mustSucceed(t, res)
		if !slices.Equal(placedOn, []string{"wa", "wb"}) {
			t.Errorf("segments placed on %v, want [wa wb]", placedOn)
		}
		return chunks, res
	}
	same := func(what string, got, want Value) {
		t.Helper()
		if !bytes.Equal(got.Data, want.Data) || !slices.Equal(got.Shape, want.Shape) || got.DType != want.DType {
			t.Errorf("%s = %s%v %v, one-shot cut %s%v %v", what, got.DType, got.Shape, got.Data, want.DType, want.Shape, want.Data)
		}
	}

	fitCut := oneShot(plan("fit-cut", Fit, nil))
	_, fitStream := streamed(plan("fit-stream", Fit, nil), 16)
	same("streamed fit's clf", resolved(t, wa, fitStream.Outputs["clf"]), resolved(t, wa, fitCut.Outputs["clf"]))
	if len(fitStream.States) != 2 || fitStream.States["scale"].Ref == "" || fitStream.States["clf"].Ref == "" {
		t.Errorf("streamed fit's states = %+v, want refs for scale and clf", fitStream.States)
	}

	fwdCut := oneShot(plan("fwd-cut", Forward, fitCut.States))
	chunks, fwdStream := streamed(plan("fwd-stream", Forward, fitStream.States), 16)
	if len(chunks) != 4 {
		t.Fatalf("%d chunk results, want 4", len(chunks))
	}
	all, err := concatRows(chunks)
	if err != nil {
		t.Fatal(err)
	}
	want := resolved(t, wa, fwdCut.Outputs["clf"])
	same("streamed forward's chunks of clf, concatenated", all, want)
	same("streamed forward's clf", resolved(t, wa, fwdStream.Outputs["clf"]), want)

	// A forward without states fails in its first segment, on the
	// first chunk, and says which segment.
	nostate := plan("fwd-nostate", Forward, nil)
	cs, err := StreamCut(ctx, nostate, segsOf(nostate), openSeg)
	if err != nil {
		t.Fatal(err)
	}
	outs, ended, err := cs.Chunk(ctx, 0, sliceRows(x, 0, 8), nil)
	if err != nil || ended == nil || ended.State != StateFailed || ended.ID != "fwd-nostate.1" || !strings.Contains(ended.Error, "not fitted") {
		t.Errorf("forward without states: outputs %v, ended %+v, err %v; want segment fwd-nostate.1 failed", outs, ended, err)
	}
	if _, _, err := cs.Chunk(ctx, 1, sliceRows(x, 8, 16), nil); !errors.Is(err, ErrStreamOver) {
		t.Errorf("Chunk after the stream ended: %v, want ErrStreamOver", err)
	}

	infos, _, err := ListWorkers(ctx, wa.store, ListOptions{Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range infos {
		if w.Leases != 0 {
			t.Errorf("worker %s holds %d leases after the streams ended, want 0", w.Record.ID, w.Leases)
		}
	}
}
