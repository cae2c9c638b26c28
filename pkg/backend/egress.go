package backend

import (
	"context"
	"errors"
	"io/fs"
	"net"
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

// RefusedEgress reports an Egress refusal (or a connect the system refused
// with EACCES/EPERM): a permission failure, not a transient one.
func RefusedEgress(err error) bool { return err != nil && errors.Is(err, fs.ErrPermission) }
