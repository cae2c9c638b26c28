package s3

import (
	"context"
	"io"
	"net/http"
	"time"
)

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
