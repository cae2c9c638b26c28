package egress_test

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/epochfs/epochfs/pkg/egress"
)

// recorder is a ConnectFunc that records every attempt and connects
// nowhere: no test of this file sends a packet, even to loopback.
type recorder struct {
	mu       sync.Mutex
	attempts []string
}

func (r *recorder) connect(_ context.Context, network, address string, local *net.TCPAddr) (net.Conn, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.attempts = append(r.attempts, network+" "+address)
	c1, c2 := net.Pipe()
	c2.Close()
	return c1, nil
}

func (r *recorder) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.attempts)
}

// nodeAddrs stand for the node's own interface addresses.
var nodeAddrs = []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("fd00::5")}

// dns is the injected resolver: every name is answered from this table.
var dns = map[string][]string{
	"minio.example":    {"203.0.113.10"},
	"loopback.example": {"127.0.0.1"},
	"mapped.example":   {"::ffff:127.0.0.1"},
	"metadata.example": {"169.254.169.254"},
	"node.example":     {"10.1.2.3"},
	"mixed.example":    {"203.0.113.11", "127.0.0.2"},
	"v6ll.example":     {"fe80::1"},
}

func newDialer(t *testing.T, allow ...string) (*egress.Dialer, *recorder) {
	t.Helper()
	r := &recorder{}
	d, err := egress.New(egress.Config{
		Allow:   allow,
		Connect: r.connect,
		Resolve: func(_ context.Context, host string) ([]netip.Addr, error) {
			var out []netip.Addr
			for _, s := range dns[host] {
				out = append(out, netip.MustParseAddr(s))
			}
			if out == nil {
				return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
			}
			return out, nil
		},
		LocalAddrs: func() ([]netip.Addr, error) { return nodeAddrs, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	return d, r
}

// TestDialerRefusesLocalDestinations: loopback, link-local (the metadata
// address among them), unspecified, multicast and the node's own addresses
// are refused — by IP and through a name that resolves to one — with an
// error naming the rule to add, and not one connection is attempted.
// Public addresses and endpoints a rule names are dialed, by the IP that
// was checked. (There was no dialer before: every one of these was dialed.)
func TestDialerRefusesLocalDestinations(t *testing.T) {
	for _, tc := range []struct {
		name, addr string
		allow      []string
		want       string // attempt made, or "" for a refusal
		why        string // part of the refusal
	}{
		{"loopback", "127.0.0.1:9000", nil, "", "loopback"},
		{"loopback other", "127.9.9.9:80", nil, "", "loopback"},
		{"ipv6 loopback", "[::1]:9000", nil, "", "loopback"},
		{"ipv4-mapped loopback", "[::ffff:127.0.0.1]:9000", nil, "", "loopback"},
		{"metadata", "169.254.169.254:80", nil, "", "link-local"},
		{"link-local", "169.254.1.1:443", nil, "", "link-local"},
		{"ipv6 link-local", "[fe80::1%eth0]:80", nil, "", "link-local"},
		{"unspecified", "0.0.0.0:9000", nil, "", "unspecified"},
		{"ipv6 unspecified", "[::]:9000", nil, "", "unspecified"},
		{"multicast", "224.0.0.1:80", nil, "", "multicast"},
		{"node address", "10.1.2.3:10250", nil, "", "address of this node"},
		{"node ipv6 address", "[fd00::5]:22", nil, "", "address of this node"},
		{"name to loopback", "loopback.example:9000", nil, "", "loopback"},
		{"name to mapped loopback", "mapped.example:9000", nil, "", "loopback"},
		{"name to metadata", "metadata.example:80", nil, "", "link-local"},
		{"name to node", "node.example:443", nil, "", "address of this node"},
		{"name to ipv6 link-local", "v6ll.example:80", nil, "", "link-local"},
		{"name with one local answer", "mixed.example:443", nil, "", "loopback"},
		{"rule for another port", "127.0.0.1:9001", []string{"127.0.0.1:9000"}, "", "loopback"},
		{"rule for another host", "127.0.0.1:9000", []string{"localhost:9000"}, "", "loopback"},
		{"rule for the name, dialed by IP", "169.254.169.254:80", []string{"metadata.example:80"}, "", "link-local"},

		{"public", "203.0.113.5:443", nil, "tcp 203.0.113.5:443", ""},
		{"public name", "minio.example:9000", nil, "tcp 203.0.113.10:9000", ""},
		{"other node", "10.1.2.4:9000", nil, "tcp 10.1.2.4:9000", ""},
		{"rule names loopback endpoint", "127.0.0.1:9000", []string{"127.0.0.1:9000"}, "tcp 127.0.0.1:9000", ""},
		{"rule names host, any port", "127.0.0.1:2049", []string{"127.0.0.1"}, "tcp 127.0.0.1:2049", ""},
		{"rule names ipv6 loopback", "[::1]:9000", []string{"[::1]:9000"}, "tcp [::1]:9000", ""},
		{"rule names the name", "loopback.example:9000", []string{"LOOPBACK.example:9000"}, "tcp 127.0.0.1:9000", ""},
		{"rule by IP covers a name", "loopback.example:9000", []string{"127.0.0.1:9000"}, "tcp 127.0.0.1:9000", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, r := newDialer(t, tc.allow...)
			c, err := d.DialContext(context.Background(), "tcp", tc.addr)
			if tc.want == "" {
				if err == nil {
					c.Close()
					t.Fatalf("dial %s: allowed, want refused", tc.addr)
				}
				if !errors.Is(err, egress.ErrRefused) || !errors.Is(err, fs.ErrPermission) {
					t.Errorf("error %v: want egress.ErrRefused and fs.ErrPermission", err)
				}
				for _, part := range []string{tc.why, tc.addr, "network rule", "--network-rules"} {
					if !strings.Contains(err.Error(), part) {
						t.Errorf("error %q does not say %q", err, part)
					}
				}
				if a := r.got(); len(a) != 0 {
					t.Errorf("refused, yet connect was attempted: %q", a)
				}
				if cerr := d.Check(context.Background(), tc.addr); !errors.Is(cerr, egress.ErrRefused) {
					t.Errorf("Check(%s) = %v, want the refusal", tc.addr, cerr)
				}
				return
			}
			if err != nil {
				t.Fatalf("dial %s: %v", tc.addr, err)
			}
			c.Close()
			if a := r.got(); !slices.Equal(a, []string{tc.want}) {
				t.Errorf("attempts %q, want [%q]", a, tc.want)
			}
		})
	}
}

// TestDialerDialsTheCheckedIP: a name is resolved once and the connection
// goes to the IP that was judged, so a resolver that answers a public
// address first and loopback afterwards (DNS rebinding) never gets the
// second answer dialed.
func TestDialerDialsTheCheckedIP(t *testing.T) {
	r := &recorder{}
	var lookups int
	d, err := egress.New(egress.Config{
		Connect: r.connect,
		Resolve: func(context.Context, string) ([]netip.Addr, error) {
			lookups++
			if lookups == 1 {
				return []netip.Addr{netip.MustParseAddr("203.0.113.7")}, nil
			}
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		},
		LocalAddrs: func() ([]netip.Addr, error) { return nil, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := d.DialContext(context.Background(), "tcp", "rebind.example:80")
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if a := r.got(); !slices.Equal(a, []string{"tcp 203.0.113.7:80"}) || lookups != 1 {
		t.Errorf("attempts %q after %d lookups; want one lookup and the checked IP dialed", a, lookups)
	}
	if _, err := d.DialContext(context.Background(), "tcp", "rebind.example:80"); !errors.Is(err, egress.ErrRefused) {
		t.Errorf("second dial (the name now answers loopback): %v, want refused", err)
	}
	if a := r.got(); len(a) != 1 {
		t.Errorf("attempts %q: the rebound name was dialed", a)
	}
}

// TestDialerRealInterfaces: with the default LocalAddrs, an address of
// this machine's own interfaces (other than loopback, which is refused
// anyway) is refused; no connection is attempted.
func TestDialerRealInterfaces(t *testing.T) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	var own netip.Addr
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && !ip.Unmap().IsLoopback() && !ip.IsLinkLocalUnicast() {
				own = ip.Unmap()
				break
			}
		}
	}
	if !own.IsValid() {
		t.Skip("this machine has no address besides loopback and link-local")
	}
	r := &recorder{}
	d, err := egress.New(egress.Config{Connect: r.connect})
	if err != nil {
		t.Fatal(err)
	}
	addr := netip.AddrPortFrom(own, 10250).String()
	if _, err := d.DialContext(context.Background(), "tcp", addr); !errors.Is(err, egress.ErrRefused) || !strings.Contains(err.Error(), "address of this node") {
		t.Errorf("dial %s (this machine's own address): %v, want refused as the node's own", addr, err)
	}
	if a := r.got(); len(a) != 0 {
		t.Errorf("attempts %q", a)
	}
}

// TestDialerLocalBind: DialFrom hands the local address (nfs's reserved
// port) to the connect function; non-tcp networks are refused.
func TestDialerLocalBind(t *testing.T) {
	var gotLocal *net.TCPAddr
	d, err := egress.New(egress.Config{
		Connect: func(_ context.Context, _, _ string, local *net.TCPAddr) (net.Conn, error) {
			gotLocal = local
			c1, c2 := net.Pipe()
			c2.Close()
			return c1, nil
		},
		LocalAddrs: func() ([]netip.Addr, error) { return nil, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := d.DialFrom(context.Background(), "tcp", "203.0.113.1:2049", &net.TCPAddr{Port: 700})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if gotLocal == nil || gotLocal.Port != 700 {
		t.Errorf("local address %v, want port 700", gotLocal)
	}
	if _, err := d.DialContext(context.Background(), "udp", "203.0.113.1:53"); err == nil {
		t.Error("udp dial allowed")
	}
}

// TestNewRejectsBadEndpoints: a malformed Allow entry fails New.
func TestNewRejectsBadEndpoints(t *testing.T) {
	for _, a := range []string{"", "host:0", "host:99999", "host:port", "http://x"} {
		if _, err := egress.New(egress.Config{Allow: []string{a}}); err == nil {
			t.Errorf("Allow %q accepted", a)
		}
	}
}
