package testenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
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
	// UpTime is how long UpCluster took (processes started to Node Ready).
	UpTime time.Duration
}

// ClusterNodeName is the kubelet's node name (--hostname-override): the
// API server reaches the kubelet (logs, exec) by this hostname.
const ClusterNodeName = "localhost"

// PauseImage is the pod sandbox image the cluster imports at start
// (built from tools/pause/pause.c).
const PauseImage = "docker.io/local/pause:1"

// clusterUpTimeout bounds UpCluster's wait for each server and for Node Ready.
const clusterUpTimeout = 3 * time.Minute

// clusterOwnerFile names the state directory of the cluster that runs on
// this machine, and for StartCluster's clusters the test process's PID; a
// second UpCluster refuses to start while it is alive, unless it is a
// test's whose process is gone (killed, timed out: no t.Cleanup ran), which
// it tears down first.
const clusterOwnerFile = "/run/epochfs-test-cluster"

// cniBridge is the bridge the cluster's CNI config makes for pods that do
// not use hostNetwork; ClusterDown deletes it.
const cniBridge = "cni-epoch0"

// clusterTools are the binaries a cluster needs, by FindTool name, and
// where they come from.
var clusterTools = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "pause"}

// clusterSystemBins are the Debian binaries a cluster needs
// (scripts/cluster-deps.sh).
var clusterSystemBins = []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "/usr/lib/cni/bridge", "/usr/lib/cni/host-local", "/usr/lib/cni/loopback", "busybox"}

// ClusterMissing returns what the cluster needs but this machine lacks
// (tools, Debian packages, root), empty when UpCluster can run.
func ClusterMissing() []string {
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root (kubelet and containerd)")
	}
	for _, name := range clusterTools {
		if _, err := FindTool(name); err != nil {
			missing = append(missing, name+" (make cluster-tools)")
		}
	}
	for _, name := range clusterSystemBins {
		if filepath.IsAbs(name) {
			if !isExecutable(name) {
				missing = append(missing, name+" (scripts/cluster-deps.sh)")
			}
		} else if _, err := exec.LookPath(name); err != nil {
			missing = append(missing, name+" (scripts/cluster-deps.sh)")
		}
	}
	return missing
}

// StartCluster starts a Cluster in a temporary directory of t and tears it
// down in t.Cleanup (every pod, process and mount; see ClusterDown). When
// tools or root are missing it skips the test, or fails it under CI=true.
// It takes a minute or more on 2 cores: callers gate it (RequireE2E).
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	if missing := ClusterMissing(); len(missing) > 0 {
		RequireOrSkip(t, "test cluster: missing "+strings.Join(missing, ", "), "run `make cluster-tools` as root")
	}
	unlock := lockClusterMachine(t)
	dir := t.TempDir()
	c, err := upCluster(context.Background(), dir, t.Logf, os.Getpid())
	if err != nil && strings.Contains(err.Error(), "address already in use") {
		// A port taken between freePorts and bind: once more, on new ports.
		t.Logf("testenv: cluster up: %v; retrying", err)
		c, err = upCluster(context.Background(), dir, t.Logf, os.Getpid())
	}
	t.Cleanup(func() {
		defer unlock()
		if err := ClusterDown(dir, t.Logf); err != nil {
			t.Errorf("testenv: cluster down: %v", err)
		}
		if t.Failed() {
			for _, name := range []string{"kubelet", "containerd", "kube-controller-manager", "kube-scheduler"} {
				t.Logf("%s log (tail):\n%s", name, tailFile(filepath.Join(dir, "logs", name+".log"), 3000))
			}
		}
	})
	if err != nil {
		t.Fatalf("testenv: cluster up: %v", err)
	}
	return c
}

// clusterLockFile serialises StartCluster across test processes (go test
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
		t.Fatalf("testenv: cluster lock: %v", err)
	}
	start, told := time.Now(), false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			t.Fatalf("testenv: cluster lock: %v", err)
		}
		if !told {
			t.Logf("testenv: waiting for another test's cluster to go (%s)", clusterLockFile)
			told = true
		}
		if time.Since(start) > clusterLockWait {
			f.Close()
			t.Fatalf("testenv: another test held the cluster for over %s", clusterLockWait)
		}
		time.Sleep(time.Second)
	}
	if told {
		t.Logf("testenv: got the cluster lock after %s", time.Since(start).Round(time.Second))
	}
	return func() { f.Close() } // closing the only descriptor drops the flock
}

// clusterPaths are the files and directories under a cluster's state dir.
type clusterPaths struct{ dir string }

func (p clusterPaths) join(elem ...string) string {
	return filepath.Join(append([]string{p.dir}, elem...)...)
}
func (p clusterPaths) pidFile(name string) string { return p.join("pids", name+".pid") }
func (p clusterPaths) logFile(name string) string { return p.join("logs", name+".log") }
func (p clusterPaths) containerdSock() string     { return p.join("containerd", "containerd.sock") }
func (p clusterPaths) kubeletRoot() string        { return p.join("kubelet") }
func (p clusterPaths) hostDir() string            { return p.join("host") }
func (p clusterPaths) kubeconfig() string         { return p.join("kubeconfig") }

// clusterProcs are the cluster's processes in start order; ClusterDown
// stops them in reverse, the kubelet before containerd.
var clusterProcs = []string{"etcd", "kube-apiserver", "containerd", "kubelet", "kube-controller-manager", "kube-scheduler"}

// UpCluster starts a cluster with its state in dir (created; anything left
// in it from an earlier cluster is removed) and waits until Node
// "localhost" is Ready. The processes outlive the caller (own session,
// output in dir/logs); ClusterDown(dir) stops them. On failure it tears
// down what it started. logf reports progress.
func UpCluster(ctx context.Context, dir string, logf func(string, ...any)) (c *Cluster, err error) {
	return upCluster(ctx, dir, logf, 0)
}

// upCluster is UpCluster; testPID is the PID of the test process that owns
// the cluster, 0 for one that outlives its starter (make cluster-up).
func upCluster(ctx context.Context, dir string, logf func(string, ...any), testPID int) (c *Cluster, err error) {
	start := time.Now()
	dir, err = filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	p := clusterPaths{dir}
	if owner, ownerPID, alive := clusterOwner(); alive {
		if ownerPID == 0 || syscall.Kill(ownerPID, 0) == nil {
			return nil, fmt.Errorf("a test cluster already runs in %s (stop it: make cluster-down CLUSTER_DIR=%s)", owner, owner)
		}
		logf("tearing down the cluster in %s: the test process %d that started it is gone", owner, ownerPID)
		if err := ClusterDown(owner, logf); err != nil {
			return nil, fmt.Errorf("cluster left by test process %d in %s: %w", ownerPID, owner, err)
		}
		// The dead test's t.TempDir root (TMPDIR/TestName123/001), which its
		// cleanup did not remove either.
		if root := filepath.Dir(owner); filepath.Dir(root) == filepath.Clean(os.TempDir()) {
			_ = os.RemoveAll(root)
		}
	}
	if running := runningProcs(p); len(running) > 0 {
		return nil, fmt.Errorf("%s already runs from %s (run cluster down first)", strings.Join(running, ", "), dir)
	}
	if missing := ClusterMissing(); len(missing) > 0 {
		return nil, fmt.Errorf("missing %s", strings.Join(missing, ", "))
	}
	// A fresh state, but never through a mount point a crashed cluster left.
	if err := checkStateDir(dir); err != nil {
		return nil, err
	}
	if err := p.unmount(); err != nil {
		return nil, err
	}
	if err := removeContents(dir); err != nil {
		return nil, err
	}
	for _, d := range []string{"pids", "logs", "pki", "containerd", "cni/net.d", "cni/ipam", "kubelet", "host", "pod-logs", "images", "volume-plugins"} {
		if err := os.MkdirAll(p.join(d), 0o755); err != nil {
			return nil, err
		}
	}
	for _, d := range []string{p.kubeletRoot(), p.hostDir()} {
		if err := makeShared(d); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(clusterOwnerFile, []byte(fmt.Sprintf("%s\n%d\n", dir, testPID)), 0o644); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			if derr := ClusterDown(dir, logf); derr != nil {
				logf("cluster down after a failed start: %v", derr)
			}
		}
	}()

	bins := map[string]string{}
	for _, name := range clusterTools {
		if bins[name], err = FindTool(name); err != nil {
			return nil, err
		}
	}
	for _, name := range []string{"containerd", "ctr"} {
		if bins[name], err = exec.LookPath(name); err != nil {
			return nil, err
		}
	}
	pki, err := newKubePKI(p.join("pki"))
	if err != nil {
		return nil, fmt.Errorf("certificates: %w", err)
	}
	ports, err := freePorts(7)
	if err != nil {
		return nil, err
	}
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peerURL := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	kasPort, kcmPort, schedPort, kubeletPort, kubeletHealthz := ports[2], ports[3], ports[4], ports[5], ports[6]
	host := "https://127.0.0.1:" + strconv.Itoa(kasPort)

	// etcd and kube-apiserver, as StartKube runs them, plus what lets the
	// API server reach the kubelet for logs and exec (gotcha 4).
	etcd, err := startDaemon(p, "etcd", bins["etcd"], etcdArgs(bins["etcd"], p.join("etcd"), etcdURL, peerURL)...)
	if err != nil {
		return nil, err
	}
	if err := waitHTTP(etcd, http.DefaultClient, etcdURL+"/health"); err != nil {
		return nil, err
	}
	// Unlike StartKube's API server (no controllers), a cluster has the
	// ServiceAccount admission plugin on, as every real one does: pods get
	// their projected token (in-cluster clients, e.g. the driver's node
	// labels and the job controller, need it).
	var baseArgs []string
	for _, a := range kubeAPIServerArgs(pki, etcdURL, kasPort, p.join("kas-certs")) {
		if a != "--disable-admission-plugins=ServiceAccount" {
			baseArgs = append(baseArgs, a)
		}
	}
	kasArgs := append(baseArgs,
		"--kubelet-preferred-address-types=Hostname",
		"--kubelet-client-certificate="+pki.adminCert, "--kubelet-client-key="+pki.adminKey,
	)
	kas, err := startDaemon(p, "kube-apiserver", bins["kube-apiserver"], kasArgs...)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.kubeconfig(), pki.kubeconfig(host), 0o600); err != nil {
		return nil, err
	}

	// containerd meanwhile: its own config, root, state and socket.
	if err := writeClusterConfigs(p, pki, kubeletPort, kubeletHealthz); err != nil {
		return nil, err
	}
	ctrd, err := startDaemon(p, "containerd", bins["containerd"], "--config", p.join("containerd", "config.toml"))
	if err != nil {
		return nil, err
	}
	kasClient := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: pki.tlsConfig()}}
	if err := waitHTTP(kas, kasClient, host+"/readyz"); err != nil {
		return nil, err
	}
	if err := waitContainerd(ctx, ctrd, bins["ctr"], p.containerdSock()); err != nil {
		return nil, err
	}
	pauseTar := p.join("images", "pause.tar")
	if err := writePauseImage(bins["pause"], pauseTar); err != nil {
		return nil, fmt.Errorf("pause image: %w", err)
	}
	if err := ctrImport(bins["ctr"], p.containerdSock(), pauseTar); err != nil {
		return nil, err
	}

	kubelet, err := startDaemon(p, "kubelet", bins["kubelet"],
		"--config", p.join("kubelet-config.yaml"),
		"--kubeconfig", p.kubeconfig(),
		"--hostname-override", ClusterNodeName,
		"--root-dir", p.kubeletRoot(),
		"--volume-plugin-dir", p.join("volume-plugins"),
		"--cert-dir", p.join("kubelet-pki"), // its default is /var/lib/kubelet/pki, whatever --root-dir says
		"--v", "1",
	)
	if err != nil {
		return nil, err
	}
	if _, err := startDaemon(p, "kube-controller-manager", bins["kube-controller-manager"],
		"--kubeconfig", p.kubeconfig(),
		"--bind-address", "127.0.0.1", "--secure-port", strconv.Itoa(kcmPort),
		"--leader-elect=false",
		"--service-account-private-key-file", pki.saKey, "--root-ca-file", pki.caCert,
		"--controllers", "*,-nodeipam,-cloud-node-lifecycle",
		"--flex-volume-plugin-dir", p.join("volume-plugins"),
		"--cert-dir", p.join("kcm-certs"),
	); err != nil {
		return nil, err
	}
	if _, err := startDaemon(p, "kube-scheduler", bins["kube-scheduler"],
		"--kubeconfig", p.kubeconfig(),
		"--bind-address", "127.0.0.1", "--secure-port", strconv.Itoa(schedPort),
		"--leader-elect=false",
		"--cert-dir", p.join("scheduler-certs"),
	); err != nil {
		return nil, err
	}

	cfg := &rest.Config{
		Host: host,
		TLSClientConfig: rest.TLSClientConfig{
			CAData: pki.caPEM, CertData: pki.adminCertPEM, KeyData: pki.adminKeyPEM,
		},
		QPS: 100, Burst: 200,
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	if err := waitNodeReady(ctx, client, kubelet); err != nil {
		return nil, err
	}
	// The default ServiceAccount, made by kube-controller-manager: its
	// controllers run (and pods that name it find it).
	if err := waitDefaultServiceAccount(ctx, client); err != nil {
		return nil, err
	}
	for _, name := range clusterProcs {
		if !procAlive(p, name) {
			return nil, fmt.Errorf("%s exited: %s", name, tailFile(p.logFile(name), 3000))
		}
	}
	c = &Cluster{
		Dir: dir, Kubeconfig: p.kubeconfig(), Config: cfg, Client: client,
		ContainerdSocket: p.containerdSock(), KubeletDir: p.kubeletRoot(), HostDir: p.hostDir(), UpTime: time.Since(start),
	}
	logf("test cluster up in %.1fs (state %s)", c.UpTime.Seconds(), dir)
	return c, nil
}

// writeClusterConfigs writes containerd's and the kubelet's config files
// and the CNI config (docs/CLUSTER.md explains each setting).
func writeClusterConfigs(p clusterPaths, pki *kubePKI, kubeletPort, kubeletHealthz int) error {
	containerd := fmt.Sprintf(`version = 2
root = %q
state = %q
[grpc]
  address = %q
[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = %q
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = %q
    restrict_oom_score_adj = true
    enable_selinux = false
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = %q
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = %q
`, p.join("containerd", "root"), p.join("containerd", "state"), p.containerdSock(),
		p.join("containerd", "opt"), PauseImage, p.join("cni", "net.d"), p.join("containerd", "runc"))
	kubelet := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failSwapOn: false
failCgroupV1: false
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %q}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: %q
podLogsDir: %q
evictionHard: {memory.available: "100Mi", nodefs.available: "1%%", imagefs.available: "1%%"}
imageGCHighThresholdPercent: 100
address: 127.0.0.1
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
nodeStatusUpdateFrequency: 4s
syncFrequency: 10s
fileCheckFrequency: 10s
`, pki.caCert, "unix://"+p.containerdSock(), p.join("pod-logs"), kubeletPort, kubeletHealthz)
	cni := fmt.Sprintf(`{"cniVersion":"0.4.0","name":"epochfs-test","plugins":[
 {"type":"bridge","bridge":%q,"isGateway":true,"ipMasq":false,
  "ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":"10.244.0.0/24"}]],"routes":[{"dst":"0.0.0.0/0"}]}},
 {"type":"loopback"}]}
`, cniBridge, p.join("cni", "ipam"))
	for path, data := range map[string]string{
		p.join("containerd", "config.toml"):           containerd,
		p.join("kubelet-config.yaml"):                 kubelet,
		p.join("cni", "net.d", "10-epochfs.conflist"): cni,
	} {
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// startDaemon starts name in its own session with output to its log file
// and records its PID and binary (so ClusterDown kills only it).
func startDaemon(p clusterPaths, name, bin string, args ...string) (*child, error) {
	logPath := p.logFile(name)
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	c := &child{name: name, logPath: logPath, exited: make(chan struct{})}
	c.cmd = exec.Command(bin, args...)
	c.cmd.Stdout, c.cmd.Stderr = f, f
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", bin, err)
	}
	go func() { c.err = c.cmd.Wait(); close(c.exited) }()
	pid := fmt.Sprintf("%d\n%s\n", c.cmd.Process.Pid, bin)
	if err := os.WriteFile(p.pidFile(name), []byte(pid), 0o644); err != nil {
		_ = c.cmd.Process.Kill()
		return nil, err
	}
	return c, nil
}

func waitContainerd(ctx context.Context, c *child, ctr, sock string) error {
	deadline := time.Now().Add(clusterUpTimeout)
	var last []byte
	for time.Now().Before(deadline) {
		select {
		case <-c.exited:
			return fmt.Errorf("containerd exited before ready (%v): %s", c.err, c.tail(3000))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		out, err := exec.Command(ctr, "--address", sock, "version").CombinedOutput()
		if err == nil {
			return nil
		}
		last = out
	}
	return fmt.Errorf("containerd not ready after %v (%s): %s", clusterUpTimeout, last, c.tail(3000))
}

// ctrImport imports a Docker-archive tar into containerd's k8s.io namespace
// (the one the CRI plugin serves).
func ctrImport(ctr, sock, tarPath string) error {
	out, err := exec.Command(ctr, "--address", sock, "-n", "k8s.io", "images", "import", tarPath).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr images import %s: %v: %s", tarPath, err, out)
	}
	return nil
}

// ImportImage imports a Docker-archive tar (WriteImageTar) into the
// cluster's containerd. Pods refer to it by its full name
// ("docker.io/NAME:TAG") with imagePullPolicy Never.
func (c *Cluster) ImportImage(tarPath string) error {
	ctr, err := exec.LookPath("ctr")
	if err != nil {
		return err
	}
	return ctrImport(ctr, c.ContainerdSocket, tarPath)
}

func waitNodeReady(ctx context.Context, client kubernetes.Interface, kubelet *child) error {
	deadline := time.Now().Add(clusterUpTimeout)
	last := "not registered"
	for time.Now().Before(deadline) {
		select {
		case <-kubelet.exited:
			return fmt.Errorf("kubelet exited (%v): %s", kubelet.err, kubelet.tail(4000))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		n, err := client.CoreV1().Nodes().Get(ctx, ClusterNodeName, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			continue
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				if cond.Status == corev1.ConditionTrue {
					return nil
				}
				last = cond.Reason + ": " + cond.Message
			}
		}
	}
	return fmt.Errorf("node %s not Ready after %v (%s): %s", ClusterNodeName, clusterUpTimeout, last, kubelet.tail(4000))
}

func waitDefaultServiceAccount(ctx context.Context, client kubernetes.Interface) error {
	deadline := time.Now().Add(clusterUpTimeout)
	var err error
	for time.Now().Before(deadline) {
		if _, err = client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("no default ServiceAccount after %v: %v", clusterUpTimeout, err)
}

// ClusterDown stops the cluster whose state is in dir and cleans up after
// it, whether it started fully or not: it deletes every pod through the API
// (the kubelet stops their containers and tears down their networks), stops
// the kubelet, kills and deletes what containerd still runs, stops
// containerd, the controllers, kube-apiserver and etcd (each by its recorded
// PID: SIGTERM, then SIGKILL), and unmounts everything under dir (lazily
// when busy). Logs stay in dir/logs. Idempotent; it returns the first of
// the errors it met but always goes on.
func ClusterDown(dir string, logf func(string, ...any)) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	p := clusterPaths{dir}
	var errs []error
	note := func(err error) {
		if err != nil {
			errs = append(errs, err)
			logf("cluster down: %v", err)
		}
	}
	// No new pods: controllers and scheduler first.
	note(stopProc(p, "kube-controller-manager", 10*time.Second))
	note(stopProc(p, "kube-scheduler", 10*time.Second))
	if procAlive(p, "kubelet") && procAlive(p, "kube-apiserver") && procAlive(p, "containerd") {
		if err := deleteAllPods(p, 45*time.Second); err != nil {
			logf("cluster down: pods not all gone through the API, killing them in containerd: %v", err)
		}
	}
	note(stopProc(p, "kubelet", 15*time.Second))
	if procAlive(p, "containerd") {
		note(killContainerdTasks(p))
	}
	note(stopProc(p, "containerd", 15*time.Second))
	note(killShims(p))
	// The machine-wide leftovers are this cluster's unless another one runs.
	owner, _, ownerAlive := clusterOwner()
	machineWide := !ownerAlive || owner == dir
	if machineWide {
		if n, err := killKubepods(); n > 0 || err != nil {
			logf("cluster down: killed %d container processes the kubelet and containerd left", n)
			note(err)
		}
	}
	note(stopProc(p, "kube-apiserver", 15*time.Second))
	note(stopProc(p, "etcd", 15*time.Second))
	note(p.unmount())
	note(removeContainerLogLinks(p))
	if machineWide {
		removeMachineLeftovers()
	}
	if _, err := os.Stat(filepath.Join("/sys/class/net", cniBridge)); err == nil && machineWide {
		if out, err := exec.Command("ip", "link", "delete", cniBridge).CombinedOutput(); err != nil {
			note(fmt.Errorf("ip link delete %s: %v: %s", cniBridge, err, out))
		}
	}
	if owner, _, _ := clusterOwner(); owner == dir {
		note(os.Remove(clusterOwnerFile))
	}
	return errors.Join(errs...)
}

// deleteAllPods deletes every pod (grace period 1 s) and waits until the
// API has none left, i.e. the kubelet has stopped them. DaemonSets' pods
// (a CSI node plugin) go last, once every other pod is gone: the kubelet
// needs a volume's driver to unmount it from a pod being deleted.
func deleteAllPods(p clusterPaths, timeout time.Duration) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", p.kubeconfig())
	if err != nil {
		return err
	}
	cfg.Timeout = 10 * time.Second
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	grace := int64(1)
	for {
		pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(pods.Items) == 0 {
			return nil
		}
		others := 0
		for i := range pods.Items {
			if !ownedByDaemonSet(&pods.Items[i]) {
				others++
			}
		}
		for _, pod := range pods.Items {
			if others > 0 && ownedByDaemonSet(&pod) {
				continue
			}
			if len(pod.Finalizers) > 0 { // Jobs' pods: the Job controller is stopped already
				_, _ = client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType,
					[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
			}
			if pod.DeletionTimestamp == nil {
				_ = client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
			} else if pod.Spec.NodeName == "" {
				_ = client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d pods left: %w", len(pods.Items), ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func ownedByDaemonSet(pod *corev1.Pod) bool {
	for _, o := range pod.OwnerReferences {
		if o.Kind == "DaemonSet" {
			return true
		}
	}
	return false
}

// killContainerdTasks kills and deletes every task and container in the
// cluster containerd's k8s.io namespace (what the kubelet left).
func killContainerdTasks(p clusterPaths) error {
	ctr, err := exec.LookPath("ctr")
	if err != nil {
		return err
	}
	run := func(args ...string) (string, error) {
		full := append([]string{"--address", p.containerdSock(), "-n", "k8s.io", "--timeout", "20s"}, args...)
		out, err := exec.Command(ctr, full...).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("ctr %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return string(out), nil
	}
	var errs []error
	out, err := run("tasks", "ls", "-q")
	if err != nil {
		return err
	}
	for _, id := range strings.Fields(out) {
		_, _ = run("tasks", "kill", "-s", "SIGKILL", id)
		if _, err := run("tasks", "delete", "-f", id); err != nil && !strings.Contains(err.Error(), "not found") {
			errs = append(errs, err) // "not found": it went between the list and the delete
		}
	}
	out, err = run("containers", "ls", "-q")
	if err != nil {
		return err
	}
	for _, id := range strings.Fields(out) {
		if _, err := run("containers", "delete", id); err != nil && !strings.Contains(err.Error(), "not found") {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// killShims kills the containerd-shim-runc-v2 processes of this cluster's
// containerd (their command line names its socket) that outlived it.
func killShims(p clusterPaths) error {
	sock := p.containerdSock()
	_, err := Processes(func(pid int, args []string) bool {
		if filepath.Base(args[0]) != "containerd-shim-runc-v2" {
			return false
		}
		flags := map[string]string{}
		for i := 1; i+1 < len(args); i++ {
			if strings.HasPrefix(args[i], "-") {
				flags[args[i]] = args[i+1]
			}
		}
		if flags["-address"] != sock {
			return false
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
		// A killed shim leaves its socket, named as containerd 1.6 names it
		// (runtime/v2/shim SocketAddress).
		sum := sha256.Sum256([]byte(filepath.Join(sock, flags["-namespace"], flags["-id"])))
		_ = os.Remove(filepath.Join("/run/containerd/s", hex.EncodeToString(sum[:])))
		return true
	})
	return err
}

// removeContainerLogLinks removes the kubelet's /var/log/containers links
// into this cluster's pod log dir (that path is fixed in the kubelet).
func removeContainerLogLinks(p clusterPaths) error {
	ents, err := os.ReadDir("/var/log/containers")
	if err != nil {
		return nil
	}
	prefix := p.join("pod-logs") + "/"
	for _, e := range ents {
		link := filepath.Join("/var/log/containers", e.Name())
		if target, err := os.Readlink(link); err == nil && strings.HasPrefix(target, prefix) {
			_ = os.Remove(link)
		}
	}
	return nil
}

// killKubepods is the teardown's last resort for containers the kubelet and
// containerd could not stop (they crashed or were killed): it SIGKILLs every
// process left in the kubelet's kubepods cgroups (only one test cluster runs
// per machine, so they are this cluster's containers) and removes the
// network namespaces (/run/netns/cni-*) that those processes were in.
func killKubepods() (int, error) {
	pids := map[int]bool{}
	var tops []string
	for _, pattern := range []string{"/sys/fs/cgroup/*/kubepods", "/sys/fs/cgroup/kubepods"} {
		m, _ := filepath.Glob(pattern)
		tops = append(tops, m...)
	}
	for _, top := range tops {
		_ = filepath.WalkDir(top, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(path)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
					pids[pid] = true
				}
			}
			return nil
		})
	}
	if len(pids) == 0 {
		return 0, nil
	}
	netns := map[uint64]bool{}
	for pid := range pids {
		var st syscall.Stat_t
		if err := syscall.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &st); err == nil {
			netns[st.Ino] = true
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for range 100 { // wait until they are gone, so their cgroups can be removed
		left := 0
		for pid := range pids {
			if syscall.Kill(pid, 0) == nil {
				left++
			}
		}
		if left == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The host's own network namespace is never removed: only cni-* files.
	files, _ := filepath.Glob("/run/netns/cni-*")
	var errs []error
	for _, f := range files {
		var st syscall.Stat_t
		if err := syscall.Stat(f, &st); err != nil || !netns[st.Ino] {
			continue
		}
		if err := syscall.Unmount(f, syscall.MNT_DETACH); err != nil {
			errs = append(errs, fmt.Errorf("unmount %s: %w", f, err))
			continue
		}
		_ = os.Remove(f)
	}
	return len(pids), errors.Join(errs...)
}

// removeMachineLeftovers removes what the kubelet, containerd and its CNI
// library make outside the state dir at fixed paths when it is empty or
// theirs: the kubelet's device-plugin socket dir (fixed in the kubelet),
// libcni's result cache, containerd's shim socket dir, and the kubelet's
// (cgroupfs) kubepods cgroups, which rmdir removes only when no task is left
// in them. Only one test cluster runs per machine, so these are ours.
func removeMachineLeftovers() {
	for _, f := range []string{"/var/lib/kubelet/device-plugins/kubelet.sock", "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"} {
		_ = os.Remove(f)
	}
	// libcni caches results as <network name>-<container id>-<ifname>.
	results, _ := filepath.Glob("/var/lib/cni/results/epochfs-test-*")
	for _, f := range results {
		_ = os.Remove(f)
		// and the loopback network's result of the same container
		id := strings.TrimPrefix(filepath.Base(f), "epochfs-test-")
		if i := strings.LastIndexByte(id, '-'); i > 0 {
			_ = os.Remove("/var/lib/cni/results/cni-loopback-" + id[:i] + "-lo")
		}
	}
	for _, d := range []string{"/var/lib/kubelet/device-plugins", "/var/lib/kubelet", "/var/lib/cni/results", "/var/lib/cni", "/run/containerd/s", "/run/containerd", "/var/log/containers"} {
		_ = syscall.Rmdir(d) // only when empty
	}
	hier, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods")
	if fi, err := os.Stat("/sys/fs/cgroup/kubepods"); err == nil && fi.IsDir() {
		hier = append(hier, "/sys/fs/cgroup/kubepods")
	}
	for _, top := range hier {
		var dirs []string
		_ = filepath.WalkDir(top, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- { // deepest first
			_ = syscall.Rmdir(dirs[i])
		}
	}
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

// unmountUnder unmounts every mount point at or below dir, deepest first,
// lazily (MNT_DETACH) when a plain unmount fails.
func unmountUnder(dir string) error {
	var errs []error
	for range 5 { // mounts can be stacked; re-read until none is left
		mounts, err := MountsUnder(dir)
		if err != nil {
			return err
		}
		if len(mounts) == 0 {
			return nil
		}
		errs = errs[:0]
		for _, m := range mounts {
			if err := syscall.Unmount(m, 0); err != nil {
				if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
					errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// unmount unmounts what the kubelet and containerd mounted: everything
// under their directories in the state dir (never above them, whatever dir
// a caller passed).
func (p clusterPaths) unmount() error {
	return errors.Join(unmountUnder(p.kubeletRoot()), unmountUnder(p.hostDir()), unmountUnder(p.join("containerd")))
}

// makeShared bind-mounts dir onto itself and makes it a shared mount, as
// a systemd node's / is. A hostPath that a pod mounts with Bidirectional
// propagation (the CSI node plugin: the kubelet dir, the driver's state
// dir) must lie on a shared mount, or containerd refuses the container
// ("path … is mounted on / but it is not a shared mount"); this sandbox's
// / is private. The cluster's unmount removes the bind (it is at the dir).
func makeShared(dir string) error {
	if err := syscall.Mount(dir, dir, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("testenv: bind %s: %w", dir, err)
	}
	if err := syscall.Mount("", dir, "", syscall.MS_SHARED|syscall.MS_REC, ""); err != nil {
		_ = syscall.Unmount(dir, syscall.MNT_DETACH)
		return fmt.Errorf("testenv: make %s shared: %w", dir, err)
	}
	return nil
}

// checkStateDir refuses a state dir that is neither missing, nor empty, nor
// an earlier cluster's (it has pids/): UpCluster empties it.
func checkStateDir(dir string) error {
	if dir == "/" {
		return errors.New("state dir /: refused")
	}
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) || (err == nil && len(ents) == 0) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi, err := os.Stat(filepath.Join(dir, "pids")); err == nil && fi.IsDir() {
		return nil
	}
	return fmt.Errorf("state dir %s is not empty and not a test cluster's (no pids/): refused, it would be emptied", dir)
}

// removeContents empties dir (creating it if missing), refusing to cross a
// mount point.
func removeContents(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if m, err := MountsUnder(dir); err != nil {
		return err
	} else if len(m) > 0 {
		return fmt.Errorf("still mounted under %s: %v", dir, m)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// ClusterStatus describes the cluster in dir: which of its processes run
// and, when the API answers, the node's Ready condition and the pod count.
func ClusterStatus(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	p := clusterPaths{dir}
	var b strings.Builder
	fmt.Fprintf(&b, "state dir: %s\n", dir)
	for _, name := range clusterProcs {
		if pid, ok := readPid(p, name); ok {
			fmt.Fprintf(&b, "  %-24s running (pid %d)\n", name, pid)
		} else {
			fmt.Fprintf(&b, "  %-24s stopped\n", name)
		}
	}
	if !procAlive(p, "kube-apiserver") {
		return b.String(), nil
	}
	fmt.Fprintf(&b, "kubeconfig: %s\n", p.kubeconfig())
	cfg, err := clientcmd.BuildConfigFromFlags("", p.kubeconfig())
	if err != nil {
		return b.String(), err
	}
	cfg.Timeout = 5 * time.Second
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return b.String(), err
	}
	ctx := context.Background()
	if n, err := client.CoreV1().Nodes().Get(ctx, ClusterNodeName, metav1.GetOptions{}); err != nil {
		fmt.Fprintf(&b, "node %s: %v\n", ClusterNodeName, err)
	} else {
		ready := "Unknown"
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				ready = string(c.Status)
			}
		}
		fmt.Fprintf(&b, "node %s: Ready=%s, kubelet %s\n", ClusterNodeName, ready, n.Status.NodeInfo.KubeletVersion)
	}
	if pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); err == nil {
		fmt.Fprintf(&b, "pods: %d\n", len(pods.Items))
	}
	return b.String(), nil
}

// freePorts returns n distinct TCP ports on 127.0.0.1 that were free a
// moment ago.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
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
