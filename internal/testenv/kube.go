package testenv

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// Kube is a real Kubernetes API server (kube-apiserver backed by its own
// etcd) started for one test on 127.0.0.1. No kubelet, scheduler or
// controller-manager runs: Jobs get no pods, PVCs stay Pending and
// namespaces never finish deleting, so tests write statuses themselves.
// Fields are read-only.
type Kube struct {
	// Config authenticates as a cluster admin (group system:masters).
	// Callers may copy it; they must not modify it.
	Config *rest.Config
	// Kubeconfig is the path of a kubeconfig file for the same admin,
	// with context "epochfs-test" and certificates embedded.
	Kubeconfig string
	// Host is "https://127.0.0.1:PORT".
	Host string

	log *SyncBuffer // kube-apiserver output
}

// kubeReadyTimeout bounds the wait for etcd and for kube-apiserver's /readyz.
const kubeReadyTimeout = 90 * time.Second

// StartKube starts etcd and kube-apiserver (RBAC on, the ServiceAccount
// admission plugin off) on free 127.0.0.1 ports with fresh certificates in
// a temporary directory, waits until /readyz answers, installs the CRDs in
// crdPaths (YAML files, several documents each allowed) and waits until
// they are established, and stops both servers (kill by PID, then wait) in
// t.Cleanup. When the binaries are missing it skips the test, or fails it
// under CI=true. The binaries are found by FindTool ("kube-apiserver",
// "etcd"), so `make tools` installs them.
func StartKube(t testing.TB, crdPaths ...string) *Kube {
	t.Helper()
	kas, err := FindTool("kube-apiserver")
	if err != nil {
		RequireOrSkip(t, "kube-apiserver not found", "run `make tools` (or set EPOCHFS_TOOLS_BIN)")
	}
	etcd, err := FindTool("etcd")
	if err != nil {
		RequireOrSkip(t, "etcd not found", "run `make tools` (or set EPOCHFS_TOOLS_BIN)")
	}
	pki, err := newKubePKI(t.TempDir())
	if err != nil {
		t.Fatalf("testenv: kube certificates: %v", err)
	}
	var k *Kube
	var lastErr error
	for range 3 { // a free port can be taken between FreePort and bind
		k, lastErr = startKube(t, etcd, kas, pki)
		if lastErr == nil {
			break
		}
	}
	if lastErr != nil {
		t.Fatalf("testenv: start kube-apiserver: %v", lastErr)
	}
	if len(crdPaths) > 0 {
		k.InstallCRDs(t, crdPaths...)
	}
	return k
}

// child is a started server process. Its output goes to out, or for the
// test cluster's processes (which outlive `cluster up`) to the file logPath.
type child struct {
	name    string
	cmd     *exec.Cmd
	out     *SyncBuffer
	logPath string
	exited  chan struct{}
	err     error
}

func startChild(name, bin string, args ...string) (*child, error) {
	c := &child{name: name, out: &SyncBuffer{}, exited: make(chan struct{})}
	c.cmd = exec.Command(bin, args...)
	c.cmd.Stdout, c.cmd.Stderr = c.out, c.out
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", bin, err)
	}
	go func() { c.err = c.cmd.Wait(); close(c.exited) }()
	return c, nil
}

// stop kills the process by PID (only the server we started) and waits.
func (c *child) stop() {
	_ = c.cmd.Process.Kill()
	<-c.exited
}

// tail returns the last n bytes of the output.
func (c *child) tail(n int) string {
	var s string
	if c.out != nil {
		s = c.out.String()
	} else {
		b, _ := os.ReadFile(c.logPath)
		s = string(b)
	}
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return s
}

var (
	etcdNoFsyncOnce sync.Once
	etcdNoFsync     bool
)

// etcdHasNoFsync reports whether this etcd has --unsafe-no-fsync (3.5+;
// Debian's 3.4 has not): tests need no durability and it is much faster.
func etcdHasNoFsync(bin string) bool {
	etcdNoFsyncOnce.Do(func() {
		out, _ := exec.Command(bin, "--help").CombinedOutput()
		etcdNoFsync = bytes.Contains(out, []byte("unsafe-no-fsync"))
	})
	return etcdNoFsync
}

func startKube(t testing.TB, etcdBin, kasBin string, pki *kubePKI) (*Kube, error) {
	t.Helper()
	dir := t.TempDir()
	clientURL := "http://127.0.0.1:" + strconv.Itoa(FreePort(t))
	peerURL := "http://127.0.0.1:" + strconv.Itoa(FreePort(t))
	etcd, err := startChild("etcd", etcdBin, etcdArgs(etcdBin, filepath.Join(dir, "etcd"), clientURL, peerURL)...)
	if err != nil {
		return nil, err
	}
	if err := waitHTTP(etcd, http.DefaultClient, clientURL+"/health"); err != nil {
		etcd.stop()
		return nil, err
	}

	port := FreePort(t)
	host := "https://127.0.0.1:" + strconv.Itoa(port)
	kas, err := startChild("kube-apiserver", kasBin,
		kubeAPIServerArgs(pki, clientURL, port, filepath.Join(dir, "kas-certs"))...)
	if err != nil {
		etcd.stop()
		return nil, err
	}
	stop := func() { kas.stop(); etcd.stop() }
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: pki.tlsConfig()}}
	if err := waitHTTP(kas, client, host+"/readyz"); err != nil {
		stop()
		return nil, fmt.Errorf("%w (etcd: %s)", err, etcd.tail(2000))
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("kube-apiserver output (tail):\n%s", kas.tail(3000))
		}
	})
	k := &Kube{
		Host: host,
		Config: &rest.Config{
			Host: host,
			TLSClientConfig: rest.TLSClientConfig{
				CAData: pki.caPEM, CertData: pki.adminCertPEM, KeyData: pki.adminKeyPEM,
			},
			QPS: 200, Burst: 400,
		},
		Kubeconfig: filepath.Join(dir, "kubeconfig"),
		log:        kas.out,
	}
	if err := os.WriteFile(k.Kubeconfig, pki.kubeconfig(host), 0o600); err != nil {
		t.Fatalf("testenv: write kubeconfig: %v", err)
	}
	return k, nil
}

// etcdArgs are etcd's flags for a throw-away single member on 127.0.0.1.
func etcdArgs(bin, dataDir, clientURL, peerURL string) []string {
	args := []string{
		"--name", "epochfs-test", "--data-dir", dataDir,
		"--listen-client-urls", clientURL, "--advertise-client-urls", clientURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "epochfs-test=" + peerURL,
		"--log-level", "warn",
	}
	if etcdHasNoFsync(bin) {
		args = append(args, "--unsafe-no-fsync=true")
	}
	return args
}

// kubeAPIServerArgs are kube-apiserver's flags on 127.0.0.1:port with the
// certificates of pki (RBAC on, the ServiceAccount admission plugin off).
func kubeAPIServerArgs(pki *kubePKI, etcdURL string, port int, certDir string) []string {
	host := "https://127.0.0.1:" + strconv.Itoa(port)
	return []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + pki.serverCert, "--tls-private-key-file=" + pki.serverKey,
		"--client-ca-file=" + pki.caCert,
		"--service-account-issuer=" + host,
		"--service-account-key-file=" + pki.saPub, "--service-account-signing-key-file=" + pki.saKey,
		"--service-cluster-ip-range=10.0.0.0/24", "--allow-privileged=true",
		"--authorization-mode=RBAC", "--disable-admission-plugins=ServiceAccount",
		"--endpoint-reconciler-type=none",
		"--cert-dir=" + certDir,
	}
}

// waitHTTP polls url until it answers 200, the process exits or
// kubeReadyTimeout passes.
func waitHTTP(c *child, client *http.Client, url string) error {
	deadline := time.Now().Add(kubeReadyTimeout)
	var last string
	for time.Now().Before(deadline) {
		select {
		case <-c.exited:
			return fmt.Errorf("%s exited before ready (%v): %s", c.name, c.err, c.tail(4000))
		case <-time.After(50 * time.Millisecond):
		}
		resp, err := client.Get(url)
		if err != nil {
			last = err.Error()
			continue
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return nil
		}
		last = fmt.Sprintf("%s: %s", resp.Status, body)
	}
	return fmt.Errorf("%s not ready after %v (%s): %s", c.name, kubeReadyTimeout, last, c.tail(4000))
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// InstallCRDs creates the CustomResourceDefinitions in the YAML files at
// paths and waits until each is established and served, or fails the test.
func (k *Kube) InstallCRDs(t testing.TB, paths ...string) {
	t.Helper()
	dc, err := dynamic.NewForConfig(k.Config)
	if err != nil {
		t.Fatalf("testenv: dynamic client: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var names []string
	for _, p := range paths {
		objs, err := readYAMLObjects(p)
		if err != nil {
			t.Fatalf("testenv: %v", err)
		}
		for _, o := range objs {
			if o.GetKind() != "CustomResourceDefinition" {
				t.Fatalf("testenv: %s: %s %q is not a CustomResourceDefinition", p, o.GetKind(), o.GetName())
			}
			if _, err := dc.Resource(crdGVR).Create(ctx, o, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatalf("testenv: create CRD %s from %s: %v", o.GetName(), p, err)
			}
			names = append(names, o.GetName())
		}
	}
	for _, name := range names {
		if err := waitEstablished(ctx, dc, name); err != nil {
			t.Fatalf("testenv: CRD %s: %v", name, err)
		}
	}
}

func waitEstablished(ctx context.Context, dc dynamic.Interface, name string) error {
	for {
		o, err := dc.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			conds, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
			for _, c := range conds {
				m, _ := c.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not established: %w (last get error: %v)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// readYAMLObjects decodes every non-empty document of a YAML file.
func readYAMLObjects(path string) ([]*unstructured.Unstructured, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}

// kubePKI is a throwaway CA, a serving certificate for 127.0.0.1, an admin
// client certificate (O=system:masters) and a service-account key pair.
type kubePKI struct {
	caCert, serverCert, serverKey, saPub, saKey string // file paths
	adminCert, adminKey                         string // file paths of the admin client certificate
	caPEM, adminCertPEM, adminKeyPEM            []byte
}

func newKubePKI(dir string) (*kubePKI, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "epochfs-test-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	issue := func(serial int64, tmpl *x509.Certificate) (certPEM, keyPEM []byte, err error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		tmpl.SerialNumber = big.NewInt(serial)
		tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Hour), now.Add(24*time.Hour)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return nil, nil, err
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return nil, nil, err
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
	}
	serverCert, serverKey, err := issue(2, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
	})
	if err != nil {
		return nil, err
	}
	adminCert, adminKey, err := issue(3, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "admin", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return nil, err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	saKeyDER, err := x509.MarshalECPrivateKey(saKey)
	if err != nil {
		return nil, err
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	p := &kubePKI{
		caCert: filepath.Join(dir, "ca.crt"), serverCert: filepath.Join(dir, "apiserver.crt"),
		serverKey: filepath.Join(dir, "apiserver.key"), saPub: filepath.Join(dir, "sa.pub"),
		saKey:     filepath.Join(dir, "sa.key"),
		adminCert: filepath.Join(dir, "admin.crt"), adminKey: filepath.Join(dir, "admin.key"),
		caPEM:        pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		adminCertPEM: adminCert, adminKeyPEM: adminKey,
	}
	for path, data := range map[string][]byte{
		p.caCert:     p.caPEM,
		p.serverCert: serverCert,
		p.serverKey:  serverKey,
		p.saPub:      pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPubDER}),
		p.saKey:      pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: saKeyDER}),
		p.adminCert:  adminCert,
		p.adminKey:   adminKey,
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func (p *kubePKI) tlsConfig() *tls.Config {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(p.caPEM)
	cert, _ := tls.X509KeyPair(p.adminCertPEM, p.adminKeyPEM)
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
}

func (p *kubePKI) kubeconfig(host string) []byte {
	b64 := base64.StdEncoding.EncodeToString
	return []byte(strings.Join([]string{
		"apiVersion: v1",
		"kind: Config",
		"clusters:",
		"- name: epochfs-test",
		"  cluster:",
		"    server: " + host,
		"    certificate-authority-data: " + b64(p.caPEM),
		"users:",
		"- name: admin",
		"  user:",
		"    client-certificate-data: " + b64(p.adminCertPEM),
		"    client-key-data: " + b64(p.adminKeyPEM),
		"contexts:",
		"- name: epochfs-test",
		"  context:",
		"    cluster: epochfs-test",
		"    user: admin",
		"    namespace: default",
		"current-context: epochfs-test",
		"",
	}, "\n"))
}

// Log returns kube-apiserver's output so far, for a test's failure message.
func (k *Kube) Log() string { return k.log.String() }
