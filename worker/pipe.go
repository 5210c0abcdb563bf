package worker

// The pipe between soma-worker and daemon.py: length-prefixed frames of a
// JSON head and a binary body (the format is documented at the top of
// daemon.py, which is the other half of this file). JSON, not msgpack,
// because the daemon must run on Python's standard library alone.

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// pipeProtocol is the version daemon.py announces in its hello.
const pipeProtocol = 2

// maxPipeHead bounds a frame's JSON head (daemon.py's MAX_HEAD).
const maxPipeHead = 64 << 20

// maxPipeBody bounds a frame's body: 64 GiB, far above any array a node
// holds, but low enough that a corrupt length is refused, not allocated.
const maxPipeBody = 64 << 30

// ErrPipe is a frame from the daemon that cannot be read.
var ErrPipe = errors.New("worker: bad frame from the Python daemon")

// pipeValue is a Value as a pipe head carries it.
type pipeValue struct {
	Kind   Kind    `json:"kind"`
	DType  string  `json:"dtype,omitempty"`
	Shape  []int64 `json:"shape,omitempty"`
	Off    int64   `json:"off"`
	Len    int64   `json:"len"`
	Object any     `json:"object,omitempty"`
	Slot   string  `json:"slot,omitempty"`
	File   string  `json:"file,omitempty"`
}

// pipeReply is a reply head from the daemon.
type pipeReply struct {
	OK        bool                    `json:"ok"`
	Error     string                  `json:"error"`
	Traceback string                  `json:"traceback"`
	Cancelled bool                    `json:"cancelled"`
	Value     *pipeValue              `json:"value"`
	Nodes     map[string]pipeNodeInfo `json:"nodes"`
	Hello     *pipeHello              `json:"hello"`
	Pong      bool                    `json:"pong"`
	Replies   []pipeReply             `json:"replies"`
	Skipped   bool                    `json:"skipped"`
	NotRun    bool                    `json:"not_run"`
}

type pipeNodeInfo struct {
	Trainable bool `json:"trainable"`
}

type pipeHello struct {
	Protocol int     `json:"protocol"`
	Python   string  `json:"python"`
	PID      int     `json:"pid"`
	Numpy    *string `json:"numpy"`
}

// pipeBody gathers the body buffers of one outgoing frame; values in the
// head refer to them by offset. Buffers are written as they are, not
// copied into one.
type pipeBody struct {
	parts [][]byte
	size  int64
}

func (b *pipeBody) add(p []byte) int64 {
	off := b.size
	if len(p) > 0 {
		b.parts = append(b.parts, p)
		b.size += int64(len(p))
	}
	return off
}

// value converts a resolved Value (inline, no Ref) for the pipe.
func (b *pipeBody) value(v Value) (pipeValue, error) {
	switch v.Kind {
	case KindNone, "":
		return pipeValue{Kind: KindNone}, nil
	case KindObject:
		return pipeValue{Kind: KindObject, Object: jsonable(v.Object)}, nil
	case KindBytes, KindArray:
		if v.file != "" {
			return pipeValue{Kind: v.Kind, DType: v.DType, Shape: v.Shape, File: v.file, Len: v.size}, nil
		}
	}
	switch v.Kind {
	case KindBytes:
		return pipeValue{Kind: KindBytes, Off: b.add(v.Data), Len: int64(len(v.Data))}, nil
	case KindArray:
		if err := checkArray(v); err != nil {
			return pipeValue{}, err
		}
		return pipeValue{Kind: KindArray, DType: v.DType, Shape: v.Shape, Off: b.add(v.Data), Len: int64(len(v.Data))}, nil
	}
	return pipeValue{}, fmt.Errorf("worker: value of kind %q (want none, array, bytes or object)", v.Kind)
}

// jsonable turns msgpack's decoded maps (map[string]any, or
// map[any]any from other encoders) into what encoding/json accepts.
func jsonable(x any) any {
	switch t := x.(type) {
	case map[any]any:
		m := make(map[string]any, len(t))
		for k, v := range t {
			m[fmt.Sprint(k)] = jsonable(v)
		}
		return m
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, v := range t {
			m[k] = jsonable(v)
		}
		return m
	case []any:
		s := make([]any, len(t))
		for i, v := range t {
			s[i] = jsonable(v)
		}
		return s
	}
	return x
}

// fromPipe converts a reply value whose bytes lie in body.
func fromPipe(pv *pipeValue, body []byte) (Value, error) {
	if pv == nil {
		return Value{Kind: KindNone}, nil
	}
	switch pv.Kind {
	case KindNone:
		return Value{Kind: KindNone}, nil
	case KindObject:
		return Value{Kind: KindObject, Object: pv.Object}, nil
	case KindBytes, KindArray:
		if pv.Off < 0 || pv.Len < 0 || pv.Off+pv.Len > int64(len(body)) {
			return Value{}, fmt.Errorf("%w: value [%d:%d] outside a body of %d bytes", ErrPipe, pv.Off, pv.Off+pv.Len, len(body))
		}
		v := Value{Kind: pv.Kind, DType: pv.DType, Shape: pv.Shape, Data: body[pv.Off : pv.Off+pv.Len : pv.Off+pv.Len]}
		if v.Kind == KindArray {
			if err := checkArray(v); err != nil {
				return Value{}, fmt.Errorf("%w: %v", ErrPipe, err)
			}
		}
		return v, nil
	}
	return Value{}, fmt.Errorf("%w: value kind %q", ErrPipe, pv.Kind)
}

// writePipeFrame writes head and body to w.
func writePipeFrame(w io.Writer, head any, body *pipeBody) error {
	hb, err := json.Marshal(head)
	if err != nil {
		return fmt.Errorf("worker: encode pipe head: %w", err)
	}
	var size int64
	if body != nil {
		size = body.size
	}
	var prefix [12]byte
	binary.BigEndian.PutUint32(prefix[:4], uint32(len(hb)))
	binary.BigEndian.PutUint64(prefix[4:], uint64(size))
	frame := append(prefix[:], hb...)
	// A small frame goes in one write: one wake-up of the reader, not one
	// per part. Large parts are written as they are, not copied.
	if size <= 64<<10 {
		if body != nil {
			for _, p := range body.parts {
				frame = append(frame, p...)
			}
		}
		_, err := w.Write(frame)
		return err
	}
	if _, err := w.Write(frame); err != nil {
		return err
	}
	if body != nil {
		for _, p := range body.parts {
			if _, err := w.Write(p); err != nil {
				return err
			}
		}
	}
	return nil
}

// readPipeFrame reads one frame: its head decoded into head, and its body.
// A clean end of input before the frame is io.EOF; anything else that is
// not a whole, well-formed frame wraps ErrPipe.
func readPipeFrame(r io.Reader, head any) ([]byte, error) {
	var prefix [12]byte
	if _, err := io.ReadFull(r, prefix[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, io.EOF
		}
		return nil, fmt.Errorf("%w: prefix: %v", ErrPipe, err)
	}
	hlen := binary.BigEndian.Uint32(prefix[:4])
	blen := binary.BigEndian.Uint64(prefix[4:])
	if hlen > maxPipeHead {
		return nil, fmt.Errorf("%w: head of %d bytes (limit %d)", ErrPipe, hlen, maxPipeHead)
	}
	if blen > maxPipeBody {
		return nil, fmt.Errorf("%w: body of %d bytes (limit %d)", ErrPipe, blen, int64(maxPipeBody))
	}
	hb := make([]byte, hlen)
	if _, err := io.ReadFull(r, hb); err != nil {
		return nil, fmt.Errorf("%w: head: %v", ErrPipe, err)
	}
	body, err := readN(r, int64(blen))
	if err != nil {
		return nil, fmt.Errorf("%w: body: %v", ErrPipe, err)
	}
	if err := json.Unmarshal(hb, head); err != nil {
		return nil, fmt.Errorf("%w: head: %v", ErrPipe, err)
	}
	return body, nil
}

// readN reads exactly n bytes, growing the buffer as data arrives so that
// a corrupt length cannot make it allocate more than was sent plus 1 MiB.
func readN(r io.Reader, n int64) ([]byte, error) {
	const step = 1 << 20
	if n <= step {
		b := make([]byte, n)
		_, err := io.ReadFull(r, b)
		return b, err
	}
	var b []byte
	for int64(len(b)) < n {
		k := min(n-int64(len(b)), max(step, int64(len(b))))
		b = append(b, make([]byte, k)...)
		if _, err := io.ReadFull(r, b[int64(len(b))-k:]); err != nil {
			return nil, err
		}
	}
	return b, nil
}
