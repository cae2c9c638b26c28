package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
)

// fakeTB records how a helper ended the test.
type fakeTB struct {
	testing.TB
	mu          sync.Mutex
	fatal, skip bool
	msg         string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.fatal, f.msg = true, sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}
func (f *fakeTB) Skipf(format string, args ...any) {
	f.mu.Lock()
	f.skip, f.msg = true, sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

func runHelper(tb *fakeTB, fn func(testing.TB)) {
	done := make(chan struct{})
	go func() { defer close(done); fn(tb) }()
	<-done
}

func TestRequireOrSkip(t *testing.T) {
	for _, tc := range []struct {
		ci        string
		wantFatal bool
	}{{"true", true}, {"1", true}, {"", false}, {"false", false}} {
		t.Setenv("CI", tc.ci)
		tb := &fakeTB{TB: t}
		runHelper(tb, func(tb testing.TB) { RequireOrSkip(tb, "minio not found", "run `make tools`") })
		if tb.fatal != tc.wantFatal || tb.skip == tc.wantFatal {
			t.Errorf("CI=%q: fatal=%v skip=%v, want fatal=%v", tc.ci, tb.fatal, tb.skip, tc.wantFatal)
		}
		if !strings.Contains(tb.msg, "minio not found: run `make tools`") {
			t.Errorf("CI=%q: message %q", tc.ci, tb.msg)
		}
	}
}

func TestRequireE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("RequireE2E always skips in -short mode")
	}
	for _, tc := range []struct {
		name, e2e, ci string
		wantRun       bool
	}{
		{"neither", "", "", false},
		{"EPOCHFS_E2E=1", "1", "", true},
		{"CI=true", "", "true", true},
		{"both", "1", "true", true},
		{"EPOCHFS_E2E=0", "0", "false", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("EPOCHFS_E2E", tc.e2e)
			t.Setenv("CI", tc.ci)
			tb := &fakeTB{TB: t}
			runHelper(tb, func(tb testing.TB) { RequireE2E(tb) })
			if tb.fatal || tb.skip == tc.wantRun {
				t.Errorf("fatal=%v skip=%v (%q), want run=%v", tb.fatal, tb.skip, tb.msg, tc.wantRun)
			}
		})
	}
}

func TestStartMinIOMissingBinary(t *testing.T) {
	t.Setenv("EPOCHFS_TOOLS_BIN", t.TempDir())
	t.Setenv("PATH", t.TempDir())
	emptyRoot := t.TempDir()
	repoRoot = func() (string, error) { return emptyRoot, nil }
	t.Cleanup(func() { repoRoot = RepoRoot })
	t.Setenv("CI", "true")
	tb := &fakeTB{TB: t}
	runHelper(tb, func(tb testing.TB) { StartMinIO(tb) })
	if !tb.fatal || !strings.Contains(tb.msg, "minio not found: run `make tools`") {
		t.Errorf("fatal=%v msg=%q", tb.fatal, tb.msg)
	}
}

func TestFindToolEnv(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "mytool")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("EPOCHFS_TOOLS_BIN", dir)
	if got, err := FindTool("mytool"); err != nil || got != p {
		t.Errorf("FindTool = %q, %v; want %q", got, err, p)
	}
	if _, err := FindTool("no-such-tool-here"); err == nil {
		t.Errorf("FindTool of a missing tool: no error")
	}
}

func TestStartMinIO(t *testing.T) {
	var host string
	t.Run("running", func(t *testing.T) {
		m := StartMinIO(t)
		host = m.Host
		m.MakeBucket(t, "smoke")
		m.Put(t, "smoke", "dir/with space ✓", []byte("hello"))
		obj, err := m.Client().GetObject(context.Background(), "smoke", "dir/with space ✓", minioGetOpts())
		if err != nil {
			t.Fatal(err)
		}
		defer obj.Close()
		buf := make([]byte, 5)
		if _, err := obj.Read(buf); string(buf) != "hello" {
			t.Fatalf("read back %q, %v", buf, err)
		}
	})
	if host == "" {
		return // skipped
	}
	// After the subtest's cleanup the server is gone.
	waitClosed(t, host, "minio")
}

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }

func minioGetOpts() minio.GetObjectOptions { return minio.GetObjectOptions{} }

// waitClosed fails the test unless nothing listens on host within 5 s: the
// server a harness started is gone after its cleanup.
func waitClosed(t *testing.T, host, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", host, 200*time.Millisecond)
		if err != nil {
			return
		}
		c.Close()
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("%s still listening on %s after cleanup", what, host)
}
