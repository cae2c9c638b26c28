package testenv

import (
	"bytes"
	"context"
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

	"github.com/epochfs/epochfs/internal/benchproc"
	"github.com/epochfs/epochfs/internal/datagen"
)

// S3 is an S3 server the tests reach on 127.0.0.1 (MinIO, Ceph RGW), with
// a client holding its credentials. Exported fields are read-only.
type S3 struct {
	// Endpoint is "http://127.0.0.1:PORT".
	Endpoint string
	// Host is "127.0.0.1:PORT".
	Host string
	// AccessKey and SecretKey are the credentials of the tests' user (the
	// random root credentials of a MinIO).
	AccessKey string
	SecretKey string

	client *minio.Client
}

// newS3Client sets s.client from the other fields.
func (s *S3) newS3Client() error {
	client, err := minio.New(s.Host, &minio.Options{
		Creds:  credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""),
		Region: "us-east-1",
	})
	s.client = client
	return err
}

// MinIO is a MinIO server started for one test. Exported fields are
// read-only.
type MinIO struct {
	S3

	bin   string
	data  string // server data dir, kept across Stop/Restart
	ports [2]int // API and console ports
	out   *SyncBuffer

	mu   sync.Mutex
	stop func() // kills the running server; nil when stopped
}

// minioReadyTimeout bounds the wait for /minio/health/ready.
const minioReadyTimeout = 60 * time.Second

// StartMinIO starts `minio server` on a temporary directory and free
// 127.0.0.1 ports with random root credentials, waits until it is ready,
// and stops it (kill by PID, then wait) in t.Cleanup. When the binary is
// missing it skips the test, or fails it under CI=true.
func StartMinIO(t testing.TB) *MinIO {
	t.Helper()
	return startMinIO(t, "epochfs"+benchproc.RandHex(8), benchproc.RandHex(20))
}

// StartMinIOLike starts another MinIO server (own ports and data) with the
// same root credentials as other: a second cloud holding a copy of the
// same dataset, reachable with the one key pair a mirror source is given.
func StartMinIOLike(t testing.TB, other *MinIO) *MinIO {
	t.Helper()
	return startMinIO(t, other.AccessKey, other.SecretKey)
}

func startMinIO(t testing.TB, accessKey, secretKey string) *MinIO {
	t.Helper()
	bin, err := FindTool("minio")
	if err != nil {
		RequireOrSkip(t, "minio not found", "run `make tools` (or set EPOCHFS_TOOLS_BIN)")
	}
	var lastErr error
	for range 3 { // a free port can be taken between FreePort and bind
		m := &MinIO{
			bin:   bin,
			data:  t.TempDir(),
			ports: [2]int{FreePort(t), FreePort(t)},
			out:   &SyncBuffer{},
		}
		m.AccessKey, m.SecretKey = accessKey, secretKey
		m.Host = "127.0.0.1:" + strconv.Itoa(m.ports[0])
		m.Endpoint = "http://" + m.Host
		if err := m.start(); err != nil {
			lastErr = err
			continue
		}
		t.Cleanup(func() {
			m.Stop()
			if t.Failed() {
				t.Logf("minio output:\n%s", m.out.String())
			}
		})
		if err := m.newS3Client(); err != nil {
			t.Fatalf("testenv: minio client: %v", err)
		}
		return m
	}
	t.Fatalf("testenv: start minio: %v", lastErr)
	return nil
}

// start runs the server on m's ports and data dir and waits until ready.
func (m *MinIO) start() error {
	cmd := exec.Command(m.bin, "server", m.data,
		"--address", m.Host,
		"--console-address", "127.0.0.1:"+strconv.Itoa(m.ports[1]),
		"--quiet")
	cmd.Env = append(os.Environ(),
		"MINIO_ROOT_USER="+m.AccessKey,
		"MINIO_ROOT_PASSWORD="+m.SecretKey,
		"MINIO_BROWSER=off",
		"MINIO_UPDATE=off",
	)
	cmd.Stdout, cmd.Stderr = m.out, m.out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: %w", m.bin, err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	stop := func() {
		_ = cmd.Process.Kill() // by PID: only the server we started
		<-exited
	}

	deadline := time.Now().Add(minioReadyTimeout)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("minio exited before ready (%v): %s", waitErr, m.out.String())
		case <-time.After(50 * time.Millisecond):
		}
		resp, err := http.Get(m.Endpoint + "/minio/health/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				m.mu.Lock()
				m.stop = stop
				m.mu.Unlock()
				return nil
			}
		}
	}
	stop()
	return fmt.Errorf("minio not ready after %v: %s", minioReadyTimeout, m.out.String())
}

// Stop kills the server (a backend outage); its data stays for Restart.
func (m *MinIO) Stop() {
	m.mu.Lock()
	stop := m.stop
	m.stop = nil
	m.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// Restart starts a stopped server again on the same port, data and
// credentials, and waits until it is ready.
func (m *MinIO) Restart(t testing.TB) {
	t.Helper()
	m.Stop()
	var err error
	for range 20 { // the port may linger briefly after the kill
		if err = m.start(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("testenv: restart minio: %v", err)
}

// Client returns a minio-go client with the test user's credentials, for
// test setup beyond MakeBucket and Put.
func (m *S3) Client() *minio.Client { return m.client }

// MakeBucket creates a bucket or fails the test.
func (m *S3) MakeBucket(t testing.TB, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.client.MakeBucket(ctx, name, minio.MakeBucketOptions{Region: "us-east-1"}); err != nil {
		t.Fatalf("testenv: make bucket %q: %v", name, err)
	}
}

// PutFiles writes generated dataset files as objects prefix+path (prefix
// ends in "/" or is empty) or fails the test.
func (m *S3) PutFiles(t testing.TB, bucket, prefix string, files []datagen.File) {
	t.Helper()
	for _, f := range files {
		m.Put(t, bucket, prefix+f.Path, datagen.Content(f))
	}
}

// Put writes an object or fails the test.
func (m *S3) Put(t testing.TB, bucket, key string, data []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Ceph RGW rejects the x-amz-content-sha256 that minio-go sends with an
	// empty body; an empty object goes up unsigned (UNSIGNED-PAYLOAD).
	if _, err := m.client.PutObject(ctx, bucket, key, bytes.NewReader(data), int64(len(data)),
		minio.PutObjectOptions{ContentType: "application/octet-stream", DisableContentSha256: len(data) == 0}); err != nil {
		t.Fatalf("testenv: put %s/%q: %v", bucket, key, err)
	}
}

// SyncBuffer is a bytes.Buffer safe for concurrent writers (a child's two
// pipes, a logger shared by goroutines) and readers. The zero value is ready.
type SyncBuffer = benchproc.SyncBuffer
