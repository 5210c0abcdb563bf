package worker

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/soma-hpc/soma/fsstore"
)

// CoordinatorOptions configure NewCoordinator.
type CoordinatorOptions struct {
	// Token is the bearer token every request must carry; "" accepts
	// all (only for a loopback listener: CheckListen).
	Token string
	// Timeout is the heartbeat timeout for workers and leases; zero means
	// DefaultHeartbeatTimeout.
	Timeout time.Duration
	// Logger gets one line per request that failed on the server's side;
	// nil discards.
	Logger *slog.Logger
}

// NewCoordinator returns the HTTP handler of soma-coordinator: placement
// through the folder, for clients that cannot see it. It hands out a
// worker's address and a lease, and steps aside: plans and data go from
// the client to the worker directly, never through it.
//
// It keeps no state of its own: every answer is read from the folder, so
// any number of coordinators may serve one folder, and a restarted one
// answers the same. /submit places as a Placer does, from a view of the
// registry and the leases at most a second old (DefaultRegistryCache, a
// tenth of the timeout if that is shorter) that its own claims and
// completions keep up to date; the claim by link(2) decides every
// placement, and a view that finds nothing is read again before a
// refusal (Placer says why that is exact). Bug (issue 15): it read the
// folder afresh for every /submit: two listings, every record, a Put. Building it starts no goroutine (the Rust
// coordinator's router spawned a reaper, seed 000 D-74): a dead worker
// is judged dead when it is read, and a stale lease is reclaimed by the
// next placer that needs its slot.
//
// Routes (JSON in and out; every one needs "Authorization: Bearer
// TOKEN" when a token is set):
//
//	GET  /health    {"status":"ok","server_time":...} once the folder answers
//	GET  /workers   WorkersReport: every worker, alive or not, and the problems
//	GET  /summary   RegistrySummary: counts
//	POST /submit    {"requirement":{...},"holder":"..."} -> SubmitReply
//	POST /renew     {"lease":{...}} -> {"renewed_at":...}; 409 if the lease is lost
//	POST /complete  {"lease":{...}} -> {"released":true}
//
// A lease is the client's to keep fresh: it POSTs /renew every
// renew_every_s of the SubmitReply while the plan runs (the coordinator
// holds nothing between requests), and /complete when it is over. A
// client that dies stops renewing; its lease goes stale after timeout_s
// and the next placement reclaims the slot.
func NewCoordinator(store *fsstore.Store, opts CoordinatorOptions) http.Handler {
	c := &coordinator{store: store, token: opts.Token, timeout: opts.Timeout, log: opts.Logger}
	if c.timeout <= 0 {
		c.timeout = DefaultHeartbeatTimeout
	}
	c.st = newPlaceState(0, c.timeout)
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", c.health)
	mux.HandleFunc("GET /workers", c.workers)
	mux.HandleFunc("GET /summary", c.summary)
	mux.HandleFunc("POST /submit", c.submit)
	mux.HandleFunc("POST /renew", c.renew)
	mux.HandleFunc("POST /complete", c.complete)
	return c.auth(mux)
}

type coordinator struct {
	store   *fsstore.Store
	token   string
	timeout time.Duration
	log     *slog.Logger
	st      *placeState // what /submit keeps of the folder between requests
}

// SubmitRequest is the body of POST /submit.
type SubmitRequest struct {
	Requirement Requirement `json:"requirement"`
	Holder      string      `json:"holder,omitempty"` // who asks, for people reading the folder
}

// SubmitReply is the answer to POST /submit: where to send the plan, and
// the lease to renew and complete.
type SubmitReply struct {
	Worker      WorkerID `json:"worker"`
	Address     string   `json:"address"`
	Lease       Lease    `json:"lease"`
	LeaseName   string   `json:"lease_name"`
	TimeoutS    float64  `json:"timeout_s"`
	RenewEveryS float64  `json:"renew_every_s"`
}

// LeaseRequest is the body of POST /renew and POST /complete.
type LeaseRequest struct {
	Lease Lease `json:"lease"`
}

// CoordinatorError is the body of every answer that is not 200.
type CoordinatorError struct {
	Error string `json:"error"`
}

func (c *coordinator) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !bearerOK(r, c.token) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="soma-coordinator"`)
			coordWriteJSON(w, http.StatusUnauthorized, CoordinatorError{Error: "missing or wrong bearer token (send Authorization: Bearer <the token in the coordinator's --token-file>)"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (c *coordinator) health(w http.ResponseWriter, r *http.Request) {
	now, err := c.store.Now(r.Context())
	if err != nil {
		c.fail(w, r, http.StatusServiceUnavailable, err)
		return
	}
	coordWriteJSON(w, http.StatusOK, map[string]any{"status": "ok", "server_time": now.UTC(), "root": c.store.Root()})
}

func (c *coordinator) workers(w http.ResponseWriter, r *http.Request) {
	rep, err := ReadWorkers(r.Context(), c.store, ListOptions{Timeout: c.timeout})
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	coordWriteJSON(w, http.StatusOK, rep)
}

func (c *coordinator) summary(w http.ResponseWriter, r *http.Request) {
	rep, err := ReadWorkers(r.Context(), c.store, ListOptions{Timeout: c.timeout})
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	coordWriteJSON(w, http.StatusOK, rep.Summary())
}

func (c *coordinator) submit(w http.ResponseWriter, r *http.Request) {
	var req SubmitRequest
	if !coordReadJSON(w, r, &req) {
		return
	}
	if err := req.Requirement.check(); err != nil {
		coordWriteJSON(w, http.StatusBadRequest, CoordinatorError{Error: err.Error()})
		return
	}
	holder := req.Holder
	if holder == "" {
		holder = "coordinator client " + r.RemoteAddr
	}
	rnd := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	rec, l, _, err := placeLeaseCached(r.Context(), c.store, req.Requirement, c.timeout, holder, rnd, c.st)
	var nm *NoMatchError
	switch {
	case errors.As(err, &nm):
		coordWriteJSON(w, http.StatusUnprocessableEntity, CoordinatorError{Error: err.Error()})
		return
	case errors.Is(err, ErrNoFreeSlot):
		// Retry-After: about one heartbeat, when stale leases may free.
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(HeartbeatInterval(c.timeout).Seconds()))))
		coordWriteJSON(w, http.StatusServiceUnavailable, CoordinatorError{Error: err.Error()})
		return
	case err != nil:
		c.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	coordWriteJSON(w, http.StatusOK, SubmitReply{
		Worker: rec.ID, Address: rec.Address, Lease: l, LeaseName: l.Name(),
		TimeoutS: c.timeout.Seconds(), RenewEveryS: HeartbeatInterval(c.timeout).Seconds(),
	})
}

func (c *coordinator) renew(w http.ResponseWriter, r *http.Request) {
	var req LeaseRequest
	if !coordReadJSON(w, r, &req) || !coordCheckLease(w, req.Lease) {
		return
	}
	t, err := RenewLease(r.Context(), c.store, req.Lease, c.timeout)
	switch {
	case errors.Is(err, ErrLeaseLost):
		coordWriteJSON(w, http.StatusConflict, CoordinatorError{Error: err.Error()})
	case err != nil:
		c.fail(w, r, http.StatusInternalServerError, err)
	default:
		coordWriteJSON(w, http.StatusOK, map[string]any{"renewed_at": t.UTC()})
	}
}

func (c *coordinator) complete(w http.ResponseWriter, r *http.Request) {
	var req LeaseRequest
	if !coordReadJSON(w, r, &req) || !coordCheckLease(w, req.Lease) {
		return
	}
	err := ReleaseLease(r.Context(), c.store, req.Lease, c.timeout)
	c.st.leaseView().released(req.Lease, false, err)
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	coordWriteJSON(w, http.StatusOK, map[string]any{"released": true})
}

func coordCheckLease(w http.ResponseWriter, l Lease) bool {
	if l.Worker.IsZero() || l.Slot < 0 || l.Nonce == "" {
		coordWriteJSON(w, http.StatusBadRequest, CoordinatorError{Error: "lease: want worker, slot and nonce as /submit returned them"})
		return false
	}
	return true
}

// coordReadJSON decodes a request body strictly (unknown fields refused, one
// value, at most 1 MiB), answering 400 itself when it cannot.
func coordReadJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && dec.Decode(new(json.RawMessage)) != io.EOF {
		err = errors.New("more than one JSON value")
	}
	if err != nil {
		coordWriteJSON(w, http.StatusBadRequest, CoordinatorError{Error: fmt.Sprintf("request body: %v", err)})
		return false
	}
	return true
}

func (c *coordinator) fail(w http.ResponseWriter, r *http.Request, code int, err error) {
	c.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	coordWriteJSON(w, code, CoordinatorError{Error: err.Error()})
}

func coordWriteJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
