package cluster

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/internal/testenv/kube"
)

// Up starts a cluster with its state in dir (created; anything left
// in it from an earlier cluster is removed) and waits until Node
// "localhost" is Ready. The processes outlive the caller (own session,
// output in dir/logs); Down(dir) stops them. On failure it tears
// down what it started. logf reports progress.
func Up(ctx context.Context, dir string, logf func(string, ...any)) (c *Cluster, err error) {
	return upCluster(ctx, dir, logf, 0)
}

// upCluster is Up; testPID is the PID of the test process that owns
// the cluster, 0 for one that outlives its starter (make cluster-up).
func upCluster(ctx context.Context, dir string, logf func(string, ...any), testPID int) (c *Cluster, err error) {
	start := time.Now()
	dir, err = filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	p := clusterPaths{dir}
	if err := claimMachine(p, logf); err != nil {
		return nil, err
	}
	if err := prepareState(p, testPID); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			if derr := Down(dir, logf); derr != nil {
				logf("cluster down after a failed start: %v", derr)
			}
		}
	}()
	s, err := newStartup(p)
	if err != nil {
		return nil, err
	}
	kas, err := s.startAPIServer()
	if err != nil {
		return nil, err
	}
	if err := s.startContainerd(ctx, kas); err != nil {
		return nil, err
	}
	kubelet, err := s.startNode()
	if err != nil {
		return nil, err
	}
	cfg := s.pki.AdminConfig(s.host, 100, 200)
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

// claimMachine refuses to start while another cluster runs on this
// machine, or from p's state dir, and tears down one whose test process is
// gone (killed, timed out: no t.Cleanup ran).
func claimMachine(p clusterPaths, logf func(string, ...any)) error {
	if owner, ownerPID, alive := clusterOwner(); alive {
		if ownerPID == 0 || syscall.Kill(ownerPID, 0) == nil {
			return fmt.Errorf("a test cluster already runs in %s (stop it: make cluster-down CLUSTER_DIR=%s)", owner, owner)
		}
		logf("tearing down the cluster in %s: the test process %d that started it is gone", owner, ownerPID)
		if err := Down(owner, logf); err != nil {
			return fmt.Errorf("cluster left by test process %d in %s: %w", ownerPID, owner, err)
		}
		// The dead test's t.TempDir root (TMPDIR/TestName123/001), which its
		// cleanup did not remove either.
		if root := filepath.Dir(owner); filepath.Dir(root) == filepath.Clean(os.TempDir()) {
			_ = os.RemoveAll(root)
		}
	}
	if running := runningProcs(p); len(running) > 0 {
		return fmt.Errorf("%s already runs from %s (run cluster down first)", strings.Join(running, ", "), p.dir)
	}
	if missing := Missing(); len(missing) > 0 {
		return fmt.Errorf("missing %s", strings.Join(missing, ", "))
	}
	return nil
}

// prepareState makes a fresh state dir (never emptied through a mount
// point a crashed cluster left), its shared mounts, and records it as the
// machine's cluster, owned by testPID.
func prepareState(p clusterPaths, testPID int) error {
	if err := checkStateDir(p.dir); err != nil {
		return err
	}
	if err := p.unmount(); err != nil {
		return err
	}
	if err := removeContents(p.dir); err != nil {
		return err
	}
	for _, d := range []string{"pids", "logs", "pki", "containerd/certs.d", "cni/net.d", "cni/ipam", "kubelet", "host", "pod-logs", "images", "volume-plugins"} {
		if err := os.MkdirAll(p.join(d), 0o755); err != nil {
			return err
		}
	}
	for _, d := range []string{p.kubeletRoot(), p.hostDir()} {
		if err := makeShared(d); err != nil {
			return err
		}
	}
	return os.WriteFile(clusterOwnerFile, []byte(fmt.Sprintf("%s\n%d\n", p.dir, testPID)), 0o644)
}

// startup is what the cluster's processes are started with: binaries,
// certificates and ports.
type startup struct {
	p                                                        clusterPaths
	bins                                                     map[string]string
	pki                                                      *kube.PKI
	etcdURL, peerURL, host                                   string
	kasPort, kcmPort, schedPort, kubeletPort, kubeletHealthz int
}

func newStartup(p clusterPaths) (*startup, error) {
	s := &startup{p: p, bins: map[string]string{}}
	var err error
	for _, name := range clusterTools {
		if s.bins[name], err = testenv.FindTool(name); err != nil {
			return nil, err
		}
	}
	for _, name := range []string{"containerd", "ctr"} {
		if s.bins[name], err = exec.LookPath(name); err != nil {
			return nil, err
		}
	}
	if s.pki, err = kube.NewPKI(p.join("pki")); err != nil {
		return nil, fmt.Errorf("certificates: %w", err)
	}
	ports, err := testenv.FreePorts(7)
	if err != nil {
		return nil, err
	}
	s.etcdURL = "http://127.0.0.1:" + strconv.Itoa(ports[0])
	s.peerURL = "http://127.0.0.1:" + strconv.Itoa(ports[1])
	s.kasPort, s.kcmPort, s.schedPort, s.kubeletPort, s.kubeletHealthz = ports[2], ports[3], ports[4], ports[5], ports[6]
	s.host = "https://127.0.0.1:" + strconv.Itoa(s.kasPort)
	return s, nil
}

// startAPIServer starts etcd and kube-apiserver, as kube.Start runs them,
// plus what lets the API server reach the kubelet for logs and exec
// (gotcha 4), and writes the admin kubeconfig. It does not wait for the
// API server.
func (s *startup) startAPIServer() (*testenv.Proc, error) {
	p := s.p
	etcd, err := startDaemon(p, "etcd", s.bins["etcd"], kube.EtcdArgs(s.bins["etcd"], p.join("etcd"), s.etcdURL, s.peerURL)...)
	if err != nil {
		return nil, err
	}
	if err := etcd.WaitHTTP(http.DefaultClient, s.etcdURL+"/health", kube.ReadyTimeout); err != nil {
		return nil, err
	}
	// Unlike kube.Start's API server (no controllers), a cluster has the
	// ServiceAccount admission plugin on, as every real one does: pods get
	// their projected token (in-cluster clients, e.g. the driver's node
	// labels and the job controller, need it).
	var args []string
	for _, a := range kube.APIServerArgs(s.pki, s.etcdURL, s.kasPort, p.join("kas-certs")) {
		if a != "--disable-admission-plugins=ServiceAccount" {
			args = append(args, a)
		}
	}
	args = append(args,
		"--kubelet-preferred-address-types=Hostname",
		"--kubelet-client-certificate="+s.pki.AdminCert, "--kubelet-client-key="+s.pki.AdminKey,
	)
	kas, err := startDaemon(p, "kube-apiserver", s.bins["kube-apiserver"], args...)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.kubeconfig(), s.pki.Kubeconfig(s.host), 0o600); err != nil {
		return nil, err
	}
	return kas, nil
}

// startContainerd starts containerd (its own config, root, state and
// socket) while kube-apiserver comes up, waits for both, and imports the
// pause image.
func (s *startup) startContainerd(ctx context.Context, kas *testenv.Proc) error {
	p := s.p
	if err := writeClusterConfigs(p, s.pki, s.kubeletPort, s.kubeletHealthz); err != nil {
		return err
	}
	ctrd, err := startDaemon(p, "containerd", s.bins["containerd"], "--config", p.join("containerd", "config.toml"))
	if err != nil {
		return err
	}
	kasClient := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: s.pki.TLSConfig()}}
	if err := kas.WaitHTTP(kasClient, s.host+"/readyz", kube.ReadyTimeout); err != nil {
		return err
	}
	if err := waitContainerd(ctx, ctrd, s.bins["ctr"], p.containerdSock()); err != nil {
		return err
	}
	pauseTar := p.join("images", "pause.tar")
	if err := writePauseImage(s.bins["pause"], pauseTar); err != nil {
		return fmt.Errorf("pause image: %w", err)
	}
	return ctrImport(s.bins["ctr"], p.containerdSock(), pauseTar)
}

// startNode starts the kubelet, kube-controller-manager and
// kube-scheduler, and returns the kubelet.
func (s *startup) startNode() (*testenv.Proc, error) {
	p := s.p
	kubelet, err := startDaemon(p, "kubelet", s.bins["kubelet"],
		"--config", p.join("kubelet-config.yaml"),
		"--kubeconfig", p.kubeconfig(),
		"--hostname-override", NodeName,
		"--root-dir", p.kubeletRoot(),
		"--volume-plugin-dir", p.join("volume-plugins"),
		"--cert-dir", p.join("kubelet-pki"), // its default is /var/lib/kubelet/pki, whatever --root-dir says
		"--v", "1",
	)
	if err != nil {
		return nil, err
	}
	if _, err := startDaemon(p, "kube-controller-manager", s.bins["kube-controller-manager"],
		"--kubeconfig", p.kubeconfig(),
		"--bind-address", "127.0.0.1", "--secure-port", strconv.Itoa(s.kcmPort),
		"--leader-elect=false",
		"--service-account-private-key-file", s.pki.SAKey, "--root-ca-file", s.pki.CACert,
		"--controllers", "*,-nodeipam,-cloud-node-lifecycle",
		"--flex-volume-plugin-dir", p.join("volume-plugins"),
		"--cert-dir", p.join("kcm-certs"),
	); err != nil {
		return nil, err
	}
	if _, err := startDaemon(p, "kube-scheduler", s.bins["kube-scheduler"],
		"--kubeconfig", p.kubeconfig(),
		"--bind-address", "127.0.0.1", "--secure-port", strconv.Itoa(s.schedPort),
		"--leader-elect=false",
		"--cert-dir", p.join("scheduler-certs"),
	); err != nil {
		return nil, err
	}
	return kubelet, nil
}

func waitContainerd(ctx context.Context, c *testenv.Proc, ctr, sock string) error {
	deadline := time.Now().Add(clusterUpTimeout)
	var last []byte
	for time.Now().Before(deadline) {
		select {
		case <-c.Done:
			return fmt.Errorf("containerd exited before ready (%v): %s", c.Err(), c.Tail(3000))
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
	return fmt.Errorf("containerd not ready after %v (%s): %s", clusterUpTimeout, last, c.Tail(3000))
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

// ImportImage imports a Docker-archive tar (package imagebuild, BusyboxImage) into the
// cluster's containerd. Pods refer to it by its full name
// ("docker.io/NAME:TAG") with imagePullPolicy Never.
func (c *Cluster) ImportImage(tarPath string) error {
	ctr, err := exec.LookPath("ctr")
	if err != nil {
		return err
	}
	return ctrImport(ctr, c.ContainerdSocket, tarPath)
}

func waitNodeReady(ctx context.Context, client kubernetes.Interface, kubelet *testenv.Proc) error {
	deadline := time.Now().Add(clusterUpTimeout)
	last := "not registered"
	for time.Now().Before(deadline) {
		select {
		case <-kubelet.Done:
			return fmt.Errorf("kubelet exited (%v): %s", kubelet.Err(), kubelet.Tail(4000))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		n, err := client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
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
	return fmt.Errorf("node %s not Ready after %v (%s): %s", NodeName, clusterUpTimeout, last, kubelet.Tail(4000))
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
