package s3store

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"golang.org/x/sync/errgroup"

	"github.com/soma-hpc/soma/fsstore"
)

// Scheme is the root prefix that names a bucket store: s3://bucket/prefix.
const Scheme = "s3://"

// IsRoot reports whether root names a bucket store (s3://...).
func IsRoot(root string) bool { return strings.HasPrefix(root, Scheme) }

// ParseRoot splits s3://bucket/prefix into the bucket and the prefix
// (without slashes at either end; "" for the whole bucket). The prefix
// follows fsstore's name rules, so that its keys are names a folder could
// hold too.
func ParseRoot(root string) (bucket, prefix string, err error) {
	rest, ok := strings.CutPrefix(root, Scheme)
	if !ok {
		return "", "", fmt.Errorf("s3store: root %q does not start with %s (write s3://bucket/prefix)", root, Scheme)
	}
	bucket, prefix, _ = strings.Cut(rest, "/")
	prefix = strings.TrimSuffix(prefix, "/")
	if bucket == "" {
		return "", "", fmt.Errorf("s3store: root %q names no bucket (write s3://bucket/prefix)", root)
	}
	if !validBucket(bucket) {
		return "", "", fmt.Errorf("s3store: root %q: bucket %q is not a valid bucket name (3-63 lowercase letters, digits, '-' and '.')", root, bucket)
	}
	if prefix != "" {
		if err := fsstore.ValidateName(prefix); err != nil {
			return "", "", fmt.Errorf("s3store: root %q: prefix: %w", root, err)
		}
	}
	return bucket, prefix, nil
}

func validBucket(b string) bool {
	if len(b) < 3 || len(b) > 63 {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// Options configure Open.
type Options struct {
	// Create writes soma.json under a prefix that holds no store yet.
	// Without it, Open refuses a prefix without one (fsstore.ErrNotFound).
	Create bool
	// Parallelism bounds the concurrent requests of Scan, ResolveMany and
	// GetMany. Zero means 32: each request is a round trip, and a bucket
	// asked one name at a time is not usable (seed 004).
	Parallelism int
	// Config is the AWS configuration. Nil loads it as the AWS CLI does
	// (environment, then ~/.aws/config and ~/.aws/credentials). Its
	// HTTP client and checksum settings are replaced (see Open).
	Config *aws.Config
	// Endpoint, when set, replaces the configured endpoint (tests put a
	// proxy in front of the server with it).
	Endpoint string
}

// Store is a soma store under a prefix of a bucket. It is safe for
// concurrent use.
type Store struct {
	client   *s3.Client
	bucket   string
	prefix   string // "" or "lab/" (ends with '/')
	root     string // s3://bucket/prefix, for messages
	endpoint string // where requests go, for messages
	parallel int
	id       string // host.pid. for probe keys
	clockKey string

	// refreshAfter is RefreshAfter; a seam for tests, which cannot wait
	// for a blob to age by minutes.
	refreshAfter time.Duration
	// Fault-injection seams for this package's tests: gcBeforeDelete
	// runs in GC after a blob's lock is taken and its age read again,
	// before it is deleted; lockWait when a Put that refreshed a blob
	// finds a GC's lock on it and waits.
	gcBeforeDelete func(d fsstore.Digest)
	lockWait       func(d fsstore.Digest)
}

// Open opens the store at root (s3://bucket/prefix). It checks the
// credentials, reads (or with Options.Create writes) soma.json, and
// proves that the endpoint refuses a second conditional PUT of one key
// (ErrUnconditional otherwise): three round trips and a delete. Errors
// say what failed and how to fix it: no credentials (ErrNoCredentials),
// an endpoint that cannot be reached (ErrUnreachable), a missing bucket
// (ErrNoBucket), refused credentials or access (ErrAccessDenied), this
// machine's clock refused by the server (ErrClockSkew).
func Open(ctx context.Context, root string, opts Options) (*Store, error) {
	bucket, prefix, err := ParseRoot(root)
	if err != nil {
		return nil, err
	}
	s := &Store{bucket: bucket, parallel: opts.Parallelism, root: Scheme + bucket, refreshAfter: RefreshAfter}
	if prefix != "" {
		s.prefix = prefix + "/"
		s.root += "/" + prefix
	}
	if s.parallel <= 0 {
		s.parallel = 32
	}
	host, _ := os.Hostname()
	s.id = fsstore.SanitizeSegment(host) + "." + strconv.Itoa(os.Getpid()) + "."
	s.clockKey = "tmp/" + s.id + "clock-" + randHex(6)

	var cfg aws.Config
	if opts.Config != nil {
		cfg = opts.Config.Copy()
	} else {
		cfg, err = config.LoadDefaultConfig(ctx)
		if err != nil {
			return nil, fmt.Errorf("s3store: open %s: reading the AWS configuration (AWS_* variables, ~/.aws/config, ~/.aws/credentials): %w", s.root, err)
		}
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	// Checksums only where S3 requires them: aws-sdk-go-v2 added CRC32
	// trailers to every PUT by default in 2025 (v1.73), which several
	// S3-compatible servers refuse, and the records carry their own CRC.
	cfg.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
	cfg.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	// As many idle connections as concurrent requests: the SDK's default
	// of 10 per host would open and close connections under GetMany.
	cfg.HTTPClient = awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
		tr.MaxIdleConns = 2 * s.parallel
		tr.MaxIdleConnsPerHost = 2 * s.parallel
	})
	s.client = s3.NewFromConfig(cfg, func(o *s3.Options) {
		if opts.Endpoint != "" {
			o.BaseEndpoint = aws.String(opts.Endpoint)
		}
		// S3-compatible servers (versitygw, MinIO, Ceph) are addressed
		// by path: virtual-hosted style needs a DNS name per bucket.
		if o.BaseEndpoint != nil {
			o.UsePathStyle = true
		}
	})
	s.endpoint = "AWS S3 (" + cfg.Region + ")"
	if ep := s.client.Options().BaseEndpoint; ep != nil {
		s.endpoint = *ep
	}
	if cfg.Credentials == nil {
		return nil, s.noCredentials(errors.New("no credentials provider"))
	}
	if _, err := cfg.Credentials.Retrieve(ctx); err != nil {
		return nil, s.noCredentials(err)
	}
	if err := s.marker(ctx, opts.Create); err != nil {
		return nil, err
	}
	if err := s.prove(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Root returns s3://bucket/prefix.
func (s *Store) Root() string { return s.root }

// Close is fsstore's Close for a bucket: a bucket store makes no temp
// files or clock of its own (its temp names are its writes' own, removed
// by each write), so there is nothing to remove.
func (s *Store) Close() error { return nil }

// Endpoint returns where the store's requests go: the configured
// endpoint's URL, or "AWS S3 (region)".
func (s *Store) Endpoint() string { return s.endpoint }

func (s *Store) key(rel string) string { return s.prefix + rel }

func (s *Store) nameKey(name string) string { return s.prefix + "names/" + name }

func (s *Store) url(key string) string { return Scheme + s.bucket + "/" + key }

// marker reads soma.json, or writes it with create.
func (s *Store) marker(ctx context.Context, create bool) error {
	b, _, err := s.getObject(ctx, s.key(markerName))
	switch {
	case err == nil:
		return fsstore.CheckMarker(s.root, b)
	case !errors.Is(err, fsstore.ErrNotFound):
		return fmt.Errorf("s3store: open %s: %w", s.root, err)
	case !create:
		return fmt.Errorf("s3store: open %s: %w: no soma.json under this prefix (create the store with soma-trial --spec or 'soma init', or check the prefix)", s.root, fsstore.ErrNotFound)
	}
	// A prefix that holds names but no marker is a store that lost it,
	// or not soma's: refused, as fsstore refuses a non-empty folder.
	out, err := s.client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: aws.String(s.key("names/")), MaxKeys: aws.Int32(1)})
	if err != nil {
		return fmt.Errorf("s3store: open %s: %w", s.root, s.explain("list", s.key("names/"), err))
	}
	if len(out.Contents) > 0 {
		return fmt.Errorf("%w: %s has names/ but no %s: if it is a soma store that lost its %s, write it back (the bytes: %s), else point soma at an empty prefix",
			fsstore.ErrNotStore, s.root, markerName, markerName, strings.TrimSpace(string(fsstore.Marker())))
	}
	// Two processes creating the store at once: the condition makes one
	// marker; the loser reads the winner's back.
	m := fsstore.Marker()
	_, err = s.put(ctx, s.key(markerName), m, putOptions{ifNoneMatch: true})
	if err != nil && !errors.Is(err, errPrecondition) {
		return fmt.Errorf("s3store: create %s: %w", s.root, err)
	}
	b, _, err = s.getObject(ctx, s.key(markerName))
	if err != nil {
		return fmt.Errorf("s3store: create %s: read soma.json back: %w", s.root, err)
	}
	return fsstore.CheckMarker(s.root, b)
}

const markerName = "soma.json"

// prove makes a fresh key with a conditional PUT and puts it again with
// the same condition: the second must be refused (412). See the package
// documentation.
func (s *Store) prove(ctx context.Context) error {
	key := s.key("tmp/" + s.id + "proof-" + randHex(8))
	body := []byte("soma: proof that If-None-Match: * is enforced\n")
	if _, err := s.put(ctx, key, body, putOptions{ifNoneMatch: true}); err != nil {
		if errors.Is(err, errPrecondition) {
			return fmt.Errorf("s3store: open %s: %w: the endpoint %s refused a conditional PUT of the fresh key %s (412 for a key that did not exist)", s.root, ErrUnconditional, s.endpoint, key)
		}
		return fmt.Errorf("s3store: open %s: proving conditional writes: %w", s.root, err)
	}
	_, err := s.put(ctx, key, body, putOptions{ifNoneMatch: true})
	// Removed whatever the answer: the key served only this proof.
	defer func() {
		_, _ = s.client.DeleteObject(context.WithoutCancel(ctx), &s3.DeleteObjectInput{Bucket: &s.bucket, Key: &key})
	}()
	switch {
	case errors.Is(err, errPrecondition):
		return nil
	case err == nil:
		return fmt.Errorf("s3store: open %s: %w: the endpoint %s accepted a second PUT with If-None-Match: * of %s, which it had just written; it would hand every trial to every process. Use a server that enforces conditional writes (AWS S3, MinIO, versitygw); soma does not fall back to unconditional writes",
			s.root, ErrUnconditional, s.endpoint, key)
	case errors.Is(err, errNotImplemented):
		return fmt.Errorf("s3store: open %s: %w: the endpoint %s does not implement If-None-Match on PUT (%v). Use a server that enforces conditional writes (AWS S3, MinIO, versitygw)", s.root, ErrUnconditional, s.endpoint, err)
	}
	return fmt.Errorf("s3store: open %s: proving conditional writes: %w", s.root, err)
}

// putOptions are the variants of put.
type putOptions struct {
	ifNoneMatch bool
	meta        map[string]string
	noRetry     bool
}

// put writes body at key and returns the server's Date of the reply.
// A 412 is errPrecondition, a 409 errConflict; other errors are
// explained (explain).
func (s *Store) put(ctx context.Context, key string, body []byte, o putOptions) (time.Time, error) {
	in := &s3.PutObjectInput{
		Bucket:        &s.bucket,
		Key:           &key,
		Body:          bytes.NewReader(body),
		ContentLength: aws.Int64(int64(len(body))),
		Metadata:      o.meta,
	}
	if o.ifNoneMatch {
		in.IfNoneMatch = aws.String("*")
	}
	var optFns []func(*s3.Options)
	if o.noRetry {
		optFns = append(optFns, func(o *s3.Options) { o.Retryer = aws.NopRetryer{} })
	}
	out, err := s.client.PutObject(ctx, in, optFns...)
	if err != nil {
		return time.Time{}, s.explain("put", key, err)
	}
	return replyDate(out.ResultMetadata), nil
}

// replyDate returns the Date header of the reply behind md, or the zero
// time if it has none.
func replyDate(md middleware.Metadata) time.Time {
	if resp, ok := awsmiddleware.GetRawResponse(md).(*smithyhttp.Response); ok && resp != nil {
		if t, err := http.ParseTime(resp.Header.Get("Date")); err == nil {
			return t
		}
	}
	return time.Time{}
}

// getObject reads key: its bytes and its metadata (LastModified in
// lastModified). A missing key is fsstore.ErrNotFound.
func (s *Store) getObject(ctx context.Context, key string) ([]byte, object, error) {
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &key})
	if err != nil {
		return nil, object{}, s.explain("get", key, err)
	}
	defer out.Body.Close()
	var b []byte
	if out.ContentLength != nil && *out.ContentLength >= 0 {
		b = make([]byte, 0, *out.ContentLength+1)
	}
	buf := bytes.NewBuffer(b)
	if _, err := io.Copy(buf, out.Body); err != nil {
		return nil, object{}, fmt.Errorf("get %s: %w", s.url(key), err)
	}
	o := object{meta: out.Metadata}
	if out.LastModified != nil {
		o.modified = *out.LastModified
	}
	return buf.Bytes(), o, nil
}

// object is what a GET or HEAD says of a key beside its bytes.
type object struct {
	modified time.Time
	meta     map[string]string
	size     int64     // HEAD only
	date     time.Time // HEAD only: the Date of the reply, the server's now
}

// Metadata keys (x-amz-meta-*): S3 hands them back lowercased.
const (
	metaClaim  = "soma-claim"  // a claim's one-time token (Claim)
	metaSealed = "soma-sealed" // "1" on a record bound by Seal
)

// Put stores b and returns its digest. Bytes already stored are not
// sent again while their blob is young; an old one is rewritten with the
// same bytes, which makes it young again, as fsstore's Put refreshes a
// blob's mtime: soma gc keeps a blob a writer is about to bind only
// because of its age (see refresh, and GC for the whole argument).
func (s *Store) Put(ctx context.Context, b []byte) (fsstore.Digest, error) {
	if err := ctx.Err(); err != nil {
		return fsstore.Digest{}, err
	}
	d := fsstore.Sum(b)
	if err := s.putBlob(ctx, d, b); err != nil {
		return fsstore.Digest{}, fmt.Errorf("put: %w", err)
	}
	return d, nil
}

func (s *Store) blobKey(d fsstore.Digest) string {
	h := d.Hex()
	return s.prefix + "blobs/" + fsstore.Algo + "/" + h[:2] + "/" + h[2:]
}

// Get returns the blob d, verifying its digest: fsstore.ErrNotFound if
// it is not stored, a *fsstore.CorruptError if its bytes do not match.
func (s *Store) Get(ctx context.Context, d fsstore.Digest) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if d.IsZero() {
		return nil, errors.New("get: zero digest")
	}
	key := s.blobKey(d)
	b, _, err := s.getObject(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", d, err)
	}
	if fsstore.Sum(b) != d {
		return nil, &fsstore.CorruptError{Digest: d, Path: s.url(key), Err: fsstore.ErrDigestMismatch}
	}
	return b, nil
}

// Has reports whether blob d is stored (one HEAD; nothing read).
func (s *Store) Has(ctx context.Context, d fsstore.Digest) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	_, err := s.head(ctx, s.blobKey(d))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fsstore.ErrNotFound):
		return false, nil
	}
	return false, fmt.Errorf("has %s: %w", d, err)
}

func (s *Store) head(ctx context.Context, key string) (object, error) {
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: &key})
	if err != nil {
		return object{}, s.explain("head", key, err)
	}
	o := object{meta: out.Metadata, date: replyDate(out.ResultMetadata)}
	if out.LastModified != nil {
		o.modified = *out.LastModified
	}
	if out.ContentLength != nil {
		o.size = *out.ContentLength
	}
	return o, nil
}

// GetMany fetches many blobs, at most Options.Parallelism at once. The
// result has one entry per digest, in order; each carries its own error.
func (s *Store) GetMany(ctx context.Context, ds []fsstore.Digest) []fsstore.Blob {
	out := make([]fsstore.Blob, len(ds))
	s.each(ctx, len(ds), func(i int) {
		b, err := s.Get(ctx, ds[i])
		out[i] = fsstore.Blob{Digest: ds[i], Data: b, Err: err}
	})
	return out
}

// each runs fn(0..n-1) on at most s.parallel goroutines and waits for
// them; it stops handing out work once ctx is done.
func (s *Store) each(ctx context.Context, n int, fn func(i int)) {
	var g errgroup.Group
	g.SetLimit(s.parallel)
	for i := range n {
		if ctx.Err() != nil {
			break
		}
		g.Go(func() error { fn(i); return nil })
	}
	g.Wait()
}

func checkWrite(ctx context.Context, name string, d fsstore.Digest) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := fsstore.ValidateName(name); err != nil {
		return err
	}
	if d.IsZero() {
		return errors.New("s3store: zero digest")
	}
	return nil
}

// claimTries bounds the PUTs of one claim: each 409 (a concurrent write
// to the key) and each lost reply whose read-back found nothing costs one.
const claimTries = 10

// Claim binds name to d with meta only if name is not bound, and reports
// whether this call bound it: a PUT with If-None-Match: *. Exactly one of
// any number of concurrent claimers, on any number of machines, gets
// true (Open proved the endpoint enforces the condition).
//
// 412 means another claimer has it. 409 (ConditionalRequestConflict) is
// retried after a short wait, as S3 asks. Any other failure may have
// lost the reply of a PUT that succeeded: the key is read back, and the
// claim is ours if its bytes and its token (a random value this call put
// in the object's metadata, so that two claimers writing the same bytes
// are told apart) are ours; if the key is absent the PUT is sent again.
func (s *Store) Claim(ctx context.Context, name string, d fsstore.Digest, meta fsstore.Meta) (bool, error) {
	if err := checkWrite(ctx, name, d); err != nil {
		return false, fmt.Errorf("claim %s: %w", name, err)
	}
	key := s.nameKey(name)
	body := fsstore.EncodeRecord(d, meta)
	token := randHex(12)
	uncertain := false // an earlier PUT of this claim may have landed
	var last error
	for try := 0; try < claimTries; try++ {
		if try > 0 {
			if err := sleep(ctx, backoff(try)); err != nil {
				return false, fmt.Errorf("claim %s: %w", name, err)
			}
		}
		_, err := s.put(ctx, key, body, putOptions{ifNoneMatch: true, meta: map[string]string{metaClaim: token}, noRetry: true})
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, errPrecondition) && !uncertain:
			return false, nil
		case errors.Is(err, errConflict):
			last = err
			continue
		case errors.Is(err, errPrecondition):
			// Ours from an earlier try, or somebody else's.
		case definite(err):
			return false, fmt.Errorf("claim %s: %w", name, err)
		}
		// The reply was lost, or the key exists after a lost reply:
		// what the server holds decides.
		uncertain = true
		last = err
		won, found, rerr := s.readBack(ctx, key, body, token)
		switch {
		case rerr != nil:
			last = errors.Join(err, rerr)
		case found:
			return won, nil
		}
	}
	return false, fmt.Errorf("claim %s: gave up after %d tries: %w", name, claimTries, last)
}

// readBack reads key and says whether it holds body with token (won);
// found is false when the key is absent.
func (s *Store) readBack(ctx context.Context, key string, body []byte, token string) (won, found bool, err error) {
	b, o, err := s.getObject(ctx, key)
	switch {
	case errors.Is(err, fsstore.ErrNotFound):
		return false, false, nil
	case err != nil:
		return false, false, err
	}
	return bytes.Equal(b, body) && o.meta[metaClaim] == token, true, nil
}

func backoff(try int) time.Duration {
	d := time.Duration(1<<min(try, 6)) * 10 * time.Millisecond
	return d/2 + time.Duration(randUint(uint64(d/2)))
}

func randUint(n uint64) uint64 {
	if n == 0 {
		return 0
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	return v % n
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Bind points name at d with meta, replacing any earlier binding: one
// PUT, atomic as S3 makes every PUT (a reader sees the old record or the
// new one). It returns the record as written, with the Date of the
// server's reply as its time.
func (s *Store) Bind(ctx context.Context, name string, d fsstore.Digest, meta fsstore.Meta) (fsstore.Bound, error) {
	return s.bind(ctx, "bind", name, d, meta, nil)
}

// Seal is Bind for a name's last binding; Probe then reports it Sealed
// (object metadata soma-sealed, read by a HEAD). A later Bind replaces it
// unsealed.
func (s *Store) Seal(ctx context.Context, name string, d fsstore.Digest, meta fsstore.Meta) (fsstore.Bound, error) {
	return s.bind(ctx, "seal", name, d, meta, map[string]string{metaSealed: "1"})
}

func (s *Store) bind(ctx context.Context, op, name string, d fsstore.Digest, meta fsstore.Meta, md map[string]string) (fsstore.Bound, error) {
	if err := checkWrite(ctx, name, d); err != nil {
		return fsstore.Bound{}, fmt.Errorf("%s %s: %w", op, name, err)
	}
	t, err := s.put(ctx, s.nameKey(name), fsstore.EncodeRecord(d, meta), putOptions{meta: md})
	if err != nil {
		return fsstore.Bound{}, fmt.Errorf("%s %s: %w", op, name, err)
	}
	return fsstore.Bound{Name: name, Digest: d, Meta: meta, Time: t}, nil
}

// Resolve returns the record bound to name, with its Last-Modified as
// its time: fsstore.ErrNotFound if none, a *fsstore.CorruptError if the
// record cannot be parsed.
func (s *Store) Resolve(ctx context.Context, name string) (fsstore.Bound, error) {
	if err := ctx.Err(); err != nil {
		return fsstore.Bound{}, err
	}
	if err := fsstore.ValidateName(name); err != nil {
		return fsstore.Bound{}, fmt.Errorf("resolve: %w", err)
	}
	key := s.nameKey(name)
	b, o, err := s.getObject(ctx, key)
	if err != nil {
		return fsstore.Bound{}, fmt.Errorf("resolve %s: %w", name, err)
	}
	d, meta, err := fsstore.DecodeRecord(b)
	if err != nil {
		return fsstore.Bound{}, &fsstore.CorruptError{Name: name, Path: s.url(key), Err: err}
	}
	return fsstore.Bound{Name: name, Digest: d, Meta: meta, Time: o.modified}, nil
}

// ResolveMany resolves many names, at most Options.Parallelism at once;
// the result has one entry per name, in order.
func (s *Store) ResolveMany(ctx context.Context, names []string) []fsstore.Lookup {
	out := make([]fsstore.Lookup, len(names))
	s.each(ctx, len(names), func(i int) {
		b, err := s.Resolve(ctx, names[i])
		out[i] = fsstore.Lookup{Bound: b, Err: err}
	})
	return out
}

// Probe reports with one HEAD whether name is bound, and whether by
// Seal.
func (s *Store) Probe(ctx context.Context, name string) (fsstore.Presence, error) {
	if err := ctx.Err(); err != nil {
		return fsstore.Missing, err
	}
	if err := fsstore.ValidateName(name); err != nil {
		return fsstore.Missing, fmt.Errorf("probe: %w", err)
	}
	o, err := s.head(ctx, s.nameKey(name))
	switch {
	case errors.Is(err, fsstore.ErrNotFound):
		return fsstore.Missing, nil
	case err != nil:
		return fsstore.Missing, fmt.Errorf("probe %s: %w", name, err)
	case o.meta[metaSealed] == "1":
		return fsstore.Sealed, nil
	}
	return fsstore.Present, nil
}

// Exists reports whether name is bound (one HEAD).
func (s *Store) Exists(ctx context.Context, name string) (bool, error) {
	p, err := s.Probe(ctx, name)
	return p != fsstore.Missing, err
}

// Unbind removes name's binding: fsstore.ErrNotFound if it is not bound.
// A HEAD then a DELETE (S3's DELETE succeeds for a missing key).
func (s *Store) Unbind(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := fsstore.ValidateName(name); err != nil {
		return fmt.Errorf("unbind: %w", err)
	}
	key := s.nameKey(name)
	if _, err := s.head(ctx, key); err != nil {
		return fmt.Errorf("unbind %s: %w", name, err)
	}
	if _, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: &key}); err != nil {
		return fmt.Errorf("unbind %s: %w", name, s.explain("delete", key, err))
	}
	return nil
}

// Touch sets name's time to the server's now without changing its
// record: a CopyObject of the key onto itself (S3 has no way to set a
// time alone), keeping its metadata. It returns the new time.
func (s *Store) Touch(ctx context.Context, name string) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	if err := fsstore.ValidateName(name); err != nil {
		return time.Time{}, fmt.Errorf("touch: %w", err)
	}
	key := s.nameKey(name)
	o, err := s.head(ctx, key)
	if err != nil {
		return time.Time{}, fmt.Errorf("touch %s: %w", name, err)
	}
	meta := o.meta
	if meta == nil {
		meta = map[string]string{}
	}
	out, err := s.client.CopyObject(ctx, &s3.CopyObjectInput{
		Bucket:            &s.bucket,
		Key:               &key,
		CopySource:        aws.String(s.bucket + "/" + key),
		MetadataDirective: "REPLACE",
		Metadata:          meta,
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("touch %s: %w", name, s.explain("copy", key, err))
	}
	if out.CopyObjectResult != nil && out.CopyObjectResult.LastModified != nil {
		return *out.CopyObjectResult.LastModified, nil
	}
	return replyDate(out.ResultMetadata), nil
}

// Now returns the server's current time: the Date of its reply to a PUT
// of this Store's probe key, tmp/<host>.<pid>.clock-<hex> (one round
// trip). The key is overwritten at each call and left in place.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	t, err := s.put(ctx, s.key(s.clockKey), nil, putOptions{})
	if err != nil {
		return time.Time{}, fmt.Errorf("server time: %w", err)
	}
	if t.IsZero() {
		return time.Time{}, fmt.Errorf("server time: the reply of %s to a PUT had no Date header", s.endpoint)
	}
	return t, nil
}

// Scan returns every name bound under prefix ("" for all; "a/b" means
// "a/b" itself and everything below "a/b/"), with digest, meta and time,
// sorted by name: one listing, then the records read at most
// Options.Parallelism at once. Records that cannot be parsed are
// returned in corrupt, and the scan goes on.
func (s *Store) Scan(ctx context.Context, prefix string) (bound []fsstore.Bound, corrupt []*fsstore.CorruptError, err error) {
	names, err := s.List(ctx, prefix)
	if err != nil {
		return nil, nil, err
	}
	res := s.ResolveMany(ctx, names)
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	bound = make([]fsstore.Bound, 0, len(res))
	for _, r := range res {
		var ce *fsstore.CorruptError
		switch {
		case r.Err == nil:
			bound = append(bound, r.Bound)
		case errors.As(r.Err, &ce):
			corrupt = append(corrupt, ce)
		case errors.Is(r.Err, fsstore.ErrNotFound):
			// Unbound between the listing and the read.
		default:
			return nil, nil, fmt.Errorf("scan: %w", r.Err)
		}
	}
	return bound, corrupt, nil
}

// List returns the bound names under prefix, sorted, without reading any
// record: ListObjectsV2, page after page. Keys that are not valid names
// are skipped.
func (s *Store) List(ctx context.Context, prefix string) ([]string, error) {
	if err := fsstore.ValidatePrefix(prefix); err != nil {
		return nil, fmt.Errorf("scan: %w", err)
	}
	prefix = strings.TrimSuffix(prefix, "/")
	base := s.nameKey("")
	lp := base
	if prefix != "" {
		lp += prefix + "/"
	}
	var names []string
	err := s.list(ctx, lp, "", func(key string, _ bool) {
		name := strings.TrimPrefix(key, base)
		if fsstore.ValidateName(name) == nil {
			names = append(names, name)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("scan %s: %w", prefix, err)
	}
	if len(names) == 0 && prefix != "" {
		// Not a folder of names: maybe a name itself.
		switch _, err := s.head(ctx, base+prefix); {
		case err == nil:
			return []string{prefix}, nil
		case !errors.Is(err, fsstore.ErrNotFound):
			return nil, fmt.Errorf("scan %s: %w", prefix, err)
		}
	}
	// S3 lists keys in byte order, and a name is its key less a common
	// prefix; sorted anyway, for servers that list in another order.
	slices.Sort(names)
	return names, nil
}

// Children returns the segments directly below prefix (bound leaves and
// the first segments of deeper names alike), sorted: one listing with
// the delimiter '/'.
func (s *Store) Children(ctx context.Context, prefix string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := fsstore.ValidatePrefix(prefix); err != nil {
		return nil, fmt.Errorf("children: %w", err)
	}
	lp := s.nameKey("")
	if p := strings.TrimSuffix(prefix, "/"); p != "" {
		lp += p + "/"
	}
	var segs []string
	err := s.list(ctx, lp, "/", func(key string, dir bool) {
		seg := strings.TrimSuffix(strings.TrimPrefix(key, lp), "/")
		if fsstore.ValidateName(seg) == nil && !strings.Contains(seg, "/") {
			segs = append(segs, seg)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("children %s: %w", prefix, err)
	}
	slices.Sort(segs)
	return segs, nil
}

// list calls fn for each key under prefix (and, with a delimiter, each
// common prefix, dir true), page after page.
func (s *Store) list(ctx context.Context, prefix, delim string, fn func(key string, dir bool)) error {
	in := &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: &prefix}
	if delim != "" {
		in.Delimiter = &delim
	}
	p := s3.NewListObjectsV2Paginator(s.client, in)
	for p.HasMorePages() {
		if err := ctx.Err(); err != nil {
			return err
		}
		page, err := p.NextPage(ctx)
		if err != nil {
			return s.explain("list", prefix, err)
		}
		for _, cp := range page.CommonPrefixes {
			if cp.Prefix != nil {
				fn(*cp.Prefix, true)
			}
		}
		for _, o := range page.Contents {
			if o.Key != nil {
				fn(*o.Key, false)
			}
		}
	}
	return nil
}
