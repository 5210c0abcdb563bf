package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// call sends one request to a coordinator over loopback HTTP and decodes
// the JSON answer into out (if non-nil).
func call(t *testing.T, srv *httptest.Server, method, path, token string, body any, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, path, err, b)
		}
	}
	if resp.StatusCode != http.StatusOK {
		var e CoordinatorError
		if json.Unmarshal(b, &e) != nil || e.Error == "" {
			t.Errorf("%s %s: %d with body %q, want a JSON error", method, path, resp.StatusCode, b)
		}
	}
	return resp.StatusCode
}

func TestCoordinatorAuth(t *testing.T) {
	s := newRegStore(t)
	announce(t, s, testRecord("w", 2, 0, 0), 0)
	srv := httptest.NewServer(NewCoordinator(s, CoordinatorOptions{Token: testToken}))
	defer srv.Close()
	for _, tc := range []struct {
		name, token string
		want        int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"wrong token", "0123456789abcdef-tokeX", http.StatusUnauthorized},
		{"prefix of the token", "0123456789abcdef", http.StatusUnauthorized},
		{"right token", testToken, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, path := range []string{"/health", "/workers", "/summary"} {
				if got := call(t, srv, "GET", path, tc.token, nil, nil); got != tc.want {
					t.Errorf("GET %s = %d, want %d", path, got, tc.want)
				}
			}
			var rep SubmitReply
			got := call(t, srv, "POST", "/submit", tc.token, SubmitRequest{}, &rep)
			if got != tc.want {
				t.Errorf("POST /submit = %d, want %d", got, tc.want)
			}
			if got == http.StatusOK {
				if code := call(t, srv, "POST", "/complete", tc.token, LeaseRequest{Lease: rep.Lease}, nil); code != http.StatusOK {
					t.Errorf("POST /complete = %d", code)
				}
			}
		})
	}
	// Query-string tokens are not accepted (the Rust coordinator's
	// deprecated ?token= put tokens in logs).
	resp, err := srv.Client().Get(srv.URL + "/workers?token=" + testToken)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("?token= = %d, want 401", resp.StatusCode)
	}
}

func TestCoordinatorSubmitRenewComplete(t *testing.T) {
	ctx := context.Background()
	s := newRegStore(t)
	announce(t, s, testRecord("cpu", 1, 0, 0), 0)
	announce(t, s, testRecord("gpu", 1, 2, 80*gib, "torch"), 0)
	srv := httptest.NewServer(NewCoordinator(s, CoordinatorOptions{}))
	defer srv.Close()

	var rep SubmitReply
	if code := call(t, srv, "POST", "/submit", "", SubmitRequest{Requirement: Requirement{GPUs: 2, Tags: []string{"torch"}}, Holder: "test"}, &rep); code != http.StatusOK {
		t.Fatalf("submit = %d", code)
	}
	if rep.Worker.String() != "gpu" || rep.Address != "http://127.0.0.1:1/gpu" || rep.LeaseName != "leases/gpu/0" || rep.RenewEveryS <= 0 {
		t.Errorf("submit reply = %+v", rep)
	}
	if b, err := s.Resolve(ctx, rep.LeaseName); err != nil || b.Meta.Value(leaseMetaHolder) != "test" {
		t.Errorf("lease record = %+v, %v", b, err)
	}
	// The only GPU worker is busy: 503 with Retry-After; a CPU plan fits.
	if code := call(t, srv, "POST", "/submit", "", SubmitRequest{Requirement: Requirement{GPUs: 1}}, nil); code != http.StatusServiceUnavailable {
		t.Errorf("submit to a busy worker = %d, want 503", code)
	}
	if code := call(t, srv, "POST", "/submit", "", SubmitRequest{Requirement: Requirement{GPUs: 4}}, nil); code != http.StatusUnprocessableEntity {
		t.Errorf("submit nobody meets = %d, want 422", code)
	}
	var sum RegistrySummary
	call(t, srv, "GET", "/summary", "", nil, &sum)
	if sum != (RegistrySummary{Workers: 2, Alive: 2, Slots: 2, Leases: 1, GPUs: 2, GPUsUsed: 2}) {
		t.Errorf("summary = %+v", sum)
	}
	if code := call(t, srv, "POST", "/renew", "", LeaseRequest{Lease: rep.Lease}, nil); code != http.StatusOK {
		t.Errorf("renew = %d", code)
	}
	wrong := rep.Lease
	wrong.Nonce = "not-the-nonce"
	if code := call(t, srv, "POST", "/renew", "", LeaseRequest{Lease: wrong}, nil); code != http.StatusConflict {
		t.Errorf("renew with a wrong nonce = %d, want 409", code)
	}
	if code := call(t, srv, "POST", "/complete", "", LeaseRequest{Lease: wrong}, nil); code != http.StatusOK {
		t.Errorf("complete with a wrong nonce = %d, want 200 (nothing to do)", code)
	}
	if _, err := s.Resolve(ctx, rep.LeaseName); err != nil {
		t.Errorf("a /complete with the wrong nonce released the lease: %v", err)
	}
	if code := call(t, srv, "POST", "/complete", "", LeaseRequest{Lease: rep.Lease}, nil); code != http.StatusOK {
		t.Errorf("complete = %d", code)
	}
	if code := call(t, srv, "POST", "/renew", "", LeaseRequest{Lease: rep.Lease}, nil); code != http.StatusConflict {
		t.Errorf("renew after complete = %d, want 409", code)
	}
	for _, body := range []string{`{"requirement":{"gpus":1},"extra":1}`, `{"requirement":{"gpus":-1}}`, `not json`, `{} {}`} {
		resp, err := srv.Client().Post(srv.URL+"/submit", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("submit %s = %d, want 400", body, resp.StatusCode)
		}
	}
	if code := call(t, srv, "POST", "/complete", "", LeaseRequest{}, nil); code != http.StatusBadRequest {
		t.Errorf("complete with no lease = %d, want 400", code)
	}
}

// TestCoordinatorRestart: a coordinator holds nothing, so a new one on
// the same folder answers the same, and completes a lease the old one
// handed out.
func TestCoordinatorRestart(t *testing.T) {
	s := newRegStore(t)
	announce(t, s, testRecord("a", 2, 0, 0), 0)
	announce(t, s, testRecord("b", 2, 1, 40*gib), 0)
	first := httptest.NewServer(NewCoordinator(s, CoordinatorOptions{Token: testToken}))
	var rep SubmitReply
	if code := call(t, first, "POST", "/submit", testToken, SubmitRequest{Requirement: Requirement{GPUs: 1}}, &rep); code != http.StatusOK {
		t.Fatalf("submit = %d", code)
	}
	var before WorkersReport
	var sumBefore RegistrySummary
	call(t, first, "GET", "/workers", testToken, nil, &before)
	call(t, first, "GET", "/summary", testToken, nil, &sumBefore)
	first.Close()

	second := httptest.NewServer(NewCoordinator(s, CoordinatorOptions{Token: testToken}))
	defer second.Close()
	var after WorkersReport
	var sumAfter RegistrySummary
	call(t, second, "GET", "/workers", testToken, nil, &after)
	call(t, second, "GET", "/summary", testToken, nil, &sumAfter)
	if sumAfter != sumBefore {
		t.Errorf("summary after restart %+v, before %+v", sumAfter, sumBefore)
	}
	// Everything but the ages and the server time is the same.
	for i := range after.Workers {
		after.Workers[i].AgeSeconds = before.Workers[i].AgeSeconds
	}
	after.ServerTime = before.ServerTime
	a, _ := json.Marshal(after)
	b, _ := json.Marshal(before)
	if !bytes.Equal(a, b) {
		t.Errorf("/workers after restart:\n%s\nbefore:\n%s", a, b)
	}
	if code := call(t, second, "POST", "/complete", testToken, LeaseRequest{Lease: rep.Lease}, nil); code != http.StatusOK {
		t.Errorf("complete on the new coordinator = %d", code)
	}
	call(t, second, "GET", "/summary", testToken, nil, &sumAfter)
	if sumAfter.Leases != 0 {
		t.Errorf("leases after complete = %d, want 0", sumAfter.Leases)
	}
}

// TestNewCoordinatorStartsNoGoroutine: building the handler starts no
// background task (the Rust coordinator's router spawned its reaper,
// seed 000 D-74, so building it twice in a test ran two).
func TestNewCoordinatorStartsNoGoroutine(t *testing.T) {
	s := newRegStore(t)
	before := runtime.NumGoroutine()
	for range 10 {
		_ = NewCoordinator(s, CoordinatorOptions{})
	}
	if after := runtime.NumGoroutine(); after != before {
		t.Errorf("goroutines %d after building 10 coordinators, %d before", after, before)
	}
}

func TestReadTokenFileRules(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name, content string
		mode          os.FileMode
		want          string // the token, or a part of the error
		ok            bool
	}{
		{"ok", testToken + "\n", 0o600, testToken, true},
		{"owner read only", testToken, 0o400, testToken, true},
		{"world readable", testToken, 0o644, "chmod 600 ", false},
		{"group readable", testToken, 0o640, "mode 0640", false},
		{"short", "abc\n", 0o600, "at least 16", false},
		{"two words", testToken + " x", 0o600, "one token on one line", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := write(strings.ReplaceAll(tc.name, " ", "-"), tc.content, tc.mode)
			got, err := ReadTokenFile(p)
			if tc.ok {
				if err != nil || got != tc.want {
					t.Errorf("ReadTokenFile = %q, %v, want %q", got, err, tc.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ReadTokenFile = %q, %v, want an error containing %q", got, err, tc.want)
			}
			if tc.mode&0o077 != 0 && (!errors.Is(err, ErrTokenFile) || !strings.Contains(err.Error(), p)) {
				t.Errorf("error %v does not name the file %s or wrap ErrTokenFile", err, p)
			}
		})
	}
	if _, err := ReadTokenFile(filepath.Join(dir, "missing")); err == nil {
		t.Errorf("a missing token file was accepted")
	}
}

func TestCheckListenAddresses(t *testing.T) {
	for _, tc := range []struct {
		addr, token string
		ok          bool
	}{
		{"127.0.0.1:7071", "", true},
		{"localhost:7071", "", true},
		{"[::1]:7071", "", true},
		{"0.0.0.0:7071", "", false},
		{":7071", "", false},
		{"10.0.0.5:7071", "", false},
		{"node12:7071", "", false},
		{"0.0.0.0:7071", testToken, true},
		{"no-port", "", false},
	} {
		err := CheckListen(tc.addr, tc.token)
		if (err == nil) != tc.ok {
			t.Errorf("CheckListen(%q, %q) = %v, want ok %v", tc.addr, tc.token, err, tc.ok)
		}
	}
}

// Liveness through the coordinator: a silent worker shows dead and is not
// placed on.
func TestCoordinatorDeadWorker(t *testing.T) {
	s := newRegStore(t)
	const timeout = 150 * time.Millisecond
	announce(t, s, testRecord("w", 1, 0, 0), timeout)
	srv := httptest.NewServer(NewCoordinator(s, CoordinatorOptions{Timeout: timeout}))
	defer srv.Close()
	time.Sleep(timeout + 50*time.Millisecond)
	var rep WorkersReport
	call(t, srv, "GET", "/workers", "", nil, &rep)
	if len(rep.Workers) != 1 || rep.Workers[0].Alive {
		t.Errorf("workers = %+v, want w dead", rep.Workers)
	}
	if code := call(t, srv, "POST", "/submit", "", SubmitRequest{}, nil); code != http.StatusUnprocessableEntity {
		t.Errorf("submit with only a dead worker = %d, want 422", code)
	}
}
