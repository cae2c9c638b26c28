package fusefs

import (
	"errors"
	"reflect"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/epochfs/epochfs/pkg/backend"
)

// TestBackendTreeHandover: a backend tree's node table, exported by
// Freeze's export and adopted by a fresh tree, is the same table, so the
// fresh tree answers for every node id the kernel holds.
func TestBackendTreeHandover(t *testing.T) {
	f := &FS{}
	old := newBackendFS(f)
	dir := old.ref(fuse.FUSE_ROOT_ID, "a", backend.Entry{Name: "a", IsDir: true}, nil)
	old.ref(dir, "a/x", backend.Entry{Name: "x", Size: 5, Version: "v1"}, nil)
	old.ref(dir, "a/x", backend.Entry{Name: "x", Size: 5, Version: "v1"}, nil) // a second lookup
	old.ref(dir, "a/x", backend.Entry{Name: "x", Size: 6, Version: "v2"}, nil) // changed: a new node, the old one unnamed
	old.ref(fuse.FUSE_ROOT_ID, "b", backend.Entry{Name: "b", Size: 1, Version: "w"}, nil)
	var st HandoverState
	old.export(&st)

	fresh := newBackendFS(f)
	if err := fresh.adopt(&st); err != nil {
		t.Fatal(err)
	}
	for name, pair := range map[string][2]any{
		"nodes": {old.nodes, fresh.nodes}, "byKey": {old.byKey, fresh.byKey},
		"inos": {old.inos, fresh.inos}, "nextID": {old.nextID, fresh.nextID},
	} {
		if !reflect.DeepEqual(pair[0], pair[1]) {
			t.Errorf("%s adopted: %v, want %v", name, pair[1], pair[0])
		}
	}
	// FORGET of ids the predecessor issued frees them here.
	for id, n := range old.nodes {
		if id != fuse.FUSE_ROOT_ID && !n.dir {
			fresh.Forget(id, n.nlookup)
		}
	}
	fresh.Forget(dir, 1)
	if n := fresh.NodeCount(); n != 1 {
		t.Fatalf("after every FORGET: %d nodes, want the root", n)
	}

	broken := st
	broken.Nodes = append([]NodeState(nil), st.Nodes...)
	broken.Nodes[1].Parent = 999
	if err := newBackendFS(f).adopt(&broken); !errors.Is(err, ErrHandover) {
		t.Fatalf("a node without its parent: %v, want ErrHandover", err)
	}
}

// TestFileHandleCarriesNode: the node of a handle is in its low bits, as
// adopt reads it, and no two open handles share one, even when the count
// wraps onto a handle still open.
func TestFileHandleCarriesNode(t *testing.T) {
	var r rawBase
	r.init(&FS{})
	seen := map[uint64]bool{}
	for _, node := range []uint64{1, 2, 1 << 39, fhNodeMask} {
		for range 3 {
			fh := r.issue(&rawHandle{node: node}, 0)
			if fh&fhNodeMask != node || seen[fh] {
				t.Fatalf("handle %#x of node %#x: node %#x, seen %v", fh, node, fh&fhNodeMask, seen[fh])
			}
			seen[fh] = true
		}
	}
	r.open.nextFh = 1 << (64 - fhNodeBits) // the next count wraps to 1: node 1's first handle, still open
	if fh := r.issue(&rawHandle{node: 1}, 0); seen[fh] {
		t.Fatalf("handle %#x issued twice", fh)
	}
}
