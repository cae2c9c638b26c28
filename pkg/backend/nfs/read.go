package nfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	nfsc "github.com/willscott/go-nfs-client/nfs"
	"github.com/willscott/go-nfs-client/nfs/xdr"

	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/source"
)

// errNFSChanged carries a version mismatch out of the retry loop.
type errNFSChanged struct{ now string }

func (e *errNFSChanged) Error() string { return "changed, now " + e.now }

func (b *nfsBackend) ReadAt(ctx context.Context, p, version string, buf []byte, off int64) (int, error) {
	p, err := backend.CheckRead(ctx, source.KindNFS, p, off)
	if err != nil {
		return 0, err
	}
	n := 0
	err = b.do(ctx, "read", func(ctx context.Context, c *rpcConn, root []byte) error {
		b.mu.Lock()
		rsize := b.rsize // set by the mount, which do made
		b.mu.Unlock()
		h, cached := b.cached(p)
		if cached {
			var err error
			n, err = b.readHandle(ctx, c, h.fh, h.typ, version, buf, off, rsize)
			var ce *errNFSChanged
			if !errors.As(err, &ce) && !isStale(err) {
				return err
			}
			// Another version (or a stale handle) through a cached
			// handle: the path may name another file now. Look it up.
			b.forget(p)
		}
		var a nfsc.Fattr
		fh, err := b.resolve(ctx, c, root, p, &a)
		if err != nil {
			return err
		}
		n, err = b.readHandle(ctx, c, fh, a.Type, version, buf, off, rsize)
		return err
	})
	if err != nil {
		var ce *errNFSChanged
		if errors.As(err, &ce) {
			return 0, fmt.Errorf("nfs: read %q: %w (version %s, now %s)", p, backend.ErrChanged, version, ce.now)
		}
		return 0, b.mapErr("read", p, err)
	}
	if n < len(buf) {
		return n, io.EOF
	}
	return n, nil
}

// readHandle reads len(buf) bytes at off from the file fh of type typ, in
// READs of up to rsize bytes, each reply's attributes checked against
// version when it is not empty.
func (b *nfsBackend) readHandle(ctx context.Context, c *rpcConn, fh []byte, typ uint32, version string, buf []byte, off int64, rsize int) (int, error) {
	switch {
	case typ == nfsc.NF3Dir:
		return 0, &nfsStatError{op: "read", stat: nfsc.NFS3ErrIsDir}
	case typ != nfsc.NF3Reg:
		return 0, &nfsStatError{op: "read", stat: nfsc.NFS3ErrNoEnt}
	}
	rsize = max(rsize, source.MinNFSReadSize)
	if len(buf) <= rsize {
		return b.readSeq(ctx, c, fh, version, buf, off, rsize)
	}
	// A read of several READs: its chunks go out at once over the idle
	// connections of the pool (never waiting for a busy one, so readers
	// cannot deadlock each other), the rest one after the other on c.
	b.mu.Lock()
	pool := b.pool
	b.mu.Unlock()
	nchunks := (len(buf) + rsize - 1) / rsize
	type result struct {
		n   int
		err error
	}
	res := make([]result, nchunks)
	chunk := func(i int) []byte { return buf[i*rsize : min(len(buf), (i+1)*rsize)] }
	var wg sync.WaitGroup
	var mine []int
	for i := range nchunks {
		var hc *rpcConn
		if i > 0 && pool != nil {
			hc = pool.tryGet(ctx)
		}
		if hc == nil {
			mine = append(mine, i)
			continue
		}
		wg.Go(func() {
			defer pool.put(hc)
			n, err := b.readSeq(ctx, hc, fh, version, chunk(i), off+int64(i*rsize), rsize)
			res[i] = result{n, err}
		})
	}
	for _, i := range mine {
		n, err := b.readSeq(ctx, c, fh, version, chunk(i), off+int64(i*rsize), rsize)
		res[i] = result{n, err}
		if err != nil {
			break
		}
	}
	wg.Wait()
	n := 0
	for i, r := range res {
		if r.err != nil {
			return 0, r.err
		}
		n += r.n
		if r.n < len(chunk(i)) {
			break // the file ends here
		}
	}
	return n, nil
}

// readSeq reads buf at off from fh in READs of up to rsize bytes, one after
// the other on c, each reply's attributes checked against version when it
// is not empty. It stops at the end of the file.
func (b *nfsBackend) readSeq(ctx context.Context, c *rpcConn, fh []byte, version string, buf []byte, off int64, rsize int) (int, error) {
	n := 0
	for {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		want := min(len(buf)-n, rsize)
		m, eof, a, attrSet, err := b.read(ctx, c, fh, off+int64(n), buf[n:n+want])
		if err != nil {
			return 0, err
		}
		if version != "" {
			if !attrSet {
				if err := b.getattr(ctx, c, fh, &a); err != nil {
					return 0, err
				}
			}
			if v := nfsVersion(&a); v != version {
				return 0, &errNFSChanged{now: v}
			}
		}
		n += m
		if eof || n >= len(buf) || m == 0 {
			return n, nil
		}
	}
}

// read issues one READ of len(p) bytes at off into p and returns the bytes
// read, the EOF flag and the file's attributes after the read (attrSet
// false when the server sent none).
func (b *nfsBackend) read(ctx context.Context, c *rpcConn, fh []byte, off int64, p []byte) (n int, eof bool, a nfsc.Fattr, attrSet bool, err error) {
	err = c.call(ctx, b.timeout, b.auth, nfsc.Nfs3Prog, nfsc.Nfs3Vers, nfsc.NFSProc3Read,
		func(e *xdrEnc) { e.opaque(fh); e.u64(uint64(off)); e.u32(uint32(len(p))) },
		func(r *bytes.Reader) error {
			st, err := xdr.ReadUint32(r)
			if err != nil {
				return err
			}
			var pa nfsc.PostOpAttr
			if err := xdr.Read(r, &pa); err != nil {
				return err
			}
			if st != nfsc.NFS3Ok {
				return &nfsStatError{op: "read", stat: st}
			}
			a, attrSet = pa.Attr, pa.IsSet
			var hdr [3]uint32 // count, eof, data length
			for i := range hdr {
				if hdr[i], err = xdr.ReadUint32(r); err != nil {
					return err
				}
			}
			if hdr[2] > uint32(len(p)) || hdr[2] > uint32(r.Len()) {
				return fmt.Errorf("READ returned %d bytes for %d asked", hdr[2], len(p))
			}
			n, _ = r.Read(p[:hdr[2]])
			eof = hdr[1] != 0
			return nil
		})
	return n, eof, a, attrSet, err
}
