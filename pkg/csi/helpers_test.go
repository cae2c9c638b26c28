package csi_test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/pkg/csi"
)

// buildBinaries builds cachefs and csi-driver once per test binary
// (build_test.go).
func buildBinaries(t *testing.T) (cachefs, driver string) { return csi.BuildBinaries(t) }

// testDriver runs a Driver in this process on a unix socket and returns a
// client connection; the driver stops and every mount it made is undone in
// t.Cleanup.
type testDriver struct {
	sock       string
	stateDir   string
	kubeletDir string // staging paths and targets must lie under it
	cacheDir   string
	conn       *grpc.ClientConn
	driver     *csi.Driver
	stop       func()
}

func startDriver(t *testing.T, mutate func(*csi.Config)) *testDriver {
	t.Helper()
	testenv.RequireFUSE(t)
	cachefs, _ := buildBinaries(t)
	dir := t.TempDir()
	td := &testDriver{sock: filepath.Join(dir, "csi.sock"), stateDir: filepath.Join(dir, "state"), cacheDir: filepath.Join(dir, "cache"),
		kubeletDir: filepath.Join(dir, "kubelet")}
	cfg := csi.Config{
		Endpoint:      "unix://" + td.sock,
		NodeID:        "test-node",
		Mode:          csi.ModeAll,
		StateDir:      td.stateDir,
		CacheRoot:     td.cacheDir,
		CachefsBinary: cachefs,
		MountTimeout:  30 * time.Second,
		// Tests make their datasets in temp dirs; the state dir and cache
		// root are forbidden inside this root all the same.
		AllowedLocalRoots: []string{os.TempDir()},
		KubeletDir:        td.kubeletDir,
		// The tests exercise inline volumes; TestInlineVolumesOff checks
		// the default.
		AllowInlineVolumes: true,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	td.stateDir, td.kubeletDir = cfg.StateDir, cfg.KubeletDir
	if err := os.MkdirAll(td.kubeletDir, 0o750); err != nil {
		t.Fatal(err)
	}
	d, err := csi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	waitSocket(t, td.sock)
	conn, err := grpc.NewClient("unix://"+td.sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	td.conn, td.driver = conn, d
	td.stop = func() {
		conn.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("driver: %v", err)
		}
	}
	t.Cleanup(func() {
		td.stop()
		unmountSecretsTmpfs(cfg.StateDir)
		cleanupMounts(t, dir)
	})
	return td
}

// unmountSecretsTmpfs unmounts the tmpfs the node service mounts on
// <stateDir>/node/secrets, which outlives the driver by design (a restarted
// driver re-uses it). Nothing mounted there is fine.
func unmountSecretsTmpfs(stateDir string) {
	p := filepath.Join(stateDir, "node", "secrets")
	for range 4 {
		if syscall.Unmount(p, 0) != nil {
			return
		}
	}
}

// workDir returns a new directory under the driver's kubelet dir, for
// staging paths and targets.
func (td *testDriver) workDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp(td.kubeletDir, "pod-")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func waitSocket(t *testing.T, sock string) {
	t.Helper()
	// Dial, not stat: the socket file exists from bind(2) on, but connects
	// are refused until listen(2).
	for i := 0; i < 500; i++ {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("socket %s did not appear", sock)
}

// cleanupMounts unmounts anything still mounted under dir and fails the
// test if something was left behind by the code under test.
func cleanupMounts(t *testing.T, dir string) {
	t.Helper()
	for _, m := range mountsUnder(t, dir) {
		t.Errorf("left mounted after the test: %s", m)
		_ = exec.Command("umount", "-l", m).Run()
	}
}

func node(td *testDriver) csipb.NodeClient             { return csipb.NewNodeClient(td.conn) }
func controller(td *testDriver) csipb.ControllerClient { return csipb.NewControllerClient(td.conn) }

type cfgT = csi.Config

func itoa(n int) string { return strconv.Itoa(n) }
