// Package benchproc starts and stops the processes the benchmarks under
// bench/ compare side by side: MinIO, rclone mounts, and mounts in general.
// It is the benchmarks' counterpart of internal/testenv (which needs a
// testing.TB): every process is stopped by its own PID only.
package benchproc

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Proc is a child process a benchmark started (a mount or a server).
type Proc struct {
	Name  string
	Cmd   *exec.Cmd
	Mnt   string      // mount point it serves, "" for a server
	Debug string      // a mount's /debug address, when known
	Out   *SyncBuffer // its stdout and stderr, unless the caller set them
	Done  chan struct{}
}

// Start starts cmd and returns it as a Proc; Done closes when it exits.
func Start(name string, cmd *exec.Cmd, mnt string) (*Proc, error) {
	p := &Proc{Name: name, Cmd: cmd, Mnt: mnt, Out: &SyncBuffer{Max: 1 << 20}, Done: make(chan struct{})}
	if cmd.Stderr == nil {
		cmd.Stderr = p.Out
	}
	if cmd.Stdout == nil {
		cmd.Stdout = p.Out
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	go func() { _ = cmd.Wait(); close(p.Done) }()
	return p, nil
}

// Stop sends SIGTERM, waits, kills after a grace period, and detaches the
// mount point if it is still mounted.
func (p *Proc) Stop() {
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.Done:
	case <-time.After(30 * time.Second):
		_ = p.Cmd.Process.Kill()
		<-p.Done
	}
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

// MinIO is a MinIO server started for a benchmark.
type MinIO struct {
	*Proc
	Host, Access, Secret string
	Client               *minio.Client
}

// Env is the credentials' environment for a client process.
func (m *MinIO) Env() []string {
	return []string{"AWS_ACCESS_KEY_ID=" + m.Access, "AWS_SECRET_ACCESS_KEY=" + m.Secret}
}

// URL is an EpochFS source URL of bucket (credentials come from Env).
func (m *MinIO) URL(bucket string) string {
	return "s3://" + bucket + "?endpoint=http://" + m.Host + "&region=us-east-1"
}

// RcloneRemote is an rclone on-the-fly remote of bucket whose credentials
// come from Env (env_auth), never from argv.
func (m *MinIO) RcloneRemote(bucket string) string {
	return `:s3,provider=Minio,env_auth=true,region=us-east-1,endpoint="http://` + m.Host + `":` + bucket
}

// StartMinIO starts `minio server` on dir, on a free port of 127.0.0.1 with
// random credentials, like internal/testenv does for tests. dir may hold
// the data of an earlier run; its buckets are served again.
func StartMinIO(bin, dir string) (*MinIO, error) {
	port, cport := FreePort(), FreePort()
	m := &MinIO{Host: "127.0.0.1:" + strconv.Itoa(port), Access: "bench" + RandHex(6), Secret: RandHex(20)}
	cmd := exec.Command(bin, "server", dir, "--address", m.Host, "--console-address", "127.0.0.1:"+strconv.Itoa(cport), "--quiet")
	cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+m.Access, "MINIO_ROOT_PASSWORD="+m.Secret, "MINIO_BROWSER=off", "MINIO_UPDATE=off")
	p, err := Start("minio", cmd, "")
	if err != nil {
		return nil, err
	}
	m.Proc = p
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get("http://" + m.Host + "/minio/health/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case <-p.Done:
			return nil, fmt.Errorf("minio exited: %s", p.Out.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.Stop()
			return nil, errors.New("minio not ready after 60s")
		}
	}
	m.Client, err = NewClient(m.Host, m.Access, m.Secret, 64)
	if err != nil {
		p.Stop()
		return nil, err
	}
	return m, nil
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
func (m *MinIO) Upload(ctx context.Context, bucket, root string, paths []string, workers int, progress func(done int)) error {
	exists, err := m.Client.BucketExists(ctx, bucket)
	if err != nil {
		return err
	}
	if !exists {
		if err := m.Client.MakeBucket(ctx, bucket, minio.MakeBucketOptions{Region: "us-east-1"}); err != nil {
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
					_, err = m.Client.PutObject(ctx, bucket, p, bytes.NewReader(b), int64(len(b)), minio.PutObjectOptions{ContentType: "application/octet-stream"})
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

// FreePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func FreePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
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

// RandHex returns n random bytes in hex.
func RandHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// SyncBuffer is a bytes.Buffer safe for concurrent writers (a child's two
// pipes, a logger shared by goroutines) and readers. The zero value is
// ready and keeps everything written; internal/testenv uses it as is.
type SyncBuffer struct {
	// Max > 0 keeps only a process's tail: once the buffer holds more than
	// Max bytes, the next write starts it afresh.
	Max int

	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.Max > 0 && b.buf.Len() > b.Max {
		b.buf.Reset()
	}
	return b.buf.Write(p)
}

// String returns what the buffer holds.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
