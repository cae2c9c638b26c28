// Package egress is the one dialer through which the dataset reads of a
// tenant's volume connect: the mount processes the CSI driver starts (s3's
// HTTP transport, nfs's RPC connections, every replica of a mirror, a
// manifest fetched by URL) and the node plugin's own manifest reads for node
// labels and volume stats. It refuses destinations on the node itself or
// next to it — loopback (127.0.0.0/8, ::1), link-local (169.254.0.0/16, with
// the cloud metadata address 169.254.169.254, and fe80::/10), unspecified
// (0.0.0.0, ::, which reach the node itself), multicast, and every address of
// the node's own interfaces (net.InterfaceAddrs: with hostNetwork, the node's
// services) — unless an admin's rule names that endpoint.
//
// How it checks: resolve, check, then dial the checked IP. The name is
// resolved once (Config.Resolve), every address it yields is judged, and
// the connection goes to the IP literal that was judged (Config.Connect),
// never to the name again: a DNS answer that changes between the check and
// the dial (rebinding) cannot slip through, and a name that resolves to a
// refused address is refused before any packet leaves. (net.Dialer's Control
// hook would see the dialed IP too, but not the name a rule allows, and it
// runs inside a real socket's connect, so a test could not count attempts
// with an injected connect function; resolve-then-dial keeps both seams.)
//
// It is a leaf: the standard library only. It knows nothing of source URLs
// (pkg/mount turns the node's network rules into Allow endpoints), backends,
// Kubernetes or gRPC.
package egress

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// ErrRefused is wrapped by every refusal of the dialer, together with
// fs.ErrPermission (so callers that classify by the standard sentinels —
// pkg/backend, pkg/mount's exit codes — see a permission failure, never a
// transient one to retry).
var ErrRefused = errors.New("egress: destination not allowed")

// ConnectFunc makes one connection to address, an IP literal and port
// ("10.0.0.7:9000", "[2001:db8::1]:443"). local, when not nil, is the local
// address to bind (nfs binds a reserved port as root). The default is a
// net.Dialer; tests inject one that records attempts.
type ConnectFunc func(ctx context.Context, network, address string, local *net.TCPAddr) (net.Conn, error)

// Config of a Dialer. The zero Config refuses every local destination and
// allows the rest, with the system resolver and a net.Dialer.
type Config struct {
	// Allow are the endpoints the admin's rules name, which may be dialed
	// whatever their addresses are: "host:port" allows that port of the
	// host, "host" (no port) every port of it. host is matched as written
	// (a name matches the same name, case-insensitively; an IP literal
	// matches the dialed IP), never through DNS.
	Allow []string
	// Resolve returns the addresses of a host name. Default:
	// net.DefaultResolver.LookupNetIP(ctx, "ip", host).
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	// Connect dials an IP literal. Default: net.Dialer.
	Connect ConnectFunc
	// LocalAddrs returns the node's own addresses, asked at every dial so
	// that an address added later is refused too. Default: the addresses
	// of net.InterfaceAddrs.
	LocalAddrs func() ([]netip.Addr, error)
}

// Dialer dials with the checks of the package doc. Its fields are
// immutable after New, so it is safe for concurrent use.
type Dialer struct {
	allow      []endpoint
	resolve    func(ctx context.Context, host string) ([]netip.Addr, error)
	connect    ConnectFunc
	localAddrs func() ([]netip.Addr, error)
}

// endpoint is one Allow entry: a host (lower-cased name or IP literal) and
// a port, "" for any.
type endpoint struct {
	host string
	ip   netip.Addr // valid when host is an IP literal
	port string
}

// New validates cfg.
func New(cfg Config) (*Dialer, error) {
	d := &Dialer{resolve: cfg.Resolve, connect: cfg.Connect, localAddrs: cfg.LocalAddrs}
	for _, a := range cfg.Allow {
		e, err := parseEndpoint(a)
		if err != nil {
			return nil, err
		}
		d.allow = append(d.allow, e)
	}
	if d.resolve == nil {
		d.resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	if d.connect == nil {
		d.connect = dialNet
	}
	if d.localAddrs == nil {
		d.localAddrs = interfaceAddrs
	}
	return d, nil
}

func parseEndpoint(a string) (endpoint, error) {
	host, port := a, ""
	if h, p, err := net.SplitHostPort(a); err == nil {
		host, port = h, p
		if n, err := strconv.Atoi(p); err != nil || n <= 0 || n > 65535 {
			return endpoint{}, fmt.Errorf("egress: allowed endpoint %q: bad port", a)
		}
	} else {
		host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	}
	if host == "" || strings.ContainsAny(host, "/ ") {
		return endpoint{}, fmt.Errorf("egress: allowed endpoint %q: want host or host:port", a)
	}
	e := endpoint{host: strings.ToLower(host), port: port}
	if ip, err := netip.ParseAddr(host); err == nil {
		e.ip = ip.Unmap()
	}
	return e, nil
}

// allowed reports whether a rule names host:port (host as dialed, before
// resolution) or, for an IP rule, ip:port.
func (d *Dialer) allowed(host, port string, ip netip.Addr) bool {
	host = strings.ToLower(host)
	for _, e := range d.allow {
		if e.port != "" && e.port != port {
			continue
		}
		if e.host == host || (e.ip.IsValid() && ip.IsValid() && e.ip == ip) {
			return true
		}
	}
	return false
}

// DialContext is DialFrom without a local address: the signature of
// net.Dialer.DialContext and http.Transport.DialContext.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	return d.DialFrom(ctx, network, address, nil)
}

// DialFrom resolves address's host, refuses it when any of its addresses is
// refused (see Check), and else connects to its addresses in turn (as
// net.Dialer does, without the parallel race of IPv4 and IPv6), binding
// local when not nil. Only tcp networks are served.
func (d *Dialer) DialFrom(ctx context.Context, network, address string, local *net.TCPAddr) (net.Conn, error) {
	switch network {
	case "tcp", "tcp4", "tcp6":
	default:
		return nil, fmt.Errorf("egress: dial %s %s: only tcp is served", network, address)
	}
	ips, err := d.check(ctx, address)
	if err != nil {
		return nil, err
	}
	_, port, _ := net.SplitHostPort(address)
	var errs []error
	for _, ip := range ips {
		if (network == "tcp4" && !ip.Is4()) || (network == "tcp6" && !ip.Is6()) {
			continue
		}
		c, err := d.connect(ctx, network, net.JoinHostPort(ip.String(), port), local)
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	if len(errs) == 0 {
		return nil, fmt.Errorf("egress: dial %s %s: no %s address", network, address, network)
	}
	return nil, errors.Join(errs...)
}

// Check resolves address ("host:port") and judges every address it yields,
// as DialFrom does, without connecting. It is for clients that cannot use
// a Go dialer (libcephfs): they connect by themselves afterwards, so a
// name's answer may change in between (see docs/SECURITY.md).
func (d *Dialer) Check(ctx context.Context, address string) error {
	_, err := d.check(ctx, address)
	return err
}

// check returns the addresses to dial for address, or the refusal.
func (d *Dialer) check(ctx context.Context, address string) ([]netip.Addr, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fmt.Errorf("egress: dial %s: %w", address, err)
	}
	if d.allowed(host, port, netip.Addr{}) {
		// The admin named this endpoint as written: its addresses are the
		// admin's to choose. It is still resolved once and dialed by IP.
		return d.lookup(ctx, host)
	}
	ips, err := d.lookup(ctx, host)
	if err != nil {
		return nil, err
	}
	local, err := d.localAddrs()
	if err != nil {
		// Unknown own addresses: refuse rather than guess.
		return nil, refused(address, netip.Addr{}, "the node's own addresses cannot be listed ("+err.Error()+")", port)
	}
	for _, ip := range ips {
		if d.allowed(host, port, ip) {
			continue
		}
		if why := localKind(ip, local); why != "" {
			return nil, refused(address, ip, why, port)
		}
	}
	return ips, nil
}

// lookup resolves host (an IP literal is itself), IPv4-mapped IPv6
// addresses unmapped so that ::ffff:127.0.0.1 is judged as 127.0.0.1.
func (d *Dialer) lookup(ctx context.Context, host string) ([]netip.Addr, error) {
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.Zone() != "" {
			ip = ip.WithZone("")
		}
		return []netip.Addr{ip.Unmap()}, nil
	}
	ips, err := d.resolve(ctx, host)
	if err != nil {
		return nil, fmt.Errorf("egress: resolve %s: %w", host, err)
	}
	if len(ips) == 0 {
		return nil, fmt.Errorf("egress: resolve %s: no address", host)
	}
	out := make([]netip.Addr, len(ips))
	for i, ip := range ips {
		out[i] = ip.WithZone("").Unmap()
	}
	return out, nil
}

// localKind names why ip is on or next to this node, or "" when it is not.
func localKind(ip netip.Addr, own []netip.Addr) string {
	switch {
	case ip.IsLoopback():
		return "a loopback address"
	case ip.IsLinkLocalUnicast():
		return "a link-local address (cloud metadata services live there)"
	case ip.IsUnspecified():
		return "the unspecified address (it reaches the node itself)"
	case ip.IsMulticast(), ip.IsLinkLocalMulticast(), ip.IsInterfaceLocalMulticast():
		return "a multicast address"
	}
	for _, o := range own {
		if o == ip {
			return "an address of this node"
		}
	}
	return ""
}

// refusal is the error of a refused destination.
type refusal struct{ msg string }

func (e *refusal) Error() string   { return e.msg }
func (e *refusal) Unwrap() []error { return []error{ErrRefused, fs.ErrPermission} }

func refused(address string, ip netip.Addr, why, port string) error {
	at := ""
	if ip.IsValid() && ip.String() != strings.Trim(strings.TrimSuffix(address, ":"+port), "[]") {
		at = " (resolved to " + ip.String() + ")"
	}
	return &refusal{msg: fmt.Sprintf("%v: %s%s is %s; a volume's source may reach it only when the admin names that endpoint "+
		"in a network rule (--network-rules, chart node.networkRules, e.g. s3://BUCKET?endpoint=http://%s, nfs://%s/EXPORT)",
		ErrRefused, address, at, why, address, address)}
}

// dialNet is the default ConnectFunc.
func dialNet(ctx context.Context, network, address string, local *net.TCPAddr) (net.Conn, error) {
	var d net.Dialer
	if local != nil {
		d.LocalAddr = local
	}
	return d.DialContext(ctx, network, address)
}

// interfaceAddrs is the default Config.LocalAddrs.
func interfaceAddrs() ([]netip.Addr, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		var ip net.IP
		switch v := a.(type) {
		case *net.IPNet:
			ip = v.IP
		case *net.IPAddr:
			ip = v.IP
		}
		if p, ok := netip.AddrFromSlice(ip); ok {
			out = append(out, p.Unmap())
		}
	}
	return out, nil
}
