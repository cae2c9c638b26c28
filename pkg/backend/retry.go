package backend

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"
)

import ()

// Retrier runs the operations of a network backend with bounded retries:
// exponential backoff with full jitter, ctx honoured during the sleeps. It
// is safe for concurrent use; policy and log are immutable after
// construction.
type Retrier struct {
	policy  RetryPolicy
	log     *slog.Logger
	retries atomic.Int64
}

// NewRetrier returns a Retrier that retries under policy (defaults filled
// in, as Options.WithDefaults leaves it) and logs each retry to log.
func NewRetrier(policy RetryPolicy, log *slog.Logger) *Retrier {
	return &Retrier{policy: policy, log: log}
}

// Retries returns the number of retries made so far (attempts after the
// first), for a backend's RetryCounter.
func (r *Retrier) Retries() int64 { return r.retries.Load() }

// Do calls fn until it succeeds, fails with an error that retryable rejects,
// or the attempts are exhausted. It returns fn's last error unwrapped (so
// the caller can classify it) and the number of attempts made. When ctx
// ends, it returns ctx's error at once.
func (r *Retrier) Do(ctx context.Context, op string, retryable func(error) bool, fn func(ctx context.Context) error) (int, error) {
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
func (r *Retrier) backoff(attempt int) time.Duration {
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
