package backend_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/epochfs/epochfs/pkg/backend"
)

// backoffLog is a slog.Handler that records the backoff of each retry
// and runs onRetry (if set) before the Retrier sleeps.
type backoffLog struct {
	mu      sync.Mutex
	delays  []time.Duration
	onRetry func()
}

func (h *backoffLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *backoffLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *backoffLog) WithGroup(string) slog.Handler            { return h }
func (h *backoffLog) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "backoff" {
			h.mu.Lock()
			h.delays = append(h.delays, a.Value.Duration())
			h.mu.Unlock()
		}
		return true
	})
	if h.onRetry != nil {
		h.onRetry()
	}
	return nil
}

var (
	errTransient = errors.New("transient")
	errFatal     = errors.New("fatal")
)

func isTransient(err error) bool { return errors.Is(err, errTransient) }

func TestRetrierDo(t *testing.T) {
	fast := backend.RetryPolicy{MaxAttempts: 4, BaseDelay: time.Microsecond, MaxDelay: 4 * time.Microsecond}
	tests := []struct {
		name         string
		errs         []error // fn's results in order; nil after the end
		wantAttempts int
		wantErr      error
		wantRetries  int64
	}{
		{"first try", nil, 1, nil, 0},
		{"success after two transient", []error{errTransient, errTransient}, 3, nil, 2},
		{"fatal stops at once", []error{errFatal, errTransient}, 1, errFatal, 0},
		{"fatal after transient", []error{errTransient, errFatal}, 2, errFatal, 1},
		{"exhausted", []error{errTransient, errTransient, errTransient, errTransient, errTransient}, 4, errTransient, 3},
		{"wrapped transient exhausted", []error{fmt.Errorf("op: %w", errTransient), fmt.Errorf("op: %w", errTransient),
			fmt.Errorf("op: %w", errTransient), fmt.Errorf("op: %w", errTransient)}, 4, errTransient, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := backend.NewRetrier(fast, slog.New(&backoffLog{}))
			calls := 0
			attempts, err := r.Do(context.Background(), "op", isTransient, func(context.Context) error {
				calls++
				if calls <= len(tc.errs) {
					return tc.errs[calls-1]
				}
				return nil
			})
			if attempts != tc.wantAttempts || calls != tc.wantAttempts {
				t.Errorf("attempts = %d (fn called %d times), want %d", attempts, calls, tc.wantAttempts)
			}
			if tc.wantErr == nil && err != nil || !errors.Is(err, tc.wantErr) {
				t.Errorf("err = %v, want %v", err, tc.wantErr)
			}
			if err != nil && err != tc.errs[calls-1] {
				t.Errorf("err = %#v, want fn's last error itself, unwrapped", err)
			}
			if got := r.Retries(); got != tc.wantRetries {
				t.Errorf("Retries = %d, want %d", got, tc.wantRetries)
			}
		})
	}
}

func TestRetrierMaxAttemptsOne(t *testing.T) {
	r := backend.NewRetrier(backend.RetryPolicy{MaxAttempts: 1, BaseDelay: time.Hour, MaxDelay: time.Hour}, slog.New(&backoffLog{}))
	attempts, err := r.Do(context.Background(), "op", isTransient, func(context.Context) error { return errTransient })
	if attempts != 1 || err != errTransient || r.Retries() != 0 {
		t.Errorf("Do = %d, %v with %d retries; want 1, transient, 0", attempts, err, r.Retries())
	}
}

// TestRetrierBackoff checks full jitter: over many runs, the sleep before
// retry n spans [0, min(MaxDelay, BaseDelay·2^(n-1))], reaching both its
// lowest and its highest quarter (each missed with probability (3/4)^runs).
func TestRetrierBackoff(t *testing.T) {
	const base, maxDelay = 1000 * time.Nanosecond, 8000 * time.Nanosecond
	const attempts, runs = 7, 200
	byRetry := make([][]time.Duration, attempts-1)
	for range runs {
		h := &backoffLog{}
		r := backend.NewRetrier(backend.RetryPolicy{MaxAttempts: attempts, BaseDelay: base, MaxDelay: maxDelay}, slog.New(h))
		if _, err := r.Do(context.Background(), "op", isTransient, func(context.Context) error { return errTransient }); err != errTransient {
			t.Fatalf("Do = %v, want transient", err)
		}
		if len(h.delays) != attempts-1 || r.Retries() != attempts-1 {
			t.Fatalf("%d backoffs logged, %d retries counted; want %d", len(h.delays), r.Retries(), attempts-1)
		}
		for i, d := range h.delays {
			byRetry[i] = append(byRetry[i], d)
		}
	}
	for i, ds := range byRetry {
		ceiling := min(maxDelay, base<<i)
		lo, hi := slices.Min(ds), slices.Max(ds)
		if lo < 0 || hi > ceiling {
			t.Errorf("backoffs before retry %d span [%v, %v], want within [0, %v]", i+1, lo, hi, ceiling)
		}
		if lo > ceiling/4 || hi < ceiling*3/4 {
			t.Errorf("backoffs before retry %d span [%v, %v], want full jitter over [0, %v]", i+1, lo, hi, ceiling)
		}
	}
}

func TestRetrierContext(t *testing.T) {
	slow := backend.RetryPolicy{MaxAttempts: 100, BaseDelay: time.Hour, MaxDelay: time.Hour}

	t.Run("cancelled during backoff", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		// The retry is logged just before the hour-long sleep: cancel there.
		r := backend.NewRetrier(slow, slog.New(&backoffLog{onRetry: cancel}))
		attempts, err := r.Do(ctx, "op", isTransient, func(context.Context) error { return errTransient })
		if !errors.Is(err, context.Canceled) || attempts != 1 {
			t.Errorf("Do = %d, %v; want 1, context.Canceled", attempts, err)
		}
	})

	t.Run("cancelled during attempt", func(t *testing.T) {
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		r := backend.NewRetrier(slow, slog.New(&backoffLog{}))
		attempts, err := r.Do(ctx, "op", func(error) bool { return true }, func(context.Context) error {
			cancel(errFatal)
			return errTransient
		})
		// ctx's error, not its cause nor fn's error, and no retry counted.
		if err != context.Canceled || attempts != 1 || r.Retries() != 0 {
			t.Errorf("Do = %d, %v with %d retries; want 1, context.Canceled, 0", attempts, err, r.Retries())
		}
	})

	t.Run("deadline already passed", func(t *testing.T) {
		ctx, cancel := context.WithDeadline(context.Background(), time.Unix(0, 0))
		defer cancel()
		r := backend.NewRetrier(slow, slog.New(&backoffLog{}))
		_, err := r.Do(ctx, "op", isTransient, func(ctx context.Context) error { return ctx.Err() })
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Do = %v, want context.DeadlineExceeded", err)
		}
	})
}
