package cephfs

import (
	"context"
	"fmt"
	"net"
	"strings"

	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/source"
)

// Open returns the Backend of the CephFS directory src names, through
// libcephfs in builds with the ceph tag (make build-ceph); the default
// cgo-free build returns an error wrapping backend.ErrUnsupported. With
// opts.Egress set, the monitor is checked through it first.
func Open(ctx context.Context, src source.Source, opts backend.Options) (backend.Backend, error) {
	opts, err := opts.WithDefaults()
	if err != nil {
		return nil, err
	}
	if opts.Egress != nil {
		if err := checkCephMonitors(ctx, src, opts.Egress); err != nil {
			return nil, err
		}
	}
	return openCephFS(ctx, src, opts)
}

// checkCephMonitors judges the monitor of a cephfs source through eg before
// libcephfs connects to it (libcephfs dials by itself, in C): src.Host, or
// both default monitor ports (msgr2 3300, msgr1 6789) when it has no port.
// What the monitor then hands out (other monitors, MDS and OSD addresses)
// is dialed by libcephfs unchecked; see docs/SECURITY.md.
func checkCephMonitors(ctx context.Context, src source.Source, eg backend.Egress) error {
	addrs := []string{src.Host}
	if _, _, err := net.SplitHostPort(src.Host); err != nil {
		h := strings.TrimSuffix(strings.TrimPrefix(src.Host, "["), "]")
		addrs = []string{net.JoinHostPort(h, "3300"), net.JoinHostPort(h, "6789")}
	}
	for _, a := range addrs {
		if err := eg.Check(ctx, a); err != nil {
			return fmt.Errorf("cephfs: open %s: monitor: %w: %w", src, backend.ErrPermission, err)
		}
	}
	return nil
}
