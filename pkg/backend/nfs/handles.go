package nfs

import (
	"bytes"
	"context"
	"strings"
	"time"

	nfsc "github.com/willscott/go-nfs-client/nfs"
	"github.com/willscott/go-nfs-client/nfs/xdr"
)

// nfsHandle is a cached LOOKUP result. The cache is a map bounded by
// nfsHandleMax with random eviction, hand-written rather than ristretto: a
// handle resolved by one block read must be visible to the next read of the
// same file at once, and ristretto's buffered Sets and admission policy would
// send those reads back to LOOKUP.
type nfsHandle struct {
	fh      []byte
	typ     uint32
	expires time.Time
}

// lookup resolves name in the directory dir, filling a.
func (b *nfsBackend) lookup(ctx context.Context, c *rpcConn, dir []byte, name string, a *nfsc.Fattr) ([]byte, error) {
	var fh []byte
	var attrSet bool
	err := c.call(ctx, b.timeout, b.auth, nfsc.Nfs3Prog, nfsc.Nfs3Vers, nfsc.NFSProc3Lookup,
		func(e *xdrEnc) { e.opaque(dir); e.str(name) },
		func(r *bytes.Reader) error {
			if err := nfsStatus(r, "lookup"); err != nil {
				return err
			}
			var err error
			if fh, err = xdr.ReadOpaque(r); err != nil {
				return err
			}
			var pa nfsc.PostOpAttr
			if err := xdr.Read(r, &pa); err != nil {
				return err
			}
			attrSet = pa.IsSet
			*a = pa.Attr
			return nil
		})
	if err != nil {
		return nil, err
	}
	if !attrSet {
		if err := b.getattr(ctx, c, fh, a); err != nil {
			return nil, err
		}
	}
	return fh, nil
}

func (b *nfsBackend) cached(p string) (nfsHandle, bool) {
	b.hmu.Lock()
	defer b.hmu.Unlock()
	h, ok := b.handles[p]
	if ok && time.Now().After(h.expires) {
		delete(b.handles, p)
		ok = false
	}
	return h, ok
}

func (b *nfsBackend) forget(p string) {
	b.hmu.Lock()
	delete(b.handles, p)
	b.hmu.Unlock()
}

func (b *nfsBackend) remember(p string, fh []byte, typ uint32) {
	if typ != nfsc.NF3Dir && typ != nfsc.NF3Reg {
		return
	}
	b.hmu.Lock()
	defer b.hmu.Unlock()
	if len(b.handles) >= nfsHandleMax {
		for k := range b.handles { // map order: random enough
			delete(b.handles, k)
			if len(b.handles) <= nfsHandleMax*7/8 {
				break
			}
		}
	}
	b.handles[p] = nfsHandle{fh: fh, typ: typ, expires: time.Now().Add(nfsHandleTTL)}
}

// dirHandle returns the handle of the directory at the clean path p,
// walking from the root with LOOKUP (cached handles first). A component
// that is not a directory (a file, a symlink) is ErrNotExist's NOTDIR.
func (b *nfsBackend) dirHandle(ctx context.Context, c *rpcConn, root []byte, p string) ([]byte, error) {
	if p == "" {
		return root, nil
	}
	if h, ok := b.cached(p); ok && h.typ == nfsc.NF3Dir {
		return h.fh, nil
	}
	i := strings.LastIndexByte(p, '/')
	parent, name := "", p
	if i >= 0 {
		parent, name = p[:i], p[i+1:]
	}
	dir, err := b.dirHandle(ctx, c, root, parent)
	if err != nil {
		return nil, err
	}
	var a nfsc.Fattr
	fh, err := b.lookup(ctx, c, dir, name, &a)
	if err != nil {
		return nil, err
	}
	if a.Type != nfsc.NF3Dir {
		return nil, &nfsStatError{op: "lookup", stat: nfsc.NFS3ErrNotDir}
	}
	b.remember(p, fh, a.Type)
	return fh, nil
}

// resolve looks up the clean path p afresh (its parent directory may come
// from the cache) and returns its handle and attributes.
func (b *nfsBackend) resolve(ctx context.Context, c *rpcConn, root []byte, p string, a *nfsc.Fattr) ([]byte, error) {
	if p == "" {
		return root, b.getattr(ctx, c, root, a)
	}
	i := strings.LastIndexByte(p, '/')
	parent, name := "", p
	if i >= 0 {
		parent, name = p[:i], p[i+1:]
	}
	dir, err := b.dirHandle(ctx, c, root, parent)
	if err != nil {
		return nil, err
	}
	fh, err := b.lookup(ctx, c, dir, name, a)
	if err != nil {
		return nil, err
	}
	b.remember(p, fh, a.Type)
	return fh, nil
}
