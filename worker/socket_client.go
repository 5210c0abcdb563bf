package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"github.com/coder/websocket"
)

// errNoSocket: the worker has no plan socket (an older soma-worker).
var errNoSocket = errors.New("worker: no plan socket")

// socketless reports whether the worker refused the plan socket before.
func (c *Client) socketless() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.noSocket
}

// runSocket runs q over a plan socket. It returns errNoSocket when the
// worker has none.
func (c *Client) runSocket(ctx context.Context, q *Plan) (*Result, error) {
	q.setVersion()
	frame, done, err := encodeSmallFrame(&SocketMessage{Kind: MsgPlan, Plan: q})
	if err != nil {
		return nil, err
	}
	defer done() // after any resend below
	for retried := false; ; retried = true {
		conn, reused, err := c.takeSocket(ctx)
		if err != nil {
			return nil, err
		}
		res, err := exchange(ctx, conn, q.ID, frame)
		var refused *RemoteError
		if err == nil || errors.As(err, &refused) {
			// A result or a refusal: the socket is in step, ready for
			// the next plan.
			c.putSocket(conn)
			return res, err
		}
		// Anything else leaves the socket in an unknown state: a reply
		// may still be on its way, or the connection is gone.
		_ = conn.CloseNow()
		if ctx.Err() != nil {
			// The worker cancels the plan of a connection that ends;
			// wait until it has ended there, as Run always has.
			_ = c.Cancel(context.WithoutCancel(ctx), q.ID)
			return nil, fmt.Errorf("worker: plan %s on %s: %w", q.ID, c.base.Host, ctx.Err())
		}
		if reused && !retried && c.unknownPlan(ctx, q.ID) {
			// An idle socket can outlive its worker (killed, or
			// restarted at the same address); the worker now listening
			// does not know the plan, so it never ran there. HTTP's
			// keep-alive pool notices such connections with a read it
			// keeps on each; the socket does without, for a goroutine
			// hand-off less per plan.
			continue
		}
		return nil, fmt.Errorf("worker: plan %s on %s: %w", q.ID, c.base.Host, err)
	}
}

// exchange sends a plan frame on conn and reads the answer: the plan's
// result, or a *RemoteError when the worker refused it.
func exchange(ctx context.Context, conn *websocket.Conn, id string, frame []byte) (*Result, error) {
	if err := conn.Write(ctx, websocket.MessageBinary, frame); err != nil {
		return nil, fmt.Errorf("plan socket: send: %w", err)
	}
	typ, b, done, err := readMessage(ctx, conn)
	if err != nil {
		return nil, fmt.Errorf("plan socket: no answer: %w", err)
	}
	defer done()
	return readAnswer(typ, b, id)
}

// readAnswer decodes the worker's answer to plan id: its result, or a
// *RemoteError when the worker refused it. Any other error means the
// socket is out of step.
func readAnswer(typ websocket.MessageType, b []byte, id string) (*Result, error) {
	if typ != websocket.MessageBinary {
		return nil, errors.New("plan socket: the worker answered with a text message")
	}
	var m SocketMessage
	if err := DecodeFrame(b, &m); err != nil {
		return nil, fmt.Errorf("plan socket: answer: %w", err)
	}
	switch {
	case m.Kind == MsgResult && m.Result != nil && m.Result.ID == id:
		return m.Result, nil
	case m.Kind == MsgError && (m.ID == "" || m.ID == id):
		return nil, &RemoteError{Status: m.Status, Message: m.Error}
	}
	return nil, fmt.Errorf("plan socket: answer to plan %q is a %q message for plan %q", id, m.Kind, answerID(&m))
}

func answerID(m *SocketMessage) string {
	if m.Result != nil {
		return m.Result.ID
	}
	return m.ID
}

// unknownPlan reports whether the worker answers that it does not know
// plan id. Any other answer, or none, is false.
func (c *Client) unknownPlan(ctx context.Context, id string) bool {
	_, err := c.Get(ctx, id)
	var re *RemoteError
	return errors.As(err, &re) && re.Status == http.StatusNotFound
}

// takeSocket returns an idle plan socket (reused true) or dials one.
func (c *Client) takeSocket(ctx context.Context) (*websocket.Conn, bool, error) {
	c.mu.Lock()
	if n := len(c.idle); n > 0 {
		conn := c.idle[n-1]
		c.idle[n-1] = nil
		c.idle = c.idle[:n-1]
		c.mu.Unlock()
		return conn, true, nil
	}
	c.mu.Unlock()
	conn, err := c.dialSocket(ctx)
	return conn, false, err
}

// putSocket keeps conn for the next Run, or closes it when enough are
// kept.
func (c *Client) putSocket(conn *websocket.Conn) {
	c.mu.Lock()
	if len(c.idle) < maxIdleSockets {
		c.idle = append(c.idle, conn)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	_ = conn.CloseNow()
}

// CloseIdle closes the plan sockets kept between plans (the worker's
// handler for each ends with it). The Client stays usable: the next Run
// dials again. The HTTP client's connections are its owner's.
func (c *Client) CloseIdle() {
	c.mu.Lock()
	idle := c.idle
	c.idle = nil
	c.mu.Unlock()
	for _, conn := range idle {
		_ = conn.CloseNow()
	}
}

// dialSocket opens a plan socket. A worker that refuses the handshake as
// one without the route does (404, 405) yields errNoSocket, said once.
func (c *Client) dialSocket(ctx context.Context) (*websocket.Conn, error) {
	conn, resp, err := c.dialWS(ctx, "/plans")
	if err == nil {
		// Results as large as POST /plans?wait=1 answers (coder/websocket's
		// default limit is 32 KiB).
		conn.SetReadLimit(maxPlanBody)
		return conn, nil
	}
	if resp == nil || resp.StatusCode < 300 {
		return nil, fmt.Errorf("worker: plan socket to %s: %w", c.base.Host, err)
	}
	if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed {
		c.mu.Lock()
		said := c.noSocket
		c.noSocket = true
		c.mu.Unlock()
		if !said {
			log := c.Logger
			if log == nil {
				log = slog.Default()
			}
			log.Info(fmt.Sprintf("worker: %s has no plan socket (GET /plans: HTTP %d), as a soma-worker older than this client; it speaks the same protocol version %d, so plans go over POST /plans?wait=1, with a slower round trip (upgrade that worker to run them over the socket)", c.base.Host, resp.StatusCode, ProtocolVersion))
		}
		return nil, errNoSocket
	}
	// The worker's ErrorReply, as the other requests read it (Dial keeps
	// the first 1024 bytes of a refused handshake's body).
	msg := "worker: plan socket refused: " + err.Error()
	if resp.Body != nil {
		b, _ := io.ReadAll(resp.Body)
		var er ErrorReply
		if DecodeFrame(b, &er) == nil {
			msg = er.Error
		}
	}
	return nil, &RemoteError{Status: resp.StatusCode, Message: msg}
}
