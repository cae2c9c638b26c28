package backend

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"strings"

	"github.com/epochfs/epochfs/pkg/source"
)

// Egress makes, or checks, the connections of network backends: the CSI
// driver's mounts pass an *egress.Dialer (package egress), which refuses
// destinations on or next to the node unless a network rule names them.
// DialFrom connects like net.Dialer.DialContext, binding local when it is
// not nil; Check judges an address that a client which cannot use a Go
// dialer (libcephfs) is about to connect to. A refusal wraps
// fs.ErrPermission: backends return it as ErrPermission and never retry it.
type Egress interface {
	DialFrom(ctx context.Context, network, address string, local *net.TCPAddr) (net.Conn, error)
	Check(ctx context.Context, address string) error
}

// refusedEgress reports an Egress refusal (or a connect the system refused
// with EACCES/EPERM): a permission failure, not a transient one.
func refusedEgress(err error) bool { return err != nil && errors.Is(err, fs.ErrPermission) }

// checkCephMonitors judges the monitor of a cephfs source through eg before
// libcephfs connects to it (libcephfs dials by itself, in C): src.Host, or
// both default monitor ports (msgr2 3300, msgr1 6789) when it has no port.
// What the monitor then hands out (other monitors, MDS and OSD addresses)
// is dialed by libcephfs unchecked; see docs/SECURITY.md.
func checkCephMonitors(ctx context.Context, src source.Source, eg Egress) error {
	addrs := []string{src.Host}
	if _, _, err := net.SplitHostPort(src.Host); err != nil {
		h := strings.TrimSuffix(strings.TrimPrefix(src.Host, "["), "]")
		addrs = []string{net.JoinHostPort(h, "3300"), net.JoinHostPort(h, "6789")}
	}
	for _, a := range addrs {
		if err := eg.Check(ctx, a); err != nil {
			return fmt.Errorf("cephfs: open %s: monitor: %w: %w", src, ErrPermission, err)
		}
	}
	return nil
}
