package testenv

import (
	"fmt"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"
)

// Ending is how a helper ended the test it was given (RunHelper).
type Ending struct {
	Fatal, Skip bool
	Msg         string
}

// endingTB is a testing.TB whose Fatalf and Skipf record the ending and
// stop the helper's goroutine instead of ending the real test.
type endingTB struct {
	testing.TB
	mu  sync.Mutex
	end Ending
}

func (f *endingTB) Helper() {}
func (f *endingTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.end.Fatal, f.end.Msg = true, fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}
func (f *endingTB) Skipf(format string, args ...any) {
	f.mu.Lock()
	f.end.Skip, f.end.Msg = true, fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

// RunHelper runs fn with a testing.TB that records whether fn failed
// (Fatalf) or skipped (Skipf) the test, and with what message, instead of
// ending t: for tests of the helpers themselves (the CI=true rule).
func RunHelper(t testing.TB, fn func(testing.TB)) Ending {
	tb := &endingTB{TB: t}
	done := make(chan struct{})
	go func() { defer close(done); fn(tb) }()
	<-done
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return tb.end
}

// WaitClosed fails the test unless nothing listens on host within 5 s: the
// server a helper started is gone after its cleanup.
func WaitClosed(t testing.TB, host, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", host, 200*time.Millisecond)
		if err != nil {
			return
		}
		c.Close()
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("%s still listening on %s after cleanup", what, host)
}
