package worker

// This file is the wire's compatibility surface: every type that crosses
// the network between a client and soma-worker is declared here, with its
// msgpack field names. Change it only by adding a version, or as the
// rules below allow within one.
//
// Rules (issue 14; the original's protocol.rs, seed 000):
//
//   - Every frame is a msgpack map with named fields (never positional
//     arrays), and carries "version". A frame whose version is not
//     ProtocolVersion is refused with both versions in the message; it is
//     never decoded best-effort.
//   - Requests a worker receives (Plan, stream messages from the client)
//     are decoded strictly: an unknown field is an error, because a field
//     the worker does not understand may change what the plan means.
//   - Replies a client receives that only describe the worker
//     (Health, Capabilities) may grow fields in the same version; a client
//     ignores the ones it does not know. Those two types say so below.
//   - Plan.Metadata is free-form: the worker carries it and never reads it.
//   - A field may be added to a request within a version only if it is
//     optional, omitted from the frame when it has its zero value, and
//     the zero value means what the frame meant without the field (so
//     every frame an older client sends still decodes, and means the
//     same). A frame that uses the new field is refused by an older
//     worker as an unknown field, which is the point: that worker cannot
//     honour it. Fields added this way: Ask.ShareGPUs (share_gpus).
//   - An endpoint may be added within a version if every frame it
//     carries is a frame of this file at this version, with the meaning
//     it has elsewhere, and an older peer can meet it only as a refused
//     handshake. Endpoints added this way: the plan socket (GET /plans
//     as a WebSocket, SocketMessage), beside POST /plans?wait=1. Why
//     not version 2: a bump makes every new client refuse every older
//     worker on every endpoint (POST /plans and the stream included),
//     so a cluster could not upgrade its workers one node at a time,
//     and nothing an older peer decodes would have changed to justify
//     it. An older worker answers the socket's handshake 404 or 405 (no
//     GET /plans route); an older client never asks for it; neither
//     ever sees a SocketMessage. A client that is refused the handshake
//     therefore faces a worker of the same version, whose POST /plans
//     carries the same Plan and Result: it may use that, and says so
//     once (Client.Run).

import (
	"bytes"
	"errors"
	"fmt"
	"math"

	"github.com/vmihailenco/msgpack/v5"
)

// ProtocolVersion is the version of the wire this package speaks. A peer
// with another version is refused (ErrVersion).
const ProtocolVersion = 1

// ContentType is the media type of msgpack bodies on HTTP.
const ContentType = "application/msgpack"

// Sentinel errors of the wire.
var (
	// ErrVersion: a frame of another protocol version.
	ErrVersion = errors.New("worker: protocol version mismatch")
	// ErrFrame: a frame that is not a well-formed msgpack map of the
	// expected shape (truncated, malformed, unknown fields).
	ErrFrame = errors.New("worker: malformed frame")
)

// VersionError is the refusal of a frame of another version. It wraps
// ErrVersion and names both versions.
type VersionError struct {
	Got, Want int
}

func (e *VersionError) Error() string {
	if e.Got == 0 {
		return fmt.Sprintf("worker: frame has no protocol version (version 0); this side speaks version %d", e.Want)
	}
	return fmt.Sprintf("worker: peer speaks protocol version %d, this side speaks version %d (run the same soma release on both sides)", e.Got, e.Want)
}

func (e *VersionError) Unwrap() error { return ErrVersion }

// Mode is what a plan does with its input.
type Mode string

const (
	// Fit trains each trainable node on the input and targets (fit(X, y)),
	// passes forward(X) downstream, and returns each trained state.
	Fit Mode = "fit"
	// Forward runs forward(X) through the nodes, after loading any states
	// the plan carries.
	Forward Mode = "forward"
)

// Plan is one unit of work for a worker: a small DAG of Python filters, its
// input, and how to run it. A plan file (TOML, ParsePlanFile) is the same
// plan written by hand.
type Plan struct {
	Version int    `msgpack:"version"`
	ID      string `msgpack:"id"`
	// Nodes run in the order given; each node's Inputs name earlier nodes
	// (or "input", the plan's input; no Inputs means "input").
	Nodes []Node `msgpack:"nodes"`
	// Files are the Python files the nodes name, shipped with the plan.
	Files []File `msgpack:"files"`
	// Outputs names the nodes whose outputs the result carries; empty
	// means the last node.
	Outputs []string `msgpack:"outputs"`
	// Env is the Python environment the filters need.
	Env EnvRequest `msgpack:"env"`
	// Input is the value the first nodes receive; Targets is y for Fit.
	Input   Value  `msgpack:"input"`
	Targets *Value `msgpack:"targets"`
	Mode    Mode   `msgpack:"mode"`
	// Seed seeds Python's random (and numpy's, if imported) before the
	// filters are built, so a plan is reproducible.
	Seed int64 `msgpack:"seed"`
	// States are trained states from an earlier Fit, by node id; each is
	// loaded with set_state before the node runs. A state that fails to
	// load fails the plan (never a silent fresh start: seed debt D-25).
	States map[string]Value `msgpack:"states"`
	// Resources the plan asks for.
	Resources Ask `msgpack:"resources"`
	// TimeoutSeconds bounds the whole plan on the worker; 0 means the
	// worker's default (DefaultPlanTimeout unless configured).
	TimeoutSeconds float64 `msgpack:"timeout_seconds"`
	// Metadata is free-form and never interpreted by the worker.
	Metadata map[string]string `msgpack:"metadata"`
	// RefOutputs names outputs that must come back as blob references
	// of the worker's store whatever their size: a value that crosses a
	// cut of the plan (CutPlan) goes worker to worker through the store,
	// never through the client. A worker without a store fails such a
	// plan, and only array and bytes outputs can be references.
	RefOutputs []string `msgpack:"ref_outputs,omitempty"`
}

// Node is one filter in a plan: an instance of Class from the shipped
// file File, built with Config as keyword arguments.
type Node struct {
	ID     string         `msgpack:"id"`
	File   string         `msgpack:"file"`
	Class  string         `msgpack:"class"`
	Config map[string]any `msgpack:"config"`
	Inputs []string       `msgpack:"inputs"`
	// At is where the node must run (a plan file's at = {...}); nil
	// means the plan's Resources. Only placement reads it: CutPlan cuts
	// a plan into segments of nodes with the same requirement.
	At *Ask `msgpack:"at,omitempty"`
	// Env is the Python environment the node needs (a plan file's
	// [nodes.env]); nil means the plan's Env. Like At, only CutPlan
	// reads it: consecutive nodes with the same at and env form one
	// segment, which runs with that env, so that one plan can train in
	// a bare venv on one worker and with system packages on another.
	Env *EnvRequest `msgpack:"env,omitempty"`
}

// File is a Python file shipped with a plan. Content may be empty when the
// worker can read the same store as the client: it then fetches Digest
// from the store. Digest is checked against the content either way.
type File struct {
	Name    string `msgpack:"name"`
	Digest  string `msgpack:"digest"`
	Content []byte `msgpack:"content"`
}

// EnvRequest is the Python environment a plan needs: pip requirements and
// how pip may reach packages (most clusters have no internet).
type EnvRequest struct {
	Requirements       []string `msgpack:"requirements"`
	SystemSitePackages bool     `msgpack:"system_site_packages"`
	NoIndex            bool     `msgpack:"no_index"`
	FindLinks          []string `msgpack:"find_links"`
	IndexURL           string   `msgpack:"index_url"`
}

// Ask is the resources a plan asks for. GPUs are given to the plan alone
// unless ShareGPUs is set.
type Ask struct {
	GPUs int `msgpack:"gpus"`
	// ShareGPUs lets the plan's GPUs be shared with other plans that set
	// it too (never with a plan that did not: that one gets its GPUs to
	// itself). It is the plan's promise that it fits beside others in
	// the GPUs' memory. Added in version 1 as an optional field (see the
	// rules at the top): absent means false.
	ShareGPUs bool   `msgpack:"share_gpus,omitempty"`
	CPUs      int    `msgpack:"cpus"`
	Memory    uint64 `msgpack:"memory"`
	// Tags are worker tags the plan needs (a plan file's top-level
	// tags): placement picks a worker carrying every one. The worker
	// itself does not check them (a plan run locally, or sent straight
	// with --worker, runs wherever it is sent).
	Tags []string `msgpack:"tags,omitempty"`
	// Client, from a node's at = { client = true }, asks for the
	// process that runs the plan (soma run), never a worker: soma run
	// runs such a segment in its own local Python, beside the workers
	// it places the other segments on. Placement never sees it; a
	// worker sent such a plan straight runs it like any other.
	Client bool `msgpack:"client,omitempty"`
}

// Kind is the kind of a Value.
type Kind string

const (
	// KindNone is Python's None.
	KindNone Kind = "none"
	// KindArray is a numeric array: DType, Shape and raw little-endian
	// C-order bytes (numpy on the Python side).
	KindArray Kind = "array"
	// KindBytes is raw bytes (Python bytes).
	KindBytes Kind = "bytes"
	// KindObject is a plain value (numbers, strings, lists, maps) carried
	// as msgpack and seen by Python as the JSON equivalent.
	KindObject Kind = "object"
)

// Value is an input or output. Its bytes are either inline (Data) or a
// reference (Ref) so that large payloads never cross the wire:
//
//	blob:sha256:<hex>            a blob of the worker's store (array bytes or raw bytes)
//	zarr:<path>?rows=A:B         rows [A, B) of a Zarr array (path relative to the store's root, or absolute)
//
// A reference that resolves nowhere is an error, never an empty value.
type Value struct {
	Kind   Kind    `msgpack:"kind"`
	DType  string  `msgpack:"dtype,omitempty"`
	Shape  []int64 `msgpack:"shape,omitempty"`
	Data   []byte  `msgpack:"data,omitempty"`
	Ref    string  `msgpack:"ref,omitempty"`
	Object any     `msgpack:"object"`

	// file and size: on the worker, a file the daemon maps instead of
	// receiving its bytes (a verified blob, or decoded zarr rows). Never
	// on the wire.
	file string
	size int64
	temp bool // file is the worker's to remove once the daemon has mapped it
}

// PlanState is where a plan is.
type PlanState string

const (
	StateQueued    PlanState = "queued"
	StateRunning   PlanState = "running"
	StateSucceeded PlanState = "succeeded"
	StateFailed    PlanState = "failed"
	StateCancelled PlanState = "cancelled"
)

// Done reports whether s is final.
func (s PlanState) Done() bool {
	return s == StateSucceeded || s == StateFailed || s == StateCancelled
}

// Result is what a plan produced: Outputs and States on success; Error
// (and the Python Traceback when a filter raised) otherwise.
type Result struct {
	Version int              `msgpack:"version"`
	ID      string           `msgpack:"id"`
	State   PlanState        `msgpack:"state"`
	Outputs map[string]Value `msgpack:"outputs"`
	// States are the trained states of the trainable nodes after Fit, as
	// blob references when the worker has a store, inline otherwise.
	States     map[string]Value `msgpack:"states"`
	Error      string           `msgpack:"error"`
	Traceback  string           `msgpack:"traceback"`
	DurationMS float64          `msgpack:"duration_ms"`
	// LogTail is the end of the plan's log: what the filters printed
	// (the last 8 KiB; so far, while the plan runs).
	LogTail string `msgpack:"log_tail"`
}

// ErrorReply is the body of an HTTP error. Status codes carry the class;
// Error the words.
type ErrorReply struct {
	Version int    `msgpack:"version"`
	Error   string `msgpack:"error"`
}

// Health is GET /health. A client ignores fields it does not know.
type Health struct {
	Version int      `msgpack:"version"`
	OK      bool     `msgpack:"ok"`
	Running int      `msgpack:"running"`
	Tags    []string `msgpack:"tags"`
}

// GPUInfo describes one GPU the worker offers.
type GPUInfo struct {
	Index       int    `msgpack:"index"`
	UUID        string `msgpack:"uuid"`
	Name        string `msgpack:"name"`
	MemoryTotal uint64 `msgpack:"memory_total"`
	MemoryFree  uint64 `msgpack:"memory_free"`
	Utilization int    `msgpack:"utilization"`
}

// Capabilities is GET /capabilities: what the worker offers. A client
// ignores fields it does not know.
type Capabilities struct {
	Version     int       `msgpack:"version"`
	WorkerID    string    `msgpack:"worker_id"`
	CPUs        int       `msgpack:"cpus"`
	MemoryBytes uint64    `msgpack:"memory_bytes"`
	GPUs        []GPUInfo `msgpack:"gpus"`
	GPUNote     string    `msgpack:"gpu_note"`
	MaxPlans    int       `msgpack:"max_plans"`
	Tags        []string  `msgpack:"tags"`
	Python      string    `msgpack:"python"`
	HasStore    bool      `msgpack:"has_store"`
}

// Stream message types (the WebSocket at /plans/stream). The client sends
// begin, then chunks, then end; the worker answers each chunk with a
// chunk_result and the end with complete. In Forward mode each chunk runs
// through the plan as it arrives; in Fit mode chunks are gathered and fit
// at the end. Either way the result equals the one-shot plan on the
// concatenated input.
const (
	MsgBegin       = "begin"
	MsgChunk       = "chunk"
	MsgEnd         = "end"
	MsgChunkResult = "chunk_result"
	MsgComplete    = "complete"
	MsgError       = "error"
)

// StreamMessage is one WebSocket message. Kind says which fields are set.
type StreamMessage struct {
	Version int    `msgpack:"version"`
	Kind    string `msgpack:"kind"`
	// begin
	Plan *Plan `msgpack:"plan,omitempty"`
	// chunk, chunk_result
	Seq     int64            `msgpack:"seq"`
	Input   *Value           `msgpack:"input,omitempty"`
	Targets *Value           `msgpack:"targets,omitempty"`
	Outputs map[string]Value `msgpack:"outputs,omitempty"`
	// complete
	Result *Result `msgpack:"result,omitempty"`
	// error (the stream ends)
	Error string `msgpack:"error,omitempty"`
}

// Plan socket message kinds (GET /plans upgraded to a WebSocket; added
// within version 1 by the endpoint rule at the top of this file). One
// connection carries many one-shot plans, one after another:
//
//	client → worker  plan    a Plan, as POST /plans?wait=1's body
//	worker → client  result  its Result (succeeded, failed or cancelled)
//	worker → client  error   the plan was refused before it ran; nothing was registered
//
// and again, on the same connection. The client sends the next plan only
// after the answer to the last one; a plan sent before that is refused
// (409), as is a malformed frame or one of another version (400: the
// connection stays usable, since WebSocket messages delimit frames),
// an invalid plan (400), the id of a running plan (409), a worker whose
// slots are all busy or that is shutting down (503). Each plan is
// registered as POST /plans?wait=1 registers it, so GET and DELETE
// /plans/<id> see and cancel it, and its result is kept the same way.
// A connection that ends while its plan runs cancels the plan, as a
// stream's does. A worker that shuts down closes its idle plan sockets
// at once and a busy one after its plan's result (the plan gets what a
// POST /plans?wait=1 plan gets: until the server's shutdown deadline,
// then it is cancelled).
const (
	MsgPlan   = "plan"
	MsgResult = "result"
	// MsgError ("error") is shared with the stream.
)

// SocketMessage is one message on the plan socket. Kind says which
// fields are set. Decoded strictly in both directions: only peers of
// this version ever exchange it.
type SocketMessage struct {
	Version int    `msgpack:"version"`
	Kind    string `msgpack:"kind"`
	// plan
	Plan *Plan `msgpack:"plan,omitempty"`
	// result
	Result *Result `msgpack:"result,omitempty"`
	// error: ID is the refused plan's (empty when its frame could not be
	// read); Status is the HTTP status POST /plans would have answered.
	ID     string `msgpack:"id,omitempty"`
	Status int    `msgpack:"status,omitempty"`
	Error  string `msgpack:"error,omitempty"`
}

// versioned is implemented by every frame type.
type versioned interface{ setVersion() }

// setVersion stamps ProtocolVersion, writing only when it is not there
// yet: a finished Result is shared by every handler that replies with it,
// and two replies at once (POST ?wait=1 and DELETE ?wait=1 of one plan)
// raced on this write (go test -race, TestClientRunCancelledByContext).
func (p *Plan) setVersion()          { stamp(&p.Version) }
func (r *Result) setVersion()        { stamp(&r.Version) }
func (e *ErrorReply) setVersion()    { stamp(&e.Version) }
func (h *Health) setVersion()        { stamp(&h.Version) }
func (c *Capabilities) setVersion()  { stamp(&c.Version) }
func (m *StreamMessage) setVersion() { stamp(&m.Version) }
func (m *SocketMessage) setVersion() { stamp(&m.Version) }

func stamp(v *int) {
	if *v != ProtocolVersion {
		*v = ProtocolVersion
	}
}

// EncodeFrame encodes v (a pointer to a frame type of this file) as a
// msgpack map with named fields, stamping ProtocolVersion.
func EncodeFrame(v versioned) ([]byte, error) {
	v.setVersion()
	// Sized for the payloads up front: growing a buffer that will hold
	// a 100 MB array copies it several times (measured: a third of the
	// client's CPU in BenchmarkForward/inline).
	// The 4 KiB for the rest only where a regrowth would copy a large
	// payload: a small frame grows cheaply, and a warm no-op plan
	// allocated two zeroed 4 KiB buffers here for frames of 2 KB and 0.3.
	n := payloadSize(v)
	if n >= 64<<10 {
		n += 4096
	} else {
		n += 512
	}
	buf := bytes.NewBuffer(make([]byte, 0, n))
	enc := msgpack.NewEncoder(buf)
	enc.UseCompactInts(true)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("worker: encode %T: %w", v, err)
	}
	return buf.Bytes(), nil
}

// encodeSmallFrame is EncodeFrame for a frame that is sent and then
// dropped: a small one goes into a pooled buffer (messageBufs) that done
// gives back, so b must not be used after it. A frame that carries 64
// KiB of payload or more is EncodeFrame's own (done does nothing). The
// plan socket's frames, a plan and its result, were a new 3 KB buffer
// each (pprof).
func encodeSmallFrame(v versioned) (b []byte, done func(), err error) {
	if payloadSize(v) >= 64<<10 {
		b, err = EncodeFrame(v)
		return b, func() {}, err
	}
	v.setVersion()
	buf := messageBufs.Get().(*bytes.Buffer)
	buf.Reset()
	enc := msgpack.NewEncoder(buf)
	enc.UseCompactInts(true)
	if err := enc.Encode(v); err != nil {
		messageBufs.Put(buf)
		return nil, nil, fmt.Errorf("worker: encode %T: %w", v, err)
	}
	return buf.Bytes(), func() { putMessageBuf(buf) }, nil
}

// DecodeFrame decodes b into v, strictly: it first reads the frame's
// version and refuses another one (a *VersionError), then decodes with
// unknown fields refused. Only Health and Capabilities, which a newer
// worker may extend, are decoded leniently. Any other failure wraps
// ErrFrame.
func DecodeFrame(b []byte, v versioned) error {
	got, err := frameVersion(b)
	if err != nil {
		return err
	}
	if got != ProtocolVersion {
		return &VersionError{Got: got, Want: ProtocolVersion}
	}
	r := bytes.NewReader(b)
	dec := msgpack.NewDecoder(r)
	switch v.(type) {
	case *Health, *Capabilities:
	default:
		dec.DisallowUnknownFields(true)
	}
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %T: %v", ErrFrame, v, err)
	}
	// bytes.Reader is an io.ByteScanner, so the decoder reads from it
	// directly and r.Len() is what the frame did not use.
	if r.Len() != 0 {
		return fmt.Errorf("%w: %T: %d trailing bytes after the frame", ErrFrame, v, r.Len())
	}
	return nil
}

// frameVersion reads only the "version" field of a frame. It walks the
// top-level map without decoding other values into types, so that a
// frame of another version is refused before its fields are interpreted.
func frameVersion(b []byte) (int, error) {
	dec := msgpack.NewDecoder(bytes.NewReader(b))
	n, err := dec.DecodeMapLen()
	if err != nil {
		return 0, fmt.Errorf("%w: not a msgpack map: %v", ErrFrame, err)
	}
	if n < 0 {
		return 0, fmt.Errorf("%w: nil map", ErrFrame)
	}
	for i := 0; i < n; i++ {
		key, err := dec.DecodeString()
		if err != nil {
			return 0, fmt.Errorf("%w: map key %d: %v", ErrFrame, i, err)
		}
		if key != "version" {
			if err := dec.Skip(); err != nil {
				return 0, fmt.Errorf("%w: field %q: %v", ErrFrame, key, err)
			}
			continue
		}
		v, err := dec.DecodeInt64()
		if err != nil {
			return 0, fmt.Errorf("%w: field \"version\": %v", ErrFrame, err)
		}
		if v < 0 || v > math.MaxInt32 {
			return 0, fmt.Errorf("%w: field \"version\" = %d", ErrFrame, v)
		}
		return int(v), nil
	}
	return 0, &VersionError{Got: 0, Want: ProtocolVersion}
}

// payloadSize is the bytes of inline values a frame carries.
func payloadSize(v versioned) int {
	n := 0
	add := func(vs ...*Value) {
		for _, x := range vs {
			if x != nil {
				n += len(x.Data)
			}
		}
	}
	addMap := func(m map[string]Value) {
		for _, x := range m {
			n += len(x.Data)
		}
	}
	addPlan := func(p *Plan) {
		if p == nil {
			return
		}
		add(&p.Input, p.Targets)
		addMap(p.States)
		for _, f := range p.Files {
			n += len(f.Content)
		}
	}
	switch t := v.(type) {
	case *Plan:
		addPlan(t)
	case *Result:
		addMap(t.Outputs)
		addMap(t.States)
	case *SocketMessage:
		addPlan(t.Plan)
		if t.Result != nil {
			addMap(t.Result.Outputs)
			addMap(t.Result.States)
		}
	case *StreamMessage:
		addPlan(t.Plan)
		add(t.Input, t.Targets)
		addMap(t.Outputs)
		if t.Result != nil {
			addMap(t.Result.Outputs)
			addMap(t.Result.States)
		}
	}
	return n
}
