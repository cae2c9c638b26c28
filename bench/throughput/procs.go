package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// proc is a child process this benchmark started (a mount or a server).
// Stop ends it by its PID only.
type proc struct {
	name  string
	cmd   *exec.Cmd
	mnt   string // mount point it serves, "" for a server
	debug string // mount child: its /debug address
	out   *syncBuffer
	done  chan struct{}
}

// Stop sends SIGTERM, waits, kills after a grace period, and detaches the
// mount point if it is still mounted.
func (p *proc) Stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	if p.mnt != "" && mounted(p.mnt) {
		_ = syscall.Unmount(p.mnt, syscall.MNT_DETACH)
	}
}

func start(name string, cmd *exec.Cmd, mnt string) (*proc, error) {
	p := &proc{name: name, cmd: cmd, mnt: mnt, out: &syncBuffer{}, done: make(chan struct{})}
	if cmd.Stderr == nil {
		cmd.Stderr = p.out
	}
	if cmd.Stdout == nil {
		cmd.Stdout = p.out
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	return p, nil
}

// mounted reports whether dir is a mount point (its device differs from its
// parent's).
func mounted(dir string) bool {
	var a, b syscall.Stat_t
	if syscall.Stat(dir, &a) != nil || syscall.Stat(filepath.Dir(dir), &b) != nil {
		return false
	}
	return a.Dev != b.Dev
}

// startEpochFS runs a mount child of this binary (see child.go) and waits
// until it is mounted.
func startEpochFS(source, mnt, cacheDir string, capacity int64, env []string) (*proc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "-cache-dir", cacheDir, "-cache-size", strconv.FormatInt(capacity, 10), source, mnt)
	cmd.Env = append(append(os.Environ(), childEnv+"=1"), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p, err := start("epochfs mount", cmd, mnt)
	if err != nil {
		return nil, err
	}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(sc.Text(), "ready "); ok {
				ready <- addr
			}
		}
	}()
	select {
	case p.debug = <-ready:
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("epochfs mount exited before ready: %s", p.out.String())
	case <-time.After(60 * time.Second):
		p.Stop()
		return nil, fmt.Errorf("epochfs mount not ready after 60s: %s", p.out.String())
	}
}

// startRclone mounts source with `rclone mount --vfs-cache-mode full` and a
// cache of the same capacity, with the same kernel attribute/entry timeouts
// as EpochFS (1h), read-only.
func startRclone(rclone, source, mnt, cacheDir string, capacity int64) (*proc, error) {
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
	p, err := start("rclone mount", cmd, mnt)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(60 * time.Second)
	for !mounted(mnt) {
		select {
		case <-p.done:
			return nil, fmt.Errorf("rclone mount exited: %s", p.out.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.Stop()
			return nil, fmt.Errorf("rclone mount not ready after 60s: %s", p.out.String())
		}
	}
	return p, nil
}

// minioServer is a MinIO server started for the benchmark.
type minioServer struct {
	*proc
	host, access, secret string
	client               *minio.Client
}

func (m *minioServer) env() []string {
	return []string{"AWS_ACCESS_KEY_ID=" + m.access, "AWS_SECRET_ACCESS_KEY=" + m.secret}
}

func (m *minioServer) url(bucket string) string {
	return "s3://" + bucket + "?endpoint=http://" + m.host + "&region=us-east-1"
}

// startMinIO starts `minio server` on dir, on a free port of 127.0.0.1 with
// random credentials, like internal/testenv does for tests.
func startMinIO(bin, dir string) (*minioServer, error) {
	port, cport := freePort(), freePort()
	m := &minioServer{host: "127.0.0.1:" + strconv.Itoa(port), access: "bench" + randHex(6), secret: randHex(20)}
	cmd := exec.Command(bin, "server", dir, "--address", m.host, "--console-address", "127.0.0.1:"+strconv.Itoa(cport), "--quiet")
	cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+m.access, "MINIO_ROOT_PASSWORD="+m.secret, "MINIO_BROWSER=off", "MINIO_UPDATE=off")
	p, err := start("minio", cmd, "")
	if err != nil {
		return nil, err
	}
	m.proc = p
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get("http://" + m.host + "/minio/health/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("minio exited: %s", p.out.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.Stop()
			return nil, errors.New("minio not ready after 60s")
		}
	}
	m.client, err = newClient(m.host, m.access, m.secret, 64)
	if err != nil {
		p.Stop()
		return nil, err
	}
	return m, nil
}

// newClient is a minio-go client whose transport keeps enough idle
// connections for conns parallel requests.
func newClient(host, access, secret string, conns int) (*minio.Client, error) {
	tr, err := minio.DefaultTransport(false)
	if err != nil {
		return nil, err
	}
	tr.MaxIdleConns = conns * 2
	tr.MaxIdleConnsPerHost = conns * 2
	tr.DisableCompression = true
	return minio.New(host, &minio.Options{Creds: credentials.NewStaticV4(access, secret, ""), Region: "us-east-1", Transport: tr})
}

// upload puts every file under root into bucket with 16 parallel PUTs.
func (m *minioServer) upload(ctx context.Context, bucket, root string, paths []string) error {
	if err := m.client.MakeBucket(ctx, bucket, minio.MakeBucketOptions{Region: "us-east-1"}); err != nil {
		return err
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		next     = make(chan string)
	)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range next {
				b, err := os.ReadFile(filepath.Join(root, p))
				if err == nil {
					_, err = m.client.PutObject(ctx, bucket, p, bytes.NewReader(b), int64(len(b)), minio.PutObjectOptions{ContentType: "application/octet-stream"})
				}
				if err != nil {
					mu.Lock()
					firstErr = errors.Join(firstErr, err)
					mu.Unlock()
				}
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

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len() > 1<<20 { // keep the tail only
		b.buf.Reset()
	}
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

var _ io.Writer = (*syncBuffer)(nil)
