package backend_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/epochfs/epochfs/internal/backendtest"
	"github.com/epochfs/epochfs/internal/testenv/ceph"
	"github.com/epochfs/epochfs/internal/testenv/s3"
	"github.com/epochfs/epochfs/pkg/backend"
)

// checkPut stores objects through backend.Put and reads them back through
// the same backend: a nested new path, a replacement, and refused paths.
func checkPut(t *testing.T, b backend.Backend) {
	t.Helper()
	ctx := context.Background()
	for _, data := range []string{"first manifest", "second, longer manifest"} {
		if err := backend.Put(ctx, b, ".epochfs/manifest", []byte(data)); err != nil {
			t.Fatal(err)
		}
		e, err := b.Stat(ctx, ".epochfs/manifest")
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 100)
		n, err := b.ReadAt(ctx, ".epochfs/manifest", e.Version, buf, 0)
		if err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
		if got := string(buf[:n]); got != data {
			t.Fatalf("read back %q, want %q", got, data)
		}
	}
	list, err := b.List(ctx, ".epochfs")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Name != "manifest" {
		t.Errorf(".epochfs lists %v, want only the manifest (no temporary left)", list)
	}
	for _, bad := range []string{"", "../escape", "/abs", "a/../../b", "nul\x00"} {
		if err := backend.Put(ctx, b, bad, []byte("x")); !errors.Is(err, backend.ErrInvalidPath) {
			t.Errorf("Put(%q): %v, want ErrInvalidPath", bad, err)
		}
	}
}

func TestPutPosix(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	b := backendtest.OpenOptions(t, data, backend.Options{})
	checkPut(t, b)
	if _, err := os.Stat(filepath.Join(dir, "escape")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused path was written outside the root: %v", err)
	}
}

func TestPutS3(t *testing.T) { testPutS3(t, &s3.StartMinIO(t).Server) }

// TestPutRGW is TestPutS3 against Ceph RGW.
func TestPutRGW(t *testing.T) { testPutS3(t, ceph.RequireRGW(t)) }

func testPutS3(t *testing.T, m *s3.Server) {
	bucket := m.NewBucket(t)
	b := backendtest.OpenS3(t, m, bucket, "ds", backend.Options{})
	checkPut(t, b)
	// The object lies under the prefix, next to the dataset.
	if _, err := m.Client().StatObject(context.Background(), bucket, "ds/.epochfs/manifest", minio.StatObjectOptions{}); err != nil {
		t.Errorf("ds/.epochfs/manifest: %v", err)
	}
	// An empty object (RGW refuses minio-go's signed empty payload).
	if err := backend.Put(context.Background(), b, ".epochfs/empty", nil); err != nil {
		t.Fatalf("Put of an empty object: %v", err)
	}
	if e, err := b.Stat(context.Background(), ".epochfs/empty"); err != nil || e.Size != 0 {
		t.Errorf("Stat(.epochfs/empty) = %+v, %v", e, err)
	}
}

func TestPutMirrorUnsupported(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	mb := backendtest.OpenOptions(t, "mirror:"+a+","+b, backend.Options{})
	if err := backend.Put(context.Background(), mb, "x", nil); !errors.Is(err, backend.ErrUnsupported) {
		t.Errorf("Put on a mirror: %v, want ErrUnsupported", err)
	}
}
