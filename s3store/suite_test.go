package s3store_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/internal/testutil"
	"github.com/soma-hpc/soma/s3store"
)

// impl is one implementation of the store under test: open makes a new,
// empty store; raw writes and reads the bytes at a path relative to the
// store's root (names/x, blobs/...), bypassing the store.
type impl struct {
	name   string
	fresh  func(t *testing.T) string // a new root
	rawPut func(t *testing.T, root, rel string, b []byte)
	rawGet func(t *testing.T, root, rel string) []byte
}

func impls() []impl {
	return []impl{
		{
			name:  "folder",
			fresh: func(t *testing.T) string { return filepath.Join(t.TempDir(), "store") },
			rawPut: func(t *testing.T, root, rel string, b []byte) {
				p := filepath.Join(root, filepath.FromSlash(rel))
				if err := os.MkdirAll(filepath.Dir(p), 0o777); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, b, 0o666); err != nil {
					t.Fatal(err)
				}
			},
			rawGet: func(t *testing.T, root, rel string) []byte {
				b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
				if err != nil {
					t.Fatal(err)
				}
				return b
			},
		},
		{
			name:  "bucket",
			fresh: func(t *testing.T) string { return freshPrefix(t) },
			rawPut: func(t *testing.T, root, rel string, b []byte) {
				c, bucket, prefix := raw(t, root)
				_, err := c.PutObject(context.Background(), &s3.PutObjectInput{Bucket: &bucket, Key: aws.String(prefix + rel), Body: bytes.NewReader(b)})
				if err != nil {
					t.Fatal(err)
				}
			},
			rawGet: func(t *testing.T, root, rel string) []byte {
				c, bucket, prefix := raw(t, root)
				out, err := c.GetObject(context.Background(), &s3.GetObjectInput{Bucket: &bucket, Key: aws.String(prefix + rel)})
				if err != nil {
					t.Fatal(err)
				}
				defer out.Body.Close()
				b, err := io.ReadAll(out.Body)
				if err != nil {
					t.Fatal(err)
				}
				return b
			},
		},
	}
}

// freshPrefix returns s3://<test bucket>/<new prefix>, sets the server's
// settings in the environment (the store reads them as the AWS CLI
// does), and removes what the test left under the prefix at its end.
func freshPrefix(t testing.TB) string {
	srv := testutil.NeedS3(t)
	srv.Setenv(t)
	return srv.FreshRoot(t, "t")
}

// raw returns a client of the test server that the store does not wrap,
// and the bucket and key prefix ("p/") of root.
func raw(t testing.TB, root string) (*s3.Client, string, string) {
	srv := testutil.NeedS3(t)
	bucket, prefix, err := s3store.ParseRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	if prefix != "" {
		prefix += "/"
	}
	c := s3.New(s3.Options{
		Region:       srv.Region,
		BaseEndpoint: aws.String(srv.Endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(srv.AccessKey, srv.SecretKey, ""),
	})
	return c, bucket, prefix
}

// eachStore runs test once per implementation, on a new store.
func eachStore(t *testing.T, test func(t *testing.T, s suiteStore, im impl, root string)) {
	for _, im := range impls() {
		t.Run(im.name, func(t *testing.T) {
			root := im.fresh(t)
			s, err := openRoot(context.Background(), root, true)
			if err != nil {
				t.Fatal(err)
			}
			test(t, s, im, root)
		})
	}
}

func TestStore(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		run  func(t *testing.T, s suiteStore, im impl, root string)
	}{
		{"blobs", func(t *testing.T, s suiteStore, _ impl, _ string) {
			d, err := s.Put(ctx, []byte("hello"))
			if err != nil {
				t.Fatal(err)
			}
			if d != fsstore.Sum([]byte("hello")) {
				t.Errorf("Put = %v, want the SHA-256 of its bytes", d)
			}
			if d2, err := s.Put(ctx, []byte("hello")); err != nil || d2 != d {
				t.Errorf("Put again = %v, %v; want %v, nil", d2, err, d)
			}
			if b, err := s.Get(ctx, d); err != nil || string(b) != "hello" {
				t.Errorf("Get = %q, %v; want \"hello\", nil", b, err)
			}
			if ok, err := s.Has(ctx, d); err != nil || !ok {
				t.Errorf("Has = %v, %v; want true", ok, err)
			}
			missing := fsstore.Sum([]byte("never put"))
			if _, err := s.Get(ctx, missing); !errors.Is(err, fsstore.ErrNotFound) {
				t.Errorf("Get of a missing blob: %v, want ErrNotFound", err)
			}
			if ok, err := s.Has(ctx, missing); err != nil || ok {
				t.Errorf("Has of a missing blob = %v, %v; want false", ok, err)
			}
			res := s.GetMany(ctx, []fsstore.Digest{missing, d})
			if len(res) != 2 || !errors.Is(res[0].Err, fsstore.ErrNotFound) || string(res[1].Data) != "hello" {
				t.Errorf("GetMany = %+v, want [not found, hello]", res)
			}
		}},
		{"corrupt blob", func(t *testing.T, s suiteStore, im impl, root string) {
			d := fsstore.Sum([]byte("good"))
			im.rawPut(t, root, "blobs/sha256/"+d.Hex()[:2]+"/"+d.Hex()[2:], []byte("bad"))
			var ce *fsstore.CorruptError
			if _, err := s.Get(ctx, d); !errors.As(err, &ce) || !errors.Is(err, fsstore.ErrDigestMismatch) {
				t.Errorf("Get of changed bytes: %v, want a CorruptError wrapping ErrDigestMismatch", err)
			}
		}},
		{"claim once", func(t *testing.T, s suiteStore, _ impl, _ string) {
			d, _ := s.Put(ctx, []byte("x"))
			meta := fsstore.Meta{{Key: "who", Value: "a b%c"}, {Key: "state", Value: "running"}}
			won, err := s.Claim(ctx, "study/s/trial/0/0", d, meta)
			if err != nil || !won {
				t.Fatalf("first Claim = %v, %v; want true", won, err)
			}
			won, err = s.Claim(ctx, "study/s/trial/0/0", d, fsstore.Meta{{Key: "who", Value: "other"}})
			if err != nil || won {
				t.Fatalf("second Claim = %v, %v; want false", won, err)
			}
			b, err := s.Resolve(ctx, "study/s/trial/0/0")
			if err != nil {
				t.Fatal(err)
			}
			if b.Digest != d || !slices.Equal(b.Meta, meta) || b.Time.IsZero() {
				t.Errorf("Resolve = %+v, want digest %v, meta %v and a time", b, d, meta)
			}
		}},
		{"same record bytes", func(t *testing.T, s suiteStore, im impl, root string) {
			d, _ := s.Put(ctx, []byte("x"))
			meta := fsstore.Meta{{Key: "k", Value: "v w"}}
			if _, err := s.Bind(ctx, "a/b", d, meta); err != nil {
				t.Fatal(err)
			}
			if got, want := im.rawGet(t, root, "names/a/b"), fsstore.EncodeRecord(d, meta); !bytes.Equal(got, want) {
				t.Errorf("names/a/b holds %q, want %q", got, want)
			}
			if got, want := im.rawGet(t, root, "soma.json"), fsstore.Marker(); !bytes.Equal(got, want) {
				t.Errorf("soma.json holds %q, want %q", got, want)
			}
			if got := im.rawGet(t, root, "blobs/sha256/"+d.Hex()[:2]+"/"+d.Hex()[2:]); string(got) != "x" {
				t.Errorf("the blob holds %q, want \"x\"", got)
			}
		}},
		{"bind, seal, probe, unbind", func(t *testing.T, s suiteStore, _ impl, _ string) {
			d1, _ := s.Put(ctx, []byte("1"))
			d2, _ := s.Put(ctx, []byte("2"))
			if p, err := s.Probe(ctx, "n/x"); err != nil || p != fsstore.Missing {
				t.Errorf("Probe of an unbound name = %v, %v; want Missing", p, err)
			}
			if _, err := s.Bind(ctx, "n/x", d1, nil); err != nil {
				t.Fatal(err)
			}
			if p, err := s.Probe(ctx, "n/x"); err != nil || p != fsstore.Present {
				t.Errorf("Probe after Bind = %v, %v; want Present", p, err)
			}
			bd, err := s.Seal(ctx, "n/x", d2, fsstore.Meta{{Key: "state", Value: "done"}})
			if err != nil || bd.Time.IsZero() {
				t.Fatalf("Seal = %+v, %v", bd, err)
			}
			if p, err := s.Probe(ctx, "n/x"); err != nil || p != fsstore.Sealed {
				t.Errorf("Probe after Seal = %v, %v; want Sealed", p, err)
			}
			if b, err := s.Resolve(ctx, "n/x"); err != nil || b.Digest != d2 {
				t.Errorf("Resolve after Seal = %+v, %v; want digest %v", b, err, d2)
			}
			if _, err := s.Bind(ctx, "n/x", d1, nil); err != nil {
				t.Fatal(err)
			}
			if p, err := s.Probe(ctx, "n/x"); err != nil || p != fsstore.Present {
				t.Errorf("Probe after Bind over Seal = %v, %v; want Present", p, err)
			}
			if ok, err := s.Exists(ctx, "n/x"); err != nil || !ok {
				t.Errorf("Exists = %v, %v; want true", ok, err)
			}
			if err := s.Unbind(ctx, "n/x"); err != nil {
				t.Fatal(err)
			}
			if err := s.Unbind(ctx, "n/x"); !errors.Is(err, fsstore.ErrNotFound) {
				t.Errorf("second Unbind: %v, want ErrNotFound", err)
			}
			if _, err := s.Resolve(ctx, "n/x"); !errors.Is(err, fsstore.ErrNotFound) {
				t.Errorf("Resolve after Unbind: %v, want ErrNotFound", err)
			}
			if won, err := s.Claim(ctx, "n/x", d1, nil); err != nil || !won {
				t.Errorf("Claim after Unbind = %v, %v; want true", won, err)
			}
		}},
		{"bad names", func(t *testing.T, s suiteStore, _ impl, _ string) {
			d, _ := s.Put(ctx, []byte("x"))
			for _, name := range []string{"", "/a", "a/../b", "a//b", ".hidden", "a b"} {
				if _, err := s.Claim(ctx, name, d, nil); err == nil {
					t.Errorf("Claim(%q) succeeded, want an error", name)
				}
				if _, err := s.Resolve(ctx, name); err == nil || errors.Is(err, fsstore.ErrNotFound) {
					t.Errorf("Resolve(%q) = %v, want a name error", name, err)
				}
			}
		}},
		{"scan, list, children", func(t *testing.T, s suiteStore, im impl, root string) {
			d, _ := s.Put(ctx, []byte("x"))
			names := []string{"s/a/1", "s/a/2", "s/a/10", "s/b/1", "s/ab", "t/1"}
			for _, n := range names {
				if _, err := s.Bind(ctx, n, d, fsstore.Meta{{Key: "n", Value: n}}); err != nil {
					t.Fatal(err)
				}
			}
			im.rawPut(t, root, "names/s/a/3", []byte("soma-record 1\ntruncated"))
			im.rawPut(t, root, "names/s/.hidden", []byte("not a name"))
			got, err := s.List(ctx, "s/a")
			if want := []string{"s/a/1", "s/a/10", "s/a/2", "s/a/3"}; err != nil || !slices.Equal(got, want) {
				t.Errorf("List(s/a) = %v, %v; want %v", got, err, want)
			}
			if got, err := s.List(ctx, "s/ab"); err != nil || !slices.Equal(got, []string{"s/ab"}) {
				t.Errorf("List(s/ab) = %v, %v; want [s/ab]", got, err)
			}
			if got, err := s.List(ctx, "nothing"); err != nil || len(got) != 0 {
				t.Errorf("List(nothing) = %v, %v; want none", got, err)
			}
			all, err := s.List(ctx, "")
			if want := []string{"s/a/1", "s/a/10", "s/a/2", "s/a/3", "s/ab", "s/b/1", "t/1"}; err != nil || !slices.Equal(all, want) {
				t.Errorf("List() = %v, %v; want %v", all, err, want)
			}
			bound, corrupt, err := s.Scan(ctx, "s")
			if err != nil {
				t.Fatal(err)
			}
			var bn []string
			for _, b := range bound {
				bn = append(bn, b.Name)
				if b.Meta.Value("n") != b.Name || b.Time.IsZero() {
					t.Errorf("Scan: %+v: meta or time lost", b)
				}
			}
			if want := []string{"s/a/1", "s/a/10", "s/a/2", "s/ab", "s/b/1"}; !slices.Equal(bn, want) {
				t.Errorf("Scan(s) bound %v, want %v", bn, want)
			}
			if len(corrupt) != 1 || corrupt[0].Name != "s/a/3" {
				t.Errorf("Scan(s) corrupt = %v, want s/a/3 only", corrupt)
			}
			kids, err := s.Children(ctx, "s")
			if want := []string{"a", "ab", "b"}; err != nil || !slices.Equal(kids, want) {
				t.Errorf("Children(s) = %v, %v; want %v", kids, err, want)
			}
			if kids, err := s.Children(ctx, "none"); err != nil || len(kids) != 0 {
				t.Errorf("Children(none) = %v, %v; want none", kids, err)
			}
			res := s.ResolveMany(ctx, []string{"t/1", "s/missing", "s/a/3"})
			var ce *fsstore.CorruptError
			if len(res) != 3 || res[0].Err != nil || res[0].Bound.Name != "t/1" ||
				!errors.Is(res[1].Err, fsstore.ErrNotFound) || !errors.As(res[2].Err, &ce) {
				t.Errorf("ResolveMany = %+v, want [t/1, not found, corrupt]", res)
			}
		}},
		{"server time", func(t *testing.T, s suiteStore, _ impl, _ string) {
			d, _ := s.Put(ctx, []byte("x"))
			now, err := s.Now(ctx)
			if err != nil || now.IsZero() {
				t.Fatalf("Now = %v, %v", now, err)
			}
			if _, err := s.Bind(ctx, "h/1", d, nil); err != nil {
				t.Fatal(err)
			}
			b, err := s.Resolve(ctx, "h/1")
			if err != nil {
				t.Fatal(err)
			}
			// Both are the server's clock, in whole seconds on a bucket:
			// a record bound after Now is not older than Now's second.
			if b.Time.Before(now.Truncate(time.Second).Add(-time.Second)) {
				t.Errorf("record time %v is before the earlier Now %v", b.Time, now)
			}
			tt, err := s.Touch(ctx, "h/1")
			if err != nil || tt.Before(b.Time) {
				t.Errorf("Touch = %v, %v; want a time not before %v", tt, err, b.Time)
			}
			if b2, err := s.Resolve(ctx, "h/1"); err != nil || b2.Digest != d {
				t.Errorf("Resolve after Touch = %+v, %v; want the record unchanged", b2, err)
			}
			if _, err := s.Touch(ctx, "h/none"); !errors.Is(err, fsstore.ErrNotFound) {
				t.Errorf("Touch of an unbound name: %v, want ErrNotFound", err)
			}
		}},
		{"reopen", func(t *testing.T, s suiteStore, _ impl, root string) {
			d, _ := s.Put(ctx, []byte("x"))
			if _, err := s.Bind(ctx, "r/1", d, nil); err != nil {
				t.Fatal(err)
			}
			s2, err := openRoot(ctx, root, false)
			if err != nil {
				t.Fatal(err)
			}
			if b, err := s2.Resolve(ctx, "r/1"); err != nil || b.Digest != d {
				t.Errorf("Resolve in a reopened store = %+v, %v", b, err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { eachStore(t, tc.run) })
	}
}

// TestOpenMissing: a root with no store is refused unless created, with
// fsstore's sentinel, on both.
func TestOpenMissing(t *testing.T) {
	for _, im := range impls() {
		t.Run(im.name, func(t *testing.T) {
			root := im.fresh(t)
			if _, err := openRoot(context.Background(), root, false); !errors.Is(err, fsstore.ErrNotFound) {
				t.Errorf("Open of a root with no store: %v, want ErrNotFound", err)
			}
		})
	}
}

// TestClaimRace: N processes claim the same M names at once; every name
// is won by exactly one of them, and its record names the winner.
func TestClaimRace(t *testing.T) {
	const procs, names = 4, 40
	for _, im := range impls() {
		t.Run(im.name, func(t *testing.T) {
			ctx := context.Background()
			root := im.fresh(t)
			s, err := openRoot(ctx, root, true)
			if err != nil {
				t.Fatal(err)
			}
			type child struct {
				out  *bufio.Scanner
				in   io.WriteCloser
				wait func() error
				pid  int
				errb *bytes.Buffer
			}
			kids := make([]*child, procs)
			for i := range kids {
				cmd := testutil.Child(t, "claimer", "SOMA_TEST_ROOT="+root, "SOMA_TEST_NAMES="+strconv.Itoa(names))
				var errb bytes.Buffer
				cmd.Stderr = &errb
				out, err := cmd.StdoutPipe()
				if err != nil {
					t.Fatal(err)
				}
				in, err := cmd.StdinPipe()
				if err != nil {
					t.Fatal(err)
				}
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				kids[i] = &child{out: bufio.NewScanner(out), in: in, wait: cmd.Wait, pid: cmd.Process.Pid, errb: &errb}
			}
			for _, k := range kids {
				if !k.out.Scan() || k.out.Text() != "ready" {
					k.in.Close()
					k.wait()
					t.Fatalf("child %d did not get ready: %s", k.pid, k.errb)
				}
			}
			for _, k := range kids {
				io.WriteString(k.in, "go\n")
			}
			winner := map[string]int{}
			for _, k := range kids {
				for k.out.Scan() {
					name, ok := strings.CutPrefix(k.out.Text(), "won ")
					if !ok {
						continue
					}
					if w, dup := winner[name]; dup {
						t.Errorf("%s won by both %d and %d", name, w, k.pid)
					}
					winner[name] = k.pid
				}
				k.in.Close()
				if err := k.wait(); err != nil {
					t.Errorf("child %d: %v: %s", k.pid, err, k.errb)
				}
			}
			if len(winner) != names {
				t.Errorf("%d names won, want %d", len(winner), names)
			}
			for name, pid := range winner {
				b, err := s.Resolve(ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				if got := b.Meta.Value("pid"); got != strconv.Itoa(pid) {
					t.Errorf("%s: record says pid %s, but %d was told it won", name, got, pid)
				}
			}
		})
	}
}
