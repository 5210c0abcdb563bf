package s3store_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/internal/testutil"
	"github.com/soma-hpc/soma/s3store"
)

// proxy is an HTTP proxy in front of the real test server that signs
// each request again with the test's keys (SigV4 signs the Host and
// If-None-Match headers) and can change a request first, sign it at
// another time, or drop the reply of a request: the misbehaving endpoints and lossy networks the
// store must survive, with the real server behind them.
type proxy struct {
	srv    testutil.S3
	target *url.URL
	// change, when set, may edit a request before it is sent on.
	change func(r *http.Request)
	// skew, when set, signs every request again at now+skew.
	skew time.Duration
	// drop says, for a request, whether to drop its reply: "before" (the
	// request never reaches the server), "after" (it does, and its reply
	// is lost), "409" (answered 409 ConditionalRequestConflict without
	// reaching the server), or "" (pass).
	drop func(r *http.Request) string
}

func newProxy(t *testing.T, p *proxy) *httptest.Server {
	p.srv = testutil.NeedS3(t)
	u, err := url.Parse(p.srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	p.target = u
	hs := httptest.NewServer(p)
	t.Cleanup(hs.Close)
	return hs
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	drop := ""
	if p.drop != nil {
		drop = p.drop(r)
	}
	switch drop {
	case "before":
		hangUp(w)
		return
	case "409":
		// What S3 answers a conditional write that races another write
		// of the key (ConditionalRequestConflict), which it asks the
		// client to retry.
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusConflict)
		io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>ConditionalRequestConflict</Code><Message>A conflicting conditional operation is currently in progress against this resource. Please try again.</Message></Error>`)
		return
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, p.target.String()+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	out.Header = r.Header.Clone()
	out.ContentLength = int64(len(body))
	if p.change != nil {
		p.change(out)
	}
	// Signed again in every case: the Host header, which SigV4 signs, is
	// the server's now, not the proxy's.
	{
		out.Header.Del("Authorization")
		out.Header.Del("X-Amz-Date")
		creds := aws.Credentials{AccessKeyID: p.srv.AccessKey, SecretAccessKey: p.srv.SecretKey}
		err := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true }).
			SignHTTP(r.Context(), creds, out, out.Header.Get("X-Amz-Content-Sha256"), "s3", p.srv.Region, time.Now().Add(p.skew))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
	}
	resp, err := http.DefaultTransport.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	if drop == "after" {
		io.Copy(io.Discard, resp.Body)
		hangUp(w)
		return
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}

// hangUp closes the client's connection without a reply.
func hangUp(w http.ResponseWriter) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err == nil {
		conn.Close()
	}
}

// conditional reports whether r is a conditional PUT of a name record
// (a claim).
func conditional(r *http.Request) bool {
	return r.Method == http.MethodPut && r.Header.Get("If-None-Match") == "*" && strings.Contains(r.URL.Path, "/names/")
}

// TestProofRefusesUnconditional: an endpoint that drops If-None-Match
// (and so writes anyway) is refused at Open, by a message that names
// it; the same proxy passing the header on is accepted, so the refusal
// is the condition's and not the proxy's.
func TestProofRefusesUnconditional(t *testing.T) {
	ctx := context.Background()
	root := freshPrefix(t)
	tests := []struct {
		name   string
		change func(r *http.Request)
		want   error
	}{
		{"passes the condition on", func(r *http.Request) {}, nil},
		{"strips If-None-Match", func(r *http.Request) { r.Header.Del("If-None-Match") }, s3store.ErrUnconditional},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hs := newProxy(t, &proxy{change: tc.change})
			_, err := s3store.Open(ctx, root, s3store.Options{Create: true, Endpoint: hs.URL})
			if !errors.Is(err, tc.want) || tc.want == nil && err != nil {
				t.Fatalf("Open through the proxy: %v, want %v", err, tc.want)
			}
			if err != nil && !strings.Contains(err.Error(), hs.URL) {
				t.Errorf("the refusal %q does not name the endpoint %s", err, hs.URL)
			}
		})
	}
}

// TestClaimLostReply: a claim whose reply is lost is settled by reading
// the key back, and a 409 is retried. Without the read-back, "after" would report a won claim
// as an error (or, retried blindly, as lost: the retry meets its own
// write and gets 412), and nobody would ever run the trial.
func TestClaimLostReply(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		drop    string // what the proxy does to the first claim
		takenBy bool   // another store claims the name first
		wantWon bool
	}{
		{"reply lost after the write", "after", false, true},
		{"request lost before the write", "before", false, true},
		{"reply of a losing claim lost", "after", true, false},
		{"409 conflict is retried", "409", false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := freshPrefix(t)
			direct, err := s3store.Open(ctx, root, s3store.Options{Create: true})
			if err != nil {
				t.Fatal(err)
			}
			var once sync.Once
			p := &proxy{drop: func(r *http.Request) string {
				what := ""
				if conditional(r) {
					once.Do(func() { what = tc.drop })
				}
				return what
			}}
			hs := newProxy(t, p)
			lossy, err := s3store.Open(ctx, root, s3store.Options{Endpoint: hs.URL})
			if err != nil {
				t.Fatal(err)
			}
			d, _ := direct.Put(ctx, []byte("x"))
			if tc.takenBy {
				if won, err := direct.Claim(ctx, "c/1", d, fsstore.Meta{{Key: "who", Value: "direct"}}); !won || err != nil {
					t.Fatalf("direct Claim = %v, %v", won, err)
				}
			}
			won, err := lossy.Claim(ctx, "c/1", d, fsstore.Meta{{Key: "who", Value: "lossy"}})
			if err != nil || won != tc.wantWon {
				t.Fatalf("Claim through the lossy proxy = %v, %v; want %v, nil", won, err, tc.wantWon)
			}
			b, err := direct.Resolve(ctx, "c/1")
			if err != nil {
				t.Fatal(err)
			}
			wantWho := "direct"
			if tc.wantWon {
				wantWho = "lossy"
			}
			if got := b.Meta.Value("who"); got != wantWho {
				t.Errorf("the record is %s's, want %s's", got, wantWho)
			}
			if !tc.takenBy {
				if won, err := direct.Claim(ctx, "c/1", d, nil); won || err != nil {
					t.Errorf("a second Claim = %v, %v; want false", won, err)
				}
			}
		})
	}
}

// TestOpenErrors: each way of pointing at a server wrongly is an error
// that says what failed and how to fix it.
func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name  string
		setup func(t *testing.T, srv testutil.S3) (root string, o s3store.Options)
		want  error
		says  []string
	}{
		{"no server", func(t *testing.T, srv testutil.S3) (string, s3store.Options) {
			return "s3://" + srv.Bucket + "/x", s3store.Options{Endpoint: "http://127.0.0.1:1"}
		}, s3store.ErrUnreachable, []string{"http://127.0.0.1:1", "AWS_ENDPOINT_URL"}},
		{"no credentials", func(t *testing.T, srv testutil.S3) (string, s3store.Options) {
			t.Setenv("AWS_ACCESS_KEY_ID", "")
			t.Setenv("AWS_SECRET_ACCESS_KEY", "")
			t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
			return "s3://" + srv.Bucket + "/x", s3store.Options{}
		}, s3store.ErrNoCredentials, []string{"AWS_ACCESS_KEY_ID", "AWS_PROFILE"}},
		{"wrong secret", func(t *testing.T, srv testutil.S3) (string, s3store.Options) {
			t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong")
			return "s3://" + srv.Bucket + "/x", s3store.Options{}
		}, s3store.ErrAccessDenied, []string{"AWS_SECRET_ACCESS_KEY", srv(t).Endpoint}},
		{"no bucket", func(t *testing.T, srv testutil.S3) (string, s3store.Options) {
			return "s3://soma-no-such-bucket/x", s3store.Options{Create: true}
		}, s3store.ErrNoBucket, []string{`"soma-no-such-bucket"`, "create it"}},
		{"clock skew", func(t *testing.T, srv testutil.S3) (string, s3store.Options) {
			hs := newProxy(t, &proxy{skew: -time.Hour})
			return "s3://" + srv.Bucket + "/x", s3store.Options{Endpoint: hs.URL}
		}, s3store.ErrClockSkew, []string{"clock", "NTP"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := testutil.NeedS3(t)
			s.Setenv(t)
			root, o := tc.setup(t, s)
			_, err := s3store.Open(ctx, root, o)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Open: %v, want %v", err, tc.want)
			}
			for _, w := range tc.says {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Open: %q does not say %q", err, w)
				}
			}
		})
	}
}

func srv(t testing.TB) testutil.S3 { return testutil.NeedS3(t) }

// TestParseRoot: roots that are not s3://bucket/prefix are refused with
// the form to write.
func TestParseRoot(t *testing.T) {
	tests := []struct {
		root, bucket, prefix string
		bad                  bool
	}{
		{"s3://b-1/lab", "b-1", "lab", false},
		{"s3://bkt/lab/sub/", "bkt", "lab/sub", false},
		{"s3://bkt", "bkt", "", false},
		{"s3://", "", "", true},
		{"s3:///lab", "", "", true},
		{"s3://Bucket/lab", "", "", true},
		{"s3://bkt/../x", "", "", true},
		{"/tmp/x", "", "", true},
	}
	for _, tc := range tests {
		b, p, err := s3store.ParseRoot(tc.root)
		if (err != nil) != tc.bad || b != tc.bucket || p != tc.prefix {
			t.Errorf("ParseRoot(%q) = %q, %q, %v; want %q, %q, error %v", tc.root, b, p, err, tc.bucket, tc.prefix, tc.bad)
		}
	}
}
