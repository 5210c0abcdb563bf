package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"
)

// CoordinatorClient places plans through a soma-coordinator, for a
// client that cannot see the folder (a laptop outside the cluster). What
// it returns is the same *Placement that Place returns: the worker's
// address, the lease, a heartbeat goroutine (POST /renew every
// renew_every_s) and Release (POST /complete).
type CoordinatorClient struct {
	URL   string // "http://login1:7071"
	Token string // the bearer token; "" for a loopback coordinator without one
	// HTTP is the client used; nil means a client with a 30 s timeout.
	HTTP *http.Client
}

// ErrUnauthorized is a coordinator's 401: no token, or the wrong one.
var ErrUnauthorized = errors.New("worker: the coordinator refused the bearer token")

// Place asks the coordinator for a worker that meets req and a lease on
// it. Errors wrap ErrNoMatch (nobody meets req), ErrNoFreeSlot (all busy;
// with opts.Wait it asks again until ctx ends) or ErrUnauthorized.
// opts.Timeout is ignored: the coordinator's applies.
func (c *CoordinatorClient) Place(ctx context.Context, req Requirement, opts PlaceOptions) (*Placement, error) {
	wait := opts.WaitInterval
	if wait <= 0 {
		wait = time.Second
	}
	for {
		var rep SubmitReply
		err := c.do(ctx, "POST", "/submit", SubmitRequest{Requirement: req, Holder: opts.Holder}, &rep)
		if err == nil {
			return c.placement(rep, opts)
		}
		if !errors.Is(err, ErrNoFreeSlot) || !opts.Wait {
			return nil, err
		}
		d := wait/2 + rand.N(wait)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("worker: place %s: %w (waited for a free slot)", req, ctx.Err())
		case <-time.After(d):
		}
	}
}

func (c *CoordinatorClient) placement(rep SubmitReply, opts PlaceOptions) (*Placement, error) {
	timeout := time.Duration(rep.TimeoutS * float64(time.Second))
	if timeout <= 0 {
		return nil, fmt.Errorf("worker: coordinator %s: submit answered timeout_s %v", c.URL, rep.TimeoutS)
	}
	l := rep.Lease
	beat := func(ctx context.Context) (time.Time, error) {
		var r struct {
			RenewedAt time.Time `json:"renewed_at"`
		}
		err := c.do(ctx, "POST", "/renew", LeaseRequest{Lease: l}, &r)
		return r.RenewedAt, err
	}
	// A coordinator ends the lease through the end marker (ReleaseLease):
	// it keeps no heartbeat history to vouch for the holder.
	end := func(ctx context.Context, _ time.Time, _ bool) error {
		return c.do(ctx, "POST", "/complete", LeaseRequest{Lease: l}, nil)
	}
	first, err := beat(context.Background())
	if err != nil {
		_ = end(context.Background(), time.Time{}, true)
		return nil, err
	}
	w := WorkerRecord{Version: WorkerRecordVersion, ID: rep.Worker, Address: rep.Address}
	return newPlacement(w, l, timeout, first, beat, end, opts.Logger), nil
}

// Workers returns the coordinator's GET /workers.
func (c *CoordinatorClient) Workers(ctx context.Context) (WorkersReport, error) {
	var rep WorkersReport
	err := c.do(ctx, "GET", "/workers", nil, &rep)
	return rep, err
}

// Summary returns the coordinator's GET /summary.
func (c *CoordinatorClient) Summary(ctx context.Context) (RegistrySummary, error) {
	var s RegistrySummary
	err := c.do(ctx, "GET", "/summary", nil, &s)
	return s, err
}

// do sends one request and decodes a 200 answer into out; any other
// answer becomes an error carrying the coordinator's message.
func (c *CoordinatorClient) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.URL, "/")+path, body)
	if err != nil {
		return fmt.Errorf("worker: coordinator %s: %w", c.URL, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("worker: coordinator %s: %w", c.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("worker: coordinator %s%s: %w", c.URL, path, err)
	}
	if resp.StatusCode == http.StatusOK {
		if out == nil {
			return nil
		}
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("worker: coordinator %s%s: answer: %w", c.URL, path, err)
		}
		return nil
	}
	var e CoordinatorError
	msg := strings.TrimSpace(string(b))
	if json.Unmarshal(b, &e) == nil && e.Error != "" {
		msg = e.Error
	}
	var kind error
	switch resp.StatusCode {
	case http.StatusUnauthorized:
		kind = ErrUnauthorized
	case http.StatusUnprocessableEntity:
		kind = ErrNoMatch
	case http.StatusServiceUnavailable:
		if path == "/submit" {
			kind = ErrNoFreeSlot
		}
	case http.StatusConflict:
		kind = ErrLeaseLost
	}
	if kind != nil {
		return &coordinatorAnswer{url: c.URL + path, code: resp.StatusCode, msg: msg, kind: kind}
	}
	return fmt.Errorf("worker: coordinator %s%s: %s: %s", c.URL, path, resp.Status, msg)
}

// coordinatorAnswer is an error answer that maps to one of the
// package's sentinels, keeping the coordinator's own words.
type coordinatorAnswer struct {
	url  string
	code int
	msg  string
	kind error
}

func (e *coordinatorAnswer) Error() string {
	return fmt.Sprintf("coordinator %s (%d): %s", e.url, e.code, e.msg)
}

func (e *coordinatorAnswer) Unwrap() error { return e.kind }
