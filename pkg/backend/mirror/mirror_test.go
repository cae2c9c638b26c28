package mirror_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/epochfs/epochfs/internal/backendtest"
	"github.com/epochfs/epochfs/internal/testenv/s3"
	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/backend/all"
	"github.com/epochfs/epochfs/pkg/source"
)

// mirrorModifiers rewrites a file in every replica of a mirror a test made.
var mirrorModifiers backendtest.Modifiers

func TestMirrorPosixConformance(t *testing.T) {
	mk := func(t *testing.T, files map[string][]byte) backend.Backend {
		a, b := t.TempDir(), t.TempDir()
		backendtest.WriteFiles(t, a, files)
		backendtest.WriteFiles(t, b, files)
		m := backendtest.OpenOptions(t, "mirror:"+a+","+b, backend.Options{})
		mirrorModifiers.Add(m, func(t *testing.T, p string, data []byte) {
			backendtest.WriteFiles(t, a, map[string][]byte{p: data})
			backendtest.WriteFiles(t, b, map[string][]byte{p: data})
		})
		return m
	}
	backendtest.Run(t, mk, backendtest.WithModify(mirrorModifiers.Modify))
}

func TestMirrorS3PosixConformance(t *testing.T) {
	m := &s3.StartMinIO(t).Server
	mk := func(t *testing.T, files map[string][]byte) backend.Backend {
		bucket := m.NewBucket(t)
		dir := t.TempDir()
		for p, data := range files {
			m.Put(t, bucket, "ds/"+p, data)
		}
		backendtest.WriteFiles(t, dir, files)
		mb := backendtest.OpenOptions(t, "mirror:"+m.URL(bucket, "ds")+","+dir, backend.Options{Credentials: backendtest.S3Credentials(m)})
		mirrorModifiers.Add(mb, func(t *testing.T, p string, data []byte) {
			m.Put(t, bucket, "ds/"+p, data)
			backendtest.WriteFiles(t, dir, map[string][]byte{p: data})
		})
		return mb
	}
	backendtest.Run(t, mk, backendtest.WithModify(mirrorModifiers.Modify))
}

// switchTransport fails every request with a 503 once broken is set.
type switchTransport struct {
	mu     sync.Mutex
	broken bool
	calls  int
}

func (s *switchTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	s.mu.Lock()
	broken := s.broken
	if broken {
		s.calls++
	}
	s.mu.Unlock()
	if broken {
		return s3Error(503, "ServiceUnavailable")(req, nil)
	}
	return http.DefaultTransport.RoundTrip(req)
}

func (s *switchTransport) set(broken bool) (calls int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.broken = broken
	return s.calls
}

func TestMirrorFailover(t *testing.T) {
	m := &s3.StartMinIO(t).Server
	bucket := m.NewBucket(t)
	dir := t.TempDir()
	same := bytes.Repeat([]byte("abc"), 1000)
	m.Put(t, bucket, "same", same)
	m.Put(t, bucket, "differs", []byte("ten bytes!"))
	backendtest.WriteFiles(t, dir, map[string][]byte{"same": same, "differs": []byte("eleven byte")})
	st := &switchTransport{}
	var logs bytes.Buffer
	b := backendtest.OpenOptions(t, "mirror:"+m.URL(bucket, "")+","+dir, backend.Options{
		Credentials: backendtest.S3Credentials(m), Transport: st, Logger: backendtest.Logger(&logs),
		Retry: backend.RetryPolicy{MaxAttempts: 1},
	})
	ctx := context.Background()
	// Both replicas are unmeasured: the first one (s3) answers.
	eSame, err := b.Stat(ctx, "same")
	if err != nil || !strings.HasPrefix(eSame.Version, "0:3000:") {
		t.Fatalf("Stat(same) = %+v, %v; want a version from replica 0", eSame, err)
	}
	eDiff, err := b.Stat(ctx, "differs")
	if err != nil || eDiff.Size != 10 {
		t.Fatalf("Stat(differs) = %+v, %v", eDiff, err)
	}

	st.set(true) // the s3 replica goes down
	e, err := b.Stat(ctx, "same")
	if err != nil || !strings.HasPrefix(e.Version, "1:3000:") {
		t.Fatalf("Stat(same) with s3 down = %+v, %v; want an answer from replica 1", e, err)
	}
	calls := st.set(true)
	if calls == 0 {
		t.Fatalf("the s3 replica was never tried")
	}
	// A version from the s3 replica is served by the posix one (same size);
	// the failed replica is tried last, so it is not even called.
	buf := make([]byte, 1000)
	if n, err := b.ReadAt(ctx, "same", eSame.Version, buf, 1500); err != nil || n != 1000 || !bytes.Equal(buf, same[1500:2500]) {
		t.Fatalf("ReadAt after s3 failed = %d, %v (or wrong bytes); want the posix replica's bytes", n, err)
	}
	if got := st.set(true); got != calls {
		t.Errorf("s3 replica called %d more times while marked down", got-calls)
	}
	// The posix replica disagrees on the size of "differs": never served.
	_, err = b.ReadAt(ctx, "differs", eDiff.Version, buf, 0)
	if err == nil || !strings.Contains(err.Error(), "disagrees on the size") {
		t.Fatalf("ReadAt(differs) = %v, want a size disagreement error", err)
	}
	if !strings.Contains(logs.String(), "mirror replica failed") {
		t.Errorf("failover not logged:\n%s", logs.String())
	}
	if !strings.HasPrefix(b.ID(), "mirror:s3://"+bucket+"?") || !strings.HasSuffix(b.ID(), ","+dir) ||
		strings.Contains(b.ID(), m.SecretKey) {
		t.Errorf("ID() = %q", b.ID())
	}
}

func TestMirrorOpen(t *testing.T) {
	dir := t.TempDir()
	backendtest.WriteFiles(t, dir, map[string][]byte{"f": []byte("x")})
	missing := filepath.Join(t.TempDir(), "gone")

	b := backendtest.OpenOptions(t, "mirror:"+missing+","+dir, backend.Options{})
	if e, err := b.Stat(context.Background(), "f"); err != nil || e.Size != 1 {
		t.Errorf("Stat through a half-available mirror = %+v, %v", e, err)
	}

	for _, tc := range []struct {
		raw  string
		want error
	}{
		{"mirror:" + missing + "," + missing + "2", backend.ErrNotExist},
		{"mirror:" + dir + ",cephfs://mon/export", backend.ErrUnsupported},
	} {
		src, err := source.Parse(tc.raw)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := all.Open(context.Background(), src, backend.Options{}); !errors.Is(err, tc.want) {
			t.Errorf("Open(%s) = %v, want %v", tc.raw, err, tc.want)
		}
	}
	_ = os.Remove(missing)
}
