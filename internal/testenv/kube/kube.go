// Package kube starts a real Kubernetes API server for tests on 127.0.0.1
// (kube-apiserver backed by its own etcd, with fresh certificates; no
// kubelet, scheduler or controllers) and installs CRDs into it, and reads
// the Kubernetes objects a doc shows (DocExample). The certificates and
// the servers' flags (PKI, EtcdArgs, APIServerArgs) are shared with package
// cluster, which runs the same two servers in a whole cluster. A missing
// binary skips a test, or fails it under CI=true.
//
// It knows nothing of EpochFS's controllers: tests bring their own clients.
package kube

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/epochfs/epochfs/internal/testenv"
)

// Server is a real Kubernetes API server (kube-apiserver backed by its own
// etcd) started for one test on 127.0.0.1. No kubelet, scheduler or
// controller-manager runs: Jobs get no pods, PVCs stay Pending and
// namespaces never finish deleting, so tests write statuses themselves.
// Fields are read-only.
type Server struct {
	// Config authenticates as a cluster admin (group system:masters).
	// Callers may copy it; they must not modify it.
	Config *rest.Config
	// Kubeconfig is the path of a kubeconfig file for the same admin,
	// with context "epochfs-test" and certificates embedded.
	Kubeconfig string
	// Host is "https://127.0.0.1:PORT".
	Host string

	log *testenv.SyncBuffer // kube-apiserver output
}

// ReadyTimeout bounds the wait for etcd and for kube-apiserver's /readyz.
const ReadyTimeout = 90 * time.Second

// Start starts etcd and kube-apiserver (RBAC on, the ServiceAccount
// admission plugin off) on free 127.0.0.1 ports with fresh certificates in
// a temporary directory, waits until /readyz answers, installs the CRDs in
// crdPaths (YAML files, several documents each allowed) and waits until
// they are established, and stops both servers (kill by PID, then wait) in
// t.Cleanup. When the binaries are missing it skips the test, or fails it
// under CI=true. The binaries are found by testenv.FindTool ("kube-apiserver",
// "etcd"), so `make tools` installs them.
func Start(t testing.TB, crdPaths ...string) *Server {
	t.Helper()
	kas, err := testenv.FindTool("kube-apiserver")
	if err != nil {
		testenv.RequireOrSkip(t, "kube-apiserver not found", "run `make tools` (or set EPOCHFS_TOOLS_BIN)")
	}
	etcd, err := testenv.FindTool("etcd")
	if err != nil {
		testenv.RequireOrSkip(t, "etcd not found", "run `make tools` (or set EPOCHFS_TOOLS_BIN)")
	}
	pki, err := NewPKI(t.TempDir())
	if err != nil {
		t.Fatalf("kube: certificates: %v", err)
	}
	var k *Server
	var lastErr error
	for range 3 { // a free port can be taken between FreePort and bind
		k, lastErr = startKube(t, etcd, kas, pki)
		if lastErr == nil {
			break
		}
	}
	if lastErr != nil {
		t.Fatalf("kube: start kube-apiserver: %v", lastErr)
	}
	if len(crdPaths) > 0 {
		k.InstallCRDs(t, crdPaths...)
	}
	return k
}

func startKube(t testing.TB, etcdBin, kasBin string, pki *PKI) (*Server, error) {
	t.Helper()
	dir := t.TempDir()
	ports, err := testenv.FreePorts(3)
	if err != nil {
		return nil, err
	}
	clientURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peerURL := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	etcd, err := testenv.StartProc("etcd", exec.Command(etcdBin, EtcdArgs(etcdBin, filepath.Join(dir, "etcd"), clientURL, peerURL)...), &testenv.SyncBuffer{})
	if err != nil {
		return nil, err
	}
	if err := etcd.WaitHTTP(http.DefaultClient, clientURL+"/health", ReadyTimeout); err != nil {
		etcd.Kill()
		return nil, err
	}

	port := ports[2]
	host := "https://127.0.0.1:" + strconv.Itoa(port)
	kas, err := testenv.StartProc("kube-apiserver", exec.Command(kasBin,
		APIServerArgs(pki, clientURL, port, filepath.Join(dir, "kas-certs"))...), &testenv.SyncBuffer{})
	if err != nil {
		etcd.Kill()
		return nil, err
	}
	stop := func() { kas.Kill(); etcd.Kill() }
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: pki.TLSConfig()}}
	if err := kas.WaitHTTP(client, host+"/readyz", ReadyTimeout); err != nil {
		stop()
		return nil, fmt.Errorf("%w (etcd: %s)", err, etcd.Tail(2000))
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("kube-apiserver output (tail):\n%s", kas.Tail(3000))
		}
	})
	k := &Server{
		Host:       host,
		Config:     pki.AdminConfig(host, 200, 400),
		Kubeconfig: filepath.Join(dir, "kubeconfig"),
		log:        kas.Out,
	}
	if err := os.WriteFile(k.Kubeconfig, pki.Kubeconfig(host), 0o600); err != nil {
		t.Fatalf("kube: write kubeconfig: %v", err)
	}
	return k, nil
}

// Log returns kube-apiserver's output so far, for a test's failure message.
func (k *Server) Log() string { return k.log.String() }
