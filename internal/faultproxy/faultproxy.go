// Package faultproxy is an HTTP reverse proxy for reliability tests: it sits
// between an S3 client and a real S3 server (MinIO) and injects faults into a
// fraction of the requests — 5xx answers, connection resets, stalls,
// truncated bodies and a Content-Length that promises more than is sent.
//
// It is seeded (reproducible fault sequences) and counts what it injected.
// Test code only.
package faultproxy

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Fault kinds.
const (
	None         = "none"
	ServerError  = "5xx"
	Reset        = "reset"
	Stall        = "stall"
	Truncate     = "truncate"
	WrongLength  = "wrong-length"
	numFaultKind = 5
)

// Kinds lists the fault kinds the proxy injects, in a fixed order.
var Kinds = []string{ServerError, Reset, Stall, Truncate, WrongLength}

// Options configure a Proxy.
type Options struct {
	Target string  // upstream base URL, e.g. http://127.0.0.1:9000
	Rate   float64 // fraction of eligible requests that get a fault, 0..1
	Seed   uint64
	// Stall is how long a stalled request hangs before the proxy drops it
	// (the client's per-request timeout should be shorter).
	Stall time.Duration
	// Eligible picks the requests that may get a fault; nil means GETs of
	// objects (requests with a Range header).
	Eligible func(*http.Request) bool
}

// Proxy is a running fault-injecting proxy.
type Proxy struct {
	URL string // http://127.0.0.1:PORT

	opts   Options
	ln     net.Listener
	srv    *http.Server
	rp     *httputil.ReverseProxy
	mu     sync.Mutex // guards rng
	rng    *rand.Rand
	counts [numFaultKind + 1]atomic.Int64 // by index in Kinds; last = requests
	rate   atomic.Uint64                  // math.Float64bits of the current rate
}

// Start listens on a free 127.0.0.1 port and serves.
func Start(o Options) (*Proxy, error) {
	target, err := url.Parse(o.Target)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: target: %w", err)
	}
	if o.Stall == 0 {
		o.Stall = 10 * time.Second
	}
	if o.Eligible == nil {
		o.Eligible = func(r *http.Request) bool { return r.Method == http.MethodGet && r.Header.Get("Range") != "" }
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: %w", err)
	}
	p := &Proxy{
		URL:  "http://" + ln.Addr().String(),
		opts: o,
		ln:   ln,
		rp:   httputil.NewSingleHostReverseProxy(target),
		rng:  rand.New(rand.NewPCG(o.Seed, 0x5eed)),
	}
	p.SetRate(o.Rate)
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// SetRate changes the fault rate (e.g. 0 to stop injecting).
func (p *Proxy) SetRate(r float64) { p.rate.Store(uint64(r * 1e9)) }

// Close stops the proxy.
func (p *Proxy) Close() error { return p.srv.Close() }

// Counts returns how many faults of each kind were injected, and the number
// of requests seen.
func (p *Proxy) Counts() (map[string]int64, int64) {
	m := map[string]int64{}
	for i, k := range Kinds {
		m[k] = p.counts[i].Load()
	}
	return m, p.counts[numFaultKind].Load()
}

func (p *Proxy) pick(r *http.Request) (string, int) {
	if !p.opts.Eligible(r) {
		return None, -1
	}
	rate := float64(p.rate.Load()) / 1e9
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rng.Float64() >= rate {
		return None, -1
	}
	i := p.rng.IntN(len(Kinds))
	return Kinds[i], i
}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.counts[numFaultKind].Add(1)
	kind, i := p.pick(r)
	if i >= 0 {
		p.counts[i].Add(1)
	}
	switch kind {
	case ServerError:
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>injected</Message></Error>`)
	case Reset:
		p.reset(w)
	case Stall:
		select {
		case <-r.Context().Done():
		case <-time.After(p.opts.Stall):
		}
		p.reset(w)
	case Truncate, WrongLength:
		p.short(w, r, kind)
	default:
		p.rp.ServeHTTP(w, r)
	}
}

// reset closes the client connection with an RST.
func (p *Proxy) reset(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler)
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	conn.Close()
}

// short forwards the request but sends only part of the body: with
// Truncate the headers are the upstream's (Content-Length promises the
// whole body); with WrongLength the Content-Length is inflated.
func (p *Proxy) short(w http.ResponseWriter, r *http.Request, kind string) {
	rec := &recorder{header: http.Header{}}
	p.rp.ServeHTTP(rec, r)
	body := rec.body
	if rec.code/100 != 2 || len(body) < 2 {
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.code)
		_, _ = w.Write(body)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler)
	}
	conn, buf, err := hj.Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	length := len(body)
	send := body[:len(body)/2]
	if kind == WrongLength {
		length = len(body) + 1 + len(body)/3
		send = body
	}
	fmt.Fprintf(buf, "HTTP/1.1 %d %s\r\n", rec.code, http.StatusText(rec.code))
	for k, vs := range rec.header {
		if k == "Content-Length" || k == "Transfer-Encoding" || k == "Connection" {
			continue
		}
		for _, v := range vs {
			fmt.Fprintf(buf, "%s: %s\r\n", k, v)
		}
	}
	fmt.Fprintf(buf, "Content-Length: %s\r\nConnection: close\r\n\r\n", strconv.Itoa(length))
	_, _ = buf.Write(send)
	_ = buf.Flush()
}

// recorder captures an upstream response.
type recorder struct {
	header http.Header
	code   int
	body   []byte
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(c int)   { r.code = c }
func (r *recorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	r.body = append(r.body, b...)
	return len(b), nil
}
