package fusefs

import (
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/zeebo/xxh3"

	"github.com/epochfs/epochfs/pkg/backend"
)

// The backend tree: without a manifest, the tree is served from listings
// on go-fuse's raw API. A directory's listing is fetched on first use (or
// taken from its prelisting, prelist.go) and held by path in the listing
// cache (listing.go); a dropped listing is fetched again when next needed.
//
// The kernel's inodes are a table of small nodes, one per name the kernel
// holds a lookup of: allocated by LOOKUP (and by READDIRPLUS, which hands
// the kernel every entry's attributes), counted per lookup, and removed by
// FORGET once the kernel has forgotten the node and all its children. A
// node is about 80 bytes plus its table entries; it shares its name and
// version strings with the listing it came from. (The go-fuse node tree
// this replaces held ~600 B of Go objects per inode.) Node ids are
// allocated in order; st_ino is the path's hash, stable across mounts.
//
// st_ino is the hash of the path, moved on to the next free number when a
// live node holds it (inos), so that no two live inodes share one. Only
// live nodes are in that table: a mount remembers nothing per file it
// listed but the kernel no longer holds, beyond the listing itself.
//
// Every node id given to the kernel is first recorded in the node table
// (nodetable.go), when there is one, so that a process recovering the
// connection after a crash answers for it.
//
// nmu guards nodes, byKey, inos and nextID, and the node table's writes;
// a node's fields but nlookup and kids are immutable; ntable is set once.
type backendFS struct {
	rawBase

	ntable *NodeTable // nil: node ids are not recorded (no recovery)

	nmu    sync.Mutex
	nodes  map[uint64]*backendNode // by node id; the root is node 1
	byKey  map[nodeKey]uint64      // live nodes by (parent node id, name)
	inos   map[uint64]uint64       // st_ino → node id, of live nodes
	nextID uint64
}

// nodeKey names a node within its parent.
type nodeKey struct {
	parent uint64
	name   string
}

// backendNode is an inode the kernel knows.
type backendNode struct {
	parent  uint64 // 0 for the root
	ino     uint64
	nlookup uint64 // lookups the kernel has not forgotten
	// A file's size, version and modification time (Unix ns, 0: none), as
	// listed.
	size    int64
	mtime   int64
	name    string
	version string
	kids    int32 // live child nodes (they need this one's path)
	dir     bool
}

var _ fuse.RawFileSystem = (*backendFS)(nil)

func newBackendFS(f *FS) *backendFS {
	r := &backendFS{
		nodes:  map[uint64]*backendNode{fuse.FUSE_ROOT_ID: {dir: true, ino: 1, nlookup: 1}},
		byKey:  map[nodeKey]uint64{},
		inos:   map[uint64]uint64{1: fuse.FUSE_ROOT_ID},
		nextID: fuse.FUSE_ROOT_ID,
	}
	r.init(f)
	r.ntable = f.opts.NodeTable
	r.listDir = r.readDir
	r.fileOf = r.fileOfNode
	return r
}

// node returns a live node and its dataset path.
func (r *backendFS) node(id uint64) (*backendNode, string, bool) {
	r.nmu.Lock()
	defer r.nmu.Unlock()
	n := r.nodes[id]
	if n == nil {
		return nil, "", false
	}
	return n, r.pathLocked(n), true
}

// pathLocked builds n's path from its ancestors (alive: each holds a kid
// count for its children). r.nmu must be held.
func (r *backendFS) pathLocked(n *backendNode) string {
	if n.parent == 0 {
		return ""
	}
	var names []string
	for ; n.parent != 0; n = r.nodes[n.parent] {
		names = append(names, n.name)
	}
	slices.Reverse(names)
	return strings.Join(names, "/")
}

// ref returns the node of entry e in directory parent, created if the
// kernel holds none, and counts one lookup of it. A new node is recorded
// in the node table: in batch, when not nil (the caller flushes it before
// its reply), else at once.
func (r *backendFS) ref(parent uint64, path string, e backend.Entry, batch *nodeBatch) uint64 {
	r.nmu.Lock()
	defer r.nmu.Unlock()
	k := nodeKey{parent, e.Name}
	if id, ok := r.byKey[k]; ok {
		n := r.nodes[id]
		if n.dir == e.IsDir && (n.dir || n.version == e.Version && n.size == e.Size) {
			n.nlookup++
			return id
		}
		// The name now stands for something else (the listing was
		// fetched again and the file changed): a new node, and the old
		// one lives on, unnamed, until the kernel forgets it.
		delete(r.byKey, k)
	}
	r.nextID++
	id := r.nextID
	n := &backendNode{parent: parent, name: e.Name, dir: e.IsDir, ino: r.inoLocked(parent, e.Name, path), nlookup: 1}
	r.inos[n.ino] = id
	if !e.IsDir {
		n.size, n.version = e.Size, e.Version
		if !e.ModTime.IsZero() {
			n.mtime = e.ModTime.UnixNano()
		}
	}
	r.nodes[id] = n
	r.byKey[k] = id
	r.nodes[parent].kids++
	if r.ntable != nil && batch != nil {
		r.ntable.add(batch, nodeRecord(id, n))
	} else {
		r.recordLocked(id, n)
	}
	return id
}

func nodeRecord(id uint64, n *backendNode) NodeRecord {
	return NodeRecord{ID: id, Parent: n.parent, Ino: n.ino, Size: n.size, Mtime: n.mtime, Name: n.name, Version: n.version, Dir: n.dir}
}

// recordLocked writes node id to the node table, before the reply that
// gives the kernel the id (the caller's). A node the table cannot hold
// is served all the same: the table is marked incomplete, so a recovery
// is refused rather than served without it. r.nmu must be held.
func (r *backendFS) recordLocked(id uint64, n *backendNode) {
	if r.ntable == nil {
		return
	}
	r.logTable(r.ntable.append(nodeRecord(id, n)))
}

// flushLocked writes a batch of new nodes' records, before the reply
// that gives the kernel their ids. r.nmu must be held.
func (r *backendFS) flushLocked(b *nodeBatch) {
	if r.ntable != nil {
		r.logTable(r.ntable.flush(b))
	}
}

// logTable logs the node table's one failure (after it nothing is
// recorded).
func (r *backendFS) logTable(err error) {
	if err != nil {
		r.fsys.log.Error("fusefs: node table: node ids are no longer recorded; this connection cannot be recovered after a crash (the mount serves on)",
			"err", err)
	}
}

// Forget drops n lookups of a node; a node the kernel forgot and whose
// children are gone is removed, and so, in turn, may its parent be.
func (r *backendFS) Forget(id, n uint64) {
	defer r.enter()()
	r.nmu.Lock()
	defer r.nmu.Unlock()
	node := r.nodes[id]
	if node == nil || id == fuse.FUSE_ROOT_ID {
		return
	}
	node.nlookup -= min(n, node.nlookup)
	for id != fuse.FUSE_ROOT_ID && node.nlookup == 0 && node.kids == 0 {
		delete(r.nodes, id)
		if k := (nodeKey{node.parent, node.name}); r.byKey[k] == id {
			delete(r.byKey, k)
		}
		if r.inos[node.ino] == id {
			delete(r.inos, node.ino)
		}
		id = node.parent
		if node = r.nodes[id]; node == nil {
			return // cannot happen: a child holds its parent
		}
		node.kids--
	}
}

// inoLocked returns the st_ino of name in directory parent, whose path is
// path: its live node's, else the path's hash, or the next number no live
// node holds. r.nmu must be held.
func (r *backendFS) inoLocked(parent uint64, name, path string) uint64 {
	if id, ok := r.byKey[nodeKey{parent, name}]; ok {
		return r.nodes[id].ino
	}
	h := xxh3.HashString(path) | 1<<63 // clear of small numbers (the root is 1)
	for {
		if _, taken := r.inos[h]; !taken {
			return h
		}
		h++
	}
}

// dirInos returns the st_ino of a directory node and of its parent.
func (r *backendFS) dirInos(id uint64) (self, parent uint64) {
	r.nmu.Lock()
	defer r.nmu.Unlock()
	n := r.nodes[id]
	if n == nil {
		return 0, 0
	}
	if p := r.nodes[n.parent]; p != nil {
		return n.ino, p.ino
	}
	return n.ino, n.ino // the root is its own parent
}

// ino is inoLocked for a directory entry being listed.
func (r *backendFS) ino(parent uint64, name, path string) uint64 {
	r.nmu.Lock()
	defer r.nmu.Unlock()
	return r.inoLocked(parent, name, path)
}

// NodeCount is the number of inodes the mount tracks (for tests).
func (r *backendFS) NodeCount() int {
	r.nmu.Lock()
	defer r.nmu.Unlock()
	return len(r.nodes)
}

func (r *backendFS) attr(n *backendNode, a *fuse.Attr) {
	a.Ino = n.ino
	if n.dir {
		dirAttr(a)
		return
	}
	a.Mode = syscall.S_IFREG | 0o444
	a.Nlink = 1
	a.Size = uint64(n.size)
	a.Blocks = (a.Size + 511) / 512
	a.Blksize = 1 << 20
	if n.mtime != 0 {
		t := time.Unix(0, n.mtime)
		a.SetTimes(nil, &t, &t)
	}
}

// fillEntry answers a lookup of node id.
func (r *backendFS) fillEntry(id uint64, out *fuse.EntryOut) {
	r.nmu.Lock()
	n := r.nodes[id]
	r.nmu.Unlock()
	out.NodeId = id
	out.Generation = 1
	out.SetEntryTimeout(r.timeout)
	out.SetAttrTimeout(r.timeout)
	r.attr(n, &out.Attr)
}

// dir returns a directory node's path and listing.
func (r *backendFS) dir(id uint64) (string, []backend.Entry, fuse.Status) {
	n, path, ok := r.node(id)
	if !ok {
		return "", nil, fuse.ENOENT
	}
	if !n.dir {
		return "", nil, fuse.ENOTDIR
	}
	entries, errno := r.fsys.listing(path)
	if errno != 0 {
		return "", nil, fuse.Status(errno)
	}
	return path, entries, fuse.OK
}

func (r *backendFS) Lookup(cancel <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	defer r.enter()()
	path, entries, st := r.dir(h.NodeId)
	if !st.Ok() {
		return st
	}
	e, ok := find(entries, name)
	if !ok {
		// A negative entry the kernel may cache: node id 0.
		out.NodeId = 0
		out.SetEntryTimeout(r.timeout)
		return fuse.OK
	}
	r.fillEntry(r.ref(h.NodeId, join(path, name), e, nil), out)
	return fuse.OK
}

func (r *backendFS) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	defer r.enter()()
	n, _, ok := r.node(in.NodeId)
	if !ok {
		return fuse.ENOENT
	}
	r.attr(n, &out.Attr)
	out.SetTimeout(r.timeout)
	return fuse.OK
}

func (r *backendFS) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	defer r.enter()()
	n, path, ok := r.node(in.NodeId)
	if !ok {
		return fuse.ENOENT
	}
	if n.dir {
		return fuse.Status(syscall.EISDIR)
	}
	return r.openFile(in.NodeId, r.file(n, path), in, out)
}

// file is file node n at path as opened, with its listed siblings as its
// readahead.
func (r *backendFS) file(n *backendNode, path string) file {
	f := file{fsys: r.fsys, path: path, version: n.version, size: n.size}
	f.next = func(k int) []file { return r.fsys.siblings(path, k) }
	return f
}

func (r *backendFS) fileOfNode(id uint64) (file, bool) {
	n, path, ok := r.node(id)
	if !ok || n.dir {
		return file{}, false
	}
	return r.file(n, path), true
}

func (r *backendFS) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	defer r.enter()()
	n, _, ok := r.node(in.NodeId)
	if !ok {
		return fuse.ENOENT
	}
	if !n.dir {
		return fuse.ENOTDIR
	}
	return fuse.OK
}

// readDir lists a directory from its listing (dirStream), as long as the
// listing is not fetched again with other contents between two calls.
func (r *backendFS) readDir(in *fuse.ReadIn, out *fuse.DirEntryList, plus bool) fuse.Status {
	path, entries, st := r.dir(in.NodeId)
	if !st.Ok() {
		return st
	}
	if in.Offset == 0 {
		// A walk reads the subdirectories next: prelist them meanwhile.
		var subdirs []string
		for _, e := range entries {
			if e.IsDir {
				subdirs = append(subdirs, join(path, e.Name))
			}
		}
		r.fsys.prelist(subdirs)
	}
	self, parent := r.dirInos(in.NodeId)
	var batch nodeBatch // the new node ids of this reply, recorded before it
	defer func() {
		if batch.n > 0 || batch.err != nil {
			r.nmu.Lock()
			r.flushLocked(&batch)
			r.nmu.Unlock()
		}
	}()
	return dirStream(in, out, plus, self, parent, len(entries),
		func(k int) (string, bool, uint64) {
			e := &entries[k]
			return e.Name, e.IsDir, r.ino(in.NodeId, e.Name, join(path, e.Name))
		},
		func(k int, eo *fuse.EntryOut) {
			r.fillEntry(r.ref(in.NodeId, join(path, entries[k].Name), entries[k], &batch), eo)
		})
}

func dirAttr(a *fuse.Attr) {
	a.Mode = syscall.S_IFDIR | 0o555
	a.Nlink = 2
}

// statfs reports the cache's capacity and free room as the file system's.
func (f *FS) statfs(out *fuse.StatfsOut) syscall.Errno {
	st := f.store.Stats()
	const bsize = 4096
	out.Bsize = bsize
	out.Frsize = bsize
	out.Blocks = uint64(st.CapacityBytes / bsize)
	out.Bfree = uint64(max(st.CapacityBytes-st.UsedBytes, 0) / bsize)
	out.Bavail = out.Bfree
	out.NameLen = 255
	return 0
}
