package status

import (
	"strings"
	"testing"
)

// TestWatchBucketPolls: a bucket root is polled, and says so; asking for
// inotify on it is refused. Bug: soma status s3://... --watch said
// "statfs s3://...: no such file or directory".
func TestWatchBucketPolls(t *testing.T) {
	w, err := NewWatcher("s3://lab/studies", WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if w.Notify() || !strings.Contains(w.Method(), "S3 bucket") {
		t.Errorf("watcher of a bucket: notify %v, %q; want polling that names the bucket", w.Notify(), w.Method())
	}
	if _, err := NewWatcher("s3://lab/studies", WatchOptions{Mode: WatchNotify}); err == nil || !strings.Contains(err.Error(), "bucket") {
		t.Errorf("notify mode on a bucket: %v, want a refusal", err)
	}
}
