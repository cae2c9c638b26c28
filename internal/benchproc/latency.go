package benchproc

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// LatencyProxy is a TCP proxy on 127.0.0.1 that makes a server on the same
// machine answer like a far one: every chunk a client sends reaches the
// server Delay after it arrived, so every HTTP request (one chunk: Go's
// HTTP client writes a request's headers in one write) gets Delay added to
// its time to first byte, as an object store in another building would
// add. Responses are copied back at once (splice between the sockets: the
// proxy costs little CPU). HTTP/1.1 without pipelining has one request in
// flight per connection, so delaying one connection's chunks in order
// delays each request once.
type LatencyProxy struct {
	Addr  string // host:port to connect to instead of the server's
	Delay time.Duration

	ln     net.Listener
	target string
	wg     sync.WaitGroup
	mu     sync.Mutex // guards conns and closed
	conns  map[net.Conn]struct{}
	closed bool
}

// StartLatencyProxy proxies a free port of 127.0.0.1 to target (host:port).
func StartLatencyProxy(target string, delay time.Duration) (*LatencyProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &LatencyProxy{Addr: ln.Addr().String(), Delay: delay, ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func (p *LatencyProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.serve(c)
		}()
	}
}

// track registers c for Close (add) or forgets it; a connection added
// after Close is closed at once.
func (p *LatencyProxy) track(c net.Conn, add bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case add && p.closed:
		_ = c.Close()
	case add:
		p.conns[c] = struct{}{}
	default:
		delete(p.conns, c)
	}
}

func (p *LatencyProxy) serve(client net.Conn) {
	defer client.Close()
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer server.Close()
	p.track(client, true)
	p.track(server, true)
	defer p.track(client, false)
	defer p.track(server, false)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(client, server) // the responses, at once
		_ = client.Close()
	}()
	buf := make([]byte, 64<<10)
	for {
		var n int
		n, err = client.Read(buf)
		if n > 0 {
			time.Sleep(p.Delay)
			if _, err = server.Write(buf[:n]); err != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	// The client is done sending (EOF) or gone: let the server finish its
	// answer in the first case, stop it in the other.
	if tc, ok := server.(*net.TCPConn); !ok || !errors.Is(err, io.EOF) || tc.CloseWrite() != nil {
		_ = server.Close()
	}
	<-done
}

// Close stops accepting, closes every connection and waits for the
// proxy's goroutines.
func (p *LatencyProxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}
