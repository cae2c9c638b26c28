package s3

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/epochfs/epochfs/internal/testenv"
)

// MinIO is a MinIO server started on free 127.0.0.1 ports. Exported fields
// are read-only.
type MinIO struct {
	Server

	bin   string
	data  string // server data dir, kept across Stop/Restart
	ports [2]int // API and console ports
	out   *testenv.SyncBuffer

	mu   sync.Mutex
	proc *testenv.Proc // the running server; nil when stopped
}

// minioReadyTimeout bounds the wait for /minio/health/ready.
const minioReadyTimeout = 60 * time.Second

// Launch starts `minio server` (the binary bin) on dataDir, which may hold
// the buckets of an earlier run, with the given root credentials, on free
// 127.0.0.1 ports, and waits until it is ready. A port taken between the
// choice and the bind is retried on new ports. The caller stops it (Stop).
func Launch(bin, dataDir, accessKey, secretKey string) (*MinIO, error) {
	var lastErr error
	for range 3 {
		ports, err := testenv.FreePorts(2)
		if err != nil {
			return nil, err
		}
		m := &MinIO{bin: bin, data: dataDir, ports: [2]int(ports), out: &testenv.SyncBuffer{}}
		m.AccessKey, m.SecretKey = accessKey, secretKey
		m.Host = "127.0.0.1:" + strconv.Itoa(m.ports[0])
		m.Endpoint = "http://" + m.Host
		if err := m.start(); err != nil {
			lastErr = err
			continue
		}
		if err := m.connect(); err != nil {
			m.Stop()
			return nil, err
		}
		return m, nil
	}
	return nil, fmt.Errorf("s3: start minio: %w", lastErr)
}

// StartMinIO starts a MinIO (Launch) on a temporary directory of t with
// random root credentials, and stops it (kill by PID, then wait) in
// t.Cleanup. When the binary is missing it skips the test, or fails it
// under CI=true.
func StartMinIO(t testing.TB) *MinIO {
	t.Helper()
	return startMinIO(t, "epochfs"+testenv.RandHex(8), testenv.RandHex(20))
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
	bin, err := testenv.FindTool("minio")
	if err != nil {
		testenv.RequireOrSkip(t, "minio not found", "run `make tools` (or set EPOCHFS_TOOLS_BIN)")
	}
	m, err := Launch(bin, t.TempDir(), accessKey, secretKey)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.Stop()
		if t.Failed() {
			t.Logf("minio output:\n%s", m.out.String())
		}
	})
	return m
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
	p, err := testenv.StartProc("minio", cmd, m.out)
	if err != nil {
		return err
	}
	if err := p.WaitHTTP(http.DefaultClient, m.Endpoint+"/minio/health/ready", minioReadyTimeout); err != nil {
		p.Kill()
		return err
	}
	m.mu.Lock()
	m.proc = p
	m.mu.Unlock()
	return nil
}

// Pid is the running server's process id (0 when stopped).
func (m *MinIO) Pid() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc == nil {
		return 0
	}
	return m.proc.Cmd.Process.Pid
}

// Stop kills the server (a backend outage); its data stays for Restart.
func (m *MinIO) Stop() {
	m.mu.Lock()
	p := m.proc
	m.proc = nil
	m.mu.Unlock()
	if p != nil {
		p.Kill()
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
	t.Fatalf("s3: restart minio: %v", err)
}
