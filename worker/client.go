package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/soma-hpc/soma/fsstore"
)

// ErrRemote is an error the worker answered with; the message is the
// worker's.
var ErrRemote = errors.New("worker: the worker refused")

// RemoteError is a worker's error reply.
type RemoteError struct {
	Status  int
	Message string
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("%s (HTTP %d)", e.Message, e.Status)
}

func (e *RemoteError) Unwrap() error { return ErrRemote }

// Client talks to one soma-worker. It is safe for concurrent use.
type Client struct {
	base  *url.URL
	token string
	http  *http.Client
	// Store, when set, is a store the worker also sees (the same --root):
	// files are then shipped by digest instead of inline.
	Store *fsstore.Store
	// Logger gets the one line that says this worker has no plan socket
	// and Run uses POST /plans (nil: slog.Default()).
	Logger *slog.Logger

	mu      sync.Mutex
	shipped map[fsstore.Digest]time.Time // when the Put of a file's blob began
	// idle are plan sockets (GET /plans) between plans, most recently
	// used last. A socket is in idle or held by one Run, never both.
	idle []*websocket.Conn
	// noSocket: the worker refused the plan socket's handshake as a
	// worker without that route does; Run uses POST /plans?wait=1.
	noSocket bool
}

// maxIdleSockets bounds the plan sockets a Client keeps between plans:
// one per concurrent Run, up to this many; a Run beyond them dials its
// own and closes it after.
const maxIdleSockets = 8

// socketMaxPayload: a plan with this many bytes of inline values (input,
// targets, states, files) goes over POST /plans?wait=1, where the worker
// knows the body's length and reads it into one buffer; a WebSocket
// message is read in growing chunks and copied once more (io.ReadAll),
// and the client masks every byte it sends. What the socket saves, tens
// of microseconds a plan, is nothing next to a megabyte. Measured with a
// 100 MB inline array, the two alternating, 2 cores at load 11: p50
// 1.5, 2.1, 2.0 s over the socket against 1.6, 1.7, 0.84 s over POST.
const socketMaxPayload = 1 << 20

// fileReuse is how long a Client ships a file by the digest of a blob it
// stored before, without storing it again. A Put of a blob that exists
// refreshes its time so that soma gc keeps it (fsstore's GC keeps blobs
// younger than its grace, at least study.MinGCAge = 60 s): the worker
// reads a file within moments of the plan's arrival, so a blob at most
// fileReuse plus a round trip old is never collected under it. The same
// rule and window as a study's empty-curve blob (study.BlobReuse). Was:
// a Put per file per plan, a stat and a utimensat on the file server at
// every plan (issue 14's round trip).
const fileReuse = 10 * time.Second

// NewClient returns a client of the worker at rawURL (http://host:port).
// hc may be nil (http.DefaultClient).
func NewClient(rawURL, token string, hc *http.Client) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(rawURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("worker: URL %q: want http://HOST:PORT", rawURL)
	}
	if hc == nil {
		hc = http.DefaultClient
	}
	return &Client{base: u, token: token, http: hc}, nil
}

// Run runs p on the worker and returns its result. Cancelling ctx
// cancels the plan on the worker; Run returns once it has ended there.
//
// Run sends p over a plan socket (GET /plans, a WebSocket that carries
// plans one after another), kept between calls: one socket per
// concurrent Run, idle ones reused (CloseIdle closes them).
// A socket that fails is closed, never reused; a plan that a reused
// socket lost before the worker registered it (the worker restarted
// since) is sent once more on a new socket.
//
// A plan carrying socketMaxPayload bytes of inline values or more goes
// over POST /plans?wait=1 instead (see there).
//
// A worker that refuses the socket's handshake as an older soma-worker
// does (404 or 405: it has no GET /plans route) gets the plan over POST
// /plans?wait=1, and the Client logs that once. Not a refusal: the
// socket was added within protocol version 1 (protocol.go's endpoint
// rule), so that worker speaks this client's version, and its POST
// /plans takes the same Plan and answers the same Result, with the same
// meaning; only the round trip is slower. Refusing it would make a
// cluster upgrade every worker before its first client. A worker of
// another version is refused on either path (VersionError).
func (c *Client) Run(ctx context.Context, p *Plan) (*Result, error) {
	q, err := c.shipFiles(ctx, p)
	if err != nil {
		return nil, err
	}
	if payloadSize(q) < socketMaxPayload && !c.socketless() {
		res, err := c.runSocket(ctx, q)
		if !errors.Is(err, errNoSocket) {
			return res, err
		}
	}
	body, err := EncodeFrame(q)
	if err != nil {
		return nil, err
	}
	var res Result
	err = c.do(ctx, http.MethodPost, "/plans?wait=1", body, &res)
	if err != nil && ctx.Err() != nil {
		_ = c.Cancel(context.WithoutCancel(ctx), p.ID)
	}
	if err != nil {
		return nil, err
	}
	return &res, nil
}

// Submit starts p and returns at once (state queued or running).
func (c *Client) Submit(ctx context.Context, p *Plan) (*Result, error) {
	body, err := c.encodePlan(ctx, p)
	if err != nil {
		return nil, err
	}
	var res Result
	if err := c.do(ctx, http.MethodPost, "/plans", body, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// Get returns where plan id is, with its result once it has ended.
func (c *Client) Get(ctx context.Context, id string) (*Result, error) {
	var res Result
	if err := c.do(ctx, http.MethodGet, "/plans/"+url.PathEscape(id), nil, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// Cancel cancels plan id and waits until it has ended.
func (c *Client) Cancel(ctx context.Context, id string) error {
	var res Result
	return c.do(ctx, http.MethodDelete, "/plans/"+url.PathEscape(id)+"?wait=1", nil, &res)
}

// Health asks GET /health.
func (c *Client) Health(ctx context.Context) (*Health, error) {
	var h Health
	if err := c.do(ctx, http.MethodGet, "/health", nil, &h); err != nil {
		return nil, err
	}
	return &h, nil
}

// Capabilities asks GET /capabilities.
func (c *Client) Capabilities(ctx context.Context) (*Capabilities, error) {
	var cp Capabilities
	if err := c.do(ctx, http.MethodGet, "/capabilities", nil, &cp); err != nil {
		return nil, err
	}
	return &cp, nil
}

// encodePlan encodes p, shipping its files by digest when the client has
// the worker's store.
func (c *Client) encodePlan(ctx context.Context, p *Plan) ([]byte, error) {
	q, err := c.shipFiles(ctx, p)
	if err != nil {
		return nil, err
	}
	return EncodeFrame(q)
}

// shipFiles returns a copy of p (encoding stamps the copy's version, never
// the caller's plan) whose files go by digest when the client has the
// worker's store.
func (c *Client) shipFiles(ctx context.Context, p *Plan) (*Plan, error) {
	q := *p
	if c.Store != nil {
		q.Files = make([]File, len(p.Files))
		for i, f := range p.Files {
			if f.Content == nil {
				q.Files[i] = f
				continue
			}
			d, err := c.ship(ctx, f.Content)
			if err != nil {
				return nil, fmt.Errorf("worker: ship %s: %w", f.Name, err)
			}
			q.Files[i] = File{Name: f.Name, Digest: d.String()}
		}
	}
	return &q, nil
}

// ship stores b in the client's store, unless its Put began less than
// fileReuse ago, and returns its digest.
func (c *Client) ship(ctx context.Context, b []byte) (fsstore.Digest, error) {
	d := fsstore.Sum(b)
	c.mu.Lock()
	at, ok := c.shipped[d]
	c.mu.Unlock()
	if ok && time.Since(at) < fileReuse {
		return d, nil
	}
	began := time.Now()
	if _, err := c.Store.Put(ctx, b); err != nil {
		return fsstore.Digest{}, err
	}
	c.mu.Lock()
	if c.shipped == nil || len(c.shipped) > 1024 {
		c.shipped = map[fsstore.Digest]time.Time{}
	}
	c.shipped[d] = began
	c.mu.Unlock()
	return d, nil
}

func (c *Client) do(ctx context.Context, method, path string, body []byte, out versioned) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base.String()+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", ContentType)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("worker: %s %s: %w", method, c.base.Host, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("worker: %s %s: reply: %w", method, c.base.Host, err)
	}
	if resp.StatusCode >= 300 {
		var er ErrorReply
		if derr := DecodeFrame(b, &er); derr != nil {
			return &RemoteError{Status: resp.StatusCode, Message: fmt.Sprintf("worker: %s (unreadable reply: %v)", resp.Status, derr)}
		}
		return &RemoteError{Status: resp.StatusCode, Message: er.Error}
	}
	if err := DecodeFrame(b, out); err != nil {
		return fmt.Errorf("worker: %s %s: %w", method, path, err)
	}
	return nil
}

// Stream is a plan fed in chunks over a WebSocket. Send chunks, then End;
// Next reads the worker's messages (a chunk_result per chunk, then
// complete). Send and Next may run in different goroutines.
type Stream struct {
	c *websocket.Conn
}

// Stream begins p as a stream.
func (c *Client) Stream(ctx context.Context, p *Plan) (*Stream, error) {
	conn, resp, err := c.dialWS(ctx, "/plans/stream")
	if err != nil {
		if resp != nil && resp.StatusCode >= 300 {
			return nil, &RemoteError{Status: resp.StatusCode, Message: "worker: stream refused: " + err.Error()}
		}
		return nil, fmt.Errorf("worker: stream: %w", err)
	}
	conn.SetReadLimit(maxPlanBody)
	s := &Stream{c: conn}
	q := *p
	if err := s.send(ctx, &StreamMessage{Kind: MsgBegin, Plan: &q}); err != nil {
		conn.CloseNow()
		return nil, err
	}
	return s, nil
}

// Send sends one chunk (targets only for a Fit).
func (s *Stream) Send(ctx context.Context, seq int64, input Value, targets *Value) error {
	return s.send(ctx, &StreamMessage{Kind: MsgChunk, Seq: seq, Input: &input, Targets: targets})
}

// End says there are no more chunks.
func (s *Stream) End(ctx context.Context) error {
	return s.send(ctx, &StreamMessage{Kind: MsgEnd})
}

// Next returns the worker's next message. An error message from the
// worker is returned as an error.
func (s *Stream) Next(ctx context.Context) (*StreamMessage, error) {
	_, b, err := s.c.Read(ctx)
	if err != nil {
		return nil, fmt.Errorf("worker: stream: %w", err)
	}
	var m StreamMessage
	if err := DecodeFrame(b, &m); err != nil {
		return nil, err
	}
	if m.Kind == MsgError {
		return nil, &RemoteError{Status: 0, Message: m.Error}
	}
	return &m, nil
}

// Close ends the connection (mid-stream, that cancels the plan).
func (s *Stream) Close() error { return s.c.CloseNow() }

func (s *Stream) send(ctx context.Context, m *StreamMessage) error {
	b, err := EncodeFrame(m)
	if err != nil {
		return err
	}
	if err := s.c.Write(ctx, websocket.MessageBinary, b); err != nil {
		return fmt.Errorf("worker: stream: %w", err)
	}
	return nil
}

// dialWS opens a WebSocket to the worker's path, with the token.
func (c *Client) dialWS(ctx context.Context, path string) (*websocket.Conn, *http.Response, error) {
	u := *c.base
	u.Scheme = map[string]string{"http": "ws", "https": "wss"}[u.Scheme]
	u.Path += path
	h := http.Header{}
	if c.token != "" {
		h.Set("Authorization", "Bearer "+c.token)
	}
	return websocket.Dial(ctx, u.String(), &websocket.DialOptions{HTTPHeader: h, HTTPClient: c.http})
}
