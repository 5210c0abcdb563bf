package worker

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// sliceRows returns rows [a, b) of an inline array.
func sliceRows(v Value, a, b int64) Value {
	row := int64(len(v.Data)) / v.Shape[0]
	shape := append([]int64{b - a}, v.Shape[1:]...)
	return Value{Kind: KindArray, DType: v.DType, Shape: shape, Data: v.Data[a*row : b*row]}
}

// streamPlan sends x in chunks of n rows (with y for a Fit) and returns
// the chunk results and the final result.
func streamPlan(t *testing.T, tw *testWorker, p *Plan, x Value, y *Value, n int64) ([]*StreamMessage, *Result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := tw.client.Stream(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	seq := int64(0)
	for a := int64(0); a < x.Shape[0]; a += n {
		b := min(a+n, x.Shape[0])
		var tp *Value
		if y != nil {
			tv := sliceRows(*y, a, b)
			tp = &tv
		}
		if err := s.Send(ctx, seq, sliceRows(x, a, b), tp); err != nil {
			t.Fatal(err)
		}
		seq++
	}
	if err := s.End(ctx); err != nil {
		t.Fatal(err)
	}
	var chunks []*StreamMessage
	for {
		m, err := s.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		switch m.Kind {
		case MsgChunkResult:
			chunks = append(chunks, m)
		case MsgComplete:
			return chunks, m.Result
		default:
			t.Fatalf("message %q", m.Kind)
		}
	}
}

// TestStreamEqualsOneShot: a plan streamed in chunks gives the one-shot
// result, for a Fit (chunks gathered) and a Forward (chunk by chunk).
func TestStreamEqualsOneShot(t *testing.T) {
	tw := newTestWorker(t, testOptions{})
	x, y := twoClusters(50)

	oneFit := run(t, tw, classifierPlan(t, "fit-one", Fit, x, &y))
	mustSucceed(t, oneFit)
	_, streamFit := streamPlan(t, tw, classifierPlan(t, "fit-stream", Fit, x, &y), x, &y, 16)
	mustSucceed(t, streamFit)
	for _, id := range []string{"scale", "clf"} {
		if !bytes.Equal(streamFit.Outputs[id].Data, oneFit.Outputs[id].Data) {
			t.Errorf("fit output %s: streamed %d bytes differ from one-shot", id, len(streamFit.Outputs[id].Data))
		}
	}

	p := classifierPlan(t, "fwd-one", Forward, x, nil)
	p.States = oneFit.States
	one := run(t, tw, p)
	mustSucceed(t, one)
	ps := classifierPlan(t, "fwd-stream", Forward, x, nil)
	ps.States = oneFit.States
	chunks, streamed := streamPlan(t, tw, ps, x, nil, 7)
	mustSucceed(t, streamed)
	if len(chunks) != 8 {
		t.Fatalf("%d chunk results, want 8", len(chunks))
	}
	var joined []byte
	for i, c := range chunks {
		if c.Seq != int64(i) {
			t.Fatalf("chunk result %d has seq %d", i, c.Seq)
		}
		joined = append(joined, c.Outputs["clf"].Data...)
	}
	if !bytes.Equal(joined, one.Outputs["clf"].Data) || !bytes.Equal(streamed.Outputs["clf"].Data, one.Outputs["clf"].Data) {
		t.Fatalf("streamed predictions differ from one-shot:\n%v\n%v\n%v", joined, streamed.Outputs["clf"].Data, one.Outputs["clf"].Data)
	}
	if !bytes.Equal(streamed.Outputs["scale"].Data, one.Outputs["scale"].Data) {
		t.Fatalf("streamed scale output differs from one-shot")
	}
}

// TestStreamClientDisconnects: a client that goes away mid-stream cancels
// its plan (the Python call is interrupted) and the worker serves on.
func TestStreamClientDisconnects(t *testing.T) {
	tw := newTestWorker(t, testOptions{})
	ctx := context.Background()
	s, err := tw.client.Stream(ctx, behaviourPlan(t, "gone", "Sleeper"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(ctx, 0, Value{Kind: KindObject, Object: 1}, nil); err != nil {
		t.Fatal(err)
	}
	waitLog(t, tw, "gone")
	s.Close()
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	res, err := tw.w.Wait(wctx, "gone")
	if err != nil {
		t.Fatal(err)
	}
	if res.State != StateCancelled {
		t.Fatalf("state %s (%s), want cancelled", res.State, res.Error)
	}
	if n := tw.w.Running(); n != 0 {
		t.Fatalf("%d plans running after the stream ended", n)
	}
	mustSucceed(t, run(t, tw, behaviourPlan(t, "after", "NoOp")))
}

// TestStreamRefusals: a stream that does not begin with a plan, and one
// whose plan is invalid, end with an error message.
func TestStreamRefusals(t *testing.T) {
	tw := newTestWorker(t, testOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bad := behaviourPlan(t, "bad", "NoOp")
	bad.Nodes[0].File = "missing.py"
	s, err := tw.client.Stream(ctx, bad)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Next(ctx); err == nil || !strings.Contains(err.Error(), `file "missing.py" is not shipped`) {
		t.Fatalf("Next = %v, want the invalid plan's error", err)
	}
}
