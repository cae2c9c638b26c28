package posix

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/source"
)

// posixBackend serves a local or kernel-mounted directory. Every access
// goes through an os.Root, so neither ".." nor a symlink can reach outside
// the dataset directory. Symlinks inside the root are followed; dangling or
// escaping ones are invisible (skipped in listings, ErrNotExist on Stat).
// Only regular files and directories are served.
//
// root and the other fields are immutable after Open (os.Root is safe
// for concurrent use); skipped is atomic.
type posixBackend struct {
	root *os.Root
	dir  string
	id   string
	log  *slog.Logger

	skipped atomic.Int64
}

var (
	_ backend.Backend     = (*posixBackend)(nil)
	_ backend.SkipCounter = (*posixBackend)(nil)
)

// readChunk bounds one pread so that a large ReadAt notices ctx between
// chunks.
const readChunk = 1 << 20

// Open returns the Backend of the posix directory src.Path, which must
// exist. The directory is served through os.OpenRoot, so symlinks and ".."
// cannot escape it.
func Open(_ context.Context, src source.Source, opts backend.Options) (backend.Backend, error) {
	opts, err := opts.WithDefaults()
	if err != nil {
		return nil, err
	}
	return openDir(src.Path, opts)
}

func openDir(dir string, opts backend.Options) (backend.Backend, error) {
	if fi, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("posix: open %s: %w", dir, mapPosixErr(err))
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("posix: open %s: %w", dir, backend.ErrNotDir)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("posix: open %s: %w", dir, mapPosixErr(err))
	}
	fi, err := root.Stat(".")
	if err != nil {
		root.Close()
		return nil, fmt.Errorf("posix: open %s: %w", dir, mapPosixErr(err))
	}
	if !fi.IsDir() {
		root.Close()
		return nil, fmt.Errorf("posix: open %s: %w", dir, backend.ErrNotDir)
	}
	return &posixBackend{
		root: root,
		dir:  dir,
		id:   "file://" + source.EscapePath(dir),
		log:  opts.Logger.With(slog.String("backend", "posix"), slog.String("dir", dir)),
	}, nil
}

func (b *posixBackend) ID() string { return b.id }

func (b *posixBackend) Close() error { return b.root.Close() }

// Skipped implements SkipCounter.
func (b *posixBackend) Skipped() int64 { return b.skipped.Load() }

// rel turns a clean dataset path into a path for os.Root.
func rel(p string) string {
	if p == "" {
		return "."
	}
	return p
}

// posixVersion is the version of a file, "MTIMENANOS-SIZE-CTIMENANOS-INO":
// mtime and ctime in Unix nanoseconds, size, and inode number (in decimal).
// mtime and size alone are fooled by a rewrite of the same size whose mtime
// is put back (touch -r, os.Chtimes, rsync -t, tar x, cp -p); the ctime
// cannot be set from user space (every write, chmod or utimes sets it to
// now), and a replacement by rename brings another inode. The device
// number is left out: it is not stable across reboots and remounts (NFS,
// overlayfs), and the backend ID already names the directory.
func posixVersion(fi fs.FileInfo) string {
	var ctime int64
	var ino uint64
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		ctime, ino = st.Ctim.Nano(), st.Ino
	}
	return backend.FileVersion(fi.ModTime().UnixNano(), uint64(fi.Size()), ctime, ino)
}

func posixEntry(name string, fi fs.FileInfo) backend.Entry {
	if fi.IsDir() {
		return backend.Entry{Name: name, IsDir: true, ModTime: fi.ModTime()}
	}
	return backend.Entry{Name: name, Size: fi.Size(), ModTime: fi.ModTime(), Version: posixVersion(fi)}
}

func servable(fi fs.FileInfo) bool { return fi.IsDir() || fi.Mode().IsRegular() }

func (b *posixBackend) Stat(ctx context.Context, p string) (backend.Entry, error) {
	p, err := backend.CleanPath(p)
	if err != nil {
		return backend.Entry{}, err
	}
	if err := ctx.Err(); err != nil {
		return backend.Entry{}, fmt.Errorf("posix: stat %q: %w", p, err)
	}
	fi, err := b.root.Stat(rel(p)) // follows symlinks, within the root only
	if err != nil {
		return backend.Entry{}, fmt.Errorf("posix: stat %q: %w", p, mapPosixErr(err))
	}
	if !servable(fi) {
		return backend.Entry{}, fmt.Errorf("posix: stat %q: %w: not a regular file or directory", p, backend.ErrNotExist)
	}
	name := p[strings.LastIndexByte(p, '/')+1:]
	return posixEntry(name, fi), nil
}

func (b *posixBackend) List(ctx context.Context, p string) ([]backend.Entry, error) {
	p, err := backend.CleanPath(p)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("posix: list %q: %w", p, err)
	}
	f, err := b.root.Open(rel(p))
	if err != nil {
		return nil, fmt.Errorf("posix: list %q: %w", p, mapPosixErr(err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("posix: list %q: %w", p, mapPosixErr(err))
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("posix: list %q: %w", p, backend.ErrNotDir)
	}
	// In batches, so that a directory over a cap (listlimit.go) is
	// refused before all of it is read.
	g := backend.NewListGuard(ctx, p)
	defer g.Release()
	out := []backend.Entry{}
	for {
		des, rerr := f.ReadDir(1024)
		if rerr != nil && rerr != io.EOF {
			return nil, fmt.Errorf("posix: list %q: %w", p, mapPosixErr(rerr))
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("posix: list %q: %w", p, err)
		}
		for _, de := range des {
			e, ok, err := b.child(p, de)
			if err != nil {
				return nil, err
			}
			if !ok {
				continue
			}
			if err := g.Entry(e.Name, e.Version); err != nil {
				return nil, fmt.Errorf("posix: list: %w", err)
			}
			out = append(out, e)
		}
		if rerr == io.EOF || len(des) == 0 {
			break
		}
	}
	slices.SortFunc(out, func(x, y backend.Entry) int { return strings.Compare(x.Name, y.Name) })
	return out, nil
}

// child is the entry of one directory entry of the directory at p; ok is
// false for a name skipped (and counted) or one removed since it was read.
func (b *posixBackend) child(p string, de fs.DirEntry) (e backend.Entry, ok bool, err error) {
	name := de.Name()
	if !source.ValidName(name) {
		b.skip(p, name, "not a valid file name")
		return e, false, nil
	}
	var info fs.FileInfo
	if de.Type()&fs.ModeSymlink != 0 {
		info, err = b.root.Stat(backend.JoinPath(p, name))
		if err != nil {
			b.skip(p, name, "symlink is dangling or points outside the dataset")
			return e, false, nil
		}
	} else if info, err = de.Info(); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return e, false, nil // removed since ReadDir
		}
		return e, false, fmt.Errorf("posix: list %q: %w", p, mapPosixErr(err))
	}
	if !servable(info) {
		b.skip(p, name, "not a regular file or directory")
		return e, false, nil
	}
	return posixEntry(name, info), true, nil
}

func (b *posixBackend) skip(dir, name, why string) {
	b.skipped.Add(1)
	b.log.Warn("skipping directory entry", slog.String("path", strconv.Quote(backend.JoinPath(dir, name))), slog.String("reason", why))
}

func (b *posixBackend) ReadAt(ctx context.Context, p, version string, buf []byte, off int64) (int, error) {
	p, err := backend.CheckRead(ctx, source.KindPosix, p, off)
	if err != nil {
		return 0, err
	}
	f, err := b.root.Open(rel(p))
	if err != nil {
		return 0, fmt.Errorf("posix: read %q: %w", p, mapPosixErr(err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("posix: read %q: %w", p, mapPosixErr(err))
	}
	switch {
	case fi.IsDir():
		return 0, fmt.Errorf("posix: read %q: %w", p, backend.ErrIsDir)
	case !fi.Mode().IsRegular():
		return 0, fmt.Errorf("posix: read %q: %w: not a regular file", p, backend.ErrNotExist)
	case version != "" && posixVersion(fi) != version:
		return 0, fmt.Errorf("posix: read %q: %w (version %s, now %s)", p, backend.ErrChanged, version, posixVersion(fi))
	}
	n := 0
	for n < len(buf) {
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("posix: read %q: %w", p, err)
		}
		end := min(len(buf), n+readChunk)
		m, err := f.ReadAt(buf[n:end], off+int64(n))
		n += m
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, fmt.Errorf("posix: read %q: %w", p, mapPosixErr(err))
		}
	}
	if version != "" {
		// The file may have been rewritten while we read it.
		if fi2, err := f.Stat(); err != nil || posixVersion(fi2) != version {
			return 0, fmt.Errorf("posix: read %q: %w during the read", p, backend.ErrChanged)
		}
	}
	if n < len(buf) {
		return n, io.EOF
	}
	return n, nil
}

// mapPosixErr maps an os error to the backend sentinels, keeping the
// original in the chain.
func mapPosixErr(err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.ELOOP):
		return fmt.Errorf("%w (%v)", backend.ErrNotExist, err)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%w (%v)", backend.ErrPermission, err)
	case isEscape(err):
		return fmt.Errorf("%w: symlink points outside the dataset", backend.ErrNotExist)
	}
	return err
}

// isEscape reports os.Root's "path escapes from parent" error, which has no
// exported sentinel.
func isEscape(err error) bool {
	return err != nil && strings.Contains(err.Error(), "path escapes from parent")
}
