package objective

import (
	"os"
	"sync/atomic"
	"testing"
	"time"
)

// unread decides whether watch lets reports pile up between reads (issue
// 13, item 8): it must say true only while verdicts written before are
// unread, or were dropped, and false once the objective has read them
// all, or an objective that waits for each verdict would wait batchWait
// per report.
func TestVerdictWriterUnread(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	v := verdictWriter{f: w, dropped: new(atomic.Bool)}
	if v.unread() {
		t.Fatal("unread() = true on an empty pipe, want false")
	}
	v.write([]byte("continue\ncontinue\n"))
	if !v.unread() {
		t.Fatal("unread() = false with two verdicts in the pipe, want true")
	}
	buf := make([]byte, 64)
	if n, err := r.Read(buf); err != nil || n != 18 {
		t.Fatalf("read %d bytes (%v), want the 18 written", n, err)
	}
	if v.unread() {
		t.Fatal("unread() = true after the verdicts were read, want false")
	}
	// A full pipe drops what does not fit, and says so until a write fits.
	line := []byte("continue\n")
	for range 1 << 14 { // 147 KiB of verdicts: more than a pipe holds
		v.write(line)
	}
	if !v.dropped.Load() || !v.unread() {
		t.Fatalf("after filling the pipe: dropped %v, unread %v, want both true", v.dropped.Load(), v.unread())
	}
	// Drain it: read until a read would wait (the deadline ends it).
	if err := r.SetReadDeadline(time.Now().Add(100 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	for big := make([]byte, 1<<17); ; {
		if _, err := r.Read(big); err != nil {
			break
		}
	}
	if err := r.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	v.write(line)
	if n, err := r.Read(buf); err != nil || n != len(line) {
		t.Fatalf("read %d bytes (%v), want the verdict written after the drain", n, err)
	}
	if v.dropped.Load() || v.unread() {
		t.Fatalf("after draining the pipe: dropped %v, unread %v, want both false", v.dropped.Load(), v.unread())
	}
}
