package s3_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/epochfs/epochfs/internal/backendtest"
	"github.com/epochfs/epochfs/internal/testenv/ceph"
	"github.com/epochfs/epochfs/internal/testenv/s3"
	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/backend/all"
	"github.com/epochfs/epochfs/pkg/source"
)

type s3Dataset struct {
	m      *s3.Server
	bucket string
	prefix string
}

var s3Datasets sync.Map // backend.Backend → s3Dataset

func TestS3Conformance(t *testing.T) { testS3Conformance(t, &s3.StartMinIO(t).Server) }

// TestRGWConformance is TestS3Conformance against Ceph RGW, the second S3 dialect.
func TestRGWConformance(t *testing.T) { testS3Conformance(t, ceph.RequireRGW(t)) }

func testS3Conformance(t *testing.T, m *s3.Server) {
	mk := func(t *testing.T, files map[string][]byte) backend.Backend {
		bucket := m.NewBucket(t)
		for p, data := range files {
			m.Put(t, bucket, "ds/"+p, data)
		}
		// Neighbours that share the prefix's first bytes must stay invisible.
		m.Put(t, bucket, "ds2/a.txt", []byte("not in the dataset"))
		m.Put(t, bucket, "ds.txt", []byte("not in the dataset"))
		m.Put(t, bucket, "dsx/dir/b.bin", []byte("not in the dataset"))
		b := backendtest.OpenS3(t, m, bucket, "ds", backend.Options{})
		s3Datasets.Store(b, s3Dataset{m, bucket, "ds"})
		return b
	}
	modify := func(t *testing.T, b backend.Backend, p string, data []byte) {
		v, ok := s3Datasets.Load(b)
		if !ok {
			t.Fatal("unknown s3 backend")
		}
		d := v.(s3Dataset)
		d.m.Put(t, d.bucket, d.prefix+"/"+p, data)
	}
	backendtest.Run(t, mk, backendtest.WithModify(modify))
}

func TestS3PrefixBoundary(t *testing.T) { testS3PrefixBoundary(t, &s3.StartMinIO(t).Server) }

// TestRGWPrefixBoundary is TestS3PrefixBoundary against Ceph RGW, the second S3 dialect.
func TestRGWPrefixBoundary(t *testing.T) { testS3PrefixBoundary(t, ceph.RequireRGW(t)) }

func testS3PrefixBoundary(t *testing.T, m *s3.Server) {
	bucket := m.NewBucket(t)
	for _, k := range []string{"data/a", "data/sub/b", "data2/c", "data.txt", "database/x", "datab"} {
		m.Put(t, bucket, k, []byte(k))
	}
	ctx := context.Background()
	for _, tc := range []struct {
		prefix string
		dir    string
		want   []string
	}{
		{"data", "", []string{"a", "sub/"}},
		{"data/", "", []string{"a", "sub/"}},
		{"data", "sub", []string{"b"}},
		{"", "", []string{"data/", "data.txt", "data2/", "datab", "database/"}},
		{"", "data", []string{"a", "sub/"}},
		{"data2", "", []string{"c"}},
	} {
		b := backendtest.OpenS3(t, m, bucket, tc.prefix, backend.Options{})
		es, err := b.List(ctx, tc.dir)
		if err != nil {
			t.Fatalf("prefix %q: List(%q): %v", tc.prefix, tc.dir, err)
		}
		if got := names(es); !slices.Equal(got, tc.want) {
			t.Errorf("prefix %q: List(%q) = %q, want %q", tc.prefix, tc.dir, got, tc.want)
		}
	}
	b := backendtest.OpenS3(t, m, bucket, "data", backend.Options{})
	for _, p := range []string{"data2", "2/c", "base", "c"} {
		if _, err := b.Stat(ctx, p); !errors.Is(err, backend.ErrNotExist) {
			t.Errorf("prefix data: Stat(%q) = %v, want backend.ErrNotExist", p, err)
		}
	}
	// "dat" is a key prefix of every key but not a directory.
	root := backendtest.OpenS3(t, m, bucket, "", backend.Options{})
	if _, err := root.Stat(ctx, "dat"); !errors.Is(err, backend.ErrNotExist) {
		t.Errorf("Stat(dat) = %v, want backend.ErrNotExist", err)
	}
	if _, err := root.List(ctx, "dat"); !errors.Is(err, backend.ErrNotExist) {
		t.Errorf("List(dat) = %v, want backend.ErrNotExist", err)
	}
	if want := "s3://" + m.Host + "/" + bucket + "/data/"; b.ID() != want {
		t.Errorf("ID() = %q, want %q", b.ID(), want)
	}
	if strings.Contains(b.ID(), m.AccessKey) || strings.Contains(b.ID(), m.SecretKey) {
		t.Errorf("ID() %q contains credentials", b.ID())
	}
}

func names(es []backend.Entry) []string {
	var out []string
	for _, e := range es {
		if e.IsDir {
			out = append(out, e.Name+"/")
		} else {
			out = append(out, e.Name)
		}
	}
	return out
}

func TestS3Pagination(t *testing.T) { testS3Pagination(t, &s3.StartMinIO(t).Server) }

// TestRGWPagination is TestS3Pagination against Ceph RGW, the second S3 dialect.
func TestRGWPagination(t *testing.T) { testS3Pagination(t, ceph.RequireRGW(t)) }

func testS3Pagination(t *testing.T, m *s3.Server) {
	bucket := m.NewBucket(t)
	const n = 1100
	var want []string
	keys := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range keys {
				m.Put(t, bucket, fmt.Sprintf("many/f%05d", i), []byte{byte(i)})
			}
		})
	}
	for i := range n {
		keys <- i
		want = append(want, fmt.Sprintf("f%05d", i))
	}
	close(keys)
	wg.Wait()
	m.Put(t, bucket, "many/sub/x", []byte("x"))
	want = append(want, "sub/")

	b := backendtest.OpenS3(t, m, bucket, "many", backend.Options{})
	es, err := b.List(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if got := names(es); !slices.Equal(got, want) {
		t.Fatalf("List returned %d entries, want %d (first diff near %v)", len(got), len(want), firstDiff(got, want))
	}
	for i, e := range es[:n] {
		if e.Size != 1 || e.Version == "" {
			t.Fatalf("entry %d = %+v", i, e)
		}
	}
}

func firstDiff(a, b []string) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Sprintf("index %d: %q vs %q", i, a[i], b[i])
		}
	}
	return "the end"
}

func TestS3CredentialsFromEnv(t *testing.T) { testS3CredentialsFromEnv(t, &s3.StartMinIO(t).Server) }

// TestRGWCredentialsFromEnv is TestS3CredentialsFromEnv against Ceph RGW, the second S3 dialect.
func TestRGWCredentialsFromEnv(t *testing.T) { testS3CredentialsFromEnv(t, ceph.RequireRGW(t)) }

func testS3CredentialsFromEnv(t *testing.T, m *s3.Server) {
	bucket := m.NewBucket(t)
	m.Put(t, bucket, "f", []byte("from env"))
	t.Setenv("AWS_ACCESS_KEY_ID", m.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", m.SecretKey)
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
	src, err := source.Parse(m.URL(bucket, ""))
	if err != nil {
		t.Fatal(err)
	}
	b, err := all.Open(context.Background(), src, backend.Options{})
	if err != nil {
		t.Fatalf("Open with env credentials: %v", err)
	}
	defer b.Close()
	buf := make([]byte, 8)
	if n, err := b.ReadAt(context.Background(), "f", "", buf, 0); n != 8 || string(buf) != "from env" {
		t.Fatalf("ReadAt = %d, %v", n, err)
	}
}

func TestS3WrongCredentials(t *testing.T) { testS3WrongCredentials(t, &s3.StartMinIO(t).Server) }

// TestRGWWrongCredentials is TestS3WrongCredentials against Ceph RGW, the second S3 dialect.
func TestRGWWrongCredentials(t *testing.T) { testS3WrongCredentials(t, ceph.RequireRGW(t)) }

func testS3WrongCredentials(t *testing.T, m *s3.Server) {
	bucket := m.NewBucket(t)
	for _, tc := range []struct {
		name  string
		creds backend.Credentials
		code  string
	}{
		{"unknown key", backend.Credentials{AccessKey: "nobody-here", SecretKey: "wrong-secret-0123456789"}, "InvalidAccessKeyId"},
		{"wrong secret", backend.Credentials{AccessKey: m.AccessKey, SecretKey: "wrong-secret-0123456789"}, "SignatureDoesNotMatch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, err := source.Parse(m.URL(bucket, ""))
			if err != nil {
				t.Fatal(err)
			}
			_, err = all.Open(context.Background(), src, backend.Options{Credentials: tc.creds})
			if !errors.Is(err, backend.ErrPermission) {
				t.Fatalf("Open = %v, want backend.ErrPermission", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.code) || !strings.Contains(msg, "check the credentials") {
				t.Errorf("error %q does not name %s or say to check the credentials", msg, tc.code)
			}
			if strings.Contains(msg, tc.creds.SecretKey) {
				t.Errorf("error %q leaks the secret key", msg)
			}
		})
	}
}

func TestS3OpenMissingBucket(t *testing.T) { testS3OpenMissingBucket(t, &s3.StartMinIO(t).Server) }

// TestRGWOpenMissingBucket is TestS3OpenMissingBucket against Ceph RGW, the second S3 dialect.
func TestRGWOpenMissingBucket(t *testing.T) { testS3OpenMissingBucket(t, ceph.RequireRGW(t)) }

func testS3OpenMissingBucket(t *testing.T, m *s3.Server) {
	src, err := source.Parse(m.URL("no-such-bucket", "x"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = all.Open(context.Background(), src, backend.Options{Credentials: backendtest.S3Credentials(m)})
	if !errors.Is(err, backend.ErrNotExist) || !strings.Contains(err.Error(), `bucket "no-such-bucket" does not exist`) {
		t.Fatalf("Open = %v, want backend.ErrNotExist naming the bucket", err)
	}
}

// faultTransport sits in front of the real MinIO and answers the first
// matching requests with a fault instead.
type faultTransport struct {
	base   http.RoundTripper
	match  func(*http.Request) bool
	faults []fault // consumed in order, one per matching request
	mu     sync.Mutex
	calls  int // matching requests seen
}

type fault func(req *http.Request, base http.RoundTripper) (*http.Response, error)

func (f *faultTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if f.match == nil || !f.match(req) {
		return f.base.RoundTrip(req)
	}
	f.mu.Lock()
	f.calls++
	var fl fault
	if len(f.faults) > 0 {
		fl, f.faults = f.faults[0], f.faults[1:]
	}
	f.mu.Unlock()
	if fl == nil {
		return f.base.RoundTrip(req)
	}
	return fl(req, f.base)
}

func (f *faultTransport) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func isRangedGet(req *http.Request) bool {
	return req.Method == http.MethodGet && req.Header.Get("Range") != ""
}

func s3Error(status int, code string) fault {
	return func(req *http.Request, _ http.RoundTripper) (*http.Response, error) {
		return backendtest.S3ErrorResponse(req, status, code), nil
	}
}

func connReset(*http.Request, http.RoundTripper) (*http.Response, error) {
	return nil, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
}

// truncated forwards the request and cuts the body in half: with
// keepLength the Content-Length still promises the whole range (the
// connection "drops"); without it the headers are rewritten to match
// (a lying server).
func truncated(keepLength bool) fault {
	return func(req *http.Request, base http.RoundTripper) (*http.Response, error) {
		resp, err := base.RoundTrip(req)
		if err != nil {
			return nil, err
		}
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		half := data[:len(data)/2]
		if keepLength {
			resp.Body = io.NopCloser(io.MultiReader(bytes.NewReader(half), errReader{io.ErrUnexpectedEOF}))
		} else {
			resp.Body = io.NopCloser(bytes.NewReader(half))
			resp.ContentLength = int64(len(half))
			resp.Header.Set("Content-Length", fmt.Sprint(len(half)))
		}
		return resp, nil
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// hang blocks until the request's context ends (a stuck server).
func hang(req *http.Request, _ http.RoundTripper) (*http.Response, error) {
	<-req.Context().Done()
	return nil, req.Context().Err()
}

// stuckBody answers with headers and then never sends the body.
func stuckBody(req *http.Request, base http.RoundTripper) (*http.Response, error) {
	resp, err := base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	resp.Body = io.NopCloser(ctxReader{req.Context()})
	return resp, nil
}

type ctxReader struct{ ctx context.Context }

func (r ctxReader) Read([]byte) (int, error) {
	<-r.ctx.Done()
	return 0, r.ctx.Err()
}

func repeatFault(f fault, n int) []fault {
	out := make([]fault, n)
	for i := range out {
		out[i] = f
	}
	return out
}

func fastRetry() backend.RetryPolicy {
	return backend.RetryPolicy{MaxAttempts: 4, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond}
}

func TestS3Retries(t *testing.T) {
	m := &s3.StartMinIO(t).Server
	bucket := m.NewBucket(t)
	data := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
	m.Put(t, bucket, "ds/f", data)

	for _, tc := range []struct {
		name        string
		faults      []fault
		timeout     time.Duration // Options.RequestTimeout
		wantErr     error         // nil: the read must succeed
		wantRetries int64
		wantCalls   int
	}{
		{"503 then ok", []fault{s3Error(503, "ServiceUnavailable")}, 0, nil, 1, 2},
		{"500 InternalError", []fault{s3Error(500, "InternalError")}, 0, nil, 1, 2},
		{"429 SlowDown", []fault{s3Error(429, "SlowDown")}, 0, nil, 1, 2},
		{"503 SlowDown", []fault{s3Error(503, "SlowDown")}, 0, nil, 1, 2},
		{"connection reset", []fault{connReset}, 0, nil, 1, 2},
		{"dropped body", []fault{truncated(true)}, 0, nil, 1, 2},
		{"short body", []fault{truncated(false)}, 0, nil, 1, 2},
		{"three different faults", []fault{s3Error(503, "SlowDown"), connReset, truncated(true)}, 0, nil, 3, 4},
		{"attempt timeout", []fault{hang, stuckBody}, 200 * time.Millisecond, nil, 2, 3},
		{"exhausted", repeatFault(s3Error(503, "ServiceUnavailable"), 4), 0, backend.ErrUnavailable, 3, 4},
		{"connection resets exhausted", repeatFault(connReset, 4), 0, backend.ErrUnavailable, 3, 4},
		{"403 not retried", []fault{s3Error(403, "AccessDenied")}, 0, backend.ErrPermission, 0, 1},
		{"400 not retried", []fault{s3Error(400, "InvalidArgument")}, 0, errAny, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ft := &faultTransport{base: http.DefaultTransport, match: isRangedGet, faults: tc.faults}
			b := backendtest.OpenS3(t, m, bucket, "ds", backend.Options{Transport: ft, Retry: fastRetry(), RequestTimeout: tc.timeout})
			buf := make([]byte, 40000)
			n, err := b.ReadAt(context.Background(), "f", "", buf, 1000)
			switch {
			case tc.wantErr == nil:
				if err != nil || n != len(buf) || !bytes.Equal(buf, data[1000:41000]) {
					t.Fatalf("ReadAt = %d, %v (or wrong bytes); want %d correct bytes", n, err, len(buf))
				}
			case tc.wantErr == errAny:
				if err == nil || n != 0 {
					t.Fatalf("ReadAt = %d, %v; want an error", n, err)
				}
			default:
				if !errors.Is(err, tc.wantErr) || n != 0 {
					t.Fatalf("ReadAt = %d, %v; want %v", n, err, tc.wantErr)
				}
			}
			if got := backend.Retries(b); got != tc.wantRetries {
				t.Errorf("Retries = %d, want %d", got, tc.wantRetries)
			}
			if got := ft.Calls(); got != tc.wantCalls {
				t.Errorf("ranged GETs = %d, want %d", got, tc.wantCalls)
			}
		})
	}
}

var errAny = errors.New("any error")

func TestS3RetriesListAndStat(t *testing.T) {
	m := &s3.StartMinIO(t).Server
	bucket := m.NewBucket(t)
	m.Put(t, bucket, "ds/a", []byte("a"))
	m.Put(t, bucket, "ds/d/b", []byte("b"))
	isList := func(req *http.Request) bool { return req.URL.Query().Get("list-type") == "2" }
	isHead := func(req *http.Request) bool { return req.Method == http.MethodHead }

	ft := &faultTransport{base: http.DefaultTransport, match: isList}
	b := backendtest.OpenS3(t, m, bucket, "ds", backend.Options{Transport: ft, Retry: fastRetry()})
	ft.mu.Lock()
	ft.faults = []fault{s3Error(503, "SlowDown"), connReset}
	ft.mu.Unlock()
	es, err := b.List(context.Background(), "")
	if err != nil || !slices.Equal(names(es), []string{"a", "d/"}) {
		t.Fatalf("List = %q, %v", names(es), err)
	}

	ft2 := &faultTransport{base: http.DefaultTransport, match: isHead, faults: []fault{s3Error(500, "InternalError")}}
	b2 := backendtest.OpenS3(t, m, bucket, "ds", backend.Options{Transport: ft2, Retry: fastRetry()})
	if e, err := b2.Stat(context.Background(), "a"); err != nil || e.Size != 1 {
		t.Fatalf("Stat = %+v, %v", e, err)
	}
	if backend.Retries(b) != 2 || backend.Retries(b2) != 1 {
		t.Errorf("Retries = %d and %d, want 2 and 1", backend.Retries(b), backend.Retries(b2))
	}
}

func TestS3Cancellation(t *testing.T) {
	m := &s3.StartMinIO(t).Server
	bucket := m.NewBucket(t)
	m.Put(t, bucket, "f", bytes.Repeat([]byte("x"), 1000))

	t.Run("during backoff", func(t *testing.T) {
		ft := &faultTransport{base: http.DefaultTransport, match: isRangedGet,
			faults: repeatFault(s3Error(503, "ServiceUnavailable"), 100)}
		b := backendtest.OpenS3(t, m, bucket, "", backend.Options{Transport: ft,
			Retry: backend.RetryPolicy{MaxAttempts: 100, BaseDelay: 10 * time.Second, MaxDelay: 10 * time.Second}})
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := b.ReadAt(ctx, "f", "", make([]byte, 10), 0)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("ReadAt = %v, want context.DeadlineExceeded", err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("ReadAt returned after %v, want about 300ms", d)
		}
	})

	t.Run("during body read", func(t *testing.T) {
		ft := &faultTransport{base: http.DefaultTransport, match: isRangedGet, faults: []fault{stuckBody}}
		b := backendtest.OpenS3(t, m, bucket, "", backend.Options{Transport: ft, Retry: fastRetry()})
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(200*time.Millisecond, cancel)
		start := time.Now()
		_, err := b.ReadAt(ctx, "f", "", make([]byte, 10), 0)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("ReadAt = %v, want context.Canceled", err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("ReadAt returned after %v, want about 200ms", d)
		}
		if backend.Retries(b) != 0 {
			t.Errorf("Retries = %d after a cancellation, want 0", backend.Retries(b))
		}
	})
}

// badKeys rewrites ListObjectsV2 responses to add keys that MinIO itself
// refuses to store but other S3 servers may return.
type badKeys struct {
	base  http.RoundTripper
	extra string // XML fragment inserted before </ListBucketResult>
}

func (b *badKeys) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := b.base.RoundTrip(req)
	if err != nil || req.URL.Query().Get("list-type") != "2" || req.URL.Query().Get("prefix") != "ds/" || resp.StatusCode != 200 {
		return resp, err
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	data = bytes.Replace(data, []byte("</ListBucketResult>"), []byte(b.extra+"</ListBucketResult>"), 1)
	resp.Body = io.NopCloser(bytes.NewReader(data))
	resp.ContentLength = int64(len(data))
	resp.Header.Del("Content-Length")
	return resp, nil
}

func TestS3SkipsKeysThatEscape(t *testing.T) {
	m := &s3.StartMinIO(t).Server
	bucket := m.NewBucket(t)
	m.Put(t, bucket, "ds/ok file ✓", []byte("ok"))
	m.Put(t, bucket, "ds/", nil) // a directory marker: neither listed nor counted
	content := func(key string) string {
		return `<Contents><Key>` + url.QueryEscape(key) + `</Key><LastModified>2024-01-01T00:00:00.000Z</LastModified><ETag>"x"</ETag><Size>1</Size><StorageClass>STANDARD</StorageClass></Contents>`
	}
	prefix := func(p string) string {
		return `<CommonPrefixes><Prefix>` + url.QueryEscape(p) + `</Prefix></CommonPrefixes>`
	}
	extra := prefix("ds/../") + prefix("ds//") + prefix("ds/./") +
		content("ds/nul\x00byte") + content("ds/ctl\x01char") + content("ds/"+strings.Repeat("n", 256)) +
		content("ds/bad\xffutf8") + content("ds/"+strings.Repeat("n", 255))
	var logs bytes.Buffer
	b := backendtest.OpenS3(t, m, bucket, "ds", backend.Options{
		Transport: &badKeys{base: http.DefaultTransport, extra: extra},
		Logger:    backendtest.Logger(&logs),
	})
	es, err := b.List(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := names(es), []string{strings.Repeat("n", 255), "ok file ✓"}; !slices.Equal(got, want) {
		t.Errorf("List = %q, want %q", got, want)
	}
	if got := backend.Skipped(b); got != 7 {
		t.Errorf("Skipped = %d, want 7", got)
	}
	if !strings.Contains(logs.String(), "skipping object key") || !strings.Contains(logs.String(), `ds/../`) {
		t.Errorf("no warning logged for the skipped keys:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), m.SecretKey) {
		t.Errorf("logs contain the secret key")
	}
}
