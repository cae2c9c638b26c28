package fusefs

import (
	"syscall"

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
// Only open files hold state (rawBase).
type manifestFS struct {
	rawBase
	m *manifest.Manifest
}

var _ fuse.RawFileSystem = (*manifestFS)(nil)

func newManifestFS(f *FS) *manifestFS {
	r := &manifestFS{m: f.manifest}
	r.init(f)
	r.listDir = r.readDir
	r.fileOf = func(node uint64) (file, bool) {
		i, ok := r.entry(node)
		if !ok || r.m.IsDir(i) {
			return file{}, false
		}
		return r.file(i), true
	}
	return r
}

func manifestIno(i int) uint64 { return uint64(i) + 1 }

// entry returns the manifest entry of a node id.
func (r *manifestFS) entry(node uint64) (int, bool) {
	if node == 0 || node > uint64(r.m.Len()) {
		return 0, false
	}
	return int(node - 1), true
}

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
	defer r.enter()()
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
	defer r.enter()()
	i, ok := r.entry(in.NodeId)
	if !ok {
		return fuse.ENOENT
	}
	r.fsys.manifestAttr(i, &out.Attr)
	out.SetTimeout(r.timeout)
	return fuse.OK
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
	defer r.enter()()
	i, ok := r.entry(in.NodeId)
	if !ok {
		return fuse.ENOENT
	}
	if r.m.IsDir(i) {
		return fuse.Status(syscall.EISDIR)
	}
	return r.openFile(in.NodeId, r.file(i), in, out)
}

func (r *manifestFS) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	defer r.enter()()
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

// readDir lists a directory's contiguous range of entries (dirStream).
func (r *manifestFS) readDir(in *fuse.ReadIn, out *fuse.DirEntryList, plus bool) fuse.Status {
	dir, ok := r.entry(in.NodeId)
	if !ok {
		return fuse.ENOENT
	}
	if !r.m.IsDir(dir) {
		return fuse.ENOTDIR
	}
	start, end := r.m.Children(dir)
	return dirStream(in, out, plus, manifestIno(dir), manifestIno(r.m.Parent(dir)), end-start,
		func(k int) (string, bool, uint64) {
			return r.m.Name(start + k), r.m.IsDir(start + k), manifestIno(start + k)
		},
		func(k int, eo *fuse.EntryOut) { r.fillEntry(start+k, eo) })
}
