package fusefs

import (
	"context"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/epochfs/epochfs/pkg/manifest"
)

// With Options.Manifest set, the tree is served from the manifest alone, on
// go-fuse's raw protocol API (fuse.RawFileSystem) rather than its node tree:
// the FUSE node id of manifest entry i is i+1 (the root, entry 0, is node 1,
// FUSE_ROOT_ID), so a node id is resolved by arithmetic and nothing is kept
// per node the kernel looks up. A node-tree file system holds a Go object
// per looked-up inode (~600 B each: fs.Inode, its child and parent maps) for
// as long as the kernel keeps the inode; here a full walk of a 1M-file
// dataset costs the manifest (~26 B/file beyond the names) and nothing more.
// FORGET is a no-op for the same reason.
//
// Lookup is a binary search among a directory's children, READDIR and
// READDIRPLUS walk a contiguous range (READDIRPLUS hands the kernel every
// child's attributes, so a walk's stat calls need no LOOKUP), GETATTR reads
// the manifest, and no List or Stat ever reaches the backend. Only OPEN reads
// from it, through the cache, with the manifest's version as the cache key
// version and the backend's version check. Node ids are stable across mounts
// of the same manifest.
//
// Only open files hold state: a table from file handle to the same
// fs.FileHandle types the node tree uses (handle.go), and the passthrough
// backing of each open node.
type manifestFS struct {
	fuse.RawFileSystem // ENOSYS for what is not implemented below

	fsys    *FS
	m       *manifest.Manifest
	timeout time.Duration

	server    *fuse.Server // set by Init, before any request
	noBacking atomic.Bool  // a backing-fd registration failed: no passthrough

	mu       sync.Mutex
	handles  map[uint64]*rawHandle // by file handle
	nextFh   uint64
	backings map[uint64]*backingRef // by node id, while open with passthrough
}

// rawHandle is an open file: its reader and whether it uses its node's
// passthrough backing. Immutable.
type rawHandle struct {
	fh      fs.FileHandle
	node    uint64
	backing bool
}

// backingRef is a node's passthrough backing file: the kernel refuses two
// different backing files on one inode at once, so concurrent opens of a
// node share the first one's, and it is unregistered at the last release.
type backingRef struct {
	id   int32
	refs int
}

var _ fuse.RawFileSystem = (*manifestFS)(nil)

func newManifestFS(f *FS) *manifestFS {
	return &manifestFS{
		RawFileSystem: fuse.NewDefaultRawFileSystem(),
		fsys:          f,
		m:             f.manifest,
		timeout:       f.opts.Timeout,
		handles:       map[uint64]*rawHandle{},
		backings:      map[uint64]*backingRef{},
	}
}

func manifestIno(i int) uint64 { return uint64(i) + 1 }

// entry returns the manifest entry of a node id.
func (r *manifestFS) entry(node uint64) (int, bool) {
	if node == 0 || node > uint64(r.m.Len()) {
		return 0, false
	}
	return int(node - 1), true
}

func (r *manifestFS) String() string { return "cachefs" }

func (r *manifestFS) Init(s *fuse.Server) { r.server = s }

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

// fillEntry answers a lookup of entry i.
func (r *manifestFS) fillEntry(i int, out *fuse.EntryOut) {
	out.NodeId = manifestIno(i)
	out.Generation = 1
	out.SetEntryTimeout(r.timeout)
	out.SetAttrTimeout(r.timeout)
	r.fsys.manifestAttr(i, &out.Attr)
}

func (r *manifestFS) Lookup(cancel <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	dir, ok := r.entry(h.NodeId)
	if !ok {
		return fuse.ENOENT
	}
	if !r.m.IsDir(dir) {
		return fuse.ENOTDIR
	}
	i, ok := r.m.Lookup(dir, name)
	if !ok {
		// A negative entry the kernel may cache: node id 0.
		out.NodeId = 0
		out.SetEntryTimeout(r.timeout)
		return fuse.OK
	}
	r.fillEntry(i, out)
	return fuse.OK
}

func (r *manifestFS) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	i, ok := r.entry(in.NodeId)
	if !ok {
		return fuse.ENOENT
	}
	r.fsys.manifestAttr(i, &out.Attr)
	out.SetTimeout(r.timeout)
	return fuse.OK
}

func (r *manifestFS) StatFs(cancel <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	return fuse.Status(r.fsys.statfs(out))
}

// file is entry i as opened, with the files after it in its directory as
// its readahead.
func (r *manifestFS) file(i int) file {
	f := file{fsys: r.fsys, path: r.m.Path(i), version: r.m.Version(i), size: r.m.Size(i)}
	f.next = func(k int) []file {
		_, end := r.m.Children(r.m.Parent(i))
		var out []file
		for j := i + 1; j < end && len(out) < k; j++ {
			if !r.m.IsDir(j) {
				out = append(out, file{fsys: r.fsys, path: r.m.Path(j), version: r.m.Version(j), size: r.m.Size(j)})
			}
		}
		return out
	}
	return f
}

func (r *manifestFS) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	i, ok := r.entry(in.NodeId)
	if !ok {
		return fuse.ENOENT
	}
	if r.m.IsDir(i) {
		return fuse.Status(syscall.EISDIR)
	}
	fh, flags, errno := r.file(i).open(in.Flags)
	if errno != 0 {
		return fuse.Status(errno)
	}
	h := &rawHandle{fh: fh, node: in.NodeId}
	if id := r.backing(in.NodeId, fh); id != 0 {
		h.backing = true
		out.BackingID = id
		flags |= fuse.FOPEN_PASSTHROUGH
		flags &^= fuse.FOPEN_KEEP_CACHE
	}
	out.OpenFlags = flags
	r.mu.Lock()
	r.nextFh++
	out.Fh = r.nextFh
	r.handles[out.Fh] = h
	r.mu.Unlock()
	return fuse.OK
}

// backing returns the passthrough backing id for an open of node, taking a
// reference: the node's current one, or fh's cache file registered with the
// kernel. It returns 0 when fh is not a cache file or passthrough is
// unavailable (not root, kernel older than 6.9). The kernel holds its own
// reference to a registered file until the id is unregistered.
func (r *manifestFS) backing(node uint64, fh fs.FileHandle) int32 {
	p, ok := fh.(fs.FilePassthroughFder)
	if !ok || r.noBacking.Load() {
		return 0
	}
	if id := r.refBacking(node); id != 0 {
		return id
	}
	fd, ok := p.PassthroughFd()
	if !ok {
		return 0
	}
	// Registered outside the lock, so opens of other nodes do not wait for
	// the ioctl; a concurrent open of the same node may have won meanwhile.
	id, errno := r.server.RegisterBackingFd(&fuse.BackingMap{Fd: int32(fd)})
	if errno != 0 {
		if r.noBacking.CompareAndSwap(false, true) {
			r.fsys.log.Info("fusefs: FUSE passthrough unavailable; cached files are read through this process", "err", errno)
		}
		return 0
	}
	r.mu.Lock()
	if b := r.backings[node]; b != nil {
		b.refs++
		won := b.id
		r.mu.Unlock()
		r.unregister(id)
		return won
	}
	r.backings[node] = &backingRef{id: id, refs: 1}
	r.mu.Unlock()
	return id
}

func (r *manifestFS) refBacking(node uint64) int32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.backings[node]
	if b == nil {
		return 0
	}
	b.refs++
	return b.id
}

func (r *manifestFS) unregister(id int32) {
	if errno := r.server.UnregisterBackingFd(id); errno != 0 {
		r.fsys.log.Warn("fusefs: unregister passthrough backing fd", "err", errno)
	}
}

func (r *manifestFS) handle(fh uint64) *rawHandle {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.handles[fh]
}

func (r *manifestFS) Read(cancel <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	h := r.handle(in.Fh)
	if h == nil {
		return nil, fuse.EBADF
	}
	rd, ok := h.fh.(fs.FileReader)
	if !ok {
		return nil, fuse.EBADF
	}
	res, errno := rd.Read(&fuse.Context{Caller: in.Caller, Cancel: cancel}, buf, int64(in.Offset))
	return res, fuse.Status(errno)
}

func (r *manifestFS) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	r.mu.Lock()
	h := r.handles[in.Fh]
	delete(r.handles, in.Fh)
	var drop int32
	if h != nil && h.backing {
		if b := r.backings[h.node]; b != nil {
			if b.refs--; b.refs == 0 {
				drop = b.id
				delete(r.backings, h.node)
			}
		}
	}
	r.mu.Unlock()
	if drop != 0 {
		r.unregister(drop)
	}
	if h == nil {
		return
	}
	if rel, ok := h.fh.(fs.FileReleaser); ok {
		rel.Release(context.Background())
	}
}

func (r *manifestFS) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	i, ok := r.entry(in.NodeId)
	if !ok {
		return fuse.ENOENT
	}
	if !r.m.IsDir(i) {
		return fuse.ENOTDIR
	}
	// The listing never changes: let the kernel keep it.
	out.OpenFlags = fuse.FOPEN_KEEP_CACHE | fuse.FOPEN_CACHE_DIR
	return fuse.OK
}

func (r *manifestFS) ReadDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	return r.readDir(in, out, false)
}

func (r *manifestFS) ReadDirPlus(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	return r.readDir(in, out, true)
}

// readDir lists a directory from offset in.Offset: offset 0 is ".", 1 is
// "..", 2+k is child k. The stream is stateless (an offset is an index), so
// a seek or an interrupted read resumes exactly.
func (r *manifestFS) readDir(in *fuse.ReadIn, out *fuse.DirEntryList, plus bool) fuse.Status {
	dir, ok := r.entry(in.NodeId)
	if !ok {
		return fuse.ENOENT
	}
	if !r.m.IsDir(dir) {
		return fuse.ENOTDIR
	}
	start, end := r.m.Children(dir)
	for off := in.Offset; ; off++ {
		child := -1
		e := fuse.DirEntry{Off: off + 1, Mode: syscall.S_IFDIR}
		switch off {
		case 0:
			e.Name, e.Ino = ".", manifestIno(dir)
		case 1:
			e.Name, e.Ino = "..", manifestIno(r.m.Parent(dir))
		default:
			child = start + int(off-2)
			if off-2 >= uint64(end-start) {
				return fuse.OK
			}
			e.Name, e.Ino = r.m.Name(child), manifestIno(child)
			if !r.m.IsDir(child) {
				e.Mode = syscall.S_IFREG
			}
		}
		if !plus {
			if !out.AddDirEntry(e) {
				return fuse.OK
			}
			continue
		}
		eo := out.AddDirLookupEntry(e)
		if eo == nil {
			return fuse.OK
		}
		// The kernel ignores the entry of "." and ".." (left zero).
		if child >= 0 {
			r.fillEntry(child, eo)
		}
	}
}

// Every write-type call fails with EROFS (see readonly.go).

func (r *manifestFS) SetAttr(cancel <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	return fuse.EROFS
}

func (r *manifestFS) Mknod(cancel <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	return fuse.EROFS
}

func (r *manifestFS) Mkdir(cancel <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	return fuse.EROFS
}

func (r *manifestFS) Unlink(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	return fuse.EROFS
}

func (r *manifestFS) Rmdir(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	return fuse.EROFS
}

func (r *manifestFS) Rename(cancel <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	return fuse.EROFS
}

func (r *manifestFS) Link(cancel <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	return fuse.EROFS
}

func (r *manifestFS) Symlink(cancel <-chan struct{}, h *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	return fuse.EROFS
}

func (r *manifestFS) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	return fuse.EROFS
}

func (r *manifestFS) SetXAttr(cancel <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	return fuse.EROFS
}

func (r *manifestFS) RemoveXAttr(cancel <-chan struct{}, h *fuse.InHeader, attr string) fuse.Status {
	return fuse.EROFS
}

func (r *manifestFS) Write(cancel <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	return 0, fuse.EROFS
}

func (r *manifestFS) Fallocate(cancel <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	return fuse.EROFS
}

func (r *manifestFS) CopyFileRange(cancel <-chan struct{}, in *fuse.CopyFileRangeIn) (uint32, fuse.Status) {
	return 0, fuse.EROFS
}
