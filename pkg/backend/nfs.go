package backend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	nfsc "github.com/willscott/go-nfs-client/nfs"
	"github.com/willscott/go-nfs-client/nfs/rpc"
	"github.com/willscott/go-nfs-client/nfs/xdr"

	"github.com/epochfs/epochfs/pkg/source"
)

// NFS defaults (see Source: the conns and rsize URL options).
const (
	// nfsHandleTTL is how long a path's file handle is reused by ReadAt
	// without a new LOOKUP (every List and Stat looks up afresh and
	// refreshes it). Handles are persistent in NFSv3, and a read checks the
	// version of the file it reads (the attributes in the READ reply), so a
	// path replaced by a rename within the TTL serves the replaced file's
	// bytes only to a caller that asks for that file's version, and
	// ErrChanged to one that asks for the new one; a removed file's handle
	// is stale and looked up again. The mount lists a directory again after
	// an hour too.
	nfsHandleTTL = time.Hour
	// nfsHandleMax bounds the handle cache (~40 MB at most); when full, an
	// eighth of it, picked at random, is dropped.
	nfsHandleMax = 1 << 18
)

// NFSv3 error numbers beyond those go-nfs-client names.
const nfs3ErrJukebox = 10008

// nfsBackend serves a directory of an NFSv3 export through a pure-Go
// client (no kernel NFS client, no mount). It MOUNTs the export path once
// (again when the server forgets the root handle), then walks paths with
// LOOKUP from the export root, one component at a time, so that ".." and
// absolute paths never reach the server (CleanPath refuses them first) and
// nothing outside the export path can be named.
//
// Symlinks are never followed: a symlink is skipped (and counted) in
// listings and is ErrNotExist for Stat and ReadAt, also as a path component.
// Resolving them on the client would mean re-implementing the confinement
// the server's export already gives; a dataset with symlinks can be served
// through a kernel mount and the posix backend, which follows those inside
// the dataset.
//
// Reads go over a pool of connections (Source.Conns), one call at a time
// on each, READs of up to the server's rtmax (Source.ReadSize, 1 MiB by
// default); a ReadAt of several READs sends them at once over the idle
// connections (a 4 MiB block of a large file: ~1.2–1.4× the sequential
// rate from Ganesha here); a broken connection is replaced at its next
// use. Every READ reply carries the file's attributes, so the version
// check costs no extra call. Versions are
// "MTIMENANOS-SIZE-CTIMENANOS-FILEID", the posix format with the server's
// fileid as the inode number.
//
// Fields are immutable after openNFS except the guarded root handle, the
// handle cache and the atomic counters.
type nfsBackend struct {
	src       source.Source
	id        string
	host      string // without port
	nfsAddr   string // host:port of the NFS service, "" until found
	log       *slog.Logger
	retry     *retrier
	auth      rpc.Auth
	timeout   time.Duration
	egress    Egress // nil: net.Dialer
	conns     int
	wantRSize int

	mu     sync.Mutex // guards pool, nfsAddr, rootFH, rsize, closed
	pool   *rpcPool
	rootFH []byte
	rsize  int
	closed bool

	hmu     sync.Mutex
	handles map[string]nfsHandle

	skipped atomic.Int64
}

// nfsHandle is a cached LOOKUP result.
type nfsHandle struct {
	fh      []byte
	typ     uint32
	expires time.Time
}

var (
	_ Backend      = (*nfsBackend)(nil)
	_ RetryCounter = (*nfsBackend)(nil)
	_ SkipCounter  = (*nfsBackend)(nil)
)

// nfsStatError is a non-OK NFSv3 (or MOUNTv3) status.
type nfsStatError struct {
	op   string
	stat uint32
}

func (e *nfsStatError) Error() string {
	if e.op == "mount" {
		return fmt.Sprintf("MOUNT status %d", e.stat)
	}
	name := "NFS3ERR_" + strconv.Itoa(int(e.stat))
	if s := nfsc.NFS3Error(e.stat); s != nil {
		var ne *nfsc.Error
		if errors.As(s, &ne) {
			name = ne.ErrorString
		} else {
			name = s.Error()
		}
	}
	if e.stat == nfs3ErrJukebox {
		name = "NFS3ERR_JUKEBOX"
	}
	return e.op + ": " + name
}

func openNFS(ctx context.Context, src source.Source, opts Options) (Backend, error) {
	host, _, err := net.SplitHostPort(src.Host)
	if err != nil {
		host = strings.TrimSuffix(strings.TrimPrefix(src.Host, "["), "]")
	}
	machine, _ := os.Hostname()
	if machine == "" {
		machine = "epochfs"
	}
	conns := src.Conns
	if conns == 0 {
		conns = source.DefaultNFSConns
	}
	rsize := src.ReadSize
	if rsize == 0 {
		rsize = source.DefaultNFSReadSize
	}
	b := &nfsBackend{
		src:       src,
		id:        "nfs://" + src.Host + source.EscapePath(src.Path),
		host:      host,
		log:       opts.Logger.With(slog.String("backend", "nfs"), slog.String("server", src.Host), slog.String("export", src.Path)),
		retry:     &retrier{policy: opts.Retry, log: opts.Logger},
		auth:      authUnix(machine, src.UID, src.GID),
		timeout:   opts.RequestTimeout,
		egress:    opts.Egress,
		conns:     conns,
		wantRSize: rsize,
		handles:   map[string]nfsHandle{},
	}
	if opts.Lazy {
		return b, nil
	}
	_, err = b.retry.do(ctx, "mount", b.retryable, func(ctx context.Context) error {
		_, _, err := b.root(ctx, nil)
		return err
	})
	if err != nil {
		return nil, b.mapErr("open", "", err)
	}
	return b, nil
}

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

func (b *nfsBackend) ID() string { return b.id }

func (b *nfsBackend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	if b.pool != nil {
		b.pool.close()
	}
	return nil
}

func (b *nfsBackend) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

// Retries implements RetryCounter.
func (b *nfsBackend) Retries() int64 { return b.retry.retries.Load() }

// Skipped implements SkipCounter.
func (b *nfsBackend) Skipped() int64 { return b.skipped.Load() }

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
		if refusedEgress(err) {
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

// nfsStatus reads an NFSv3 reply's status; a failure's body (attributes)
// is not needed.
func nfsStatus(r *bytes.Reader, op string) error {
	st, err := xdr.ReadUint32(r)
	if err != nil {
		return err
	}
	if st != nfsc.NFS3Ok {
		return &nfsStatError{op: op, stat: st}
	}
	return nil
}

func isStale(err error) bool {
	var se *nfsStatError
	return errors.As(err, &se) && se.op != "mount" && (se.stat == nfsc.NFS3ErrStale || se.stat == nfsc.NFS3ErrBadHandle)
}

// retryable: transport failures, SYSTEM_ERR, JUKEBOX and SERVERFAULT.
func (b *nfsBackend) retryable(err error) bool {
	if refusedEgress(err) {
		return false // a refused destination stays refused
	}
	if errors.Is(err, errTransport) {
		return true
	}
	var re *rpcError
	if errors.As(err, &re) {
		return re.transient
	}
	var se *nfsStatError
	if errors.As(err, &se) && se.op != "mount" {
		return se.stat == nfs3ErrJukebox || se.stat == nfsc.NFS3ErrServerFault || se.stat == nfsc.NFS3ErrIO
	}
	return false
}

// mapErr maps an error to the backend sentinels.
func (b *nfsBackend) mapErr(op, p string, err error) error {
	prefix := "nfs: " + op + " " + strconv.Quote(p)
	if op == "open" {
		prefix = "nfs: open " + b.src.String()
	}
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: %w", prefix, err)
	case errors.Is(err, errPoolClosed):
		return fmt.Errorf("%s: %w", prefix, err)
	case refusedEgress(err):
		return fmt.Errorf("%s: %w: %w", prefix, ErrPermission, err)
	case b.retryable(err):
		return fmt.Errorf("%s: %w: %w", prefix, ErrUnavailable, err)
	}
	var se *nfsStatError
	if errors.As(err, &se) {
		if se.op == "mount" {
			switch se.stat {
			case nfsc.MNT3ErrNoEnt:
				return fmt.Errorf("%s: %w: the server exports no %q (%v)", prefix, ErrNotExist, b.src.Path, err)
			case nfsc.MNT3ErrPerm, nfsc.MNT3ErrAcces:
				return fmt.Errorf("%s: %w: the server refused to mount %q for this client (%v)", prefix, ErrPermission, b.src.Path, err)
			case nfsc.MNT3ErrNotDir:
				return fmt.Errorf("%s: %w (%v)", prefix, ErrNotDir, err)
			}
			return fmt.Errorf("%s: %w", prefix, err)
		}
		switch se.stat {
		case nfsc.NFS3ErrNoEnt, nfsc.NFS3ErrNotDir, nfsc.NFS3ErrStale, nfsc.NFS3ErrBadHandle:
			return fmt.Errorf("%s: %w (%v)", prefix, ErrNotExist, err)
		case nfsc.NFS3ErrIsDir:
			return fmt.Errorf("%s: %w (%v)", prefix, ErrIsDir, err)
		case nfsc.NFS3ErrPerm, nfsc.NFS3ErrAcces:
			return fmt.Errorf("%s: %w (%v)", prefix, ErrPermission, err)
		case nfsc.NFS3ErrNameTooLong:
			return fmt.Errorf("%s: %w (%v)", prefix, ErrInvalidPath, err)
		}
	}
	var re *rpcError
	if errors.As(err, &re) && re.auth {
		return fmt.Errorf("%s: %w (%v)", prefix, ErrPermission, err)
	}
	return fmt.Errorf("%s: %w", prefix, err)
}

// nfsVersion is the version of a file: "MTIMENANOS-SIZE-CTIMENANOS-FILEID"
// from its NFSv3 attributes.
func nfsVersion(a *nfsc.Fattr) string {
	buf := make([]byte, 0, 64)
	buf = strconv.AppendInt(buf, nfsNanos(a.Mtime), 10)
	buf = append(buf, '-')
	buf = strconv.AppendUint(buf, a.Filesize, 10)
	buf = append(buf, '-')
	buf = strconv.AppendInt(buf, nfsNanos(a.Ctime), 10)
	buf = append(buf, '-')
	buf = strconv.AppendUint(buf, a.Fileid, 10)
	return string(buf)
}

func nfsNanos(t nfsc.NFS3Time) int64 { return int64(t.Seconds)*1e9 + int64(t.Nseconds) }

func nfsTime(t nfsc.NFS3Time) time.Time { return time.Unix(int64(t.Seconds), int64(t.Nseconds)) }

func nfsEntry(name string, a *nfsc.Fattr) Entry {
	if a.Type == nfsc.NF3Dir {
		return Entry{Name: name, IsDir: true, ModTime: nfsTime(a.Mtime)}
	}
	return Entry{Name: name, Size: int64(a.Filesize), ModTime: nfsTime(a.Mtime), Version: nfsVersion(a)}
}

// do runs fn with a pooled connection and the root handle, under the
// retry policy. A stale handle makes it forget the cached handles and try
// again; when the root handle itself is stale (a server restarted without
// persistent handles), it mounts the export again first.
func (b *nfsBackend) do(ctx context.Context, op string, fn func(ctx context.Context, c *rpcConn, root []byte) error) error {
	_, err := b.retry.do(ctx, op, b.retryable, func(ctx context.Context) error {
		var stale []byte
		var err error
		fresh := false
		for range 4 {
			var pool *rpcPool
			var root []byte
			if pool, root, err = b.root(ctx, stale); err != nil {
				return err
			}
			var c *rpcConn
			if c, err = pool.get(ctx); err != nil {
				if errors.Is(err, errPoolClosed) && !b.isClosed() {
					continue // replaced by a mount at another NFS port
				}
				return err
			}
			err = fn(ctx, c, root)
			if errors.Is(err, errTransport) && c.reused && !fresh {
				// The connection died while idle: drop its idle
				// siblings too and try once more on a new one (not
				// counted as a retry).
				pool.put(c)
				pool.dropIdle()
				fresh = true
				continue
			}
			if !isStale(err) {
				pool.put(c)
				return err
			}
			b.hmu.Lock()
			clear(b.handles)
			b.hmu.Unlock()
			stale = nil
			if gerr := b.getattr(ctx, c, root, new(nfsc.Fattr)); isStale(gerr) {
				stale = root
			}
			pool.put(c)
		}
		return err
	})
	return err
}

// getattr fills a with the attributes of fh. c must be a connection the
// caller holds; it may be broken by then (the call then fails).
func (b *nfsBackend) getattr(ctx context.Context, c *rpcConn, fh []byte, a *nfsc.Fattr) error {
	if c.broken {
		return fmt.Errorf("%w: connection broken", errTransport)
	}
	return c.call(ctx, b.timeout, b.auth, nfsc.Nfs3Prog, nfsc.Nfs3Vers, nfsc.NFSProc3GetAttr,
		func(e *xdrEnc) { e.opaque(fh) },
		func(r *bytes.Reader) error {
			if err := nfsStatus(r, "getattr"); err != nil {
				return err
			}
			return xdr.Read(r, a)
		})
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

func (b *nfsBackend) Stat(ctx context.Context, p string) (Entry, error) {
	p, err := CleanPath(p)
	if err != nil {
		return Entry{}, err
	}
	if err := ctx.Err(); err != nil {
		return Entry{}, fmt.Errorf("nfs: stat %q: %w", p, err)
	}
	var a nfsc.Fattr
	err = b.do(ctx, "stat", func(ctx context.Context, c *rpcConn, root []byte) error {
		_, err := b.resolve(ctx, c, root, p, &a)
		return err
	})
	if err != nil {
		return Entry{}, b.mapErr("stat", p, err)
	}
	switch {
	case a.Type == nfsc.NF3Lnk:
		return Entry{}, fmt.Errorf("nfs: stat %q: %w: a symlink (not followed)", p, ErrNotExist)
	case a.Type != nfsc.NF3Reg && a.Type != nfsc.NF3Dir:
		return Entry{}, fmt.Errorf("nfs: stat %q: %w: not a regular file or directory", p, ErrNotExist)
	}
	return nfsEntry(p[strings.LastIndexByte(p, '/')+1:], &a), nil
}

// READDIRPLUS page sizes: directory bytes and whole reply bytes.
const (
	nfsDirCount = 64 << 10
	nfsMaxCount = 512 << 10
)

func (b *nfsBackend) List(ctx context.Context, p string) ([]Entry, error) {
	p, err := CleanPath(p)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("nfs: list %q: %w", p, err)
	}
	var out []Entry
	type kid struct {
		name string
		fh   []byte
		typ  uint32
	}
	var kids []kid
	var skipped []string
	g := newListGuard(ctx, p) // the caps (listlimit.go)
	defer g.release()
	err = b.do(ctx, "list", func(ctx context.Context, c *rpcConn, root []byte) error {
		out, kids, skipped = out[:0], kids[:0], skipped[:0]
		g.restart()
		var a nfsc.Fattr
		dir, err := b.resolve(ctx, c, root, p, &a)
		if err != nil {
			return err
		}
		switch {
		case a.Type == nfsc.NF3Lnk:
			return &nfsStatError{op: "lookup", stat: nfsc.NFS3ErrNoEnt}
		case a.Type != nfsc.NF3Dir:
			return errNFSNotDir
		}
		var cookie uint64
		var verf [8]byte
		prevCookie := cookie
		for {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := g.page(); err != nil {
				return err
			}
			eof := false
			err := c.call(ctx, b.timeout, b.auth, nfsc.Nfs3Prog, nfsc.Nfs3Vers, nfsc.NFSProc3ReadDirPlus,
				func(e *xdrEnc) {
					e.opaque(dir)
					e.u64(cookie)
					e.b = append(e.b, verf[:]...)
					e.u32(nfsDirCount)
					e.u32(nfsMaxCount)
				},
				func(r *bytes.Reader) error {
					if err := nfsStatus(r, "readdirplus"); err != nil {
						return err
					}
					var dattr nfsc.PostOpAttr
					if err := xdr.Read(r, &dattr); err != nil {
						return err
					}
					if _, err := io.ReadFull(r, verf[:]); err != nil {
						return err
					}
					for {
						follows, err := xdr.ReadUint32(r)
						if err != nil {
							return err
						}
						if follows == 0 {
							break
						}
						var ent nfsc.EntryPlus
						if err := xdr.Read(r, &ent); err != nil {
							return err
						}
						cookie = ent.Cookie
						name := ent.FileName
						if name == "." || name == ".." {
							continue
						}
						if !source.ValidName(name) {
							skipped = append(skipped, name+"\x00not a valid file name")
							continue
						}
						var fh []byte
						if ent.Handle.IsSet {
							fh = ent.Handle.FH
						}
						if err := g.entry(name, ""); err != nil {
							return err // stops the loop: no further page is asked for
						}
						var typ uint32
						if ent.Attr.IsSet {
							typ = ent.Attr.Attr.Type
							out = append(out, nfsEntry(name, &ent.Attr.Attr))
						} else {
							out = append(out, Entry{Name: name}) // filled in below
						}
						kids = append(kids, kid{name: name, fh: fh, typ: typ})
					}
					e, err := xdr.ReadUint32(r)
					eof = e != 0
					return err
				})
			if err != nil {
				return err
			}
			if eof {
				break
			}
			if cookie == prevCookie {
				// A page that moved nothing on and is not the last: a
				// broken server; do not loop forever.
				return fmt.Errorf("%w: READDIRPLUS made no progress (cookie %d)", errTransport, cookie)
			}
			prevCookie = cookie
		}
		// Entries the server sent without attributes (or handles): LOOKUP.
		for i := range kids {
			if kids[i].typ != 0 && kids[i].fh != nil {
				continue
			}
			var a nfsc.Fattr
			fh, err := b.lookup(ctx, c, dir, kids[i].name, &a)
			if err != nil {
				if isNotExist(err) {
					kids[i].typ = 0xffff // removed since the listing
					continue
				}
				return err
			}
			kids[i].fh, kids[i].typ = fh, a.Type
			out[i] = nfsEntry(kids[i].name, &a)
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, errNFSNotDir) {
			return nil, fmt.Errorf("nfs: list %q: %w", p, ErrNotDir)
		}
		if lim := (*ListLimitError)(nil); errors.As(err, &lim) {
			return nil, fmt.Errorf("nfs: list: %w", lim)
		}
		return nil, b.mapErr("list", p, err)
	}
	for _, s := range skipped {
		name, why, _ := strings.Cut(s, "\x00")
		b.skip(p, name, why)
	}
	res := out[:0]
	for i, e := range out {
		k := kids[i]
		switch k.typ {
		case nfsc.NF3Reg, nfsc.NF3Dir:
			b.remember(joinPath(p, k.name), k.fh, k.typ)
			res = append(res, e)
		case 0xffff:
		case nfsc.NF3Lnk:
			b.skip(p, k.name, "a symlink (not followed)")
		default:
			b.skip(p, k.name, "not a regular file or directory")
		}
	}
	slices.SortFunc(res, func(x, y Entry) int { return strings.Compare(x.Name, y.Name) })
	return res, nil
}

var errNFSNotDir = errors.New("not a directory")

func isNotExist(err error) bool {
	var se *nfsStatError
	return errors.As(err, &se) && se.stat == nfsc.NFS3ErrNoEnt
}

func (b *nfsBackend) skip(dir, name, why string) {
	b.skipped.Add(1)
	b.log.Warn("skipping directory entry", slog.String("path", strconv.Quote(joinPath(dir, name))), slog.String("reason", why))
}

// errNFSChanged carries a version mismatch out of the retry loop.
type errNFSChanged struct{ now string }

func (e *errNFSChanged) Error() string { return "changed, now " + e.now }

func (b *nfsBackend) ReadAt(ctx context.Context, p, version string, buf []byte, off int64) (int, error) {
	p, err := checkRead(ctx, source.KindNFS, p, off)
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
			return 0, fmt.Errorf("nfs: read %q: %w (version %s, now %s)", p, ErrChanged, version, ce.now)
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
