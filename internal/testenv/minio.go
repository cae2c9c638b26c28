package testenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// MinIO is a MinIO server started for one test. Fields are read-only.
type MinIO struct {
	// Endpoint is "http://127.0.0.1:PORT".
	Endpoint string
	// Host is "127.0.0.1:PORT".
	Host string
	// AccessKey and SecretKey are the random root credentials.
	AccessKey string
	SecretKey string

	client *minio.Client
}

// minioReadyTimeout bounds the wait for /minio/health/ready.
const minioReadyTimeout = 60 * time.Second

// StartMinIO starts `minio server` on a temporary directory and free
// 127.0.0.1 ports with random root credentials, waits until it is ready,
// and stops it (kill by PID, then wait) in t.Cleanup. When the binary is
// missing it skips the test, or fails it under CI=true.
func StartMinIO(t testing.TB) *MinIO {
	t.Helper()
	bin, err := FindTool("minio")
	if err != nil {
		RequireOrSkip(t, "minio not found", "run `make tools` (or set EPOCHFS_TOOLS_BIN)")
	}
	var lastErr error
	for range 3 { // a free port can be taken between FreePort and bind
		m, err := startMinIO(t, bin)
		if err == nil {
			return m
		}
		lastErr = err
	}
	t.Fatalf("testenv: start minio: %v", lastErr)
	return nil
}

func startMinIO(t testing.TB, bin string) (*MinIO, error) {
	t.Helper()
	port, consolePort := FreePort(t), FreePort(t)
	host := "127.0.0.1:" + strconv.Itoa(port)
	m := &MinIO{
		Endpoint:  "http://" + host,
		Host:      host,
		AccessKey: "epochfs" + randHex(t, 8),
		SecretKey: randHex(t, 20),
	}
	out := &syncBuffer{}
	cmd := exec.Command(bin, "server", t.TempDir(),
		"--address", host,
		"--console-address", "127.0.0.1:"+strconv.Itoa(consolePort),
		"--quiet")
	cmd.Env = append(os.Environ(),
		"MINIO_ROOT_USER="+m.AccessKey,
		"MINIO_ROOT_PASSWORD="+m.SecretKey,
		"MINIO_BROWSER=off",
		"MINIO_UPDATE=off",
	)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", bin, err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	stop := func() {
		_ = cmd.Process.Kill() // by PID: only the server we started
		<-exited
	}

	deadline := time.Now().Add(minioReadyTimeout)
	ready := false
	for !ready && time.Now().Before(deadline) {
		select {
		case <-exited:
			return nil, fmt.Errorf("minio exited before ready (%v): %s", waitErr, out.String())
		case <-time.After(50 * time.Millisecond):
		}
		resp, err := http.Get(m.Endpoint + "/minio/health/ready")
		if err == nil {
			resp.Body.Close()
			ready = resp.StatusCode == http.StatusOK
		}
	}
	if !ready {
		stop()
		return nil, fmt.Errorf("minio not ready after %v: %s", minioReadyTimeout, out.String())
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("minio output:\n%s", out.String())
		}
	})
	client, err := minio.New(host, &minio.Options{
		Creds:  credentials.NewStaticV4(m.AccessKey, m.SecretKey, ""),
		Region: "us-east-1",
	})
	if err != nil {
		t.Fatalf("testenv: minio client: %v", err)
	}
	m.client = client
	return m, nil
}

// Client returns a minio-go client with the root credentials, for test
// setup beyond MakeBucket and Put.
func (m *MinIO) Client() *minio.Client { return m.client }

// MakeBucket creates a bucket or fails the test.
func (m *MinIO) MakeBucket(t testing.TB, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.client.MakeBucket(ctx, name, minio.MakeBucketOptions{Region: "us-east-1"}); err != nil {
		t.Fatalf("testenv: make bucket %q: %v", name, err)
	}
}

// Put writes an object or fails the test.
func (m *MinIO) Put(t testing.TB, bucket, key string, data []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := m.client.PutObject(ctx, bucket, key, bytes.NewReader(data), int64(len(data)),
		minio.PutObjectOptions{ContentType: "application/octet-stream"}); err != nil {
		t.Fatalf("testenv: put %s/%q: %v", bucket, key, err)
	}
}

func randHex(t testing.TB, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("testenv: random: %v", err)
	}
	return hex.EncodeToString(b)
}

// syncBuffer collects a child's output from two pipes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
