package kube

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/rest"
)

// PKI is a throwaway CA, a serving certificate for 127.0.0.1, an admin
// client certificate (O=system:masters) and a service-account key pair,
// written as files for the servers' flags. Fields are read-only.
type PKI struct {
	// File paths.
	CACert, ServerCert, ServerKey, SAPub, SAKey string
	// AdminCert and AdminKey are the file paths of the admin client
	// certificate (the kube-apiserver's client certificate for kubelets).
	AdminCert, AdminKey string

	caPEM, adminCertPEM, adminKeyPEM []byte
}

// ca is a certificate authority that issues the PKI's certificates.
type ca struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
	now  time.Time
}

func newCA(now time.Time) (*ca, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "epochfs-test-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &ca{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), now: now}, nil
}

// issue signs tmpl (given its serial number) for a new key and returns
// both in PEM.
func (c *ca) issue(serial int64, tmpl *x509.Certificate) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl.SerialNumber = big.NewInt(serial)
	tmpl.NotBefore, tmpl.NotAfter = c.now.Add(-time.Hour), c.now.Add(24*time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
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

// NewPKI makes a PKI and writes its files into dir.
func NewPKI(dir string) (*PKI, error) {
	ca, err := newCA(time.Now())
	if err != nil {
		return nil, err
	}
	serverCert, serverKey, err := ca.issue(2, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
	})
	if err != nil {
		return nil, err
	}
	adminCert, adminKey, err := ca.issue(3, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "admin", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return nil, err
	}
	saPub, saKey, err := serviceAccountKeys()
	if err != nil {
		return nil, err
	}
	p := &PKI{
		CACert: filepath.Join(dir, "ca.crt"), ServerCert: filepath.Join(dir, "apiserver.crt"),
		ServerKey: filepath.Join(dir, "apiserver.key"), SAPub: filepath.Join(dir, "sa.pub"),
		SAKey:     filepath.Join(dir, "sa.key"),
		AdminCert: filepath.Join(dir, "admin.crt"), AdminKey: filepath.Join(dir, "admin.key"),
		caPEM: ca.pem, adminCertPEM: adminCert, adminKeyPEM: adminKey,
	}
	for path, data := range map[string][]byte{
		p.CACert: p.caPEM, p.ServerCert: serverCert, p.ServerKey: serverKey,
		p.SAPub: saPub, p.SAKey: saKey, p.AdminCert: adminCert, p.AdminKey: adminKey,
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// serviceAccountKeys returns a key pair for signing service-account
// tokens, public and private, in PEM.
func serviceAccountKeys() (pubPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

// TLSConfig is a client TLS config that trusts the CA and presents the
// admin certificate.
func (p *PKI) TLSConfig() *tls.Config {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(p.caPEM)
	cert, _ := tls.X509KeyPair(p.adminCertPEM, p.adminKeyPEM)
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
}

// AdminConfig is a client config for the API server at host
// ("https://127.0.0.1:PORT") as the admin, with the given rate limits.
func (p *PKI) AdminConfig(host string, qps float32, burst int) *rest.Config {
	return &rest.Config{
		Host: host,
		TLSClientConfig: rest.TLSClientConfig{
			CAData: p.caPEM, CertData: p.adminCertPEM, KeyData: p.adminKeyPEM,
		},
		QPS: qps, Burst: burst,
	}
}

// Kubeconfig is a kubeconfig file for the API server at host as the admin,
// with context "epochfs-test" and the certificates embedded.
func (p *PKI) Kubeconfig(host string) []byte {
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
