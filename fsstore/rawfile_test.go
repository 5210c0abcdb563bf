package fsstore

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A Store's fsync (fsyncer) must behave as fsync(2) does, raw or not, and
// the first slow one must end raw fsyncs for the Store.
func TestFsyncer(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	}
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte("x"), 0o666); err != nil {
		t.Fatal(err)
	}
	fd, err := openRaw(p, unix.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)

	t.Run("a file syncs", func(t *testing.T) {
		var f fsyncer
		if err := f.fsync(fd); err != nil {
			t.Fatal(err)
		}
		if f.off.Load() {
			t.Fatal("a quick fsync turned raw fsyncs off")
		}
		var none *fsyncer // the ordinary call
		if err := none.fsync(fd); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("errors come back", func(t *testing.T) {
		var f fsyncer
		if err := f.fsync(-1); !errors.Is(err, unix.EBADF) {
			t.Fatalf("raw fsync of fd -1: %v, want EBADF", err)
		}
		f.off.Store(true)
		if err := f.fsync(-1); !errors.Is(err, unix.EBADF) {
			t.Fatalf("ordinary fsync of fd -1: %v, want EBADF", err)
		}
	})
	t.Run("a slow fsync ends raw fsyncs", func(t *testing.T) {
		f := fsyncer{slow: time.Nanosecond} // every fsync is slow
		if err := f.fsync(fd); err != nil {
			t.Fatal(err)
		}
		if !f.off.Load() {
			t.Fatal("raw fsyncs still on after a slow one")
		}
		f.slow = time.Hour
		if err := f.fsync(fd); err != nil {
			t.Fatal(err)
		}
		if !f.off.Load() {
			t.Fatal("raw fsyncs came back on")
		}
	})
}
