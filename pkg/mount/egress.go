package mount

import (
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/epochfs/epochfs/pkg/egress"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
	"github.com/epochfs/epochfs/pkg/source"
)

// EgressAllow returns the endpoints that network rules (source URLs, as the
// node plugin's --network-rules) name, for egress.Config.Allow: an s3
// rule's endpoint host:port (the scheme's port when it has none; an s3 rule
// without endpoint names AWS, which is not local and needs nothing); an nfs
// rule's host on every port (MOUNT and the portmapper listen beside NFS); a
// cephfs rule's monitor, host:port when it has a port, else the host.
func EgressAllow(rules []string) ([]string, error) {
	var out []string
	for _, r := range rules {
		src, err := source.Parse(r)
		if err != nil {
			return nil, fmt.Errorf("mount: --%s: %w", mountapi.FlagEgressRules, err)
		}
		switch src.Kind {
		case source.KindS3:
			if src.Endpoint == "" {
				continue
			}
			u, err := url.Parse(src.Endpoint)
			if err != nil || u.Host == "" {
				return nil, fmt.Errorf("mount: --%s: rule %s: bad endpoint", mountapi.FlagEgressRules, r)
			}
			host, port := u.Hostname(), u.Port()
			if port == "" {
				port = "80"
				if u.Scheme == "https" {
					port = "443"
				}
			}
			out = append(out, net.JoinHostPort(host, port))
		case source.KindNFS:
			out = append(out, hostOnly(src.Host))
		case source.KindCephFS:
			if _, _, err := net.SplitHostPort(src.Host); err == nil {
				out = append(out, src.Host)
			} else {
				out = append(out, hostOnly(src.Host))
			}
		default:
			return nil, fmt.Errorf("mount: --%s: rule %s is a %s source, want s3://, cephfs:// or nfs://", mountapi.FlagEgressRules, r, src.Kind)
		}
	}
	return out, nil
}

// hostOnly strips the port (and IPv6 brackets) of "host[:port]".
func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]")
}

// NewEgress returns the dialer of a mount with restricted egress
// (--restrict-egress): it refuses the node's own, loopback, link-local,
// unspecified and multicast destinations unless one of rules names the
// endpoint (EgressAllow).
func NewEgress(rules []string) (*egress.Dialer, error) {
	allow, err := EgressAllow(rules)
	if err != nil {
		return nil, err
	}
	return egress.New(egress.Config{Allow: allow})
}

// SplitRules splits a comma-separated --egress-rules value, dropping empty
// items (the form of the node plugin's --network-rules).
func SplitRules(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
