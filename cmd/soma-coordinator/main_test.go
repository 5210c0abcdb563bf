package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/worker"
)

// syncBuffer is a bytes.Buffer safe to write from the server and read
// from the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

const token = "0123456789abcdef-token"

func newRoot(t *testing.T) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "root")
	s, err := fsstore.Open(root, fsstore.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	id, _ := worker.ParseWorkerID("w1")
	rec := worker.WorkerRecord{ID: id, Address: "http://127.0.0.1:9/", Slots: 2, Capabilities: worker.RecordCapabilities{CPUs: 4}}
	if _, err := worker.Announce(context.Background(), s, rec, worker.RegistryOptions{}); err != nil {
		t.Fatal(err)
	}
	return root
}

func tokenFile(t *testing.T, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte(token+"\n"), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRefusals(t *testing.T) {
	root := newRoot(t)
	loose := tokenFile(t, 0o644)
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no root", []string{}, exitUsage, "--root is required"},
		{"beyond loopback without a token", []string{"--root", root, "--listen", "0.0.0.0:0"}, exitError, "without a token"},
		{"world-readable token file", []string{"--root", root, "--token-file", loose}, exitError, "chmod 600 " + loose},
		{"not a store", []string{"--root", t.TempDir() + "/none"}, exitError, "not found"},
		{"bad timeout", []string{"--root", root, "--timeout", "-1s"}, exitUsage, "--timeout"},
		{"stray argument", []string{"--root", root, "extra"}, exitUsage, "unexpected arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := runContext(context.Background(), append([]string{"soma-coordinator"}, tc.args...), &out, &errb)
			if code != tc.code || !strings.Contains(errb.String(), tc.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, errb.String(), tc.code, tc.want)
			}
		})
	}
}

// TestServeAndShutdown: a real coordinator on loopback with a token
// answers the right token only, and stops gracefully when its context
// ends (what SIGTERM does through signal.NotifyContext).
func TestServeAndShutdown(t *testing.T) {
	root := newRoot(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr syncBuffer
	exit := make(chan int, 1)
	go func() {
		exit <- runContext(ctx, []string{"soma-coordinator", "--root", root, "--listen", "127.0.0.1:0", "--token-file", tokenFile(t, 0o600)}, &stderr, &stderr)
	}()
	addr := regexp.MustCompile(`on (http://\S+)`)
	var url string
	for deadline := time.Now().Add(30 * time.Second); url == ""; {
		if m := addr.FindStringSubmatch(stderr.String()); m != nil {
			url = m[1]
			break
		}
		select {
		case code := <-exit:
			t.Fatalf("exited %d: %s", code, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no address printed: %s", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, tc := range []struct {
		name, auth string
		want       int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"wrong token", "Bearer nope-nope-nope-nope", http.StatusUnauthorized},
		{"right token", "Bearer " + token, http.StatusOK},
	} {
		req, _ := http.NewRequest("GET", url+"/workers", nil)
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: GET /workers = %d, want %d", tc.name, resp.StatusCode, tc.want)
		}
	}
	cancel()
	if code := <-exit; code != exitOK {
		t.Errorf("exit %d after shutdown, want 0: %s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "stopped") {
		t.Errorf("stderr %q does not say it stopped", stderr.String())
	}
}
