package worker

import (
	"bytes"
	"encoding/binary"
	"testing"
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
