package worker

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soma-hpc/soma/internal/testutil"
	"github.com/vmihailenco/msgpack/v5"
)

// encodeMap encodes m as a raw msgpack map, as another peer might.
func encodeMap(t testing.TB, m map[string]any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodeFrame(t *testing.T) {
	good, err := EncodeFrame(&Plan{ID: "p", Mode: Forward})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		in   []byte
		want error
		msg  string
	}{
		{"good", good, nil, ""},
		{"newer version", encodeMap(t, map[string]any{"version": 2, "id": "p"}), ErrVersion, "peer speaks protocol version 2, this side speaks version 1"},
		{"no version", encodeMap(t, map[string]any{"id": "p"}), ErrVersion, "no protocol version"},
		{"unknown field", encodeMap(t, map[string]any{"version": 1, "id": "p", "surprise": true}), ErrFrame, "surprise"},
		{"truncated", good[:len(good)-3], ErrFrame, ""},
		{"trailing bytes", append(append([]byte(nil), good...), 0xc0), ErrFrame, "trailing"},
		{"not a map", []byte{0x93, 1, 2, 3}, ErrFrame, "not a msgpack map"},
		{"empty", nil, ErrFrame, ""},
		{"version not a number", encodeMap(t, map[string]any{"version": "1"}), ErrFrame, "version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p Plan
			err := DecodeFrame(tc.in, &p)
			if !errors.Is(err, tc.want) || (err != nil && !strings.Contains(err.Error(), tc.msg)) {
				t.Fatalf("DecodeFrame = %v, want %v containing %q", err, tc.want, tc.msg)
			}
		})
	}
}

// TestShareGPUsOptional: share_gpus is added to version 1 by protocol.go's
// rule for optional fields: a plan that does not share encodes exactly as
// before (no share_gpus key, so an older worker still decodes it), and a
// plan that shares carries the key and decodes back.
func TestShareGPUsOptional(t *testing.T) {
	plain, err := EncodeFrame(&Plan{ID: "p", Mode: Forward, Resources: Ask{GPUs: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(plain, []byte("share_gpus")) {
		t.Errorf("a plan that does not share carries share_gpus: an older worker would refuse it")
	}
	shared, err := EncodeFrame(&Plan{ID: "p", Mode: Forward, Resources: Ask{GPUs: 1, ShareGPUs: true}})
	if err != nil {
		t.Fatal(err)
	}
	var p Plan
	if err := DecodeFrame(shared, &p); err != nil || !p.Resources.ShareGPUs || p.Resources.GPUs != 1 {
		t.Fatalf("DecodeFrame(shared) = %v, resources %+v, want 1 GPU shared", err, p.Resources)
	}
}

// TestCapabilitiesLenient: a client ignores fields a newer worker of the
// same version adds to /capabilities and /health (protocol.go's rules).
func TestCapabilitiesLenient(t *testing.T) {
	b := encodeMap(t, map[string]any{"version": 1, "cpus": 8, "new_field": "x"})
	var c Capabilities
	if err := DecodeFrame(b, &c); err != nil || c.CPUs != 8 {
		t.Fatalf("DecodeFrame = %v (cpus %d), want nil and 8", err, c.CPUs)
	}
}

// TestHTTPRefusals: the server refuses bad frames and bad tokens with a
// status and a message that says what is wrong.
func TestHTTPRefusals(t *testing.T) {
	tw := newTestWorker(t, testOptions{})
	good, err := EncodeFrame(behaviourPlan(t, "ok", "NoOp"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, method, path, token string
		body                      []byte
		code                      int
		msg                       string
	}{
		{"no token", "POST", "/plans", "", good, 401, "missing or wrong bearer token"},
		{"wrong token", "POST", "/plans", "nope", good, 401, "missing or wrong bearer token"},
		{"wrong token, same length", "GET", "/capabilities", strings.Repeat("x", len(testToken)), nil, 401, "bearer token"},
		{"health needs no token", "GET", "/health", "", nil, 200, ""},
		{"wrong version", "POST", "/plans", testToken, encodeMap(t, map[string]any{"version": 7, "id": "x"}), 400, "peer speaks protocol version 7, this side speaks version 1"},
		{"malformed", "POST", "/plans", testToken, []byte("{json?}"), 400, "malformed frame"},
		{"truncated", "POST", "/plans", testToken, good[:len(good)/2], 400, "malformed frame"},
		{"invalid plan", "POST", "/plans", testToken, encodeMap(t, map[string]any{"version": 1, "id": "../x"}), 400, "invalid plan: id"},
		{"unknown plan", "GET", "/plans/nope", testToken, nil, 404, "unknown plan"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, tw.srv.URL+tc.path, bytes.NewReader(tc.body))
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			resp, err := tw.srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.code {
				t.Fatalf("status %d, want %d (body %q)", resp.StatusCode, tc.code, b)
			}
			if tc.msg == "" {
				return
			}
			var er ErrorReply
			if err := DecodeFrame(b, &er); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(er.Error, tc.msg) {
				t.Fatalf("error %q, want it to contain %q", er.Error, tc.msg)
			}
		})
	}
	// A wrong token through the client is a RemoteError.
	c, _ := NewClient(tw.srv.URL, "wrong", tw.srv.Client())
	if _, err := c.Capabilities(context.Background()); !errors.Is(err, ErrRemote) {
		t.Fatalf("Capabilities with a wrong token = %v, want ErrRemote", err)
	}
	if _, err := tw.client.Capabilities(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestReadTokenFile(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name    string
		content string
		mode    os.FileMode
		want    string
		err     string
	}{
		{"private", "s3cret-0123456789\n", 0o600, "s3cret-0123456789", ""},
		{"world readable", "s3cret\n", 0o644, "", "readable by group or others (mode 0644); run chmod 600 "},
		{"group readable", "s3cret\n", 0o640, "", "chmod 600"},
		{"empty", "\n", 0o600, "", "one token on one line"},
		{"two words", "a b\n", 0o600, "", "one token on one line"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			if err := os.WriteFile(path, []byte(tc.content), tc.mode); err != nil {
				t.Fatal(err)
			}
			os.Chmod(path, tc.mode)
			got, err := ReadTokenFile(path)
			if tc.err != "" {
				if !errors.Is(err, ErrTokenFile) || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), path) {
					t.Fatalf("ReadTokenFile = %q, %v; want an error naming %s and %q", got, err, path, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ReadTokenFile = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestCheckListen(t *testing.T) {
	for _, tc := range []struct {
		addr, token string
		ok          bool
	}{
		{"127.0.0.1:7070", "", true},
		{"[::1]:7070", "", true},
		{"localhost:7070", "", true},
		{"0.0.0.0:7070", "", false},
		{":7070", "", false},
		{"10.1.2.3:7070", "", false},
		{"0.0.0.0:7070", "tok", true},
	} {
		err := CheckListen(tc.addr, tc.token)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrNoToken)) {
			t.Errorf("CheckListen(%q, %q) = %v, want ok=%v", tc.addr, tc.token, err, tc.ok)
		}
	}
}

// TestDaemonPythonUnittest runs daemon.py's own unit tests with the
// project's interpreter, so that `make test` runs them.
func TestDaemonPythonUnittest(t *testing.T) {
	testutil.NeedPython(t, "json")
	cmd := exec.Command(testutil.Python(), "-B", "-m", "unittest", "-v", "daemon_test")
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python -m unittest daemon_test: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
