package csi_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
	log  *testenv.SyncBuffer
}

// runDriverProcess starts csi-driver with extra flags; with mode "mounter"
// it starts only the mounter (no CSI client).
func runDriverProcess(t *testing.T, dir, mode string, extra ...string) *driverProcess {
	t.Helper()
	cachefs, driver := buildBinaries(t)
	sock := filepath.Join(dir, "csi.sock")
	if mode == "mounter" {
		sock = filepath.Join(dir, "mounter.sock")
	}
	_ = os.Remove(sock)
	log := &testenv.SyncBuffer{}
	args := append([]string{"--endpoint", "unix://" + sock, "--nodeid", "n1", "--mode", mode,
		"--state-dir", filepath.Join(dir, "state"), "--cache-root", filepath.Join(dir, "cache"),
		"--cachefs-binary", cachefs, "--health-interval", "0", "--log-format", "text",
		"--allowed-local-roots", os.TempDir(), "--kubelet-dir", filepath.Join(dir, "kubelet")}, extra...)
	if mode == "mounter" {
		args = append(args, "--mounter-endpoint", "unix://"+sock)
	}
	cmd := exec.Command(driver, args...)
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &driverProcess{cmd: cmd, done: make(chan struct{}), log: log}
	go func() { _ = cmd.Wait(); close(p.done) }()
	waitSocket(t, sock)
	if mode == "mounter" {
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			<-p.done
		})
		return p
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	p.td = &testDriver{sock: sock, stateDir: filepath.Join(dir, "state"), kubeletDir: filepath.Join(dir, "kubelet"), conn: conn}
	t.Cleanup(func() {
		conn.Close()
		_ = cmd.Process.Kill()
		<-p.done
		unmountSecretsTmpfs(p.td.stateDir)
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
	t.Run("local launcher", func(t *testing.T) { testKill9AndRestart(t, false) })
	t.Run("mounter", func(t *testing.T) { testKill9AndRestart(t, true) })
}

func testKill9AndRestart(t *testing.T, viaMounter bool) {
	testenv.RequireFUSE(t)
	dir := t.TempDir()
	var extra []string
	var mounter *driverProcess
	if viaMounter {
		mounter = runDriverProcess(t, dir, "mounter")
		extra = []string{"--mounter-endpoint", "unix://" + filepath.Join(dir, "mounter.sock")}
	}
	data, files := dataset(t)
	work := filepath.Join(dir, "kubelet", "pod")
	staging, target := filepath.Join(work, "staging"), filepath.Join(work, "pod", "vol")
	vctx := map[string]string{"source": data, "cacheSize": "64MiB"}
	t.Cleanup(func() {
		for _, m := range append(mountsUnder(t, work), mountsUnder(t, dir)...) {
			t.Errorf("left mounted: %s", m)
			_ = syscall.Unmount(m, syscall.MNT_DETACH)
		}
	})

	p1 := runDriverProcess(t, dir, "all", extra...)
	stage(t, p1.td, "vol-k", staging, vctx)
	publish(t, p1.td, "vol-k", staging, target, vctx)
	checkFiles(t, target, files[:10])
	pids := mountProcesses(t, p1.td.stateDir)
	if len(pids) != 1 {
		t.Fatalf("%d mount processes, want 1", len(pids))
	}
	parent := p1.cmd.Process.Pid
	if viaMounter {
		parent = mounter.cmd.Process.Pid
	}
	if ppid := parentPID(t, pids[0]); ppid != parent {
		t.Errorf("mount process %d has parent %d, want %d (mounter: %v)", pids[0], ppid, parent, viaMounter)
	}

	p1.kill9(t)
	checkFiles(t, target, files) // still serving, cached and uncached files alike
	if now := mountProcesses(t, p1.td.stateDir); len(now) != 1 || now[0] != pids[0] {
		t.Fatalf("mount processes after kill -9 of the driver: %v, want %v", now, pids)
	}

	p2 := runDriverProcess(t, dir, "all", extra...)
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

func parentPID(t *testing.T, pid int) int {
	t.Helper()
	ppid := testenv.ParentPID(pid)
	if ppid == 0 {
		t.Fatalf("process %d is gone", pid)
	}
	return ppid
}
