package backend_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/backend/all"
	"github.com/epochfs/epochfs/pkg/backend/cephfs"
	"github.com/epochfs/epochfs/pkg/egress"
	"github.com/epochfs/epochfs/pkg/source"
)

// egressRecorder is an egress.Dialer whose connect function records every
// attempt; it connects only to loopback (an in-test server), and refuses to
// connect anywhere else, so no test here can send a packet off the machine.
type egressRecorder struct {
	mu       sync.Mutex
	attempts []string
}

func (r *egressRecorder) dialer(t *testing.T, allow ...string) *egress.Dialer {
	t.Helper()
	d, err := egress.New(egress.Config{
		Allow: allow,
		Connect: func(ctx context.Context, network, address string, local *net.TCPAddr) (net.Conn, error) {
			r.mu.Lock()
			r.attempts = append(r.attempts, address)
			r.mu.Unlock()
			ap, err := netip.ParseAddrPort(address)
			if err != nil || !ap.Addr().IsLoopback() {
				t.Errorf("connect to %s: a test may dial loopback only", address)
				return nil, errors.New("test: not loopback")
			}
			var d net.Dialer
			return d.DialContext(ctx, network, address)
		},
		Resolve: func(_ context.Context, host string) ([]netip.Addr, error) {
			switch host {
			case "loopback.example":
				return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
			case "metadata.example":
				return []netip.Addr{netip.MustParseAddr("169.254.169.254")}, nil
			}
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		},
		LocalAddrs: func() ([]netip.Addr, error) { return []netip.Addr{netip.MustParseAddr("10.9.8.7")}, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func (r *egressRecorder) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.attempts)
}

// TestEgressRefusesLocalSources: every network backend opened with an
// Egress connects through it, so a source on loopback, link-local or the
// node's own address (directly or through a name resolving there) fails
// at Open with ErrPermission naming the rule to add, not retried, and
// not one connection is attempted. Before the Egress option, s3 and nfs
// dialed these addresses with a plain net.Dialer, and cephfs handed them
// to libcephfs.
func TestEgressRefusesLocalSources(t *testing.T) {
	for _, tc := range []struct{ name, source string }{
		{"s3 on loopback", "s3://bucket?endpoint=http://127.0.0.1:9&region=us-east-1"},
		{"s3 on metadata address", "s3://bucket?endpoint=http://169.254.169.254&region=us-east-1"},
		{"s3 on a name resolving to loopback", "s3://bucket?endpoint=https://loopback.example:9443&region=us-east-1"},
		{"s3 on the node's address", "s3://bucket?endpoint=http://10.9.8.7:10250&region=us-east-1"},
		{"nfs on loopback, port given", "nfs://127.0.0.1:2049/export"},
		{"nfs on loopback, portmapper", "nfs://127.0.0.1/export"},
		{"nfs on metadata name", "nfs://metadata.example/export?mountport=20048"},
		{"mirror of local places", "mirror:s3://bkt?endpoint=http://127.0.0.1:9&region=us-east-1,nfs://[::1]:2049/x"},
		{"cephfs monitor on loopback", "cephfs://admin@127.0.0.1/data"},
		{"cephfs monitor name to link-local", "cephfs://admin@metadata.example:3300/data"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, err := source.Parse(tc.source)
			if err != nil {
				t.Fatal(err)
			}
			r := &egressRecorder{}
			opts := backend.Options{Egress: r.dialer(t), Credentials: backend.Credentials{AccessKey: "AKIAEXAMPLE", SecretKey: "secret-not-used"}}
			b, err := all.Open(context.Background(), src, opts)
			if err == nil {
				b.Close()
				t.Fatalf("Open(%s): opened, want refused", tc.source)
			}
			if !errors.Is(err, backend.ErrPermission) || !errors.Is(err, egress.ErrRefused) || errors.Is(err, backend.ErrUnavailable) {
				t.Errorf("Open(%s): %v; want ErrPermission and egress.ErrRefused, not ErrUnavailable", tc.source, err)
			}
			if !strings.Contains(err.Error(), "network rule") {
				t.Errorf("Open(%s): %q does not name the rule to add", tc.source, err)
			}
			if a := r.got(); len(a) != 0 {
				t.Errorf("refused, yet connections were attempted: %q", a)
			}
		})
	}
}

// TestEgressAllowsRuleEndpoint: an s3 source on loopback opens when a rule
// names its endpoint, and its requests go through the Egress (an in-test
// S3 server answers the probe).
func TestEgressAllowsRuleEndpoint(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/xml")
		_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>bucket</Name><Prefix></Prefix><KeyCount>1</KeyCount><MaxKeys>1</MaxKeys><IsTruncated>false</IsTruncated><Contents><Key>a</Key><Size>1</Size><ETag>"e"</ETag><LastModified>2024-01-01T00:00:00.000Z</LastModified></Contents></ListBucketResult>`))
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	src, err := source.Parse("s3://bucket?endpoint=" + srv.URL + "&region=us-east-1")
	if err != nil {
		t.Fatal(err)
	}
	r := &egressRecorder{}
	opts := backend.Options{Egress: r.dialer(t, host), Credentials: backend.Credentials{AccessKey: "AKIAEXAMPLE", SecretKey: "secret"}}
	b, err := all.Open(context.Background(), src, opts)
	if err != nil {
		t.Fatalf("Open with a rule naming %s: %v", host, err)
	}
	b.Close()
	if a := r.got(); len(a) == 0 || a[0] != host {
		t.Errorf("attempts %q, want the dial to %s through the Egress", a, host)
	}

	// The same source without the rule: refused, nothing dialed.
	r2 := &egressRecorder{}
	opts.Egress = r2.dialer(t)
	if _, err := all.Open(context.Background(), src, opts); !errors.Is(err, egress.ErrRefused) {
		t.Errorf("Open without the rule: %v, want refused", err)
	}
	if a := r2.got(); len(a) != 0 {
		t.Errorf("attempts %q without the rule", a)
	}
}

// TestEgressCephMonitorAllowed: a cephfs monitor that passes the check
// reaches the cephfs backend (in this cgo-free build: ErrUnsupported).
func TestEgressCephMonitorAllowed(t *testing.T) {
	if cephfs.Built {
		t.Skip("a ceph build would connect to the monitor; this test only checks the check")
	}
	src, err := source.Parse("cephfs://admin@127.0.0.1:3300/data")
	if err != nil {
		t.Fatal(err)
	}
	r := &egressRecorder{}
	_, err = all.Open(context.Background(), src, backend.Options{Egress: r.dialer(t, "127.0.0.1")})
	if !errors.Is(err, backend.ErrUnsupported) {
		t.Errorf("Open: %v, want ErrUnsupported (past the monitor check)", err)
	}
}
