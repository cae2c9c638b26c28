package backend

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync/atomic"
	"time"
)

// RetryCounter is an optional ability of a Backend that retries transient
// failures: Retries returns how many retries (attempts after the first) it
// has made since it was opened. Use the Retries helper to find it through
// wrappers.
type RetryCounter interface {
	Retries() int64
}

// SkipCounter is an optional ability of a Backend whose listings can
// contain names that ValidName rejects: Skipped returns how many such
// children its listings have skipped since it was opened (a name seen in
// two listings counts twice). Use the Skipped helper to find it through
// wrappers.
type SkipCounter interface {
	Skipped() int64
}

// Unwrapper is implemented by Backends that wrap another one (WithObserver,
// mirror replicas are not wrappers).
type Unwrapper interface {
	Unwrap() Backend
}

// Retries returns the retry count of b or of the first Backend it wraps
// that implements RetryCounter, or 0.
func Retries(b Backend) int64 {
	if rc, ok := as[RetryCounter](b); ok {
		return rc.Retries()
	}
	return 0
}

// Skipped returns the skipped-name count of b or of the first Backend it
// wraps that implements SkipCounter, or 0.
func Skipped(b Backend) int64 {
	if sc, ok := as[SkipCounter](b); ok {
		return sc.Skipped()
	}
	return 0
}

// as returns b, or the first Backend b wraps (through Unwrapper), that
// implements T: how the optional abilities are found through wrappers.
func as[T any](b Backend) (T, bool) {
	for b != nil {
		if t, ok := b.(T); ok {
			return t, true
		}
		u, ok := b.(Unwrapper)
		if !ok {
			break
		}
		b = u.Unwrap()
	}
	var zero T
	return zero, false
}

// retrier runs an operation with bounded retries: exponential backoff with
// full jitter, ctx honoured during the sleeps. It is safe for concurrent
// use; policy and log are immutable after construction.
type retrier struct {
	policy  RetryPolicy
	log     *slog.Logger
	retries atomic.Int64
}

// do calls fn until it succeeds, fails with an error that retryable rejects,
// or the attempts are exhausted. It returns fn's last error unwrapped (so
// the caller can classify it) and the number of attempts made. When ctx
// ends, it returns ctx's error at once.
func (r *retrier) do(ctx context.Context, op string, retryable func(error) bool, fn func(ctx context.Context) error) (int, error) {
	for attempt := 1; ; attempt++ {
		err := fn(ctx)
		if err == nil {
			return attempt, nil
		}
		if ctxErr := ctx.Err(); ctxErr != nil {
			return attempt, ctxErr
		}
		if attempt >= r.policy.MaxAttempts || !retryable(err) {
			return attempt, err
		}
		delay := r.backoff(attempt)
		r.retries.Add(1)
		r.log.LogAttrs(ctx, slog.LevelWarn, "retrying after transient error",
			slog.String("op", op), slog.Int("attempt", attempt),
			slog.Duration("backoff", delay), slog.String("error", err.Error()))
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return attempt, ctx.Err()
		case <-t.C:
		}
	}
}

// backoff returns the full-jitter sleep before the retry following attempt.
func (r *retrier) backoff(attempt int) time.Duration {
	ceiling := r.policy.MaxDelay
	if shift := attempt - 1; shift < 32 {
		if d := r.policy.BaseDelay << shift; d > 0 && d < ceiling {
			ceiling = d
		}
	}
	if ceiling <= 0 {
		return 0
	}
	return rand.N(ceiling)
}

// timeoutTransport bounds each HTTP request, body read included, to d. The
// deadline lives on a context derived from the request's, so the caller's
// cancellation still aborts the request at once.
type timeoutTransport struct {
	base http.RoundTripper
	d    time.Duration
}

func (t *timeoutTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithTimeout(req.Context(), t.d)
	resp, err := t.base.RoundTrip(req.WithContext(ctx))
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// cancelBody releases the request's timeout context when the body closes.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}
