package fusefs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/epochfs/epochfs/pkg/manifest"
)

// With Options.Manifest set, the tree is served from the manifest alone:
// Lookup is a binary search among a directory's children, Readdir walks a
// contiguous range, Getattr reads the manifest, and no List or Stat ever
// reaches the backend. Only Open reads from it (through the cache, with the
// manifest's version as the cache key version and the backend's version
// check). Entry i of the manifest has inode number i+1 (the root is 1),
// stable across mounts of the same manifest.
//
// A node holds only its entry number; names, paths and versions are built
// from the manifest when needed, so each inode the kernel keeps costs the
// go-fuse Inode plus 16 bytes.

// manifestDir is a directory of the manifest. Immutable.
type manifestDir struct {
	fs.Inode
	readOnlyDir
	fsys *FS
	idx  int
}

// manifestFile is a file of the manifest. Immutable.
type manifestFile struct {
	fs.Inode
	readOnlyFile
	fsys *FS
	idx  int
}

var (
	_ = (fs.NodeLookuper)((*manifestDir)(nil))
	_ = (fs.NodeReaddirer)((*manifestDir)(nil))
	_ = (fs.NodeGetattrer)((*manifestDir)(nil))
	_ = (fs.NodeStatfser)((*manifestDir)(nil))
	_ = (fs.NodeGetattrer)((*manifestFile)(nil))
	_ = (fs.NodeOpener)((*manifestFile)(nil))
)

func manifestIno(i int) uint64 { return uint64(i) + 1 }

func (f *FS) manifestAttr(i int, a *fuse.Attr) {
	m := f.manifest
	a.Ino = manifestIno(i)
	created := m.Info().Created
	if !created.IsZero() {
		a.SetTimes(nil, &created, &created)
	}
	if m.IsDir(i) {
		dirAttr(a)
		return
	}
	a.Mode = syscall.S_IFREG | 0o444
	a.Nlink = 1
	a.Size = uint64(m.Size(i))
	a.Blocks = (a.Size + 511) / 512
	a.Blksize = 1 << 20
}

func (d *manifestDir) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	d.fsys.manifestAttr(d.idx, &out.Attr)
	return 0
}

func (d *manifestDir) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	return d.fsys.statfs(out)
}

func (d *manifestDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	m := d.fsys.manifest
	i, ok := m.Lookup(d.idx, name)
	if !ok {
		return nil, syscall.ENOENT
	}
	d.fsys.manifestAttr(i, &out.Attr)
	out.Ino = manifestIno(i)
	if m.IsDir(i) {
		return d.NewInode(ctx, &manifestDir{fsys: d.fsys, idx: i}, fs.StableAttr{Mode: syscall.S_IFDIR, Ino: out.Ino}), 0
	}
	return d.NewInode(ctx, &manifestFile{fsys: d.fsys, idx: i}, fs.StableAttr{Mode: syscall.S_IFREG, Ino: out.Ino}), 0
}

func (d *manifestDir) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	start, end := d.fsys.manifest.Children(d.idx)
	return &manifestDirStream{m: d.fsys.manifest, next: start, end: end}, 0
}

// manifestDirStream lists a range of manifest entries without building
// the whole listing first. Used by one reader at a time.
type manifestDirStream struct {
	m         *manifest.Manifest
	next, end int
}

func (s *manifestDirStream) HasNext() bool { return s.next < s.end }

func (s *manifestDirStream) Next() (fuse.DirEntry, syscall.Errno) {
	i := s.next
	s.next++
	mode := uint32(syscall.S_IFREG)
	if s.m.IsDir(i) {
		mode = syscall.S_IFDIR
	}
	return fuse.DirEntry{Name: s.m.Name(i), Mode: mode, Ino: manifestIno(i)}, 0
}

func (s *manifestDirStream) Close() {}

func (n *manifestFile) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.fsys.manifestAttr(n.idx, &out.Attr)
	return 0
}

func (n *manifestFile) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	m := n.fsys.manifest
	return file{fsys: n.fsys, path: m.Path(n.idx), version: m.Version(n.idx), size: m.Size(n.idx)}.open(flags)
}
