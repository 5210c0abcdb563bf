package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// maxPlanBody bounds a POST /plans body: inline values are for small
// data; large data goes by reference.
const maxPlanBody = 4 << 30

// Server serves a Worker over HTTP and WebSocket.
type Server struct {
	w     *Worker
	token string
	log   *slog.Logger

	// streams tracks the WebSocket handlers: http.Server.Shutdown does
	// not wait for hijacked connections (STYLE rule 11).
	streams sync.WaitGroup
	mu      sync.Mutex
	closing bool
	cancels map[*context.CancelFunc]struct{}
	// sockets are the open plan sockets (GET /plans), which Serve also
	// waits for: their running plans get what POST /plans?wait=1 plans
	// get at shutdown.
	sockets   map[*planSocket]struct{}
	socketsWG sync.WaitGroup
	slow      slowPlans // hands a busy plan socket's reading on (read)

	// StopGrace is how long Serve lets the plans still running at
	// shutdown end on their own before it cancels them (0:
	// DefaultStopGrace). Set it before Serve.
	StopGrace time.Duration
}

// NewServer returns a server for w. An empty token means no auth (loopback
// only: see CheckListen).
func NewServer(w *Worker, token string) *Server {
	return &Server{w: w, token: token, log: w.log, cancels: map[*context.CancelFunc]struct{}{}, sockets: map[*planSocket]struct{}{}}
}

// Handler returns the HTTP routes:
//
//	POST   /plans            submit (?wait=1: answer with the result)
//	GET    /plans            WebSocket: one-shot plans, one after another (the plan socket)
//	GET    /plans/{id}       state, and the result once ended
//	DELETE /plans/{id}       cancel
//	GET    /plans/stream     WebSocket: a plan in chunks
//	GET    /health           liveness (no token needed)
//	GET    /capabilities     what the worker offers
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", s.health)
	mux.Handle("GET /capabilities", s.auth(http.HandlerFunc(s.capabilities)))
	mux.Handle("POST /plans", s.auth(http.HandlerFunc(s.submit)))
	// The plan socket is GET /plans rather than a path under /plans/,
	// where it would hide a plan of that id from GET /plans/{id} (as
	// /plans/stream hides a plan named "stream").
	mux.Handle("GET /plans", s.auth(http.HandlerFunc(s.planSocket)))
	mux.Handle("GET /plans/stream", s.auth(http.HandlerFunc(s.stream)))
	mux.Handle("GET /plans/{id}", s.auth(http.HandlerFunc(s.status)))
	mux.Handle("DELETE /plans/{id}", s.auth(http.HandlerFunc(s.cancel)))
	return mux
}

// Serve serves on ln until ctx ends, then shuts down: it stops accepting,
// ends the streams, closes the idle plan sockets, and waits for every
// handler; plans still running on HTTP requests and plan sockets get
// StopGrace to end (a constant 10 s before, which no test could wait
// for). Then those on plan sockets are cancelled, and Serve returns once
// they have ended; a POST plan runs on until Worker.Close cancels it (it
// is not under its request's context: see submit).
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 30 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	s.mu.Lock()
	s.closing = true
	for c := range s.cancels {
		(*c)()
	}
	for ps := range s.sockets {
		ps.shutdown()
	}
	s.mu.Unlock()
	grace := s.StopGrace
	if grace <= 0 {
		grace = DefaultStopGrace
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	err := hs.Shutdown(sctx)
	s.waitSockets(sctx)
	s.streams.Wait()
	<-errc
	return err
}

// auth checks the bearer token in constant time.
func (s *Server) auth(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.token != "" {
			if !bearerOK(r, s.token) {
				w.Header().Set("WWW-Authenticate", `Bearer realm="soma-worker"`)
				s.fail(w, http.StatusUnauthorized, errors.New("worker: missing or wrong bearer token (soma run --token-file FILE)"))
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	s.reply(w, http.StatusOK, &Health{OK: true, Running: s.w.Running(), Tags: s.w.o.Tags})
}

func (s *Server) capabilities(w http.ResponseWriter, r *http.Request) {
	c := s.w.Capabilities()
	s.reply(w, http.StatusOK, &c)
}

func (s *Server) submit(w http.ResponseWriter, r *http.Request) {
	b, err := readBody(w, r)
	if err != nil {
		s.fail(w, http.StatusRequestEntityTooLarge, fmt.Errorf("worker: plan body: %w (send large values by reference)", err))
		return
	}
	var p Plan
	if err := DecodeFrame(b, &p); err != nil {
		s.fail(w, http.StatusBadRequest, err)
		return
	}
	if r.URL.Query().Get("wait") != "" {
		// The plan runs in this handler's goroutine (Worker.Run: one
		// hand-off less than Submit and Wait), but not under the
		// request's context: a client that goes away can GET the
		// result later, or DELETE the plan.
		res, err := s.w.Run(context.Background(), &p)
		if err != nil {
			s.fail(w, statusOf(err), err)
			return
		}
		s.reply(w, http.StatusOK, res)
		return
	}
	if err := s.w.Submit(&p); err != nil {
		s.fail(w, statusOf(err), err)
		return
	}
	res, _ := s.w.Status(p.ID)
	s.reply(w, http.StatusAccepted, res)
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	res, err := s.w.Status(r.PathValue("id"))
	if err != nil {
		s.fail(w, statusOf(err), err)
		return
	}
	s.reply(w, http.StatusOK, res)
}

func (s *Server) cancel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := s.w.Cancel(id); err != nil {
		s.fail(w, statusOf(err), err)
		return
	}
	if r.URL.Query().Get("wait") != "" {
		if _, err := s.w.Wait(r.Context(), id); err != nil {
			return
		}
	}
	res, _ := s.w.Status(id)
	s.reply(w, http.StatusOK, res)
}

func statusOf(err error) int {
	switch {
	case errors.Is(err, ErrUnknownPlan):
		return http.StatusNotFound
	case errors.Is(err, ErrDuplicatePlan):
		return http.StatusConflict
	case errors.Is(err, ErrClosed), errors.Is(err, ErrFull):
		return http.StatusServiceUnavailable
	}
	return http.StatusBadRequest
}

func (s *Server) reply(w http.ResponseWriter, code int, v versioned) {
	b, err := EncodeFrame(v)
	if err != nil {
		s.log.Error("encode reply", "err", err)
		code = http.StatusInternalServerError
		b, _ = EncodeFrame(&ErrorReply{Error: err.Error()})
	}
	w.Header().Set("Content-Type", ContentType)
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

func (s *Server) fail(w http.ResponseWriter, code int, err error) {
	s.reply(w, code, &ErrorReply{Error: err.Error()})
}

// readBody reads a request body of at most maxPlanBody bytes, into a
// buffer of the announced length when there is one (io.ReadAll would
// grow and copy a large plan several times).
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body := http.MaxBytesReader(w, r.Body, maxPlanBody)
	if n := r.ContentLength; n > 0 && n <= maxPlanBody {
		b := make([]byte, n)
		if _, err := io.ReadFull(body, b); err != nil {
			return nil, err
		}
		return b, nil
	}
	return io.ReadAll(body)
}
