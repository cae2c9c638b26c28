package benchproc

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestLatencyProxy: requests through the proxy arrive intact, each at least
// Delay late, over one kept-alive connection; Close ends everything.
func TestLatencyProxy(t *testing.T) {
	body := strings.Repeat("epochfs ", 100_000) // 800 KB: many chunks back
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.URL.Path+body)
	}))
	defer srv.Close()
	const delay = 40 * time.Millisecond
	p, err := StartLatencyProxy(strings.TrimPrefix(srv.URL, "http://"), delay)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	for _, path := range []string{"/a", "/b", "/c"} {
		start := time.Now()
		resp, err := c.Get("http://" + p.Addr + path)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if el := time.Since(start); el < delay {
			t.Errorf("GET %s took %v through a proxy adding %v", path, el, delay)
		}
		if err != nil || string(got) != path+body {
			t.Errorf("GET %s: %d bytes, %v", path, len(got), err)
		}
	}
	c.CloseIdleConnections()
	// An idle connection left open by a client must not block Close.
	resp, err := http.Get("http://" + p.Addr + "/d")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	done := make(chan error, 1)
	go func() { done <- p.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close hangs with an idle client connection open")
	}
}
