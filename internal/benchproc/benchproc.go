// Package benchproc starts and stops the processes the benchmarks under
// bench/ compare side by side: MinIO, rclone mounts, and mounts in general.
// It is the benchmarks' side of internal/testenv: the same error-returning
// cores (free ports, child processes, the MinIO start of package
// testenv/s3) without a testing.TB. Every process is stopped by its own
// PID only.
package benchproc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/internal/testenv/s3"
)

// Proc is a child process a benchmark started (a mount or a server).
type Proc struct {
	*testenv.Proc
	Mnt   string // mount point it serves, "" for a server
	Debug string // a mount's /debug address, when known
}

// Start starts cmd and returns it as a Proc; Done closes when it exits.
// Its stdout and stderr, unless the caller set them, go to Out, which
// keeps their last MiB.
func Start(name string, cmd *exec.Cmd, mnt string) (*Proc, error) {
	p, err := testenv.StartProc(name, cmd, &testenv.SyncBuffer{Max: 1 << 20})
	if err != nil {
		return nil, err
	}
	return &Proc{Proc: p, Mnt: mnt}, nil
}

// Stop sends SIGTERM, waits, kills after a grace period, and detaches the
// mount point if it is still mounted.
func (p *Proc) Stop() {
	p.Terminate(30 * time.Second)
	if p.Mnt != "" && Mounted(p.Mnt) {
		_ = syscall.Unmount(p.Mnt, syscall.MNT_DETACH)
	}
}

// WaitMounted waits until p's mount point is mounted, p exits, or timeout.
func (p *Proc) WaitMounted(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for !Mounted(p.Mnt) {
		select {
		case <-p.Done:
			return fmt.Errorf("%s exited: %s", p.Name, p.Out.String())
		case <-time.After(2 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.Stop()
			return fmt.Errorf("%s not mounted after %v: %s", p.Name, timeout, p.Out.String())
		}
	}
	return nil
}

// Mounted reports whether dir is a mount point (its device differs from its
// parent's).
func Mounted(dir string) bool {
	var a, b syscall.Stat_t
	if syscall.Stat(dir, &a) != nil || syscall.Stat(filepath.Dir(dir), &b) != nil {
		return false
	}
	return a.Dev != b.Dev
}

// StartRclone mounts source with `rclone mount --vfs-cache-mode full` and a
// cache of the given capacity, read-only, with the same kernel attribute and
// entry timeouts as EpochFS (1h), and waits until it is mounted. env is
// added to its environment (e.g. MinIO credentials for an S3 source with
// env_auth).
func StartRclone(rclone, source, mnt, cacheDir string, capacity int64, env []string) (*Proc, error) {
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return nil, err
	}
	cmd := exec.Command(rclone, "mount", source, mnt,
		"--read-only", "--allow-other",
		"--vfs-cache-mode", "full",
		"--vfs-cache-max-size", strconv.FormatInt(capacity, 10),
		"--cache-dir", cacheDir,
		"--attr-timeout", "1h", "--dir-cache-time", "1h",
		"--config", "/dev/null", "--log-level", "ERROR")
	cmd.Env = append(os.Environ(), env...)
	p, err := Start("rclone mount", cmd, mnt)
	if err != nil {
		return nil, err
	}
	if err := p.WaitMounted(60 * time.Second); err != nil {
		return nil, err
	}
	return p, nil
}

// S3 is an S3 server a benchmark reads from: a MinIO it started
// (StartMinIO) or another one, such as Ceph's RGW (OpenS3).
type S3 struct {
	*s3.Server
	minio *s3.MinIO     // the server StartMinIO started; nil for OpenS3's
	bulk  *minio.Client // with idle connections for parallel uploads
}

// OpenS3 is the S3 server at endpoint ("http://HOST:PORT") for the user
// with these keys.
func OpenS3(endpoint, accessKey, secretKey string) (*S3, error) {
	srv, err := s3.NewServer(endpoint, accessKey, secretKey)
	if err != nil {
		return nil, err
	}
	bulk, err := NewClient(srv.Host, accessKey, secretKey, 64)
	if err != nil {
		return nil, err
	}
	return &S3{Server: srv, bulk: bulk}, nil
}

// Stop stops the MinIO that StartMinIO started (OpenS3's server is left
// alone).
func (m *S3) Stop() {
	if m.minio != nil {
		m.minio.Stop()
	}
}

// Pid is the process id of the MinIO that StartMinIO started, else 0.
func (m *S3) Pid() int {
	if m.minio == nil {
		return 0
	}
	return m.minio.Pid()
}

// Env is the credentials' environment for a client process.
func (m *S3) Env() []string {
	return []string{"AWS_ACCESS_KEY_ID=" + m.AccessKey, "AWS_SECRET_ACCESS_KEY=" + m.SecretKey}
}

// URL is an EpochFS source URL of bucket (credentials come from Env).
func (m *S3) URL(bucket string) string {
	return "s3://" + bucket + "?endpoint=http://" + m.Host + "&region=us-east-1"
}

// RcloneRemote is an rclone on-the-fly remote of bucket whose credentials
// come from Env (env_auth), never from argv.
func (m *S3) RcloneRemote(bucket string) string {
	return `:s3,provider=Minio,env_auth=true,region=us-east-1,endpoint="http://` + m.Host + `":` + bucket
}

// StartMinIO starts `minio server` on dir with s3.Launch, as the tests do,
// with random credentials. dir may hold the data of an earlier run; its
// buckets are served again. The caller stops it (Stop).
func StartMinIO(bin, dir string) (*S3, error) {
	srv, err := s3.Launch(bin, dir, "bench"+testenv.RandHex(6), testenv.RandHex(20))
	if err != nil {
		return nil, err
	}
	bulk, err := NewClient(srv.Host, srv.AccessKey, srv.SecretKey, 64)
	if err != nil {
		srv.Stop()
		return nil, err
	}
	return &S3{Server: &srv.Server, minio: srv, bulk: bulk}, nil
}

// NewClient is a minio-go client whose transport keeps enough idle
// connections for conns parallel requests.
func NewClient(host, access, secret string, conns int) (*minio.Client, error) {
	tr, err := minio.DefaultTransport(false)
	if err != nil {
		return nil, err
	}
	tr.MaxIdleConns = conns * 2
	tr.MaxIdleConnsPerHost = conns * 2
	tr.DisableCompression = true
	return minio.New(host, &minio.Options{Creds: credentials.NewStaticV4(access, secret, ""), Region: "us-east-1", Transport: tr})
}

// Upload puts every file under root (paths relative to it) into bucket,
// creating the bucket if needed, with workers parallel PUTs. progress, when
// not nil, is called with the count done after every 10,000 files.
func (m *S3) Upload(ctx context.Context, bucket, root string, paths []string, workers int, progress func(done int)) error {
	exists, err := m.bulk.BucketExists(ctx, bucket)
	if err != nil {
		return err
	}
	if !exists {
		if err := m.bulk.MakeBucket(ctx, bucket, minio.MakeBucketOptions{Region: "us-east-1"}); err != nil {
			return err
		}
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		done     int
		next     = make(chan string)
	)
	for range max(workers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range next {
				b, err := os.ReadFile(filepath.Join(root, p))
				if err == nil {
					_, err = m.bulk.PutObject(ctx, bucket, p, bytes.NewReader(b), int64(len(b)), minio.PutObjectOptions{ContentType: "application/octet-stream"})
				}
				mu.Lock()
				if err != nil {
					firstErr = errors.Join(firstErr, err)
				}
				done++
				if progress != nil && done%10_000 == 0 {
					progress(done)
				}
				mu.Unlock()
			}
		}()
	}
	for _, p := range paths {
		next <- p
	}
	close(next)
	wg.Wait()
	return firstErr
}

// WorkDir returns dir, or when dir is "" a new temporary directory under
// /var/tmp named prefix*, and a func that removes the directory if WorkDir
// created it (else does nothing).
func WorkDir(dir, prefix string) (string, func(), error) {
	if dir != "" {
		return dir, func() {}, nil
	}
	tmp, err := os.MkdirTemp("/var/tmp", prefix)
	if err != nil {
		return "", nil, err
	}
	return tmp, func() { os.RemoveAll(tmp) }, nil
}
