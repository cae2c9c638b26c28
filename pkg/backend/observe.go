package backend

import (
	"context"
	"io"
	"time"
)

// Observer receives one call per ReadAt of an observed Backend, e.g. to
// feed the cachefs_backend_read_seconds histogram and
// cachefs_backend_errors_total. Implementations must be safe for
// concurrent use and must not block.
type Observer interface {
	// ObserveRead reports the wall time of one ReadAt, the bytes it
	// returned and its error. err is nil on success and also for a short
	// read at the end of the file (io.EOF is not an error here). Every
	// other error is reported as is, including ErrNotExist, ErrChanged and
	// context.Canceled: the observer decides what to count (counting them
	// all as backend errors is fine; they are rare on a healthy mount).
	ObserveRead(d time.Duration, bytes int, err error)
}

// WithObserver returns b with every ReadAt timed and reported to o. The
// other methods pass through. The result implements Unwrapper, so the
// Retries and Skipped helpers still find b's counters.
func WithObserver(b Backend, o Observer) Backend {
	if o == nil {
		return b
	}
	return &observed{Backend: b, o: o}
}

// observed is immutable after WithObserver.
type observed struct {
	Backend
	o Observer
}

var _ Unwrapper = (*observed)(nil)

func (b *observed) Unwrap() Backend { return b.Backend }

func (b *observed) ReadAt(ctx context.Context, path, version string, p []byte, off int64) (int, error) {
	start := time.Now()
	n, err := b.Backend.ReadAt(ctx, path, version, p, off)
	oerr := err
	if isEOF(err) {
		oerr = nil
	}
	b.o.ObserveRead(time.Since(start), n, oerr)
	return n, err
}

func isEOF(err error) bool { return err == io.EOF }
