package peer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"sync"
	"time"
)

// transport is the client's HTTP/1.1 keep-alive RoundTripper for peer
// requests: one request at a time per connection, written and read on the
// caller's goroutine, connections pooled per address.
//
// Why not net/http's Transport: on loopback with small files its
// per-connection read and write goroutines cost more than the request (every
// request hands off between three goroutines); BenchmarkRead measured it at
// 0.3× the files/s of a local read against this transport's figures in
// bench/RESULTS.md. HTTP/2 cleartext (net/http's UnencryptedHTTP2) was
// slower still (framing, flow control, one connection's lock). The server
// stays net/http's (it parses what hostile clients send); the response is
// parsed by http.ReadResponse.
type transport struct {
	dialer  net.Dialer
	maxIdle int // idle connections kept per address

	mu   sync.Mutex
	idle map[string][]*conn
}

type conn struct {
	c  net.Conn
	lr *limitReader // under br: bounds a response's header
	br *bufio.Reader
	bw *bufio.Writer
}

// maxHeader bounds the bytes read up to the end of a response's header (a
// hostile peer could otherwise send header lines until the timeout).
const maxHeader = 64 << 10

type limitReader struct {
	r io.Reader
	n int64
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errors.New("peer: the answer's header is too long")
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

func newTransport(maxIdle int) *transport {
	return &transport{dialer: net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}, maxIdle: maxIdle, idle: map[string][]*conn{}}
}

func (t *transport) get(addr string) *conn {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.idle[addr]
	if len(l) == 0 {
		return nil
	}
	c := l[len(l)-1]
	t.idle[addr] = l[:len(l)-1]
	return c
}

func (t *transport) put(addr string, c *conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.idle[addr]) >= t.maxIdle {
		c.c.Close()
		return
	}
	t.idle[addr] = append(t.idle[addr], c)
}

var errReused = errors.New("peer: a kept-alive connection was closed")

// RoundTrip sends req (a GET without a body) and returns the response;
// its Body must be read to the end and closed for the connection to be
// reused. A kept-alive connection the server closed meanwhile is retried
// once on a new one (the request is an idempotent GET).
func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	addr := req.URL.Host
	for attempt := 0; ; attempt++ {
		c := t.get(addr)
		reused := c != nil
		if c == nil {
			nc, err := t.dialer.DialContext(req.Context(), "tcp", addr)
			if err != nil {
				return nil, err
			}
			c = &conn{c: nc, lr: &limitReader{r: nc}, bw: bufio.NewWriterSize(nc, 1<<10)}
			c.br = bufio.NewReaderSize(c.lr, 32<<10)
		}
		resp, err := t.roundTrip(c, req)
		if err == nil {
			return resp, nil
		}
		c.c.Close()
		if !reused || attempt > 0 || req.Context().Err() != nil || !errors.Is(err, errReused) {
			return nil, err
		}
	}
}

func (t *transport) roundTrip(c *conn, req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	if d, ok := ctx.Deadline(); ok {
		_ = c.c.SetDeadline(d)
	} else {
		_ = c.c.SetDeadline(time.Time{})
	}
	// A cancelled context interrupts a blocked read or write.
	stop := context.AfterFunc(ctx, func() { _ = c.c.SetDeadline(time.Unix(1, 0)) })
	fail := func(err error) (*http.Response, error) {
		stop()
		if cerr := ctx.Err(); cerr != nil {
			return nil, fmt.Errorf("%w (%w)", cerr, err)
		}
		if d, ok := ctx.Deadline(); ok && errors.Is(err, os.ErrDeadlineExceeded) && !time.Now().Before(d) {
			// The connection's deadline, which is the context's, came first.
			return nil, fmt.Errorf("%w (%w)", context.DeadlineExceeded, err)
		}
		return nil, err
	}
	if err := req.Write(c.bw); err != nil {
		return fail(err)
	}
	if err := c.bw.Flush(); err != nil {
		return fail(err)
	}
	c.lr.n = maxHeader
	resp, err := http.ReadResponse(c.br, req)
	c.lr.n = math.MaxInt64 // the body: the caller reads what it wants
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			err = fmt.Errorf("%w: %w", errReused, err)
		}
		return fail(err)
	}
	resp.Body = &body{ReadCloser: resp.Body, t: t, c: c, addr: req.URL.Host, stop: stop, keep: !resp.Close && resp.ContentLength >= 0}
	return resp, nil
}

// body returns the connection to the pool when it was read to the end and
// the context did not fire; otherwise closes it.
type body struct {
	io.ReadCloser
	t    *transport
	c    *conn
	addr string
	stop func() bool
	keep bool
	eof  bool
	done bool
}

func (b *body) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

func (b *body) Close() error {
	if b.done {
		return nil
	}
	b.done = true
	if !b.eof {
		// Read what is left of a short answer (http.ReadResponse's body is
		// bounded by Content-Length); a long one is not worth it.
		if _, err := io.Copy(io.Discard, io.LimitReader(b.ReadCloser, 64<<10)); err == nil {
			var one [1]byte
			if n, _ := b.ReadCloser.Read(one[:]); n == 0 {
				b.eof = true
			}
		}
	}
	_ = b.ReadCloser.Close()
	if b.stop() && b.keep && b.eof && b.c.br.Buffered() == 0 {
		_ = b.c.c.SetDeadline(time.Time{})
		b.t.put(b.addr, b.c)
		return nil
	}
	b.c.c.Close()
	return nil
}
