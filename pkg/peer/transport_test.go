package peer

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestTransport: the client's keep-alive transport reuses one connection
// for sequential reads (refusals included: their body is drained), dials
// again when the server closed the kept-alive one, and a cancelled or
// timed-out request returns at once and does not put its connection back.
func TestTransport(t *testing.T) {
	fr := &fakeReader{}
	var block atomic.Bool
	release := make(chan struct{})
	h := NewServer(ServerOptions{Dataset: "ds", Group: group, Token: token, Reader: fr})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if block.Load() {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		h.ServeHTTP(w, r)
	}))
	var conns atomic.Int64
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	addr := strings.TrimPrefix(srv.URL, "http://")
	c, err := NewCluster(ClientOptions{Self: "self", Dataset: "ds", Group: group, Token: token, Timeout: 300 * time.Millisecond,
		Members: Static{{ID: "owner", Addr: addr}}})
	if err != nil {
		t.Fatal(err)
	}
	read := func(version string) error {
		return c.Read(context.Background(), "a/b", version, 5000, 0, make([]byte, 5000))
	}
	for i := range 50 {
		v := "v1"
		if i%10 == 9 {
			v = "v2" // refused with 409: not held against the peer
		}
		if err := read(v); (err == nil) != (v == "v1") {
			t.Fatalf("read %d (%s): %v", i, v, err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("50 sequential reads used %d connections, want 1", n)
	}
	srv.CloseClientConnections()
	time.Sleep(50 * time.Millisecond)
	if err := read("v1"); err != nil {
		t.Fatalf("read after the server closed the kept-alive connection: %v", err)
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections after the server closed one, want 2", n)
	}
	// A slow owner: the timeout returns the read at once.
	block.Store(true)
	start := time.Now()
	if err := read("v1"); err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("read of a slow owner: %v, want a deadline error", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the timed-out read took %v", d)
	}
	// A cancelled reader: returns too.
	c.markUp("owner")
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	if err := c.Read(ctx, "a/b", "v1", 5000, 0, make([]byte, 5000)); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled read: %v, want context.Canceled", err)
	}
	// An endless header is cut off.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		_, _ = nc.Write([]byte("HTTP/1.1 200 OK\r\n"))
		line := []byte("X-Junk: " + strings.Repeat("j", 1000) + "\r\n")
		for {
			if _, err := nc.Write(line); err != nil {
				return
			}
		}
	}()
	h2, err := NewCluster(ClientOptions{Self: "self", Dataset: "ds", Group: group, Token: token, Timeout: 10 * time.Second,
		Members: Static{{ID: "owner", Addr: ln.Addr().String()}}})
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if err := h2.Read(context.Background(), "a/b", "v1", 5000, 0, make([]byte, 5000)); err == nil || !strings.Contains(err.Error(), "too long") {
		t.Errorf("read of an endless header: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the endless header took %v to refuse", d)
	}

	block.Store(false)
	c.markUp("owner")
	before := conns.Load()
	if err := read("v1"); err != nil {
		t.Fatal(err)
	}
	if n := conns.Load(); n != before+1 {
		t.Errorf("after a timed-out and a cancelled read: %d new connections, want 1 (theirs are not reused)", n-before)
	}
}
