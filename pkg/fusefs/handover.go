package fusefs

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"syscall"

	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/epochfs/epochfs/pkg/manifest"
)

// Handover: what a process needs to serve a FUSE connection that another
// process opened (docs/DESIGN.md, "FUSE connection handover"; the
// connection itself and its INIT are pkg/handover's).
//
// The kernel holds node ids, file handles and passthrough backing ids the
// old process gave it. Node ids of a manifest tree are entry indexes
// (manifest.go): any process serving the same manifest answers for them.
// Node ids of a backend tree are a counter, so the node table travels in
// the handover state (HandoverState.Nodes). A file handle carries its node
// id (fhNodeBits), so a handle the new process never issued is opened on
// its first READ (adopt); the handle table travels too, for its
// passthrough flags. Backing ids belong to the connection, not to the
// process: they stay valid, and the table of them travels so that the new
// process unregisters each at its node's last RELEASE and reuses it for
// new opens of that node.

// ErrHandover: a handover state that does not fit this FS (another
// dataset, or a tree of another kind).
var ErrHandover = errors.New("fusefs: handover state does not fit")

// HandoverState is the state of a frozen tree.
type HandoverState struct {
	// Dataset names what the node ids mean: the manifest (Identity).
	Dataset  string         `json:"dataset"`
	NextFh   uint64         `json:"next_fh"`
	Handles  []HandleState  `json:"handles,omitempty"`
	Backings []BackingState `json:"backings,omitempty"`
	// NoPassthrough: the predecessor served without passthrough (the
	// flag, or passthrough unavailable), and so does its successor.
	NoPassthrough bool `json:"no_passthrough,omitempty"`
	// BackingTable is the token of the connection's backing table
	// (backingtable.go), which the successor maps and writes on.
	BackingTable string `json:"backing_table,omitempty"`
	// NodeTable is the token of a backend tree's node table
	// (nodetable.go), which the successor appends to; a crash recovery's
	// state has no Nodes and takes them from it.
	NodeTable string `json:"node_table,omitempty"`
	// A backend tree's node table (nil with a manifest) and counter.
	Nodes  []NodeState `json:"nodes,omitempty"`
	NextID uint64      `json:"next_id,omitempty"`
}

// HandleState is an open file handle.
type HandleState struct {
	Fh      uint64 `json:"fh"`
	Backing bool   `json:"backing,omitempty"` // uses its node's passthrough backing
}

// BackingState is a node's passthrough backing id and its open handles.
type BackingState struct {
	Node uint64 `json:"node"`
	ID   int32  `json:"id"`
	Refs int    `json:"refs"`
}

// NodeState is a backend tree node.
type NodeState struct {
	ID      uint64 `json:"id"`
	Parent  uint64 `json:"parent"`
	Ino     uint64 `json:"ino"`
	Nlookup uint64 `json:"nlookup"`
	Size    int64  `json:"size,omitempty"`
	Mtime   int64  `json:"mtime,omitempty"`
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
	Kids    int32  `json:"kids,omitempty"`
	Dir     bool   `json:"dir,omitempty"`
	Named   bool   `json:"named,omitempty"`    // its parent's entry of Name (else replaced, awaiting FORGET)
	OwnsIno bool   `json:"owns_ino,omitempty"` // the live holder of Ino
}

// Identity names the dataset version whose node ids the FS serves: a
// manifest's, or a backend listing's (then the ids are in the state).
func (f *FS) Identity() string { return Identity(f.manifest, f.dataset) }

// Identity is FS.Identity of an FS serving m (nil: backend listings) of
// the backend whose ID is backendID, before the FS is made.
func Identity(m *manifest.Manifest, backendID string) string {
	if m != nil {
		info := m.Info()
		return fmt.Sprintf("manifest:%s@%s:%d/%d/%d", info.Source, info.Created.UTC().Format(time.RFC3339Nano),
			m.Files(), m.Dirs(), m.TotalBytes())
	}
	return "listing:" + backendID
}

// BackingTable is Options.BackingTable: nil, or the connection's table of
// passthrough backing ids, which this FS writes.
func (f *FS) BackingTable() *BackingTable { return f.opts.BackingTable }

// NodeTable is Options.NodeTable: nil, or the table of node ids a tree
// without a manifest records.
func (f *FS) NodeTable() *NodeTable {
	if f.manifest != nil {
		return nil
	}
	return f.opts.NodeTable
}

// DeviceFd is the mounted connection's /dev/fuse descriptor (-1 before
// Mount or when it could not be told). It stays the FS's: dup it to pass it.
func (f *FS) DeviceFd() int { return int(f.devFd.Load()) }

// Freeze stops the mounted tree for a handover: requests that arrive from
// now on wait, those in flight finish (a backend fetch within ReadTimeout),
// and the state the successor needs is returned. Then either Thaw (the
// handover failed: serve on) or exit without unmounting; the requests
// waiting are then the successor's (it has the kernel resend them).
func (f *FS) Freeze() (*HandoverState, error) {
	r := f.base.Load()
	if r == nil {
		return nil, errors.New("fusefs: freeze: not mounted")
	}
	r.gate.Lock()
	st := &HandoverState{Dataset: f.Identity(), NoPassthrough: r.noBacking.Load()}
	if r.table != nil {
		st.BackingTable = r.table.Token()
	}
	if nt := f.opts.NodeTable; nt != nil {
		st.NodeTable = nt.Token()
	}
	r.open.mu.Lock()
	st.NextFh = r.open.nextFh
	for _, fh := range slices.Sorted(maps.Keys(r.open.handles)) {
		st.Handles = append(st.Handles, HandleState{Fh: fh, Backing: r.open.handles[fh].backing})
	}
	for _, node := range slices.Sorted(maps.Keys(r.open.backings)) {
		b := r.open.backings[node]
		st.Backings = append(st.Backings, BackingState{Node: node, ID: b.id, Refs: b.refs})
	}
	r.open.mu.Unlock()
	if t := f.tree.Load(); t != nil {
		t.export(st)
	}
	return st, nil
}

// Thaw lets the requests Freeze held back run.
func (f *FS) Thaw() { f.base.Load().gate.Unlock() }

// Adopt makes the tree for serving a connection another process opened,
// from its state, with fds registering backing files (and devFd its
// descriptor). Serve the tree with fds' request loop (pkg/handover).
func (f *FS) Adopt(st *HandoverState, fds BackingFds, devFd int) (fuse.RawFileSystem, error) {
	if st.Dataset != f.Identity() {
		return nil, fmt.Errorf("%w: the running mount serves %q, this one %q", ErrHandover, st.Dataset, f.Identity())
	}
	switch nt := f.opts.NodeTable; {
	case f.manifest != nil && st.Nodes != nil:
		return nil, fmt.Errorf("%w: a node table and a manifest", ErrHandover)
	case f.manifest == nil && st.Nodes == nil && (nt == nil || !nt.Loaded()):
		return nil, fmt.Errorf("%w: the node ids of a backend tree are neither in the state nor in a node table", ErrHandover)
	}
	raw := f.newTree()
	r := f.base.Load()
	r.fds = fds
	r.noBacking.Store(st.NoPassthrough || f.opts.NoPassthrough)
	r.open.nextFh = st.NextFh
	for _, h := range st.Handles {
		r.open.handles[h.Fh] = &rawHandle{node: h.Fh & fhNodeMask, backing: h.Backing}
	}
	for _, b := range st.Backings {
		r.open.backings[b.Node] = &backingRef{id: b.ID, refs: b.Refs, inherited: true}
	}
	if r.table != nil {
		r.adoptTable()
	}
	if t := f.tree.Load(); t != nil {
		if err := t.adopt(st); err != nil {
			return nil, err
		}
	}
	f.devFd.Store(int64(devFd))
	return raw, nil
}

// adoptTable merges the backing table into the open files taken from the
// handover state: a loaded table's records of handles the state does not
// name (all of them after a crash recovery, whose state has no handles)
// become open backing handles, counted in their node's references, and
// the file-handle count goes on from the table's; every backing handle
// that the table lacks (a predecessor without one) is then recorded, so
// that the table is complete. Before any request: no lock needed but for
// the table's own rule (open.mu guards it), taken here.
func (r *rawBase) adoptTable() {
	r.open.mu.Lock()
	defer r.open.mu.Unlock()
	t := r.table
	if t.Loaded() {
		r.open.nextFh = max(r.open.nextFh, t.NextFh())
		for _, rec := range t.Records() {
			if _, ok := r.open.handles[rec.Fh]; ok {
				continue // the state's (a takeover)
			}
			b := r.open.backings[rec.Node]
			if b == nil {
				b = &backingRef{id: rec.ID, inherited: true}
				r.open.backings[rec.Node] = b
			} else if b.id != rec.ID { // cannot happen: a record names its node's registered id
				r.fsys.log.Warn("fusefs: backing table: two ids for one node; the record is dropped", "node", rec.Node, "id", rec.ID, "kept", b.id)
				t.remove(rec.Fh)
				continue
			}
			b.refs++
			r.open.handles[rec.Fh] = &rawHandle{node: rec.Node, backing: true}
		}
	}
	t.setNextFh(r.open.nextFh)
	for fh, h := range r.open.handles {
		if b := r.open.backings[h.node]; h.backing && b != nil {
			r.record(fh, h.node, b.id)
		}
	}
}

// adopt opens file handle fh, which a predecessor issued (prev: its entry
// from the handover state, or nil), on its first READ.
func (r *rawBase) adopt(fh uint64, prev *rawHandle) (*rawHandle, fuse.Status) {
	node := fh & fhNodeMask
	f, ok := r.fileOf(node)
	if !ok {
		return nil, fuse.EBADF
	}
	opened, _, errno := f.open(syscall.O_RDONLY)
	if errno != 0 {
		return nil, fuse.Status(errno)
	}
	h := &rawHandle{fh: opened, node: node, backing: prev != nil && prev.backing}
	r.open.mu.Lock()
	cur := r.open.handles[fh]
	if cur != nil && cur.fh != nil { // a concurrent READ won
		r.open.mu.Unlock()
		releaseHandle(opened)
		return cur, fuse.OK
	}
	r.open.handles[fh] = h
	r.open.mu.Unlock()
	return h, fuse.OK
}

// export adds the node table to st. The gate is held.
func (r *backendFS) export(st *HandoverState) {
	r.nmu.Lock()
	defer r.nmu.Unlock()
	st.NextID = r.nextID
	st.Nodes = make([]NodeState, 0, len(r.nodes))
	for _, id := range slices.Sorted(maps.Keys(r.nodes)) {
		n := r.nodes[id]
		st.Nodes = append(st.Nodes, NodeState{
			ID: id, Parent: n.parent, Ino: n.ino, Nlookup: n.nlookup, Size: n.size, Mtime: n.mtime,
			Name: n.name, Version: n.version, Kids: n.kids, Dir: n.dir,
			Named: r.byKey[nodeKey{n.parent, n.name}] == id, OwnsIno: r.inos[n.ino] == id,
		})
	}
}

// pinnedLookups is the lookup count of a node loaded from the node table
// after a crash: the kernel's count died with the process, so the node is
// kept until unmount (FORGET never brings it to 0).
const pinnedLookups = 1 << 62

// adopt replaces the node table with st's, or, after a crash (st has no
// nodes), with the node table file's records, each kept until unmount; the
// id counter goes on past the largest id. A node table that was not the
// connection's (a new one) then records every node adopted, so that it is
// complete.
func (r *backendFS) adopt(st *HandoverState) error {
	r.nmu.Lock()
	defer r.nmu.Unlock()
	var recs []NodeRecord
	if r.ntable != nil {
		recs = r.ntable.take() // a takeover's are not needed: its state has the nodes
	}
	var err error
	if st.Nodes == nil {
		err = r.adoptRecordsLocked(recs)
	} else {
		err = r.adoptStateLocked(st)
	}
	if err != nil || r.ntable == nil || r.ntable.Loaded() {
		return err
	}
	for _, id := range slices.Sorted(maps.Keys(r.nodes)) { // parents first: a parent's id is the smaller
		if id != fuse.FUSE_ROOT_ID {
			r.recordLocked(id, r.nodes[id])
		}
	}
	return nil
}

// adoptRecordsLocked makes the nodes of a node table's records (checked by
// the loader: unique ids, each parent a directory recorded before it). A
// name recorded twice (the file changed, a new node) is the later node's.
func (r *backendFS) adoptRecordsLocked(recs []NodeRecord) error {
	root := r.nodes[fuse.FUSE_ROOT_ID]
	nodes := map[uint64]*backendNode{fuse.FUSE_ROOT_ID: root}
	byKey := map[nodeKey]uint64{}
	inos := map[uint64]uint64{root.ino: fuse.FUSE_ROOT_ID}
	next := uint64(fuse.FUSE_ROOT_ID)
	for _, rec := range recs {
		p := nodes[rec.Parent]
		if p == nil || !p.dir { // cannot happen: the loader checked
			return fmt.Errorf("%w: node table: node %d without its parent %d", ErrHandover, rec.ID, rec.Parent)
		}
		nodes[rec.ID] = &backendNode{parent: rec.Parent, ino: rec.Ino, nlookup: pinnedLookups, size: rec.Size,
			mtime: rec.Mtime, name: rec.Name, version: rec.Version, dir: rec.Dir}
		p.kids++
		byKey[nodeKey{rec.Parent, rec.Name}] = rec.ID
		inos[rec.Ino] = rec.ID
		next = max(next, rec.ID)
	}
	r.nodes, r.byKey, r.inos, r.nextID = nodes, byKey, inos, next
	return nil
}

// adoptStateLocked makes the nodes of a handover state.
func (r *backendFS) adoptStateLocked(st *HandoverState) error {
	nodes := make(map[uint64]*backendNode, len(st.Nodes))
	byKey := map[nodeKey]uint64{}
	inos := map[uint64]uint64{}
	for _, s := range st.Nodes {
		if s.ID == 0 || s.ID > st.NextID || s.ID > fhNodeMask {
			return fmt.Errorf("%w: node id %d", ErrHandover, s.ID)
		}
		nodes[s.ID] = &backendNode{parent: s.Parent, ino: s.Ino, nlookup: s.Nlookup, size: s.Size, mtime: s.Mtime,
			name: s.Name, version: s.Version, kids: s.Kids, dir: s.Dir}
		if s.Named && s.ID != fuse.FUSE_ROOT_ID {
			byKey[nodeKey{s.Parent, s.Name}] = s.ID
		}
		if s.OwnsIno {
			inos[s.Ino] = s.ID
		}
	}
	if root := nodes[fuse.FUSE_ROOT_ID]; root == nil || !root.dir {
		return fmt.Errorf("%w: no root", ErrHandover)
	}
	for id, n := range nodes {
		if id != fuse.FUSE_ROOT_ID && nodes[n.parent] == nil {
			return fmt.Errorf("%w: node %d without its parent %d", ErrHandover, id, n.parent)
		}
	}
	r.nodes, r.byKey, r.inos, r.nextID = nodes, byKey, inos, st.NextID
	return nil
}
