package slowfs

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
)

// Handler serves a mount's counters over HTTP, for scripts/slowfs.sh and
// the bench: GET /counts answers the counts since the mount or the last
// reset as a JSON object (kind → count); POST /reset answers the same and
// starts counting from zero.
func (m *Mount) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /counts", func(w http.ResponseWriter, r *http.Request) {
		writeCounts(w, m.Counts())
	})
	mux.HandleFunc("POST /reset", func(w http.ResponseWriter, r *http.Request) {
		writeCounts(w, m.Reset())
	})
	return mux
}

func writeCounts(w http.ResponseWriter, c Counts) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(c)
}

// Fetch asks the control socket sock of a running slowfs for its counts,
// resetting them if reset is true (Handler).
func Fetch(ctx context.Context, sock string, reset bool) (Counts, error) {
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
	defer client.CloseIdleConnections()
	method, path := http.MethodGet, "/counts"
	if reset {
		method, path = http.MethodPost, "/reset"
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://slowfs"+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("slowfs: control socket %s: %w (is the slowfs running? scripts/slowfs.sh start DIR)", sock, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("slowfs: control socket %s: %w", sock, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("slowfs: control socket %s: %s: %s", sock, resp.Status, b)
	}
	var c Counts
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("slowfs: control socket %s: bad answer %q: %w", sock, b, err)
	}
	return c, nil
}
