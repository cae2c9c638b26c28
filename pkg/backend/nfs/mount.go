package nfs

import (
	"bytes"
	"context"
	"log/slog"
	"time"

	nfsc "github.com/willscott/go-nfs-client/nfs"
	"github.com/willscott/go-nfs-client/nfs/rpc"
	"github.com/willscott/go-nfs-client/nfs/xdr"
)

// authUnix is the AUTH_UNIX credential of uid and gid, with gid as the one
// supplementary group. (go-nfs-client's NewAuthUnix lists group 0 there,
// which would claim the root group for any uid.)
func authUnix(machine string, uid, gid uint32) rpc.Auth {
	if len(machine) > 255 {
		machine = machine[:255]
	}
	a := rpc.AuthUnix{Stamp: uint32(time.Now().Unix()), Machinename: machine, Uid: uid, Gid: gid, GidLen: 1, Gids: gid}
	return a.Auth()
}

// root returns the pool and the export's root handle, mounting the export
// first when it is not mounted, or when stale is the current root handle
// (the server forgot it: restarted without persistent handles).
func (b *nfsBackend) root(ctx context.Context, stale []byte) (*rpcPool, []byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, nil, errPoolClosed
	}
	if b.rootFH != nil && (stale == nil || !bytes.Equal(stale, b.rootFH)) {
		return b.pool, b.rootFH, nil
	}
	nfsAddr, mountAddr, err := b.findPorts(ctx)
	if err != nil {
		return nil, nil, err
	}
	fh, err := b.mountExport(ctx, mountAddr)
	if err != nil {
		return nil, nil, err
	}
	if b.pool == nil || nfsAddr != b.nfsAddr {
		if b.pool != nil {
			b.pool.close()
		}
		b.pool = newRPCPool(nfsAddr, b.conns, b.timeout, b.egress)
		b.nfsAddr = nfsAddr
	}
	// FSINFO: the server's largest READ.
	c, err := b.pool.get(ctx)
	if err != nil {
		return nil, nil, err
	}
	var rtmax uint32
	err = c.call(ctx, b.timeout, b.auth, nfsc.Nfs3Prog, nfsc.Nfs3Vers, nfsc.NFSProc3FSInfo,
		func(e *xdrEnc) { e.opaque(fh) },
		func(r *bytes.Reader) error {
			if err := nfsStatus(r, "fsinfo"); err != nil {
				return err
			}
			var info nfsc.FSInfo
			if err := xdr.Read(r, &info); err != nil {
				return err
			}
			rtmax = info.RTMax
			return nil
		})
	b.pool.put(c)
	if err != nil {
		return nil, nil, err
	}
	b.rsize = b.wantRSize
	if rtmax > 0 && int64(rtmax) < int64(b.rsize) {
		b.rsize = int(rtmax)
	}
	b.rootFH = fh
	b.hmu.Lock()
	clear(b.handles)
	b.hmu.Unlock()
	b.log.Debug("mounted export", slog.String("nfs", nfsAddr), slog.String("mount", mountAddr), slog.Int("rsize", b.rsize))
	return b.pool, fh, nil
}

// mountExport MOUNTs the export path and returns its root handle.
func (b *nfsBackend) mountExport(ctx context.Context, mountAddr string) ([]byte, error) {
	c, err := dialRPC(ctx, mountAddr, b.timeout, b.egress)
	if err != nil {
		return nil, err
	}
	defer c.close()
	var fh []byte
	err = c.call(ctx, b.timeout, b.auth, nfsc.MountProg, nfsc.MountVers, nfsc.MountProc3MNT,
		func(e *xdrEnc) { e.str(b.src.Path) },
		func(r *bytes.Reader) error {
			st, err := xdr.ReadUint32(r)
			if err != nil {
				return err
			}
			if st != nfsc.MNT3Ok {
				return &nfsStatError{op: "mount", stat: st}
			}
			fh, err = xdr.ReadOpaque(r)
			return err
		})
	return fh, err
}
