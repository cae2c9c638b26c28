package fusefs

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// fakeClock is a clock that moves only when told.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time      { return c.t }
func (c *fakeClock) add(d time.Duration) { c.t = c.t.Add(d) }
func newFakeClock() *fakeClock           { return &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }
func feed(a *autoReadahead, n int, d time.Duration) {
	for range n {
		a.fetched(d, nil)
	}
}

// TestAutoReadaheadWindow: the window follows the measured latency: off for
// a local store, on and growing with the latency for a far one, bounded.
func TestAutoReadaheadWindow(t *testing.T) {
	tests := []struct {
		latency time.Duration
		cost    time.Duration // local cost of a miss; 0: not measured
		want    int
	}{
		{500 * time.Microsecond, 0, 0},                   // local MinIO
		{2 * time.Millisecond, 0, 0},                     // local, busy
		{7 * time.Millisecond, 0, 0},                     // below AutoMinLatency
		{8 * time.Millisecond, 0, 3},                     // AutoMinLatency: 8/2.5 rounds to 3
		{20 * time.Millisecond, 0, 8},                    // the far benchmark
		{20 * time.Millisecond, time.Millisecond, 8},     // local cost well below the latency
		{20 * time.Millisecond, 6 * time.Millisecond, 0}, // CPU-bound: 20 ms < 4 × 6 ms
		{50 * time.Millisecond, 0, AutoMaxFiles},         // bounded
		{time.Second, 0, AutoMaxFiles},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.latency, "/", tt.cost), func(t *testing.T) {
			a := newAutoReadahead(newFakeClock().now)
			if tt.cost > 0 {
				for range 20 {
					a.localCost(tt.cost)
				}
			}
			feed(a, 50, tt.latency)
			if got := a.window(); got != tt.want {
				t.Fatalf("window = %d, want %d (state %+v)", got, tt.want, a.state())
			}
		})
	}
}

// TestAutoReadaheadContention: a local store whose fetches are slowed by
// CPU contention (most of them, but not all) stays off; a far store whose
// fetches vary stays on.
func TestAutoReadaheadContention(t *testing.T) {
	local := newAutoReadahead(newFakeClock().now)
	far := newAutoReadahead(newFakeClock().now)
	for i := range 200 {
		d := 2 * time.Millisecond
		if i%10 != 0 {
			d = 30 * time.Millisecond // nine in ten fetches wait for a core
		}
		local.fetched(d, nil)
		far.fetched(20*time.Millisecond+time.Duration(i%7)*10*time.Millisecond, nil)
	}
	if got := local.window(); got != 0 {
		t.Errorf("local store under contention: window %d, want 0 (state %+v)", got, local.state())
	}
	if got := far.window(); got != 8 {
		t.Errorf("far store, 20-80 ms: window %d, want 8 (20 ms) (state %+v)", got, far.state())
	}
}

// TestAutoReadaheadWarmup: nothing is read ahead before autoMinSamples
// fetches were measured.
func TestAutoReadaheadWarmup(t *testing.T) {
	a := newAutoReadahead(newFakeClock().now)
	feed(a, autoMinSamples-1, 20*time.Millisecond)
	if got := a.window(); got != 0 {
		t.Fatalf("window after %d fetches = %d, want 0", autoMinSamples-1, got)
	}
	feed(a, 1, 20*time.Millisecond)
	if got := a.window(); got != 8 {
		t.Fatalf("window after %d fetches = %d, want 8", autoMinSamples, got)
	}
}

// TestAutoReadaheadHysteresis: once on, readahead stays on until the
// latency falls below half the threshold, then turns off; a backend that
// became slow turns it on again.
func TestAutoReadaheadHysteresis(t *testing.T) {
	a := newAutoReadahead(newFakeClock().now)
	feed(a, 50, 20*time.Millisecond)
	feed(a, 200, 5*time.Millisecond) // below 8 ms, above 4 ms
	if got := a.window(); got != AutoMinFiles {
		t.Fatalf("window at 5 ms after 20 ms = %d, want %d (still on, at the least window)", got, AutoMinFiles)
	}
	feed(a, 200, time.Millisecond)
	if got := a.window(); got != 0 {
		t.Fatalf("window at 1 ms = %d, want 0", got)
	}
	feed(a, 200, 5*time.Millisecond)
	if got := a.window(); got != 0 {
		t.Fatalf("window at 5 ms after 1 ms = %d, want 0 (still off)", got)
	}
	feed(a, 200, 30*time.Millisecond)
	if got := a.window(); got != 12 {
		t.Fatalf("window at 30 ms = %d, want 12", got)
	}
}

// TestAutoReadaheadErrors: a failed fetch turns readahead off for
// autoErrorHold (by the clock), and its duration is not latency; a
// cancelled fetch changes nothing.
func TestAutoReadaheadErrors(t *testing.T) {
	clk := newFakeClock()
	a := newAutoReadahead(clk.now)
	feed(a, 50, 20*time.Millisecond)
	a.fetched(2*time.Minute, context.Canceled)
	if got := a.window(); got != 8 {
		t.Fatalf("window after a cancelled fetch = %d, want 8", got)
	}
	a.fetched(2*time.Minute, errors.New("backend: 503"))
	if got := a.window(); got != 0 {
		t.Fatalf("window right after a failed fetch = %d, want 0", got)
	}
	if st := a.state(); st.Latency > 21*time.Millisecond {
		t.Fatalf("latency %v after a 2-minute failure: counted as latency", st.Latency)
	}
	clk.add(autoErrorHold - time.Second)
	feed(a, 5, 20*time.Millisecond)
	if got := a.window(); got != 0 {
		t.Fatalf("window %v after the failure = %d, want 0", autoErrorHold-time.Second, got)
	}
	clk.add(time.Second)
	feed(a, 1, 20*time.Millisecond)
	if got := a.window(); got != 8 {
		t.Fatalf("window %v after the failure, fetches fast again = %d, want 8", autoErrorHold, got)
	}
	// A failure at a local store's latency keeps it off after the hold.
	b := newAutoReadahead(clk.now)
	feed(b, 50, time.Millisecond)
	b.fetched(time.Minute, errors.New("timeout"))
	clk.add(autoErrorHold)
	if got := b.window(); got != 0 {
		t.Fatalf("local store after a failure: window %d, want 0", got)
	}
}
