package s3store_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/internal/testutil"
	"github.com/soma-hpc/soma/s3store"
)

func TestMain(m *testing.M) {
	testutil.RunChild(map[string]func() int{"claimer": claimer})
	os.Exit(m.Run())
}

// suiteStore is what the suite exercises: everything the two stores have
// in common.
type suiteStore interface {
	Root() string
	Put(ctx context.Context, b []byte) (fsstore.Digest, error)
	Get(ctx context.Context, d fsstore.Digest) ([]byte, error)
	Has(ctx context.Context, d fsstore.Digest) (bool, error)
	GetMany(ctx context.Context, ds []fsstore.Digest) []fsstore.Blob
	Claim(ctx context.Context, name string, d fsstore.Digest, meta fsstore.Meta) (bool, error)
	Bind(ctx context.Context, name string, d fsstore.Digest, meta fsstore.Meta) (fsstore.Bound, error)
	Seal(ctx context.Context, name string, d fsstore.Digest, meta fsstore.Meta) (fsstore.Bound, error)
	Resolve(ctx context.Context, name string) (fsstore.Bound, error)
	ResolveMany(ctx context.Context, names []string) []fsstore.Lookup
	Probe(ctx context.Context, name string) (fsstore.Presence, error)
	Exists(ctx context.Context, name string) (bool, error)
	Unbind(ctx context.Context, name string) error
	Touch(ctx context.Context, name string) (time.Time, error)
	Now(ctx context.Context) (time.Time, error)
	Scan(ctx context.Context, prefix string) ([]fsstore.Bound, []*fsstore.CorruptError, error)
	List(ctx context.Context, prefix string) ([]string, error)
	Children(ctx context.Context, prefix string) ([]string, error)
	GC(ctx context.Context, opts fsstore.GCOptions) (fsstore.GCReport, error)
	OpenBlob(ctx context.Context, d fsstore.Digest) (io.ReadCloser, error)
	RemoveTree(ctx context.Context, prefix string) error
}

var (
	_ suiteStore = (*fsstore.Store)(nil)
	_ suiteStore = (*s3store.Store)(nil)
)

// openRoot opens a folder or an s3:// root.
func openRoot(ctx context.Context, root string, create bool) (suiteStore, error) {
	if s3store.IsRoot(root) {
		return s3store.Open(ctx, root, s3store.Options{Create: create})
	}
	return fsstore.Open(root, fsstore.Options{Create: create})
}

// claimer is a child process of the claim race: it opens SOMA_TEST_ROOT,
// waits for a line on stdin (so that all start together), claims names
// race/0 .. race/<SOMA_TEST_NAMES-1> and prints each name it won.
func claimer() int {
	ctx := context.Background()
	s, err := openRoot(ctx, os.Getenv("SOMA_TEST_ROOT"), false)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	n, _ := strconv.Atoi(os.Getenv("SOMA_TEST_NAMES"))
	me := strconv.Itoa(os.Getpid())
	d, err := s.Put(ctx, []byte("claimed by "+me))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		fmt.Fprintln(os.Stderr, "no start line:", err)
		return 1
	}
	for i := range n {
		name := "race/" + strconv.Itoa(i)
		won, err := s.Claim(ctx, name, d, fsstore.Meta{{Key: "pid", Value: me}})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if won {
			fmt.Println("won", name)
		}
	}
	return 0
}
