package fusefs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Every write-type call fails with EROFS. The mount is also read-only at the
// VFS level (MS_RDONLY), so most of these never reach us; they are here so
// that the answer does not depend on how the mount was made. Directory and
// file node types embed readOnlyDir and readOnlyFile; the manifest file
// system (manifest.go) answers the same calls itself.

// readOnlyDir answers EROFS to the write-type calls on a directory.
type readOnlyDir struct{}

// readOnlyFile answers EROFS to the write-type calls on a file.
type readOnlyFile struct{}

var (
	_ = (fs.NodeSetattrer)((*dirNode)(nil))
	_ = (fs.NodeCreater)((*dirNode)(nil))
	_ = (fs.NodeMkdirer)((*dirNode)(nil))
	_ = (fs.NodeMknoder)((*dirNode)(nil))
	_ = (fs.NodeUnlinker)((*dirNode)(nil))
	_ = (fs.NodeRmdirer)((*dirNode)(nil))
	_ = (fs.NodeRenamer)((*dirNode)(nil))
	_ = (fs.NodeSymlinker)((*dirNode)(nil))
	_ = (fs.NodeLinker)((*dirNode)(nil))
	_ = (fs.NodeSetxattrer)((*dirNode)(nil))
	_ = (fs.NodeRemovexattrer)((*dirNode)(nil))
	_ = (fs.NodeSetattrer)((*fileNode)(nil))
	_ = (fs.NodeSetxattrer)((*fileNode)(nil))
	_ = (fs.NodeRemovexattrer)((*fileNode)(nil))
)

func (readOnlyDir) Setattr(context.Context, fs.FileHandle, *fuse.SetAttrIn, *fuse.AttrOut) syscall.Errno {
	return syscall.EROFS
}

func (readOnlyDir) Create(context.Context, string, uint32, uint32, *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EROFS
}

func (readOnlyDir) Mkdir(context.Context, string, uint32, *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}

func (readOnlyDir) Mknod(context.Context, string, uint32, uint32, *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}

func (readOnlyDir) Unlink(context.Context, string) syscall.Errno { return syscall.EROFS }

func (readOnlyDir) Rmdir(context.Context, string) syscall.Errno { return syscall.EROFS }

func (readOnlyDir) Rename(context.Context, string, fs.InodeEmbedder, string, uint32) syscall.Errno {
	return syscall.EROFS
}

func (readOnlyDir) Symlink(context.Context, string, string, *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}

func (readOnlyDir) Link(context.Context, fs.InodeEmbedder, string, *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}

func (readOnlyDir) Setxattr(context.Context, string, []byte, uint32) syscall.Errno {
	return syscall.EROFS
}

func (readOnlyDir) Removexattr(context.Context, string) syscall.Errno { return syscall.EROFS }

func (readOnlyFile) Setattr(context.Context, fs.FileHandle, *fuse.SetAttrIn, *fuse.AttrOut) syscall.Errno {
	return syscall.EROFS
}

func (readOnlyFile) Setxattr(context.Context, string, []byte, uint32) syscall.Errno {
	return syscall.EROFS
}

func (readOnlyFile) Removexattr(context.Context, string) syscall.Errno { return syscall.EROFS }
