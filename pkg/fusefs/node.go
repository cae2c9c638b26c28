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
// kept, as one slice sorted by name (no map: a listed file costs its
// backend.Entry, about 72 bytes plus its name and version strings), until
// the mount's listing budget drops it (listcache.go); then it is listed
// again when next needed.
//
// fsys and path are immutable; mu guards loaded and entries.
type dirNode struct {
	fs.Inode
	readOnlyDir
	fsys *FS
	path string

	mu      sync.Mutex
	loaded  bool
	entries []backend.Entry // sorted by Name, unique
}

var (
	_ = (fs.NodeLookuper)((*dirNode)(nil))
	_ = (fs.NodeReaddirer)((*dirNode)(nil))
	_ = (fs.NodeGetattrer)((*dirNode)(nil))
	_ = (fs.NodeStatfser)((*dirNode)(nil))
)

// load lists the directory once. A failed listing is not remembered, so a
// later call retries.
func (d *dirNode) load(ctx context.Context) syscall.Errno {
	lru := d.fsys.listings
	d.mu.Lock()
	if d.loaded {
		d.mu.Unlock()
		lru.touch(d)
		return 0
	}
	entries, err := d.fsys.list(d.path)
	if err != nil {
		d.mu.Unlock()
		return d.fsys.errno("list", d.path, err)
	}
	sort.SliceStable(entries, func(i, j int) bool { return entries[i].Name < entries[j].Name })
	// A key that is both a file and a prefix: the first wins.
	entries = slices.CompactFunc(entries, func(a, b backend.Entry) bool { return a.Name == b.Name })
	lru.add(d, len(entries))
	d.entries = slices.Clip(entries)
	d.loaded = true
	d.mu.Unlock()
	lru.trim(d)
	return 0
}

// child returns the entry named name. The listing may have been dropped
// since load (listcache.go): then it is loaded again.
func (d *dirNode) child(ctx context.Context, name string) (backend.Entry, syscall.Errno, bool) {
	for {
		if errno := d.load(ctx); errno != 0 {
			return backend.Entry{}, errno, false
		}
		d.mu.Lock()
		if !d.loaded {
			d.mu.Unlock()
			continue
		}
		e, ok := d.find(name)
		d.mu.Unlock()
		return e, 0, ok
	}
}

// find returns the loaded entry named name. d.mu must be held.
func (d *dirNode) find(name string) (backend.Entry, bool) {
	i, ok := slices.BinarySearchFunc(d.entries, name, func(e backend.Entry, n string) int { return strings.Compare(e.Name, n) })
	if !ok {
		return backend.Entry{}, false
	}
	return d.entries[i], true
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
	for {
		if errno := d.load(ctx); errno != 0 {
			return nil, errno
		}
		d.mu.Lock()
		if d.loaded {
			break
		}
		d.mu.Unlock() // dropped meanwhile (listcache.go): load again
	}
	defer d.mu.Unlock()
	list := make([]fuse.DirEntry, 0, len(d.entries))
	var subdirs []string
	for _, e := range d.entries {
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
	d.mu.Lock()
	defer d.mu.Unlock()
	i, found := slices.BinarySearchFunc(d.entries, n.entry.Name, func(e backend.Entry, name string) int { return strings.Compare(e.Name, name) })
	if found {
		i++
	}
	var out []file
	for ; i < len(d.entries) && len(out) < k; i++ {
		e := d.entries[i]
		if !e.IsDir {
			out = append(out, file{fsys: n.fsys, path: join(d.path, e.Name), version: e.Version, size: e.Size})
		}
	}
	return out
}
