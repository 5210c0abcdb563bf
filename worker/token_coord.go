package worker

// Token files and bearer checks for soma's HTTP servers (the coordinator
// here; the worker daemon follows the same rules, issue 14). TODO(lead):
// merge with the daemon helper's token.go if both exist.

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
)

// MinTokenLength is the shortest bearer token accepted: 16 characters of
// a random token (base64 of 12 random bytes) are 96 bits.
const MinTokenLength = 16

// ErrTokenFileMode is returned for a token file that group or others can
// read.
var ErrTokenFileMode = errors.New("token file readable by group or others")

// LoadTokenFile reads a bearer token from path. Like ssh with a private
// key, it refuses a file that group or others may read, naming the file
// and the chmod that fixes it; a token is one line, surrounding white
// space ignored, at least MinTokenLength characters.
func LoadTokenFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("token file %s: not a regular file", path)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return "", fmt.Errorf("%w: %s has mode %04o; run: chmod 600 %s", ErrTokenFileMode, path, perm, path)
	}
	b := make([]byte, 4097)
	n, _ := f.Read(b)
	if n > 4096 {
		return "", fmt.Errorf("token file %s: longer than 4096 bytes; a token is one line", path)
	}
	tok := strings.TrimSpace(string(b[:n]))
	switch {
	case strings.ContainsAny(tok, " \t\r\n"):
		return "", fmt.Errorf("token file %s: a token is one word on one line", path)
	case len(tok) < MinTokenLength:
		return "", fmt.Errorf("token file %s: the token has %d characters, want at least %d (make one: head -c 24 /dev/urandom | base64 > %s; chmod 600 %s)", path, len(tok), MinTokenLength, path, path)
	}
	return tok, nil
}

// CheckListenToken refuses to serve addr beyond loopback without a token:
// an open port on a cluster's network would run anyone's plans.
func CheckListenToken(addr, token string) error {
	if token != "" {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen address %q: %w", addr, err)
	}
	if !coordLoopback(host) {
		return fmt.Errorf("listen address %q reaches beyond this machine and no --token-file was given: give one (chmod 600), or listen on 127.0.0.1", addr)
	}
	return nil
}

func coordLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// coordBearerOK reports whether r carries "Authorization: Bearer <token>",
// compared in constant time (the comparison takes as long whatever
// prefix matches, so timing does not reveal the token). An empty token
// accepts every request (loopback only: CheckListenToken).
func coordBearerOK(r *http.Request, token string) bool {
	if token == "" {
		return true
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
}
