package testutil

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// S3 is the S3 server tests use: scripts/s3-local.sh's versitygw, or any
// server the AWS_* variables point at.
type S3 struct {
	Endpoint  string // AWS_ENDPOINT_URL
	AccessKey string // AWS_ACCESS_KEY_ID
	SecretKey string // AWS_SECRET_ACCESS_KEY
	Region    string // AWS_REGION
	Bucket    string // SOMA_TEST_BUCKET: a bucket tests may write in
}

// Env returns the server's settings as environment lines
// ("NAME=value"), for a child process or t.Setenv.
func (s S3) Env() []string {
	return []string{
		"AWS_ENDPOINT_URL=" + s.Endpoint,
		"AWS_ACCESS_KEY_ID=" + s.AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + s.SecretKey,
		"AWS_REGION=" + s.Region,
		"SOMA_TEST_BUCKET=" + s.Bucket,
	}
}

// Setenv sets the server's settings in t's environment (t.Setenv: not
// for parallel tests), and clears the AWS variables that would override
// them (a profile, a session token).
func (s S3) Setenv(t testing.TB) {
	t.Helper()
	for _, kv := range s.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	for _, k := range []string{"AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	// No shared files: the test's keys are the only ones.
	dir := t.TempDir()
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
}

var s3Found struct {
	once sync.Once
	s3   S3
	why  string
}

// S3StateDir is where scripts/s3-local.sh keeps its state (and the env
// file NeedS3 reads): $SOMA_S3_STATE, else
// ${XDG_STATE_HOME:-$HOME/.local/state}/soma-s3, as the script computes it.
func S3StateDir() string {
	if d := os.Getenv("SOMA_S3_STATE"); d != "" {
		return d
	}
	base := os.Getenv("XDG_STATE_HOME")
	if base == "" {
		home, _ := os.UserHomeDir()
		base = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(base, "soma-s3")
}

// NeedS3 returns the S3 server for tests, or skips t (fails it under
// SOMA_REQUIRE=1) when there is none that answers. The settings come from
// SOMA_TEST_BUCKET and the AWS_* variables when SOMA_TEST_BUCKET is set,
// else from the env file `scripts/s3-local.sh start` writes in its state
// folder (so that `make test` needs no exported variables).
func NeedS3(t testing.TB) S3 {
	t.Helper()
	s3Found.once.Do(func() {
		s3Found.s3, s3Found.why = findS3()
	})
	Need(t, s3Found.why == "", "a local S3 server (scripts/s3-local.sh start): "+s3Found.why)
	return s3Found.s3
}

func findS3() (S3, string) {
	s := S3{
		Endpoint:  os.Getenv("AWS_ENDPOINT_URL"),
		AccessKey: os.Getenv("AWS_ACCESS_KEY_ID"),
		SecretKey: os.Getenv("AWS_SECRET_ACCESS_KEY"),
		Region:    os.Getenv("AWS_REGION"),
		Bucket:    os.Getenv("SOMA_TEST_BUCKET"),
	}
	if s.Bucket == "" {
		file := filepath.Join(S3StateDir(), "env")
		f, err := os.Open(file)
		if err != nil {
			return S3{}, "SOMA_TEST_BUCKET is not set and " + err.Error()
		}
		defer f.Close()
		vars := map[string]string{}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			k, v, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "export "), "=")
			if ok {
				vars[k] = v
			}
		}
		s = S3{vars["AWS_ENDPOINT_URL"], vars["AWS_ACCESS_KEY_ID"], vars["AWS_SECRET_ACCESS_KEY"], vars["AWS_REGION"], vars["SOMA_TEST_BUCKET"]}
		if s.Bucket == "" {
			return S3{}, file + " names no SOMA_TEST_BUCKET"
		}
	}
	if s.Region == "" {
		s.Region = "us-east-1"
	}
	if s.Endpoint == "" || s.AccessKey == "" || s.SecretKey == "" {
		return S3{}, "SOMA_TEST_BUCKET is set but AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID or AWS_SECRET_ACCESS_KEY is not (eval \"$(scripts/s3-local.sh env)\")"
	}
	c := http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get(s.Endpoint + "/")
	if err != nil {
		return S3{}, "nothing answers at " + s.Endpoint + ": " + err.Error()
	}
	resp.Body.Close()
	return s, ""
}

// FreshRoot returns a root under a prefix of the test bucket no other
// test uses (s3://bucket/name-<12 hex>), removed when t ends.
func (s S3) FreshRoot(t testing.TB, name string) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	root := "s3://" + s.Bucket + "/" + name + "-" + hex.EncodeToString(b[:])
	s.RemoveAtEnd(t, root)
	return root
}

// RemoveAtEnd removes every key under root (s3://bucket/prefix) when t
// ends, so that tests leave the test bucket as they found it. A failure
// is logged, not fatal: the keys are only litter.
func (s S3) RemoveAtEnd(t testing.TB, root string) {
	t.Helper()
	rest, ok := strings.CutPrefix(root, "s3://")
	bucket, prefix, _ := strings.Cut(rest, "/")
	if !ok || bucket == "" || prefix == "" {
		t.Fatalf("RemoveAtEnd(%q): want s3://bucket/prefix", root)
	}
	prefix = strings.TrimSuffix(prefix, "/") + "/"
	t.Cleanup(func() {
		ctx := context.Background()
		c := s3.New(s3.Options{
			Region:       s.Region,
			BaseEndpoint: aws.String(s.Endpoint),
			UsePathStyle: true,
			Credentials:  credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
		})
		p := s3.NewListObjectsV2Paginator(c, &s3.ListObjectsV2Input{Bucket: &bucket, Prefix: &prefix})
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				t.Logf("removing %s: %v", root, err)
				return
			}
			for _, o := range page.Contents {
				if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &bucket, Key: o.Key}); err != nil {
					t.Logf("removing %s: %v", root, err)
					return
				}
			}
		}
	})
}
