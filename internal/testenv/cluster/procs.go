package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/epochfs/epochfs/internal/testenv"
)

// clusterPaths are the files and directories under a cluster's state dir.
type clusterPaths struct{ dir string }

func (p clusterPaths) join(elem ...string) string {
	return filepath.Join(append([]string{p.dir}, elem...)...)
}

func (p clusterPaths) pidFile(name string) string { return p.join("pids", name+".pid") }

func (p clusterPaths) logFile(name string) string { return p.join("logs", name+".log") }

func (p clusterPaths) containerdSock() string { return p.join("containerd", "containerd.sock") }

// registryHostsDir is containerd's CRI registry config_path: a
// HOST:PORT/hosts.toml per registry with settings (StartRegistry).
func (p clusterPaths) registryHostsDir() string { return p.join("containerd", "certs.d") }

func (p clusterPaths) kubeletRoot() string { return p.join("kubelet") }

func (p clusterPaths) hostDir() string { return p.join("host") }

func (p clusterPaths) kubeconfig() string { return p.join("kubeconfig") }

// clusterProcs are the cluster's processes in start order; Down
// stops them in reverse, the kubelet before containerd.
var clusterProcs = []string{"etcd", "kube-apiserver", "containerd", "kubelet", "kube-controller-manager", "kube-scheduler"}

// startDaemon starts name in its own session with output to its log file
// and records its PID and binary (so Down kills only it).
func startDaemon(p clusterPaths, name, bin string, args ...string) (*testenv.Proc, error) {
	logPath := p.logFile(name)
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	c, err := testenv.StartProc(name, cmd, nil)
	if err != nil {
		return nil, err
	}
	c.LogPath = logPath
	pid := fmt.Sprintf("%d\n%s\n", cmd.Process.Pid, bin)
	if err := os.WriteFile(p.pidFile(name), []byte(pid), 0o644); err != nil {
		_ = cmd.Process.Kill()
		return nil, err
	}
	return c, nil
}

// readPid returns the PID recorded for name, if that process still runs the
// recorded binary (a reused PID is not ours).
func readPid(p clusterPaths, name string) (int, bool) {
	b, err := os.ReadFile(p.pidFile(name))
	if err != nil {
		return 0, false
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	pid, err := strconv.Atoi(lines[0])
	if err != nil || pid <= 0 || len(lines) < 2 {
		return 0, false
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return 0, false
	}
	want, _ := filepath.EvalSymlinks(lines[1])
	if exe != want && exe != lines[1] {
		return 0, false
	}
	if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		if i := strings.LastIndexByte(string(st), ')'); i > 0 && i+2 < len(st) && st[i+2] == 'Z' {
			return 0, false // a zombie: exited, not yet reaped
		}
	}
	return pid, true
}

func procAlive(p clusterPaths, name string) bool {
	_, ok := readPid(p, name)
	return ok
}

func runningProcs(p clusterPaths) []string {
	var running []string
	for _, name := range clusterProcs {
		if procAlive(p, name) {
			running = append(running, name)
		}
	}
	return running
}

// clusterOwner returns the state dir and test PID named by
// clusterOwnerFile and whether any of its processes still runs.
func clusterOwner() (dir string, testPID int, alive bool) {
	b, err := os.ReadFile(clusterOwnerFile)
	if err != nil {
		return "", 0, false
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	dir = lines[0]
	if len(lines) > 1 {
		testPID, _ = strconv.Atoi(lines[1])
	}
	return dir, testPID, len(runningProcs(clusterPaths{dir})) > 0
}

// stopProc sends SIGTERM to the recorded process, waits up to grace, then
// SIGKILLs it, and removes the PID file.
func stopProc(p clusterPaths, name string, grace time.Duration) error {
	pid, ok := readPid(p, name)
	if !ok {
		_ = os.Remove(p.pidFile(name))
		return nil
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if !procAlive(p, name) {
			return os.Remove(p.pidFile(name))
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	for range 100 {
		if !procAlive(p, name) {
			_ = os.Remove(p.pidFile(name))
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s (pid %d) survived SIGKILL", name, pid)
}
