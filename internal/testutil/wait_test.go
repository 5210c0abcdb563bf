package testutil

import (
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// WaitFor returns as soon as the condition holds, after polling as many
// times as it takes.
func TestWaitForPollsUntilTrue(t *testing.T) {
	var calls atomic.Int32
	WaitFor(t, time.Minute, time.Millisecond, "the third call", func() (bool, error) {
		return calls.Add(1) == 3, nil
	})
	if got := calls.Load(); got != 3 {
		t.Errorf("cond called %d times, want 3", got)
	}
}

// A condition that never holds, or fails, fails the test (checked in a
// fake testing.TB, whose Fatalf ends the goroutine as t.Fatalf does).
func TestWaitForFails(t *testing.T) {
	for _, tc := range []struct {
		name string
		cond func() (bool, error)
	}{
		{"never true", func() (bool, error) { return false, nil }},
		{"error", func() (bool, error) { return false, errors.New("boom") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ft := &fatalTB{TB: t}
			done := make(chan struct{})
			go func() {
				defer close(done)
				WaitFor(ft, 20*time.Millisecond, time.Millisecond, "x", tc.cond)
			}()
			<-done
			if !ft.failed {
				t.Error("WaitFor returned without failing the test")
			}
		})
	}
}

type fatalTB struct {
	testing.TB
	failed bool
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(string, ...any) {
	f.failed = true
	runtime.Goexit()
}
