package nfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	nfsc "github.com/willscott/go-nfs-client/nfs"
	"github.com/willscott/go-nfs-client/nfs/rpc"
	"github.com/willscott/go-nfs-client/nfs/xdr"

	"github.com/epochfs/epochfs/pkg/backend"
)

// findPorts returns the addresses of the NFS and MOUNT services. With a
// port in the URL, NFS is there and MOUNT is at the mountport option, or
// on the same port when the server serves both there (go-nfs and other
// single-port servers), else wherever the portmapper (port 111) says. With
// no port, the portmapper names both (NFS falls back to 2049).
func (b *nfsBackend) findPorts(ctx context.Context) (nfsAddr, mountAddr string, err error) {
	_, _, splitErr := net.SplitHostPort(b.src.Host)
	if splitErr == nil {
		nfsAddr = b.src.Host
	}
	if b.src.MountPort != 0 {
		mountAddr = net.JoinHostPort(b.host, strconv.Itoa(b.src.MountPort))
	}
	if nfsAddr != "" && mountAddr != "" {
		return nfsAddr, mountAddr, nil
	}
	var probeErr error
	if nfsAddr != "" {
		// Try MOUNT on the NFS port first: a single-port server answers.
		ok, err := b.probeProgram(ctx, nfsAddr, nfsc.MountProg, nfsc.MountVers)
		if ok {
			return nfsAddr, nfsAddr, nil
		}
		if ctxErr := ctx.Err(); ctxErr != nil {
			return "", "", ctxErr
		}
		if backend.RefusedEgress(err) {
			return "", "", err // the portmapper is on the same host
		}
		probeErr = err // a server that drops the call: ask the portmapper
	}
	pmAddr := net.JoinHostPort(b.host, strconv.Itoa(rpc.PmapPort))
	if mountAddr == "" {
		p, err := b.getport(ctx, pmAddr, nfsc.MountProg, nfsc.MountVers)
		if err != nil {
			if probeErr != nil {
				err = errors.Join(fmt.Errorf("MOUNT on %s: %w", nfsAddr, probeErr), err)
			}
			return "", "", fmt.Errorf("finding the MOUNT port through the portmapper at %s (or give ?mountport=N): %w", pmAddr, err)
		}
		if p == 0 {
			return "", "", &rpcError{msg: fmt.Sprintf("the portmapper at %s knows no MOUNT v3 over TCP (is the NFS server running?)", pmAddr)}
		}
		mountAddr = net.JoinHostPort(b.host, strconv.Itoa(p))
	}
	if nfsAddr == "" {
		p, err := b.getport(ctx, pmAddr, nfsc.Nfs3Prog, nfsc.Nfs3Vers)
		if err != nil || p == 0 {
			p = 2049
		}
		nfsAddr = net.JoinHostPort(b.host, strconv.Itoa(p))
	}
	return nfsAddr, mountAddr, nil
}

// probeProgram calls the NULL procedure of prog at addr: true when it is
// served there, false when the server says it is not.
func (b *nfsBackend) probeProgram(ctx context.Context, addr string, prog, vers uint32) (bool, error) {
	c, err := dialRPC(ctx, addr, b.timeout, b.egress)
	if err != nil {
		return false, err
	}
	defer c.close()
	err = c.call(ctx, b.timeout, rpc.AuthNull, prog, vers, 0, nil, func(*bytes.Reader) error { return nil })
	var re *rpcError
	if errors.As(err, &re) && re.progUnavail {
		return false, nil
	}
	return err == nil, err
}

// getport asks the portmapper at pmAddr for the TCP port of prog, vers (0
// when it has none).
func (b *nfsBackend) getport(ctx context.Context, pmAddr string, prog, vers uint32) (int, error) {
	c, err := dialRPC(ctx, pmAddr, b.timeout, b.egress)
	if err != nil {
		return 0, err
	}
	defer c.close()
	var port uint32
	err = c.call(ctx, b.timeout, rpc.AuthNull, rpc.PmapProg, rpc.PmapVers, rpc.PmapProcGetPort,
		func(e *xdrEnc) { e.u32(prog); e.u32(vers); e.u32(rpc.IPProtoTCP); e.u32(0) },
		func(r *bytes.Reader) error {
			var err error
			port, err = xdr.ReadUint32(r)
			return err
		})
	return int(port), err
}
