package fusefs

import (
	"context"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/epochfs/epochfs/pkg/backend"
)

// dirNode is a directory of the dataset. Its listing is fetched from the
// backend on first use (or taken from a sibling prelisting, see prelist) and
// held by path in the mount's listing budget (listcache.go), as one slice
// sorted by name (no map: a listed file costs its backend.Entry, about 72
// bytes plus its name and version strings), so that a node the kernel
// forgot and looked up again finds it; a listing the budget dropped is
// listed again when next needed.
//
// fsys and path are immutable; mu serialises the node's listings, so that
// concurrent lookups in a directory not held list it once.
type dirNode struct {
	fs.Inode
	readOnlyDir
	fsys *FS
	path string

	mu sync.Mutex
}

var (
	_ = (fs.NodeLookuper)((*dirNode)(nil))
	_ = (fs.NodeReaddirer)((*dirNode)(nil))
	_ = (fs.NodeGetattrer)((*dirNode)(nil))
	_ = (fs.NodeStatfser)((*dirNode)(nil))
)

// listing returns the directory's entries, sorted by name and unique: the
// held listing, or a new one from the backend. A failed listing is not
// remembered, so a later call retries. The slice is never modified.
func (d *dirNode) listing(ctx context.Context) ([]backend.Entry, syscall.Errno) {
	lru := d.fsys.listings
	if entries, ok := lru.get(d.path); ok {
		return entries, 0
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if entries, ok := lru.get(d.path); ok {
		return entries, 0 // listed while we waited
	}
	entries, err := d.fsys.list(d.path)
	if err != nil {
		return nil, d.fsys.errno("list", d.path, err)
	}
	sort.SliceStable(entries, func(i, j int) bool { return entries[i].Name < entries[j].Name })
	// A key that is both a file and a prefix: the first wins.
	entries = slices.Clip(slices.CompactFunc(entries, func(a, b backend.Entry) bool { return a.Name == b.Name }))
	lru.put(d.path, entries)
	return entries, 0
}

// child returns the entry named name.
func (d *dirNode) child(ctx context.Context, name string) (backend.Entry, syscall.Errno, bool) {
	entries, errno := d.listing(ctx)
	if errno != 0 {
		return backend.Entry{}, errno, false
	}
	e, ok := find(entries, name)
	return e, 0, ok
}

// find returns the entry named name of a sorted listing.
func find(entries []backend.Entry, name string) (backend.Entry, bool) {
	i, ok := slices.BinarySearchFunc(entries, name, func(e backend.Entry, n string) int { return strings.Compare(e.Name, n) })
	if !ok {
		return backend.Entry{}, false
	}
	return entries[i], true
}

func (d *dirNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	dirAttr(&out.Attr)
	return 0
}

func (d *dirNode) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	return d.fsys.statfs(out)
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

func (d *dirNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	e, errno, ok := d.child(ctx, name)
	if errno != 0 {
		return nil, errno
	}
	if !ok {
		return nil, syscall.ENOENT
	}
	path := join(d.path, name)
	ino := d.fsys.ino(path)
	if e.IsDir {
		dirAttr(&out.Attr)
		out.Ino = ino
		child := &dirNode{fsys: d.fsys, path: path}
		return d.NewInode(ctx, child, fs.StableAttr{Mode: syscall.S_IFDIR, Ino: ino}), 0
	}
	child := &fileNode{fsys: d.fsys, dir: d, path: path, entry: e}
	child.attr(&out.Attr)
	out.Ino = ino
	return d.NewInode(ctx, child, fs.StableAttr{Mode: syscall.S_IFREG, Ino: ino}), 0
}

func (d *dirNode) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	entries, errno := d.listing(ctx)
	if errno != 0 {
		return nil, errno
	}
	list := make([]fuse.DirEntry, 0, len(entries))
	var subdirs []string
	for _, e := range entries {
		mode := uint32(syscall.S_IFREG)
		if e.IsDir {
			mode = syscall.S_IFDIR
			subdirs = append(subdirs, join(d.path, e.Name))
		}
		list = append(list, fuse.DirEntry{Name: e.Name, Mode: mode, Ino: d.fsys.ino(join(d.path, e.Name))})
	}
	d.fsys.prelist(subdirs)
	return fs.NewListDirStream(list), 0
}

func dirAttr(a *fuse.Attr) {
	a.Mode = syscall.S_IFDIR | 0o555
	a.Nlink = 2
}

// fileNode is a file of the dataset. All fields are immutable.
type fileNode struct {
	fs.Inode
	readOnlyFile
	fsys  *FS
	dir   *dirNode
	path  string
	entry backend.Entry
}

var (
	_ = (fs.NodeGetattrer)((*fileNode)(nil))
	_ = (fs.NodeOpener)((*fileNode)(nil))
)

func (n *fileNode) attr(a *fuse.Attr) {
	a.Mode = syscall.S_IFREG | 0o444
	a.Nlink = 1
	a.Size = uint64(n.entry.Size)
	a.Blocks = (a.Size + 511) / 512
	a.Blksize = 1 << 20
	if !n.entry.ModTime.IsZero() {
		a.SetTimes(nil, &n.entry.ModTime, &n.entry.ModTime)
	}
}

func (n *fileNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.attr(&out.Attr)
	return 0
}

func (n *fileNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return file{fsys: n.fsys, path: n.path, version: n.entry.Version, size: n.entry.Size, next: n.siblings}.open(flags)
}

// siblings returns up to k files after n in its directory's listing (none
// when the listing was dropped: readahead is an optimisation).
func (n *fileNode) siblings(k int) []file {
	d := n.dir
	entries, ok := d.fsys.listings.get(d.path)
	if !ok {
		return nil
	}
	i, found := slices.BinarySearchFunc(entries, n.entry.Name, func(e backend.Entry, name string) int { return strings.Compare(e.Name, name) })
	if found {
		i++
	}
	var out []file
	for ; i < len(entries) && len(out) < k; i++ {
		e := entries[i]
		if !e.IsDir {
			out = append(out, file{fsys: n.fsys, path: join(d.path, e.Name), version: e.Version, size: e.Size})
		}
	}
	return out
}
