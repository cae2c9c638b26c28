package csi_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/epochfs/epochfs/internal/testenv"
)

// driverProcess runs bin/csi-driver as its own process, as on a node.
type driverProcess struct {
	cmd  *exec.Cmd
	done chan struct{}
	td   *testDriver
	log  *syncBuffer
}

// syncBuffer is a bytes.Buffer safe for the process's writes and our reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func runDriverProcess(t *testing.T, dir string) *driverProcess {
	t.Helper()
	cachefs, driver := buildBinaries(t)
	sock := filepath.Join(dir, "csi.sock")
	_ = os.Remove(sock)
	log := &syncBuffer{}
	cmd := exec.Command(driver, "--endpoint", "unix://"+sock, "--nodeid", "n1", "--mode", "all",
		"--state-dir", filepath.Join(dir, "state"), "--cache-root", filepath.Join(dir, "cache"),
		"--cachefs-binary", cachefs, "--health-interval", "0", "--log-format", "text")
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &driverProcess{cmd: cmd, done: make(chan struct{}), log: log}
	go func() { _ = cmd.Wait(); close(p.done) }()
	waitSocket(t, sock)
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	p.td = &testDriver{sock: sock, stateDir: filepath.Join(dir, "state"), conn: conn}
	t.Cleanup(func() {
		conn.Close()
		_ = cmd.Process.Kill()
		<-p.done
	})
	return p
}

func (p *driverProcess) kill9(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
	p.td.conn.Close()
}

// TestDriverKill9AndRestart: after kill -9 of the driver the mounts keep
// serving; a restarted driver re-adopts them from --state-dir, and
// unpublish/unstage still work and clean everything up.
func TestDriverKill9AndRestart(t *testing.T) {
	testenv.RequireFUSE(t)
	dir := t.TempDir()
	data, files := dataset(t)
	work := t.TempDir()
	staging, target := filepath.Join(work, "staging"), filepath.Join(work, "pod", "vol")
	vctx := map[string]string{"source": data, "cacheSize": "64MiB"}
	t.Cleanup(func() {
		for _, m := range append(mountsUnder(t, work), mountsUnder(t, dir)...) {
			t.Errorf("left mounted: %s", m)
			_ = syscall.Unmount(m, syscall.MNT_DETACH)
		}
	})

	p1 := runDriverProcess(t, dir)
	stage(t, p1.td, "vol-k", staging, vctx)
	publish(t, p1.td, "vol-k", staging, target, vctx)
	checkFiles(t, target, files[:10])
	pids := mountProcesses(t, p1.td.stateDir)
	if len(pids) != 1 {
		t.Fatalf("%d mount processes, want 1", len(pids))
	}

	p1.kill9(t)
	checkFiles(t, target, files) // still serving, cached and uncached files alike
	if now := mountProcesses(t, p1.td.stateDir); len(now) != 1 || now[0] != pids[0] {
		t.Fatalf("mount processes after kill -9 of the driver: %v, want %v", now, pids)
	}

	p2 := runDriverProcess(t, dir)
	st, err := node(p2.td).NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: "vol-k", VolumePath: target})
	if err != nil {
		t.Fatalf("stats after restart: %v\n%s", err, p2.log)
	}
	if st.GetUsage()[0].Used == 0 {
		t.Error("re-adopted volume reports an empty cache")
	}
	if !strings.Contains(p2.log.String(), "re-adopted dataset mount") {
		t.Errorf("the restarted driver did not say it re-adopted the mount:\n%s", p2.log)
	}
	stage(t, p2.td, "vol-k", staging, vctx) // kubelet may stage again: idempotent, no new process
	if now := mountProcesses(t, p2.td.stateDir); len(now) != 1 || now[0] != pids[0] {
		t.Fatalf("mount processes after restart and re-stage: %v, want %v", now, pids)
	}
	checkFiles(t, target, files)
	unpublish(t, p2.td, "vol-k", target)
	unstage(t, p2.td, "vol-k", staging)
	if now := mountProcesses(t, p2.td.stateDir); len(now) != 0 {
		t.Errorf("adopted mount process %v still runs after unstage", now)
	}
}
