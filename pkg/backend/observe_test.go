package backend_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/epochfs/epochfs/internal/backendtest"
	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/backend/all"
	"github.com/epochfs/epochfs/pkg/backend/cephfs"
	"github.com/epochfs/epochfs/pkg/source"
)

type readRecord struct {
	d     time.Duration
	bytes int
	err   error
}

type recorder struct {
	mu    sync.Mutex
	reads []readRecord
}

func (r *recorder) ObserveRead(d time.Duration, n int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reads = append(r.reads, readRecord{d, n, err})
}

func TestWithObserver(t *testing.T) {
	dir := t.TempDir()
	backendtest.WriteFiles(t, dir, map[string][]byte{"f": []byte("0123456789"), "bad\x01name": nil})
	inner := backendtest.OpenOptions(t, dir, backend.Options{})
	rec := &recorder{}
	b := backend.WithObserver(inner, rec)
	defer b.Close()
	ctx := context.Background()
	buf := make([]byte, 4)
	b.ReadAt(ctx, "f", "", buf, 0)       // ok
	b.ReadAt(ctx, "f", "", buf, 8)       // short read at EOF: not an error
	b.ReadAt(ctx, "missing", "", buf, 0) // ErrNotExist
	b.ReadAt(ctx, "f", "stale", buf, 0)  // ErrChanged
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	b.ReadAt(canceled, "f", "", buf, 0) // context.Canceled
	want := []struct {
		bytes int
		err   error
	}{{4, nil}, {2, nil}, {0, backend.ErrNotExist}, {0, backend.ErrChanged}, {0, context.Canceled}}
	if len(rec.reads) != len(want) {
		t.Fatalf("%d observations, want %d", len(rec.reads), len(want))
	}
	for i, w := range want {
		r := rec.reads[i]
		if r.bytes != w.bytes || (w.err == nil) != (r.err == nil) || (w.err != nil && !errors.Is(r.err, w.err)) || r.d <= 0 {
			t.Errorf("observation %d = %+v, want %d bytes, err %v, positive duration", i, r, w.bytes, w.err)
		}
	}
	// The wrapper still returns io.EOF to its caller and exposes counters.
	if _, err := b.ReadAt(ctx, "f", "", buf, 8); err != io.EOF {
		t.Errorf("ReadAt at the end through the observer = %v, want io.EOF", err)
	}
	if _, err := b.List(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if got := backend.Skipped(b); got != 1 {
		t.Errorf("Skipped through the observer = %d, want 1", got)
	}
	if backend.Retries(b) != 0 {
		t.Errorf("Retries of posix = %d, want 0", backend.Retries(b))
	}
	if backend.WithObserver(inner, nil) != inner {
		t.Errorf("WithObserver(b, nil) should return b")
	}
}

func TestOpenUnsupported(t *testing.T) {
	raws := []string{}
	if !cephfs.Built {
		raws = append(raws, "cephfs://mon/x")
	}
	for _, raw := range raws {
		src, err := source.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		_, err = all.Open(context.Background(), src, backend.Options{})
		if !errors.Is(err, backend.ErrUnsupported) {
			t.Errorf("Open(%s) = %v, want ErrUnsupported", raw, err)
		}
		// The cgo-free build says which build has cephfs, and the kernel
		// mount alternative.
		if strings.HasPrefix(raw, "cephfs:") && (!strings.Contains(err.Error(), "make build-ceph") || !strings.Contains(err.Error(), "kernel client")) {
			t.Errorf("Open(%s) = %v, want a message naming make build-ceph and the kernel client", raw, err)
		}
	}
}

func TestOpenOptionsValidated(t *testing.T) {
	src := source.Source{Kind: source.KindPosix, Path: t.TempDir()}
	for _, o := range []backend.Options{
		{Retry: backend.RetryPolicy{MaxAttempts: -1}},
		{RequestTimeout: -time.Second},
		{Credentials: backend.Credentials{AccessKey: "only-the-key"}},
	} {
		if _, err := all.Open(context.Background(), src, o); err == nil {
			t.Errorf("Open with %+v: no error", o)
		}
	}
}
