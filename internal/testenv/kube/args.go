package kube

import (
	"bytes"
	"os/exec"
	"strconv"
	"sync"
)

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

// EtcdArgs are etcd's flags for a throw-away single member on 127.0.0.1.
func EtcdArgs(bin, dataDir, clientURL, peerURL string) []string {
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

// APIServerArgs are kube-apiserver's flags on 127.0.0.1:port with the
// certificates of pki (RBAC on, the ServiceAccount admission plugin off).
func APIServerArgs(pki *PKI, etcdURL string, port int, certDir string) []string {
	host := "https://127.0.0.1:" + strconv.Itoa(port)
	return []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + pki.ServerCert, "--tls-private-key-file=" + pki.ServerKey,
		"--client-ca-file=" + pki.CACert,
		"--service-account-issuer=" + host,
		"--service-account-key-file=" + pki.SAPub, "--service-account-signing-key-file=" + pki.SAKey,
		"--service-cluster-ip-range=10.0.0.0/24", "--allow-privileged=true",
		"--authorization-mode=RBAC", "--disable-admission-plugins=ServiceAccount",
		"--endpoint-reconciler-type=none",
		"--cert-dir=" + certDir,
	}
}
