package worker

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/coder/websocket"
)

// FuzzDecodeFrame: no input makes the frame decoder panic or hang; a
// frame it accepts re-encodes and decodes to the same plan.
func FuzzDecodeFrame(f *testing.F) {
	for _, p := range []*Plan{
		{ID: "p"},
		{ID: "p", Nodes: []Node{{ID: "a", File: "f.py", Class: "C", Config: map[string]any{"k": 1.5}}}, Input: Value{Kind: KindArray, DType: "float32", Shape: []int64{1}, Data: []byte{0, 0, 128, 63}}},
	} {
		b, err := EncodeFrame(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	f.Add([]byte{0x81, 0xa7, 'v', 'e', 'r', 's', 'i', 'o', 'n', 0x02})
	f.Add([]byte{0xdf, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		var p Plan
		if err := DecodeFrame(b, &p); err != nil {
			return
		}
		again, err := EncodeFrame(&p)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		var q Plan
		if err := DecodeFrame(again, &q); err != nil {
			t.Fatalf("decode of re-encoded frame: %v", err)
		}
	})
}

// FuzzReadPipeFrame: the pipe frame reader never panics, and never
// allocates far beyond what it was sent (a corrupt length is refused or
// hits the end of input).
func FuzzReadPipeFrame(f *testing.F) {
	var buf bytes.Buffer
	var body pipeBody
	pv, _ := body.value(Value{Kind: KindBytes, Data: []byte("abc")})
	if err := writePipeFrame(&buf, map[string]any{"ok": true, "value": pv}, &body); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add(buf.Bytes()[:5])
	huge := make([]byte, 12)
	binary.BigEndian.PutUint32(huge, 2)
	binary.BigEndian.PutUint64(huge[4:], 1<<40)
	f.Add(append(huge, '{', '}'))
	f.Fuzz(func(t *testing.T, b []byte) {
		var r pipeReply
		body, err := readPipeFrame(bytes.NewReader(b), &r)
		if err != nil {
			return
		}
		if len(body) > len(b) {
			t.Fatalf("body of %d bytes from %d bytes of input", len(body), len(b))
		}
		if r.Value != nil {
			_, _ = fromPipe(r.Value, body)
		}
	})
}

// FuzzSocketMessages: no message makes the plan socket's decoders panic
// or hang, on the worker (decodeSocketPlan) or the client (readAnswer);
// a message the worker accepts is a plan, and one the client accepts is
// the answer to the plan it sent.
func FuzzSocketMessages(f *testing.F) {
	p := &Plan{ID: "p", Nodes: []Node{{ID: "a", File: "f.py", Class: "C"}}, Input: Value{Kind: KindObject, Object: "x"}}
	for _, m := range []*SocketMessage{
		{Kind: MsgPlan, Plan: p},
		{Kind: MsgResult, Result: &Result{ID: "p", State: StateSucceeded, Outputs: map[string]Value{"a": {Kind: KindBytes, Data: []byte("out")}}}},
		{Kind: MsgError, ID: "p", Status: 409, Error: "busy"},
		{Kind: MsgError, Status: 400, Error: "malformed"},
		{Kind: MsgChunk},
	} {
		b, err := EncodeFrame(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(true, b)
		f.Add(true, b[:len(b)/2])
		f.Add(false, b)
	}
	f.Add(true, []byte{0x81, 0xa7, 'v', 'e', 'r', 's', 'i', 'o', 'n', 0x02})
	f.Add(true, []byte{0xdf, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, binary bool, b []byte) {
		typ := websocket.MessageText
		if binary {
			typ = websocket.MessageBinary
		}
		plan, refusal := decodeSocketPlan(typ, b)
		if (plan == nil) == (refusal == nil) {
			t.Fatalf("decodeSocketPlan = %v, %v: want a plan or a refusal", plan, refusal)
		}
		if refusal != nil && (refusal.Kind != MsgError || refusal.Status != 400 || refusal.Error == "") {
			t.Fatalf("refusal %+v, want a 400 error message", refusal)
		}
		if plan != nil {
			again, err := EncodeFrame(&SocketMessage{Kind: MsgPlan, Plan: plan})
			if err != nil {
				t.Fatalf("re-encode: %v", err)
			}
			if p, refusal := decodeSocketPlan(websocket.MessageBinary, again); p == nil {
				t.Fatalf("the re-encoded plan is refused: %+v", refusal)
			}
		}
		res, err := readAnswer(typ, b, "p")
		if (err == nil) == (res == nil) || (res != nil && res.ID != "p") {
			t.Fatalf("readAnswer = %+v, %v: want plan p's result or an error", res, err)
		}
	})
}
