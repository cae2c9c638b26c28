package backend

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

	"github.com/epochfs/epochfs/pkg/source"
)

// posixBackend serves a local or kernel-mounted directory. Every access
// goes through an os.Root, so neither ".." nor a symlink can reach outside
// the dataset directory. Symlinks inside the root are followed; dangling or
// escaping ones are invisible (skipped in listings, ErrNotExist on Stat).
// Only regular files and directories are served.
//
// root and the other fields are immutable after openPosix (os.Root is safe
// for concurrent use); skipped is atomic.
type posixBackend struct {
	root *os.Root
	dir  string
	id   string
	log  *slog.Logger

	skipped atomic.Int64
}

var (
	_ Backend     = (*posixBackend)(nil)
	_ SkipCounter = (*posixBackend)(nil)
)

// readChunk bounds one pread so that a large ReadAt notices ctx between
// chunks.
const readChunk = 1 << 20

func openPosix(dir string, opts Options) (Backend, error) {
	if fi, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("posix: open %s: %w", dir, mapPosixErr(err))
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("posix: open %s: %w", dir, ErrNotDir)
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
		return nil, fmt.Errorf("posix: open %s: %w", dir, ErrNotDir)
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
	b := make([]byte, 0, 64)
	b = strconv.AppendInt(b, fi.ModTime().UnixNano(), 10)
	b = append(b, '-')
	b = strconv.AppendInt(b, fi.Size(), 10)
	b = append(b, '-')
	b = strconv.AppendInt(b, ctime, 10)
	b = append(b, '-')
	b = strconv.AppendUint(b, ino, 10)
	return string(b)
}

func posixEntry(name string, fi fs.FileInfo) Entry {
	if fi.IsDir() {
		return Entry{Name: name, IsDir: true, ModTime: fi.ModTime()}
	}
	return Entry{Name: name, Size: fi.Size(), ModTime: fi.ModTime(), Version: posixVersion(fi)}
}

func servable(fi fs.FileInfo) bool { return fi.IsDir() || fi.Mode().IsRegular() }

func (b *posixBackend) Stat(ctx context.Context, p string) (Entry, error) {
	p, err := CleanPath(p)
	if err != nil {
		return Entry{}, err
	}
	if err := ctx.Err(); err != nil {
		return Entry{}, fmt.Errorf("posix: stat %q: %w", p, err)
	}
	fi, err := b.root.Stat(rel(p)) // follows symlinks, within the root only
	if err != nil {
		return Entry{}, fmt.Errorf("posix: stat %q: %w", p, mapPosixErr(err))
	}
	if !servable(fi) {
		return Entry{}, fmt.Errorf("posix: stat %q: %w: not a regular file or directory", p, ErrNotExist)
	}
	name := p[strings.LastIndexByte(p, '/')+1:]
	return posixEntry(name, fi), nil
}

func (b *posixBackend) List(ctx context.Context, p string) ([]Entry, error) {
	p, err := CleanPath(p)
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
		return nil, fmt.Errorf("posix: list %q: %w", p, ErrNotDir)
	}
	// In batches, so that a directory over a cap (listlimit.go) is
	// refused before all of it is read.
	g := newListGuard(ctx, p)
	defer g.release()
	out := []Entry{}
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
			if err := g.entry(e.Name, e.Version); err != nil {
				return nil, fmt.Errorf("posix: list: %w", err)
			}
			out = append(out, e)
		}
		if rerr == io.EOF || len(des) == 0 {
			break
		}
	}
	slices.SortFunc(out, func(x, y Entry) int { return strings.Compare(x.Name, y.Name) })
	return out, nil
}

// child is the entry of one directory entry of the directory at p; ok is
// false for a name skipped (and counted) or one removed since it was read.
func (b *posixBackend) child(p string, de fs.DirEntry) (e Entry, ok bool, err error) {
	name := de.Name()
	if !source.ValidName(name) {
		b.skip(p, name, "not a valid file name")
		return e, false, nil
	}
	var info fs.FileInfo
	if de.Type()&fs.ModeSymlink != 0 {
		info, err = b.root.Stat(joinPath(p, name))
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
	b.log.Warn("skipping directory entry", slog.String("path", strconv.Quote(joinPath(dir, name))), slog.String("reason", why))
}

func (b *posixBackend) ReadAt(ctx context.Context, p, version string, buf []byte, off int64) (int, error) {
	p, err := checkRead(ctx, source.KindPosix, p, off)
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
		return 0, fmt.Errorf("posix: read %q: %w", p, ErrIsDir)
	case !fi.Mode().IsRegular():
		return 0, fmt.Errorf("posix: read %q: %w: not a regular file", p, ErrNotExist)
	case version != "" && posixVersion(fi) != version:
		return 0, fmt.Errorf("posix: read %q: %w (version %s, now %s)", p, ErrChanged, version, posixVersion(fi))
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
			return 0, fmt.Errorf("posix: read %q: %w during the read", p, ErrChanged)
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
		return fmt.Errorf("%w (%v)", ErrNotExist, err)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%w (%v)", ErrPermission, err)
	case isEscape(err):
		return fmt.Errorf("%w: symlink points outside the dataset", ErrNotExist)
	}
	return err
}

// isEscape reports os.Root's "path escapes from parent" error, which has no
// exported sentinel.
func isEscape(err error) bool {
	return err != nil && strings.Contains(err.Error(), "path escapes from parent")
}
