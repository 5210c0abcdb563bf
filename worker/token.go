package worker

// Token files and bearer checks, one set of rules for both of soma's HTTP
// servers: the worker daemon (server.go) and the coordinator
// (coordinator.go). (The two were written twice at first, with different
// rules; merged here.)

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
)

// Errors of the server's set-up.
var (
	// ErrNoToken: listening beyond loopback without a token.
	ErrNoToken = errors.New("worker: a token is required")
	// ErrTokenFile: a token file that is unsafe or empty.
	ErrTokenFile = errors.New("worker: bad token file")
)

// MinTokenLength is the shortest bearer token accepted: 16 characters of
// a random token (hex of 8 random bytes) are 64 bits.
const MinTokenLength = 16

// ReadTokenFile reads a bearer token from path. Like ssh with private
// keys, it refuses a file that group or others may read, naming the file
// and the chmod that fixes it.
func ReadTokenFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrTokenFile, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrTokenFile, err)
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("%w: %s is not a regular file", ErrTokenFile, path)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return "", fmt.Errorf("%w: %s is readable by group or others (mode %04o); run chmod 600 %s", ErrTokenFile, path, perm, path)
	}
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return "", fmt.Errorf("%w: %s: %w", ErrTokenFile, path, err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" || strings.ContainsAny(tok, " \t\r\n") {
		return "", fmt.Errorf("%w: %s must hold one token on one line (e.g. openssl rand -hex 32 > %s)", ErrTokenFile, path, path)
	}
	if len(tok) < MinTokenLength {
		return "", fmt.Errorf("%w: %s holds a token of %d characters, want at least %d (openssl rand -hex 32 > %s; chmod 600 %s)", ErrTokenFile, path, len(tok), MinTokenLength, path, path)
	}
	return tok, nil
}

// CheckListen refuses to serve addr beyond loopback without a token.
func CheckListen(addr, token string) error {
	if token != "" {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("worker: listen address %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%w: refusing to listen on %s without a token: anyone who can reach it could run code as you (pass --token-file FILE, or listen on 127.0.0.1)", ErrNoToken, addr)
}

// bearerOK reports whether r carries "Authorization: Bearer <token>",
// compared in constant time (the comparison takes as long whatever prefix
// matches, so timing does not reveal the token). An empty token accepts
// every request (loopback only: CheckListen).
func bearerOK(r *http.Request, token string) bool {
	if token == "" {
		return true
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
}
