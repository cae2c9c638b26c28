package backend

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Retrier runs the operations of a network backend with bounded retries:
// exponential backoff with full jitter, ctx honoured during the sleeps. It
// is safe for concurrent use; policy and log are immutable after
// construction. The loop and the jittered exponential schedule are
// github.com/cenkalti/backoff/v5 (no dependencies of its own, unlike
// k8s.io/apimachinery's wait, which would link klog into cachefs, and whose
// Jitter only adds to the delay: it cannot draw from [0, ceiling)).
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
	attempt := 0
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		attempt++
		err := fn(ctx)
		switch {
		case err == nil:
			return struct{}{}, nil
		case !retryable(err):
			return struct{}{}, backoff.Permanent(err)
		}
		return struct{}{}, err
	},
		backoff.WithBackOff(r.schedule()),
		backoff.WithMaxTries(uint(max(r.policy.MaxAttempts, 1))),
		backoff.WithMaxElapsedTime(0), // bounded by MaxAttempts and ctx only
		backoff.WithNotify(func(err error, delay time.Duration) {
			r.retries.Add(1)
			r.log.LogAttrs(ctx, slog.LevelWarn, "retrying after transient error",
				slog.String("op", op), slog.Int("attempt", attempt),
				slog.Duration("backoff", delay), slog.String("error", err.Error()))
		}))
	if err == nil {
		return attempt, nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return attempt, ctxErr // ctx.Err, not a cause set with WithCancelCause
	}
	// Retry unwraps a PermanentError except on the last attempt.
	if perm := (*backoff.PermanentError)(nil); errors.As(err, &perm) {
		err = perm.Unwrap()
	}
	return attempt, err
}

// schedule returns a fresh backoff (ExponentialBackOff is not safe for
// concurrent use) whose sleep before retry n is drawn uniformly from
// [0, min(MaxDelay, BaseDelay·2^(n-1))]: a randomization factor of 1 around
// half the ceiling is full jitter.
func (r *Retrier) schedule() backoff.BackOff {
	b := &backoff.ExponentialBackOff{
		InitialInterval:     r.policy.BaseDelay / 2,
		RandomizationFactor: 1,
		Multiplier:          2,
		MaxInterval:         r.policy.MaxDelay / 2,
	}
	if b.InitialInterval <= 0 || b.MaxInterval <= 0 {
		return &backoff.ZeroBackOff{}
	}
	return b
}
