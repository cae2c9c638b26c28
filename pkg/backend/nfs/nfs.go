package nfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	nfsc "github.com/willscott/go-nfs-client/nfs"
	"github.com/willscott/go-nfs-client/nfs/rpc"
	"github.com/willscott/go-nfs-client/nfs/xdr"

	"github.com/epochfs/epochfs/pkg/backend"
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
// Fields are immutable after Open except the guarded root handle, the
// handle cache and the atomic counters.
type nfsBackend struct {
	src       source.Source
	id        string
	host      string // without port
	nfsAddr   string // host:port of the NFS service, "" until found
	log       *slog.Logger
	retry     *backend.Retrier
	auth      rpc.Auth
	timeout   time.Duration
	egress    backend.Egress // nil: net.Dialer
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

var (
	_ backend.Backend      = (*nfsBackend)(nil)
	_ backend.RetryCounter = (*nfsBackend)(nil)
	_ backend.SkipCounter  = (*nfsBackend)(nil)
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

// Open MOUNTs the export path of src (through the server's portmapper
// unless the URL names the ports) and returns a Backend that reads it over
// NFSv3 with a pure-Go client: no kernel NFS client and no mount on the
// node. It reads over src.Conns connections.
func Open(ctx context.Context, src source.Source, opts backend.Options) (backend.Backend, error) {
	opts, err := opts.WithDefaults()
	if err != nil {
		return nil, err
	}
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
		retry:     backend.NewRetrier(opts.Retry, opts.Logger),
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
	_, err = b.retry.Do(ctx, "mount", b.retryable, func(ctx context.Context) error {
		_, _, err := b.root(ctx, nil)
		return err
	})
	if err != nil {
		return nil, b.mapErr("open", "", err)
	}
	return b, nil
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
func (b *nfsBackend) Retries() int64 { return b.retry.Retries() }

// Skipped implements SkipCounter.
func (b *nfsBackend) Skipped() int64 { return b.skipped.Load() }

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
	if backend.RefusedEgress(err) {
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
	case backend.RefusedEgress(err):
		return fmt.Errorf("%s: %w: %w", prefix, backend.ErrPermission, err)
	case b.retryable(err):
		return fmt.Errorf("%s: %w: %w", prefix, backend.ErrUnavailable, err)
	}
	var se *nfsStatError
	if errors.As(err, &se) {
		if se.op == "mount" {
			switch se.stat {
			case nfsc.MNT3ErrNoEnt:
				return fmt.Errorf("%s: %w: the server exports no %q (%v)", prefix, backend.ErrNotExist, b.src.Path, err)
			case nfsc.MNT3ErrPerm, nfsc.MNT3ErrAcces:
				return fmt.Errorf("%s: %w: the server refused to mount %q for this client (%v)", prefix, backend.ErrPermission, b.src.Path, err)
			case nfsc.MNT3ErrNotDir:
				return fmt.Errorf("%s: %w (%v)", prefix, backend.ErrNotDir, err)
			}
			return fmt.Errorf("%s: %w", prefix, err)
		}
		switch se.stat {
		case nfsc.NFS3ErrNoEnt, nfsc.NFS3ErrNotDir, nfsc.NFS3ErrStale, nfsc.NFS3ErrBadHandle:
			return fmt.Errorf("%s: %w (%v)", prefix, backend.ErrNotExist, err)
		case nfsc.NFS3ErrIsDir:
			return fmt.Errorf("%s: %w (%v)", prefix, backend.ErrIsDir, err)
		case nfsc.NFS3ErrPerm, nfsc.NFS3ErrAcces:
			return fmt.Errorf("%s: %w (%v)", prefix, backend.ErrPermission, err)
		case nfsc.NFS3ErrNameTooLong:
			return fmt.Errorf("%s: %w (%v)", prefix, backend.ErrInvalidPath, err)
		}
	}
	var re *rpcError
	if errors.As(err, &re) && re.auth {
		return fmt.Errorf("%s: %w (%v)", prefix, backend.ErrPermission, err)
	}
	return fmt.Errorf("%s: %w", prefix, err)
}

// nfsVersion is the version of a file: "MTIMENANOS-SIZE-CTIMENANOS-FILEID"
// from its NFSv3 attributes.
func nfsVersion(a *nfsc.Fattr) string {
	return backend.FileVersion(nfsNanos(a.Mtime), a.Filesize, nfsNanos(a.Ctime), a.Fileid)
}

func nfsNanos(t nfsc.NFS3Time) int64 { return int64(t.Seconds)*1e9 + int64(t.Nseconds) }

func nfsTime(t nfsc.NFS3Time) time.Time { return time.Unix(int64(t.Seconds), int64(t.Nseconds)) }

func nfsEntry(name string, a *nfsc.Fattr) backend.Entry {
	if a.Type == nfsc.NF3Dir {
		return backend.Entry{Name: name, IsDir: true, ModTime: nfsTime(a.Mtime)}
	}
	return backend.Entry{Name: name, Size: int64(a.Filesize), ModTime: nfsTime(a.Mtime), Version: nfsVersion(a)}
}

// do runs fn with a pooled connection and the root handle, under the
// retry policy. A stale handle makes it forget the cached handles and try
// again; when the root handle itself is stale (a server restarted without
// persistent handles), it mounts the export again first.
func (b *nfsBackend) do(ctx context.Context, op string, fn func(ctx context.Context, c *rpcConn, root []byte) error) error {
	_, err := b.retry.Do(ctx, op, b.retryable, func(ctx context.Context) error {
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

func (b *nfsBackend) Stat(ctx context.Context, p string) (backend.Entry, error) {
	p, err := backend.CleanPath(p)
	if err != nil {
		return backend.Entry{}, err
	}
	if err := ctx.Err(); err != nil {
		return backend.Entry{}, fmt.Errorf("nfs: stat %q: %w", p, err)
	}
	var a nfsc.Fattr
	err = b.do(ctx, "stat", func(ctx context.Context, c *rpcConn, root []byte) error {
		_, err := b.resolve(ctx, c, root, p, &a)
		return err
	})
	if err != nil {
		return backend.Entry{}, b.mapErr("stat", p, err)
	}
	switch {
	case a.Type == nfsc.NF3Lnk:
		return backend.Entry{}, fmt.Errorf("nfs: stat %q: %w: a symlink (not followed)", p, backend.ErrNotExist)
	case a.Type != nfsc.NF3Reg && a.Type != nfsc.NF3Dir:
		return backend.Entry{}, fmt.Errorf("nfs: stat %q: %w: not a regular file or directory", p, backend.ErrNotExist)
	}
	return nfsEntry(p[strings.LastIndexByte(p, '/')+1:], &a), nil
}
