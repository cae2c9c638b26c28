package backendtest

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/epochfs/epochfs/internal/testenv/s3"
	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/backend/all"
	"github.com/epochfs/epochfs/pkg/source"
)

// Open opens the dataset at url (a source URL, as `cachefs mount` takes it)
// with the credentials of the environment and closes it in t.Cleanup; the
// test fails if either step does. For tests that check what a mount, a
// prefetch or `cachefs index` made of a dataset.
func Open(t testing.TB, url string) backend.Backend {
	t.Helper()
	src, err := source.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	b, err := all.Open(context.Background(), src, backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// OpenOptions is Open with opts.
func OpenOptions(t testing.TB, url string, opts backend.Options) backend.Backend {
	t.Helper()
	src, err := source.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	b, err := all.Open(context.Background(), src, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", url, err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// S3Credentials are the credentials of the test user of the S3 server m.
func S3Credentials(m *s3.Server) backend.Credentials {
	return backend.Credentials{AccessKey: m.AccessKey, SecretKey: m.SecretKey}
}

// OpenS3 opens s3://bucket/prefix on m (OpenOptions); opts.Credentials
// default to m's.
func OpenS3(t testing.TB, m *s3.Server, bucket, prefix string, opts backend.Options) backend.Backend {
	t.Helper()
	if opts.Credentials.IsZero() {
		opts.Credentials = S3Credentials(m)
	}
	return OpenOptions(t, m.URL(bucket, prefix), opts)
}

// WriteFiles writes files (slash-separated paths relative to dir, and their
// bytes) under dir, creating directories as needed.
func WriteFiles(t testing.TB, dir string, files map[string][]byte) {
	t.Helper()
	for p, data := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// Logger returns a debug-level text logger writing to buf, safe for the
// concurrent writes of a backend's goroutines.
func Logger(buf *bytes.Buffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(&lockedWriter{w: buf}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// lockedWriter serializes writes to a shared buffer.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
