// Package cluster runs a real single-node Kubernetes for the end-to-end
// tests and `make cluster-up` (docs/CLUSTER.md): etcd and kube-apiserver
// as package kube runs them, kube-controller-manager, kube-scheduler,
// Debian's containerd and a kubelet, all from one state directory and
// torn down to the last pod, mount and cgroup (Down). It also holds what
// runs on that cluster: container images written without a daemon
// (image.go), an image registry on 127.0.0.1 the cluster's containerd
// pulls from over plain HTTP (registry.go), a throw-away containerd
// without Kubernetes (containerd.go),
// the Helm chart's install (chart.go) and TF_CONFIG as TensorFlow reads it.
// A missing tool or root skips a test, or fails it under CI=true; the
// tests that start a cluster are gated by testenv.RequireE2E.
//
// It knows nothing of EpochFS's code; the tests bring the images and the
// chart.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/epochfs/epochfs/internal/testenv"
)

// Cluster is a real single-node Kubernetes on 127.0.0.1: etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler, containerd
// (Debian's, CRI plugin) and a kubelet registered as Node "localhost", all
// started from one state directory (docs/CLUSTER.md). Only one runs per
// machine at a time (the kubelet's cgroups and the CNI bridge are
// machine-wide). Fields are read-only.
type Cluster struct {
	// Dir is the state directory: certificates, data, logs (Dir/logs),
	// PID files, containerd's root/state/socket and the kubelet's root dir.
	Dir string
	// Kubeconfig is the path of an admin kubeconfig (Dir/kubeconfig).
	Kubeconfig string
	// Config authenticates as a cluster admin (system:masters).
	Config *rest.Config
	// Client is a clientset for Config.
	Client kubernetes.Interface
	// ContainerdSocket is the socket of the cluster's own containerd.
	ContainerdSocket string
	// HostDir (Dir/host) is for the host paths of the pods the tests run:
	// like KubeletDir it is a shared mount (a real node's / is), which
	// hostPaths mounted with Bidirectional propagation need.
	HostDir string
	// KubeletDir is the kubelet's --root-dir (Dir/kubelet): CSI drivers run
	// as host processes put their socket under KubeletDir/plugins and
	// register through KubeletDir/plugins_registry.
	KubeletDir string
	// UpTime is how long Up took (processes started to Node Ready).
	UpTime time.Duration
}

// NodeName is the kubelet's node name (--hostname-override): the
// API server reaches the kubelet (logs, exec) by this hostname.
const NodeName = "localhost"

// PauseImage is the pod sandbox image the cluster imports at start
// (built from tools/pause/pause.c).
const PauseImage = "docker.io/local/pause:1"

// clusterUpTimeout bounds Up's wait for each server and for Node Ready.
const clusterUpTimeout = 3 * time.Minute

// clusterOwnerFile names the state directory of the cluster that runs on
// this machine, and for Start's clusters the test process's PID; a
// second Up refuses to start while it is alive, unless it is a
// test's whose process is gone (killed, timed out: no t.Cleanup ran), which
// it tears down first.
const clusterOwnerFile = "/run/epochfs-test-cluster"

// cniBridge is the bridge the cluster's CNI config makes for pods that do
// not use hostNetwork; Down deletes it.
const cniBridge = "cni-epoch0"

// clusterTools are the binaries a cluster needs, by FindTool name, and
// where they come from.
var clusterTools = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "pause"}

// clusterSystemBins are the Debian binaries a cluster needs
// (scripts/cluster-deps.sh).
var clusterSystemBins = []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "/usr/lib/cni/bridge", "/usr/lib/cni/host-local", "/usr/lib/cni/loopback", "busybox"}

// Missing returns what the cluster needs but this machine lacks
// (tools, Debian packages, root), empty when Up can run.
func Missing() []string {
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root (kubelet and containerd)")
	}
	for _, name := range clusterTools {
		if _, err := testenv.FindTool(name); err != nil {
			missing = append(missing, name+" (make cluster-tools)")
		}
	}
	for _, name := range clusterSystemBins {
		if filepath.IsAbs(name) {
			if !testenv.Executable(name) {
				missing = append(missing, name+" (scripts/cluster-deps.sh)")
			}
		} else if _, err := exec.LookPath(name); err != nil {
			missing = append(missing, name+" (scripts/cluster-deps.sh)")
		}
	}
	return missing
}

// Start starts a Cluster in a temporary directory of t and tears it
// down in t.Cleanup (every pod, process and mount; see Down). When
// tools or root are missing it skips the test, or fails it under CI=true.
// It takes a minute or more on 2 cores: callers gate it (RequireE2E).
func Start(t testing.TB) *Cluster {
	t.Helper()
	if missing := Missing(); len(missing) > 0 {
		testenv.RequireOrSkip(t, "test cluster: missing "+strings.Join(missing, ", "), "run `make cluster-tools` as root")
	}
	unlock := lockClusterMachine(t)
	dir := t.TempDir()
	c, err := upCluster(context.Background(), dir, t.Logf, os.Getpid())
	if err != nil && strings.Contains(err.Error(), "address already in use") {
		// A port taken between freePorts and bind: once more, on new ports.
		t.Logf("cluster: cluster up: %v; retrying", err)
		c, err = upCluster(context.Background(), dir, t.Logf, os.Getpid())
	}
	t.Cleanup(func() {
		defer unlock()
		if err := Down(dir, t.Logf); err != nil {
			t.Errorf("cluster: cluster down: %v", err)
		}
		if t.Failed() {
			for _, name := range []string{"kubelet", "containerd", "kube-controller-manager", "kube-scheduler"} {
				t.Logf("%s log (tail):\n%s", name, tailFile(filepath.Join(dir, "logs", name+".log"), 3000))
			}
		}
	})
	if err != nil {
		t.Fatalf("cluster: cluster up: %v", err)
	}
	return c
}

// clusterLockFile serialises Start across test processes (go test
// runs packages in parallel; the e2e package and this one both start
// clusters, and only one can run on a machine: the kubelet's cgroups and the
// CNI bridge are machine-wide). The kernel drops the flock when its holder
// dies.
const clusterLockFile = "/run/epochfs-test-cluster.lock"

// clusterLockWait bounds the wait for another test's cluster.
const clusterLockWait = 30 * time.Minute

// lockClusterMachine takes the machine's cluster lock, waiting for the test
// that holds it, and returns its release.
func lockClusterMachine(t testing.TB) func() {
	t.Helper()
	f, err := os.OpenFile(clusterLockFile, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatalf("cluster: cluster lock: %v", err)
	}
	start, told := time.Now(), false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			t.Fatalf("cluster: cluster lock: %v", err)
		}
		if !told {
			t.Logf("cluster: waiting for another test's cluster to go (%s)", clusterLockFile)
			told = true
		}
		if time.Since(start) > clusterLockWait {
			f.Close()
			t.Fatalf("cluster: another test held the cluster for over %s", clusterLockWait)
		}
		time.Sleep(time.Second)
	}
	if told {
		t.Logf("cluster: got the cluster lock after %s", time.Since(start).Round(time.Second))
	}
	return func() { f.Close() } // closing the only descriptor drops the flock
}

// tailFile returns the last n bytes of a file, or a note that it is unreadable.
func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	if len(b) > n {
		return "…" + string(b[len(b)-n:])
	}
	return string(b)
}
