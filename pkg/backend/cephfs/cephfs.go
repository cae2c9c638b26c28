//go:build ceph

package cephfs

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ceph/go-ceph/cephfs"

	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/source"
)

// Built reports whether this build can open cephfs:// sources.
const Built = true

// cephMountsDefault is the number of libcephfs mounts (each its own client
// session) a cephfs backend spreads its calls over, by directory (see
// mount). Measured by TestCephFSParallelReads on 2 cores shared with the
// OSD and the MDS: 8 readers on one mount read 1.2–3.7x as fast as one
// reader (reads do not serialize on a mount), and 2 or 4 mounts came out
// within the noise of one (0.8–1.6x). libcephfs does each call's
// client-side work under one client lock, so on a node with many cores a
// second session is a cheap hedge; more were no better here.
const cephMountsDefault = 2

// cephMounts is cephMountsDefault, replaceable by tests and benchmarks.
var cephMounts = cephMountsDefault

// cephfsBackend serves a directory of a CephFS file system. Each mount of
// the pool is rooted (MountWithRoot) at the dataset directory, so the
// client itself cannot walk above it; paths are also checked by CleanPath
// and never hold "..". Symlinks are not followed: they are skipped in
// listings and are ErrNotExist on Stat and ReadAt, like other entries
// that are neither regular files nor directories.
//
// The fields are immutable after openCephFS; skipped and closed are atomic.
type cephfsBackend struct {
	clients []*cephClient
	id      string
	src     string // the source URL, for messages (no secrets)
	log     *slog.Logger

	slots   chan struct{} // one per libcephfs call in flight (call)
	skipped atomic.Int64
	closed  atomic.Bool
}

var (
	_ backend.Backend     = (*cephfsBackend)(nil)
	_ backend.SkipCounter = (*cephfsBackend)(nil)
)

func openCephFS(ctx context.Context, src source.Source, opts backend.Options) (backend.Backend, error) {
	b := &cephfsBackend{
		slots: make(chan struct{}, maxCephCalls),
		id:    cephfsID(src),
		src:   src.String(),
		log:   opts.Logger.With(slog.String("backend", "cephfs"), slog.String("source", src.String())),
	}
	n := max(cephMounts, 1)
	for range n {
		if err := ctx.Err(); err != nil {
			b.Close()
			return nil, fmt.Errorf("cephfs: open %s: %w", b.src, err)
		}
		c, err := cephMount(src, opts)
		if err != nil {
			b.Close()
			return nil, fmt.Errorf("cephfs: open %s: %w", b.src, err)
		}
		b.clients = append(b.clients, c)
	}
	// The dataset directory must be a directory: the mount root is it.
	sx, err := b.clients[0].mount.Statx("/", cephfs.StatxBasicStats, 0)
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("cephfs: open %s: %w", b.src, mapCephErr(err))
	}
	if !isDir(sx) {
		b.Close()
		return nil, fmt.Errorf("cephfs: open %s: %w", b.src, backend.ErrNotDir)
	}
	return b, nil
}

// cephfsID is "cephfs://MON/PATH[?fs=NAME]": the user is left out (two
// clients reading the same directory read the same dataset) and there are
// never keys in it.
func cephfsID(src source.Source) string {
	id := "cephfs://" + src.Host + source.EscapePath(strings.TrimSuffix(src.Path, "/")) + "/"
	if src.FS != "" {
		id += "?fs=" + src.FS
	}
	return id
}

func (b *cephfsBackend) ID() string { return b.id }

// Skipped implements SkipCounter.
func (b *cephfsBackend) Skipped() int64 { return b.skipped.Load() }

// Close unmounts and releases every client of the pool. It must not race
// with calls in flight (callers close a Backend after its last use).
func (b *cephfsBackend) Close() error {
	if b.closed.Swap(true) {
		return nil
	}
	// Calls abandoned by their callers (see call) may still be inside
	// libcephfs: releasing a mount under them would free memory they use.
	// Wait a little for them, taking every slot; if some never return,
	// leave the clients to end with the process.
	deadline := time.After(closeWait)
	for taken := 0; taken < cap(b.slots); taken++ {
		select {
		case b.slots <- struct{}{}:
		case <-deadline:
			return fmt.Errorf("cephfs: close %s: %w: %d calls to Ceph still unanswered after %v; its client sessions are left open",
				b.src, backend.ErrUnavailable, cap(b.slots)-taken, closeWait)
		}
	}
	var errs []error
	for _, c := range b.clients {
		if err := c.close(); err != nil {
			errs = append(errs, err)
		}
	}
	b.clients = nil
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cephfs: close %s: %w", b.src, err)
	}
	return nil
}

// mount picks the mount of the pool that serves the directory dir (a
// clean dataset path): a directory's listing, its children's stats and
// reads all go to one client, which then holds their dentries and caps,
// rather than each client of the pool asking the MDS for the same inodes.
func (b *cephfsBackend) mount(dir string) *cephfs.MountInfo {
	if len(b.clients) == 1 {
		return b.clients[0].mount
	}
	h := fnv.New32a()
	h.Write([]byte(dir))
	return b.clients[h.Sum32()%uint32(len(b.clients))].mount
}

// parent is the directory of a clean dataset path ("" for the root's
// children and for the root).
func parent(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i]
	}
	return ""
}

// cpath turns a clean dataset path into a path under the mount root.
func cpath(p string) string { return "/" + p }

const cephStatxWant = cephfs.StatxBasicStats

func isDir(sx *cephfs.CephStatx) bool { return sx.Mode&syscall.S_IFMT == syscall.S_IFDIR }

func isFile(sx *cephfs.CephStatx) bool { return sx.Mode&syscall.S_IFMT == syscall.S_IFREG }

func tsTime(ts cephfs.Timespec) time.Time { return time.Unix(ts.Sec, ts.Nsec) }

func tsNanos(ts cephfs.Timespec) int64 { return ts.Sec*1e9 + ts.Nsec }

// cephVersion is "MTIMENANOS-SIZE-CTIMENANOS-INO" from statx, the posix
// backend's version for the same reasons (see posixVersion).
func cephVersion(sx *cephfs.CephStatx) string {
	return backend.FileVersion(tsNanos(sx.Mtime), sx.Size, tsNanos(sx.Ctime), uint64(sx.Inode))
}

func cephEntry(name string, sx *cephfs.CephStatx) backend.Entry {
	if isDir(sx) {
		return backend.Entry{Name: name, IsDir: true, ModTime: tsTime(sx.Mtime)}
	}
	return backend.Entry{Name: name, Size: int64(sx.Size), ModTime: tsTime(sx.Mtime), Version: cephVersion(sx)}
}

// statx stats the dataset path p on m without following a final symlink.
// libcephfs answers EACCES, not ENOTDIR, for a path that walks through a
// file ("a.txt/x"); that case is ErrNotExist like on posix.
func statx(m *cephfs.MountInfo, p string) (*cephfs.CephStatx, error) {
	sx, err := m.Statx(cpath(p), cephStatxWant, cephfs.AtSymlinkNofollow)
	if err == nil {
		return sx, nil
	}
	err = mapCephErr(err)
	if errors.Is(err, backend.ErrPermission) {
		for dir := p; strings.Contains(dir, "/"); {
			dir = dir[:strings.LastIndexByte(dir, '/')]
			if psx, perr := m.Statx(cpath(dir), cephStatxWant, cephfs.AtSymlinkNofollow); perr == nil && !isDir(psx) {
				return nil, fmt.Errorf("%w: %q is not a directory", backend.ErrNotExist, dir)
			}
		}
	}
	return nil, err
}

// closeWait bounds how long Close waits for calls still inside libcephfs.
const closeWait = 5 * time.Second

// maxCephCalls bounds the libcephfs calls of one backend in flight,
// abandoned ones included (see call).
const maxCephCalls = 256

// readChunk bounds one read so that a large ReadAt notices ctx between
// chunks.
const readChunk = 1 << 20

// call runs f, a libcephfs call that no deadline interrupts (a stopped OSD
// or MDS blocks it for good: Ceph has no client-side op timeout by
// default), in a goroutine of its own and waits for it or for ctx. When ctx
// ends first, call returns an error wrapping ErrUnavailable and ctx's
// error and leaves f running; f must then write only to memory the caller
// no longer reads. At most maxCephCalls calls run at once, so a hung
// cluster cannot pile up threads without bound.
func (b *cephfsBackend) call(ctx context.Context, f func()) error {
	if b.closed.Load() {
		return fmt.Errorf("%w: the backend is closed", backend.ErrUnavailable)
	}
	select {
	case b.slots <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("%w: %d calls to Ceph still unanswered (%w)", backend.ErrUnavailable, maxCephCalls, ctx.Err())
	}
	done := make(chan struct{})
	go func() {
		defer func() { <-b.slots }()
		f()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: no answer from Ceph in time (%w)", backend.ErrUnavailable, ctx.Err())
	}
}

func (b *cephfsBackend) Stat(ctx context.Context, p string) (backend.Entry, error) {
	p, err := backend.CleanPath(p)
	if err != nil {
		return backend.Entry{}, err
	}
	if err := ctx.Err(); err != nil {
		return backend.Entry{}, fmt.Errorf("cephfs: stat %q: %w", p, err)
	}
	var (
		e    backend.Entry
		serr error
	)
	if err := b.call(ctx, func() { e, serr = b.stat(p) }); err != nil {
		return backend.Entry{}, fmt.Errorf("cephfs: stat %q: %w", p, err)
	}
	return e, serr
}

func (b *cephfsBackend) stat(p string) (backend.Entry, error) {
	sx, err := statx(b.mount(parent(p)), p)
	if err != nil {
		return backend.Entry{}, fmt.Errorf("cephfs: stat %q: %w", p, err)
	}
	if !isDir(sx) && !isFile(sx) {
		return backend.Entry{}, fmt.Errorf("cephfs: stat %q: %w: not a regular file or directory", p, backend.ErrNotExist)
	}
	return cephEntry(p[strings.LastIndexByte(p, '/')+1:], sx), nil
}

func (b *cephfsBackend) List(ctx context.Context, p string) ([]backend.Entry, error) {
	p, err := backend.CleanPath(p)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("cephfs: list %q: %w", p, err)
	}
	var (
		es   []backend.Entry
		lerr error
	)
	if err := b.call(ctx, func() { es, lerr = b.list(ctx, p) }); err != nil {
		return nil, fmt.Errorf("cephfs: list %q: %w", p, err)
	}
	return es, lerr
}

func (b *cephfsBackend) list(ctx context.Context, p string) ([]backend.Entry, error) {
	m := b.mount(p)
	sx, err := statx(m, p)
	if err != nil {
		return nil, fmt.Errorf("cephfs: list %q: %w", p, err)
	}
	if !isDir(sx) {
		if isFile(sx) {
			return nil, fmt.Errorf("cephfs: list %q: %w", p, backend.ErrNotDir)
		}
		return nil, fmt.Errorf("cephfs: list %q: %w: not a directory", p, backend.ErrNotExist)
	}
	d, err := m.OpenDir(cpath(p))
	if err != nil {
		return nil, fmt.Errorf("cephfs: list %q: %w", p, mapCephErr(err))
	}
	defer d.Close()
	g := backend.NewListGuard(ctx, p) // the caps (listlimit.go)
	defer g.Release()
	var out []backend.Entry
	for i := 0; ; i++ {
		if i%256 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("cephfs: list %q: %w", p, err)
			}
		}
		de, err := d.ReadDirPlus(cephStatxWant, cephfs.AtSymlinkNofollow)
		if err != nil {
			return nil, fmt.Errorf("cephfs: list %q: %w", p, mapCephErr(err))
		}
		if de == nil {
			break
		}
		name := de.Name()
		if name == "." || name == ".." {
			continue
		}
		if !source.ValidName(name) {
			b.skip(p, name, "not a valid file name")
			continue
		}
		esx := de.Statx()
		if !isDir(esx) && !isFile(esx) {
			b.skip(p, name, "not a regular file or directory (symlinks are not followed)")
			continue
		}
		e := cephEntry(name, esx)
		if err := g.Entry(e.Name, e.Version); err != nil {
			return nil, fmt.Errorf("cephfs: list: %w", err)
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(x, y backend.Entry) int { return strings.Compare(x.Name, y.Name) })
	return out, nil
}

func (b *cephfsBackend) skip(dir, name, why string) {
	b.skipped.Add(1)
	b.log.Warn("skipping directory entry", slog.String("path", strconv.Quote(backend.JoinPath(dir, name))), slog.String("reason", why))
}

func (b *cephfsBackend) ReadAt(ctx context.Context, p, version string, buf []byte, off int64) (int, error) {
	p, err := backend.CheckRead(ctx, source.KindCephFS, p, off)
	if err != nil {
		return 0, err
	}
	// The call reads into a buffer of its own, copied out once it is done:
	// an abandoned call (see call) must not write into buf later.
	priv := getReadBuf(len(buf))
	var (
		n    int
		rerr error
	)
	if err := b.call(ctx, func() { n, rerr = b.readAt(ctx, p, version, *priv, off) }); err != nil {
		return 0, fmt.Errorf("cephfs: read %q: %w", p, err)
	}
	copy(buf, (*priv)[:n])
	readBufs.Put(priv)
	return n, rerr
}

// readBufs holds ReadAt's private buffers for reuse.
var readBufs sync.Pool // *[]byte

func getReadBuf(n int) *[]byte {
	if v, ok := readBufs.Get().(*[]byte); ok && cap(*v) >= n {
		*v = (*v)[:n]
		return v
	}
	b := make([]byte, n)
	return &b
}

func (b *cephfsBackend) readAt(ctx context.Context, p, version string, buf []byte, off int64) (int, error) {
	m := b.mount(parent(p))
	// Open first (no separate path walk): O_NOFOLLOW refuses a symlink
	// (ELOOP, ErrNotExist), and the fstatx of the open file tells a
	// directory or another non-file apart.
	f, err := m.Open(cpath(p), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		if errors.Is(mapCephErr(err), backend.ErrPermission) {
			if _, serr := statx(m, p); serr != nil {
				return 0, fmt.Errorf("cephfs: read %q: %w", p, serr)
			}
		}
		return 0, fmt.Errorf("cephfs: read %q: %w", p, mapCephErr(err))
	}
	defer f.Close()
	fsx, err := f.Fstatx(cephStatxWant, 0)
	if err != nil {
		return 0, fmt.Errorf("cephfs: read %q: %w", p, mapCephErr(err))
	}
	if isDir(fsx) {
		return 0, fmt.Errorf("cephfs: read %q: %w", p, backend.ErrIsDir)
	}
	if !isFile(fsx) {
		return 0, fmt.Errorf("cephfs: read %q: %w: not a regular file", p, backend.ErrNotExist)
	}
	if version != "" && cephVersion(fsx) != version {
		return 0, fmt.Errorf("cephfs: read %q: %w (version %s, now %s)", p, backend.ErrChanged, version, cephVersion(fsx))
	}
	n := 0
	for n < len(buf) {
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("cephfs: read %q: %w", p, err)
		}
		end := min(len(buf), n+readChunk)
		k, err := f.ReadAt(buf[n:end], off+int64(n))
		n += k
		if err == io.EOF || (err == nil && k == 0) {
			break
		}
		if err != nil {
			return 0, fmt.Errorf("cephfs: read %q: %w", p, mapCephErr(err))
		}
	}
	if version != "" {
		if fsx2, err := f.Fstatx(cephStatxWant, 0); err != nil || cephVersion(fsx2) != version {
			return 0, fmt.Errorf("cephfs: read %q: %w during the read", p, backend.ErrChanged)
		}
	}
	if n < len(buf) {
		return n, io.EOF
	}
	return n, nil
}

// mapCephErr maps a go-ceph error (a negative errno) to the backend
// sentinels, keeping the original in the chain.
// isErrno reports whether err is a Ceph error with errno e.
func isErrno(err error, e syscall.Errno) bool {
	var ec interface{ ErrorCode() int }
	if !errors.As(err, &ec) {
		return false
	}
	code := ec.ErrorCode()
	if code < 0 {
		code = -code
	}
	return syscall.Errno(code) == e
}

func mapCephErr(err error) error {
	var ec interface{ ErrorCode() int }
	if !errors.As(err, &ec) {
		return err
	}
	code := ec.ErrorCode()
	if code < 0 {
		code = -code
	}
	switch syscall.Errno(code) {
	case syscall.ENOENT, syscall.ENOTDIR, syscall.ELOOP:
		return fmt.Errorf("%w (%v)", backend.ErrNotExist, err)
	case syscall.EACCES, syscall.EPERM:
		return fmt.Errorf("%w (%v)", backend.ErrPermission, err)
	case syscall.EISDIR:
		return fmt.Errorf("%w (%v)", backend.ErrIsDir, err)
	case syscall.ETIMEDOUT, syscall.ENOTCONN, syscall.ESHUTDOWN, syscall.ECONNREFUSED,
		syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.EAGAIN, syscall.EIO:
		return fmt.Errorf("%w (%v)", backend.ErrUnavailable, err)
	}
	return err
}
