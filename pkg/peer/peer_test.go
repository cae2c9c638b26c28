package peer

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/epochfs/epochfs/pkg/backend"
)

func members(n int) []Peer {
	var ps []Peer
	for i := range n {
		ps = append(ps, Peer{ID: fmt.Sprintf("node-%d", i), Addr: fmt.Sprintf("127.0.0.1:%d", 7000+i)})
	}
	return ps
}

// TestOwnerStability: files spread evenly, and a peer joining or leaving
// moves about 1/N of them — only those the leaver owned, only to the
// joiner.
func TestOwnerStability(t *testing.T) {
	const files = 30000
	for _, n := range []int{3, 5, 8} {
		ps := members(n + 1)
		before, after := ps[:n], ps // node-n joins
		count := map[string]int{}
		moved := 0
		for i := range files {
			k := FileKey("s3://host/bucket", fmt.Sprintf("train/class%03d/img%06d.jpg", i%100, i))
			a, _ := Owner(before, k)
			b, _ := Owner(after, k)
			count[a.ID]++
			if a.ID != b.ID {
				moved++
				if b.ID != ps[n].ID {
					t.Fatalf("N=%d: %s moved from %s to %s, not to the joiner", n, k, a.ID, b.ID)
				}
			}
			// Leaving is the reverse: only the leaver's files move.
		}
		want := float64(files) / float64(n+1)
		if got := float64(moved); got < 0.9*want || got > 1.1*want {
			t.Errorf("N=%d→%d: %d files moved, want ≈ %.0f (1/N)", n, n+1, moved, want)
		}
		for id, c := range count {
			if e := float64(files) / float64(n); float64(c) < 0.9*e || float64(c) > 1.1*e {
				t.Errorf("N=%d: %s owns %d files, want ≈ %.0f", n, id, c, e)
			}
		}
		t.Logf("N=%d→%d: %d of %d files moved (%.3f; 1/N = %.3f)", n, n+1, moved, files, float64(moved)/files, 1/float64(n+1))
	}
	// Order of the list does not matter.
	ps := members(4)
	rev := []Peer{ps[3], ps[2], ps[1], ps[0]}
	for i := range 1000 {
		k := FileKey("d", fmt.Sprint(i))
		a, _ := Owner(ps, k)
		b, _ := Owner(rev, k)
		if a != b {
			t.Fatal("the owner depends on the order of the peer list")
		}
	}
	if _, ok := Owner(nil, "x"); ok {
		t.Error("an owner among no peers")
	}
}

func TestParsePeers(t *testing.T) {
	ps, err := ParsePeers("b=127.0.0.1:2, a=host:1")
	if err != nil || len(ps) != 2 || ps[0].ID != "a" || ps[1].Addr != "127.0.0.1:2" {
		t.Fatalf("ParsePeers = %v, %v", ps, err)
	}
	ps, err = ParsePeers("b=127.0.0.1:2;capacity=1000,a=host:1")
	if err != nil || ps[1].Capacity != 1000 || ps[0].Capacity != 0 {
		t.Fatalf("ParsePeers with a capacity = %v, %v", ps, err)
	}
	if back, err := ParsePeers(FormatPeers(ps)); err != nil || !slices.Equal(back, ps) {
		t.Fatalf("ParsePeers(FormatPeers(%v)) = %v, %v", ps, back, err)
	}
	for _, bad := range []string{"", "a", "a=:1", "a=host", "a=h:1,a=h:2", "a b=h:1", "=h:1",
		"a=h:1;capacity=0", "a=h:1;capacity=-5", "a=h:1;capacity=1k", "a=h:1;cap=5", "a=h:1;"} {
		if _, err := ParsePeers(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParsePeers(%q) = %v, want ErrInvalid", bad, err)
		}
	}
	if err := CheckListenAddr(":7070"); err == nil {
		t.Error(":7070 accepted: every interface by omission")
	}
	for _, ok := range []string{"0.0.0.0:7070", "127.0.0.1:0", "[::1]:1"} {
		if err := CheckListenAddr(ok); err != nil {
			t.Errorf("CheckListenAddr(%q) = %v", ok, err)
		}
	}
}

// fakeReader serves a deterministic file of every path.
type fakeReader struct{ calls atomic.Int64 }

func content(path string, size int64) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(len(path)*31 + i*7)
	}
	return b
}

func (r *fakeReader) ReadForPeer(ctx context.Context, path, version string, size, off, n int64) ([]byte, error) {
	r.calls.Add(1)
	switch {
	case path == "missing":
		return nil, backend.ErrNotExist
	case version != "v1":
		return nil, backend.ErrChanged
	}
	return content(path, size)[off : off+n], nil
}

var token = []byte("0123456789abcdef-token")

const group = "g-test"

func newPair(t *testing.T, h http.Handler) (*Cluster, *Metrics, string) {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	// "self" owns nothing: make sure the file's owner is "owner".
	pm := NewPerPeerMetrics()
	c, err := NewCluster(ClientOptions{Self: "self", Dataset: "ds", Group: group, Token: token, Timeout: time.Second, Metrics: pm,
		Members: Static{{ID: "owner", Addr: addr}}})
	if err != nil {
		t.Fatal(err)
	}
	return c, pm, addr
}

func TestServerAndClient(t *testing.T) {
	fr := &fakeReader{}
	sm := NewPerPeerMetrics()
	srv := NewServer(ServerOptions{Dataset: "ds", Group: group, Token: token, Reader: fr, Metrics: sm,
		Members: Static{{ID: "self"}}})
	c, pm, addr := newPair(t, srv)
	if c.Owns("a/b.jpg") {
		t.Fatal("self owns a file of a list without it")
	}
	p := make([]byte, 100)
	if err := c.Read(context.Background(), "a/b.jpg", "v1", 1000, 200, p); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p, content("a/b.jpg", 1000)[200:300]) {
		t.Fatal("wrong bytes")
	}
	if got := testutil.ToFloat64(pm.Hits.For("owner")); got != 1 {
		t.Errorf("peer hits %v, want 1", got)
	}
	if got := testutil.ToFloat64(sm.ServedBytes.For("self")); got != 100 {
		t.Errorf("served bytes %v, want 100", got)
	}
	// Another version: refused (409), a fallback, not marked down.
	if err := c.Read(context.Background(), "a/b.jpg", "v2", 1000, 0, p); !errors.Is(err, ErrRejected) {
		t.Errorf("another version: %v, want a rejection", err)
	}
	if c.isDown("owner") {
		t.Error("a peer that disagrees on a version is marked down")
	}

	// Requests by hand: unauthenticated, wrong key, other dataset, bad
	// paths and ranges (the group checks: group_test.go).
	key := GroupKey(token, group)
	get := func(auth, dataset, path, rng string) int {
		q := url.Values{"dataset": {dataset}, "path": {path}, "version": {"v1"}, "size": {"1000"}}
		off, n, _ := strings.Cut(rng, "+")
		q.Set("off", off)
		q.Set("len", n)
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+ReadPath+"?"+q.Encode(), nil)
		req.Header.Set(HeaderGroup, group)
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	good := hex.EncodeToString(key)
	before := fr.calls.Load()
	for _, tc := range []struct {
		auth, dataset, path, rng string
		want                     int
	}{
		{"", "ds", "a", "0+10", 401},
		{"wrong-token-wrong-token", "ds", "a", "0+10", 401},
		{good + "00", "ds", "a", "0+10", 401},
		{string(token), "ds", "a", "0+10", 401}, // the shared token itself is no group key
		{good, "other", "a", "0+10", 403},
		{good, "ds", "../etc/passwd", "0+10", 400},
		{good, "ds", "/etc/passwd", "0+10", 400},
		{good, "ds", "a/./b", "0+10", 400},
		{good, "ds", "", "0+10", 400},
		{good, "ds", "a", "990+20", 400},
		{good, "ds", "a", "-1+2", 400},
		{good, "ds", "missing", "0+10", 404},
		{good, "ds", "a", "0+10", 200},
	} {
		if got := get(tc.auth, tc.dataset, tc.path, tc.rng); got != tc.want {
			t.Errorf("key %v, dataset %s, path %q, range %s: status %d, want %d", tc.auth != "", tc.dataset, tc.path, tc.rng, got, tc.want)
		}
	}
	if got := fr.calls.Load() - before; got != 2 { // missing and the good one
		t.Errorf("the reader was called %d times, want 2: refused requests must not read", got)
	}
	if got := testutil.ToFloat64(sm.Refused.WithLabelValues("unauthorized")); got != 4 {
		t.Errorf("refused unauthorized %v, want 4", got)
	}
}

// TestClientRejectsBadAnswers: wrong bytes (checksum or manifest sha256),
// another version, a short body, a down or slow peer: each is an error (the
// reader goes to the backend), counted per peer; a failing peer is skipped
// while marked down.
func TestClientRejectsBadAnswers(t *testing.T) {
	var mode atomic.Value
	mode.Store("ok")
	good := NewServer(ServerOptions{Dataset: "ds", Group: group, Token: token, Reader: &fakeReader{}})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		good.ServeHTTP(rec, r)
		body := rec.Body.Bytes()
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		switch mode.Load().(string) {
		case "flip": // wrong bytes, the checksum of the right ones
			body[0] ^= 1
		case "version":
			w.Header().Set(HeaderVersion, "v0")
		case "slow":
			time.Sleep(2 * time.Second)
		case "short":
			w.Header().Set("Content-Length", fmt.Sprint(len(body)))
			body = body[:len(body)-1]
			w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(body)
	})
	c, pm, _ := newPair(t, h)
	p := make([]byte, 50)
	read := func() error { return c.Read(context.Background(), "f", "v1", 50, 0, p) }
	if err := read(); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"flip", "version", "short", "slow"} {
		mode.Store(m)
		c.markUp("owner")
		if err := read(); err == nil {
			t.Errorf("%s: accepted", m)
		}
		if !c.isDown("owner") {
			t.Errorf("%s: the peer is not marked down", m)
		}
		// Marked down: skipped at once, a fallback without a request.
		start := time.Now()
		if err := read(); !errors.Is(err, ErrDown) || time.Since(start) > 100*time.Millisecond {
			t.Errorf("%s: a down peer was asked (%v)", m, err)
		}
	}
	if e, f := testutil.ToFloat64(pm.Errors.For("owner")), testutil.ToFloat64(pm.Fallbacks.For("owner")); e != 4 || f != 8 {
		t.Errorf("errors %v, fallbacks %v; want 4 and 8", e, f)
	}

	// The manifest's sha256 catches a peer whose own checksum is
	// consistent with wrong bytes.
	mode.Store("ok")
	c.markUp("owner")
	c.o.Checksum = func(string) []byte { return bytes.Repeat([]byte{1}, 32) }
	if err := read(); !errors.Is(err, ErrRejected) {
		t.Errorf("bytes that do not match the manifest's sha256: %v, want a rejection", err)
	}
}

func TestReadToken(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		f := dir + "/tok"
		if err := writeFile(f, s); err != nil {
			t.Fatal(err)
		}
		return f
	}
	if tok, err := ReadToken(write("  0123456789abcdefXYZ\n")); err != nil || string(tok) != "0123456789abcdefXYZ" {
		t.Errorf("ReadToken = %q, %v", tok, err)
	}
	_, err := ReadToken(write("short-secret"))
	if err == nil || strings.Contains(err.Error(), "short-secret") {
		t.Errorf("a short token: %v (the error must not show it)", err)
	}
}
