// Package s3store is soma's store in an S3 bucket: the same layout, the
// same record bytes and the same contract as package fsstore's folder,
// under a prefix of a bucket (seed 004, issue 17). A study copied between
// a folder and a bucket with a plain `aws s3 sync` reads the same.
//
// Layout under s3://<bucket>/<prefix>/:
//
//	soma.json                     format marker, fsstore.Marker's bytes
//	blobs/sha256/<2 hex>/<62 hex> immutable blobs, addressed by their SHA-256
//	names/<name>                  one record per name: fsstore.EncodeRecord's bytes
//	tmp/<host>.<pid>.<what>-<hex> probes written by Open and Now
//	tmp/gc-<64 hex>               a GC's lock on a blob it may delete (Store.GC)
//
// Claim is a PutObject with If-None-Match: *, which the server refuses
// with 412 when the key exists: exactly one of any number of concurrent
// claimers wins (S3's conditional writes, 2024-08). A 409
// (ConditionalRequestConflict: a concurrent write to the same key) is
// retried, as S3 asks. A claim whose reply was lost (a reset connection,
// a timeout) is settled by reading the key back: ours if the stored bytes
// and the claim's one-time token (object metadata soma-claim) are what
// this call sent; the bucket's answer to NFS's link count (fsstore.Claim).
// A claim is never retried blindly: a retried conditional PUT that meets
// its own first attempt answers 412, and would lose a claim it won.
//
// Open proves that the endpoint enforces the condition before it hands
// the store over: it makes a fresh key with a conditional PUT and puts it
// again with the same condition, which must be refused. An endpoint that
// accepts If-None-Match: * and writes anyway would give every trial to
// every machine and say nothing (seed 004; seaweedfs had this bug, its
// issue 8800), so it is refused with ErrUnconditional and a message that
// names it. Nothing falls back to unconditional writes.
//
// Times are the server's: a record's Time is its Last-Modified, a Bind's
// is the Date of the PUT's reply, and Now is the Date of the reply to a
// probe write. This machine's clock is never read. Both have a resolution
// of one second.
//
// Blobs are collected by GC as in a folder, by age and reference; S3
// can neither rename nor touch an object, so a Put of an old blob
// rewrites it to make it young, and GC deletes a blob under a per-blob
// lock that such a Put checks (Store.GC argues why no blob a writer is
// about to bind is removed).
//
// Differences from the folder, each because S3 has no folders: a name
// that is a prefix of another ("a/b" and "a/b/c") is not refused (soma's
// layers never make such pairs); Unbind is a HEAD then a DELETE, so two
// concurrent Unbinds of one name may both succeed; Touch rewrites the
// record on the server (a CopyObject onto itself), which keeps its bytes.
//
// Configuration is the AWS CLI's: the AWS_* environment variables
// (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,
// AWS_PROFILE, AWS_REGION, AWS_ENDPOINT_URL, AWS_ENDPOINT_URL_S3...) and
// the shared files ~/.aws/config and ~/.aws/credentials, read by
// aws-sdk-go-v2's config package. With a custom endpoint (an S3-compatible
// server) requests use path-style addressing; without one, AWS's
// virtual-hosted style. The region defaults to us-east-1.
//
// A Store is safe for concurrent use by many goroutines and, through the
// bucket, by many processes on many machines.
package s3store
