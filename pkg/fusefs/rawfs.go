package fusefs

import (
	"context"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// The two trees a mount serves, from a manifest (manifest.go) or from
// backend listings (backendfs.go), both run on go-fuse's raw protocol API
// (fuse.RawFileSystem) rather than its node tree, which holds ~600 B of Go
// objects per inode the kernel knows. rawBase is what they share: the
// EROFS answers, the table of open files and their passthrough backings.
//
// Only open files hold state here (openFiles). server and noBacking are
// set once; the rest is immutable after init.
type rawBase struct {
	fuse.RawFileSystem // ENOSYS for what is not implemented

	fsys    *FS
	timeout time.Duration

	fds       BackingFds  // set by Init (or Adopt), before any request
	noBacking atomic.Bool // a backing-fd registration failed: no passthrough
	// table, when set, mirrors the backing handles of open (backingtable.go)
	// for a process that recovers the connection; guarded by open.mu.
	table *BackingTable

	// listDir answers READDIR (plus false) and READDIRPLUS; fileOf returns
	// the file of a node id (false: none, or a directory). Set by the tree.
	listDir func(in *fuse.ReadIn, out *fuse.DirEntryList, plus bool) fuse.Status
	fileOf  func(node uint64) (file, bool)

	// gate holds back requests during a handover (handover.go): every
	// request handler holds it for reading; Freeze takes it for writing.
	gate sync.RWMutex

	open openFiles
}

// BackingFds registers FUSE passthrough backing files with the kernel
// connection: *fuse.Server, or the request loop of a taken-over connection
// (pkg/handover).
type BackingFds interface {
	RegisterBackingFd(m *fuse.BackingMap) (int32, syscall.Errno)
	UnregisterBackingFd(id int32) syscall.Errno
}

// File handles carry their node id in the low fhNodeBits bits (node ids
// are manifest entry indexes or a counter, far below 2^40), so a process
// that took over a connection can open a file handle it never issued
// (handover.go).
const (
	fhNodeBits = 40
	fhNodeMask = 1<<fhNodeBits - 1
)

// enter holds the gate for one request; call the returned func when done.
func (r *rawBase) enter() func() {
	r.gate.RLock()
	return r.gate.RUnlock
}

// openFiles is a mounted tree's table of open files: from file handle to
// the fs.FileHandle types of handle.go, and the passthrough backing of
// each open node. mu guards handles, nextFh and backings, and the
// rawBase's backing table (backingtable.go), written in memory under it;
// it is a leaf, and never held across the backing-fd ioctls. nextFh
// counts the handles issued; a handle is nextFh<<fhNodeBits | node.
type openFiles struct {
	mu       sync.Mutex
	handles  map[uint64]*rawHandle // by file handle
	nextFh   uint64
	backings map[uint64]*backingRef // by node id, while open with passthrough
}

// rawHandle is an open file: its reader and whether it uses its node's
// passthrough backing. fh is nil for a handle a predecessor issued
// (handover.go) until its first READ opens it. Immutable: Read replaces
// an unopened one.
type rawHandle struct {
	fh      fs.FileHandle
	node    uint64
	backing bool
}

// backingRef is a node's passthrough backing file: the kernel refuses two
// different backing files on one inode at once, so concurrent opens of a
// node share the first one's, and it is unregistered at the last release.
type backingRef struct {
	id        int32
	refs      int
	inherited bool // registered by a predecessor (handover.go)
}

func (r *rawBase) init(f *FS) {
	r.RawFileSystem = fuse.NewDefaultRawFileSystem()
	r.fsys = f
	r.timeout = f.opts.Timeout
	r.open.handles = map[uint64]*rawHandle{}
	r.open.backings = map[uint64]*backingRef{}
	r.table = f.opts.BackingTable
}

// Init is go-fuse's: the server registers the backing files.
func (r *rawBase) Init(s *fuse.Server) { r.fds = s }

func (r *rawBase) String() string { return "cachefs" }

func (r *rawBase) ReadDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	defer r.enter()()
	return r.listDir(in, out, false)
}

func (r *rawBase) ReadDirPlus(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	defer r.enter()()
	return r.listDir(in, out, true)
}

// dirStream answers a READDIR (plus false) or READDIRPLUS from offset
// in.Offset: offset 0 is ".", 1 is "..", 2+k is child k of n. self and
// parent are the st_ino of the directory and of its parent; child(k)
// names child k; lookup(k, eo) answers child k's lookup, which for
// READDIRPLUS the kernel counts as one it will forget (it ignores the entry
// of "." and "..", left zero). The stream is stateless (an offset is an
// index), so a seek or an interrupted read resumes exactly.
func dirStream(in *fuse.ReadIn, out *fuse.DirEntryList, plus bool, self, parent uint64, n int,
	child func(k int) (name string, dir bool, ino uint64), lookup func(k int, eo *fuse.EntryOut)) fuse.Status {
	for off := in.Offset; ; off++ {
		k := -1
		e := fuse.DirEntry{Off: off + 1, Mode: syscall.S_IFDIR}
		switch off {
		case 0:
			e.Name, e.Ino = ".", self
		case 1:
			e.Name, e.Ino = "..", parent
		default:
			if off-2 >= uint64(n) {
				return fuse.OK
			}
			k = int(off - 2)
			var dir bool
			e.Name, dir, e.Ino = child(k)
			if !dir {
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
		if k >= 0 {
			lookup(k, eo)
		}
	}
}

func (r *rawBase) StatFs(cancel <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	defer r.enter()()
	return fuse.Status(r.fsys.statfs(out))
}

// openFile opens f as node for an OPEN request: through the cache, with
// the node's passthrough backing when the handle is a cache file.
func (r *rawBase) openFile(node uint64, f file, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	if node > fhNodeMask {
		return fuse.EIO // cannot happen: see fhNodeBits
	}
	fh, flags, errno := f.open(in.Flags)
	if errno != 0 {
		return fuse.Status(errno)
	}
	h := &rawHandle{fh: fh, node: node}
	id := r.backing(node, fh)
	if id != 0 {
		counters.passthroughOpens.Add(1)
		h.backing = true
		out.BackingID = id
		flags |= fuse.FOPEN_PASSTHROUGH
		flags &^= fuse.FOPEN_KEEP_CACHE
	}
	out.OpenFlags = flags
	out.Fh = r.issue(h, id)
	return fuse.OK
}

// issue enters h in the table under a new file handle: the next count
// with h's node in the low bits, not held by another open handle. A
// handle using backing id is recorded in the backing table before the
// OPEN reply (backingtable.go: the order of the writes).
func (r *rawBase) issue(h *rawHandle, id int32) uint64 {
	r.open.mu.Lock()
	defer r.open.mu.Unlock()
	for {
		r.open.nextFh++
		fh := r.open.nextFh<<fhNodeBits | h.node
		if _, taken := r.open.handles[fh]; taken {
			continue
		}
		r.open.handles[fh] = h
		if r.table != nil {
			r.table.setNextFh(r.open.nextFh)
			if h.backing {
				r.record(fh, h.node, id)
			}
		}
		return fh
	}
}

// record adds fh to the backing table; open.mu is held.
func (r *rawBase) record(fh, node uint64, id int32) {
	if !r.table.add(fh, node, id) && !r.table.full {
		r.table.full = true
		r.fsys.log.Warn("fusefs: the backing table is full: further passthrough handles are not recorded (after a crash, opens of their files may fail until they close)",
			"records", BackingTableRecords)
	}
}

// backing returns the passthrough backing id for an open of node, taking a
// reference: the node's current one (whatever fh is: while a file opened
// with it is open, the kernel refuses any other open of the inode), or
// fh's cache file registered with the kernel. It returns 0 when fh is not
// a cache file or passthrough is unavailable (not root, kernel older than
// 6.9). The kernel holds its own reference to a registered file until the
// id is unregistered.
func (r *rawBase) backing(node uint64, fh fs.FileHandle) int32 {
	if id := r.refBacking(node); id != 0 {
		return id
	}
	p, ok := fh.(fs.FilePassthroughFder)
	if !ok || r.noBacking.Load() {
		return 0
	}
	fd, ok := p.PassthroughFd()
	if !ok {
		return 0
	}
	// Registered outside the lock, so opens of other nodes do not wait for
	// the ioctl; a concurrent open of the same node may have won meanwhile.
	id, errno := r.fds.RegisterBackingFd(&fuse.BackingMap{Fd: int32(fd)})
	if errno != 0 {
		if r.noBacking.CompareAndSwap(false, true) {
			r.fsys.log.Info("fusefs: FUSE passthrough unavailable; cached files are read through this process", "err", errno)
		}
		return 0
	}
	r.open.mu.Lock()
	if b := r.open.backings[node]; b != nil {
		b.refs++
		won := b.id
		r.open.mu.Unlock()
		r.unregister(id)
		return won
	}
	r.open.backings[node] = &backingRef{id: id, refs: 1}
	r.open.mu.Unlock()
	return id
}

func (r *rawBase) refBacking(node uint64) int32 {
	r.open.mu.Lock()
	defer r.open.mu.Unlock()
	b := r.open.backings[node]
	if b == nil {
		return 0
	}
	b.refs++
	return b.id
}

func (r *rawBase) unregister(id int32) {
	if errno := r.fds.UnregisterBackingFd(id); errno != 0 {
		r.fsys.log.Warn("fusefs: unregister passthrough backing fd", "err", errno)
	}
}

func (r *rawBase) handle(fh uint64) *rawHandle {
	r.open.mu.Lock()
	defer r.open.mu.Unlock()
	return r.open.handles[fh]
}

func (r *rawBase) Read(cancel <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	defer r.enter()()
	h := r.handle(in.Fh)
	if h == nil || h.fh == nil {
		var st fuse.Status
		if h, st = r.adopt(in.Fh, h); !st.Ok() {
			return nil, st
		}
	}
	rd, ok := h.fh.(fs.FileReader)
	if !ok {
		return nil, fuse.EBADF
	}
	res, errno := rd.Read(&fuse.Context{Caller: in.Caller, Cancel: cancel}, buf, int64(in.Offset))
	return res, fuse.Status(errno)
}

func (r *rawBase) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	defer r.enter()()
	r.open.mu.Lock()
	h := r.open.handles[in.Fh]
	delete(r.open.handles, in.Fh)
	if r.table != nil {
		r.table.remove(in.Fh) // before the unregister below: a record names a registered id
	}
	var drop int32
	var inherited bool
	if h != nil && h.backing {
		if b := r.open.backings[h.node]; b != nil {
			if b.refs--; b.refs == 0 {
				drop, inherited = b.id, b.inherited
				delete(r.open.backings, h.node)
			}
		}
	}
	r.open.mu.Unlock()
	if drop != 0 && inherited {
		// The id is the connection's: valid here though another process
		// registered it.
		errno := r.fds.UnregisterBackingFd(drop)
		r.fsys.log.Info("fusefs: unregistered a predecessor's passthrough backing", "id", drop, "errno", int(errno))
	} else if drop != 0 {
		r.unregister(drop)
	}
	if h == nil || h.fh == nil {
		return
	}
	releaseHandle(h.fh)
}

func releaseHandle(fh fs.FileHandle) {
	if rel, ok := fh.(fs.FileReleaser); ok {
		rel.Release(context.Background())
	}
}

// Every write-type call fails with EROFS. The mount is also read-only at the
// VFS level (MS_RDONLY), so most of these never reach us; they are here so
// that the answer does not depend on how the mount was made.

func (r *rawBase) SetAttr(cancel <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	return fuse.EROFS
}

func (r *rawBase) Mknod(cancel <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	return fuse.EROFS
}

func (r *rawBase) Mkdir(cancel <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	return fuse.EROFS
}

func (r *rawBase) Unlink(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	return fuse.EROFS
}

func (r *rawBase) Rmdir(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	return fuse.EROFS
}

func (r *rawBase) Rename(cancel <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	return fuse.EROFS
}

func (r *rawBase) Link(cancel <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	return fuse.EROFS
}

func (r *rawBase) Symlink(cancel <-chan struct{}, h *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	return fuse.EROFS
}

func (r *rawBase) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	return fuse.EROFS
}

func (r *rawBase) SetXAttr(cancel <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	return fuse.EROFS
}

func (r *rawBase) RemoveXAttr(cancel <-chan struct{}, h *fuse.InHeader, attr string) fuse.Status {
	return fuse.EROFS
}

func (r *rawBase) Write(cancel <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	return 0, fuse.EROFS
}

func (r *rawBase) Fallocate(cancel <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	return fuse.EROFS
}

func (r *rawBase) CopyFileRange(cancel <-chan struct{}, in *fuse.CopyFileRangeIn) (uint32, fuse.Status) {
	return 0, fuse.EROFS
}
