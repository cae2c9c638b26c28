package fusefs

import (
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// fakeFds is a connection's backing-id map, as the kernel keeps it:
// cyclic ids from 1, an unregister of an unknown id fails.
type fakeFds struct {
	mu     sync.Mutex
	next   int32
	live   map[int32]int32 // id → fd
	unregs []int32
}

func (f *fakeFds) RegisterBackingFd(m *fuse.BackingMap) (int32, syscall.Errno) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.live == nil {
		f.live = map[int32]int32{}
	}
	f.next++
	f.live[f.next] = m.Fd
	return f.next, 0
}

func (f *fakeFds) UnregisterBackingFd(id int32) syscall.Errno {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.live[id]; !ok {
		return syscall.ENOENT
	}
	delete(f.live, id)
	f.unregs = append(f.unregs, id)
	return 0
}

// fdHandle is a passthrough-capable handle (a cache file's).
type fdHandle struct{ fd int }

func (h fdHandle) PassthroughFd() (int, bool) { return h.fd, true }

func newTableBase(t *testing.T, table *BackingTable, fds BackingFds) *rawBase {
	t.Helper()
	r := &rawBase{}
	r.init(&FS{opts: Options{BackingTable: table}, log: slog.New(slog.DiscardHandler)})
	r.fds = fds
	return r
}

// open is openFile without the cache: a backing for node and a handle.
func (r *rawBase) openForTest(node uint64, fh any) uint64 {
	h := &rawHandle{node: node}
	var id int32
	if p, ok := fh.(fdHandle); ok {
		id = r.backing(node, p)
	} else {
		id = r.backing(node, &memFile{})
	}
	h.backing = id != 0
	return r.issue(h, id)
}

// TestBackingTableRecovery: what a process that recovers a connection
// finds in the table the dead one wrote (a second mapping of the file, as
// after a kill -9: the stores are in the page cache): its backing handles
// by node and id, its handle count; a new open of a node with a live id
// reuses it (even a handle that is no cache file: the kernel holds the
// backing), a RELEASE counts a dead handle down once however often it is
// resent, and the last one unregisters the id, once.
func TestBackingTableRecovery(t *testing.T) {
	path := filepath.Join(t.TempDir(), "connection", "backing")
	tableA, loaded, err := OpenBackingTable(path, "")
	if err != nil || loaded {
		t.Fatalf("new table: loaded %v, %v", loaded, err)
	}
	fds := &fakeFds{}
	a := newTableBase(t, tableA, fds)
	fh1 := a.openForTest(5, fdHandle{fd: 100})
	fh2 := a.openForTest(5, fdHandle{fd: 101}) // shares node 5's id
	fh3 := a.openForTest(9, fdHandle{fd: 102})
	plain := a.openForTest(12, nil) // no passthrough: not recorded
	a.Release(nil, &fuse.ReleaseIn{Fh: fh3})
	if got := fds.unregs; !slices.Equal(got, []int32{2}) {
		t.Fatalf("unregistered %v after node 9's only release, want [2]", got)
	}
	// The process dies here; fds (the connection) lives on.

	tableB, loaded, err := OpenBackingTable(path, tableA.Token())
	if err != nil || !loaded {
		t.Fatalf("reopen with the connection's token: loaded %v, %v", loaded, err)
	}
	b := newTableBase(t, tableB, fds)
	b.adoptTable()
	if got := b.open.backings[5]; got == nil || got.id != 1 || got.refs != 2 || !got.inherited {
		t.Fatalf("node 5's backing after recovery: %+v, want id 1, 2 refs, inherited", got)
	}
	if len(b.open.backings) != 1 || b.open.handles[fh1] == nil || b.open.handles[fh2] == nil || b.open.handles[plain] != nil {
		t.Fatalf("recovered handles %v, backings %v: want fh %#x and %#x on node 5 only", b.open.handles, b.open.backings, fh1, fh2)
	}
	if b.open.nextFh != a.open.nextFh {
		t.Fatalf("handle count %d after recovery, want the dead process's %d", b.open.nextFh, a.open.nextFh)
	}
	fh4 := b.openForTest(5, nil) // memory-served, yet passthrough with id 1
	if h := b.open.handles[fh4]; h == nil || !h.backing || fds.next != 2 {
		t.Fatalf("new open of node 5: handle %+v, %d ids registered; want id 1 reused", h, fds.next)
	}
	for _, fh := range []uint64{fh1, fh1, fh2, fh2} { // each RELEASE twice: resent after a crash
		b.Release(nil, &fuse.ReleaseIn{Fh: fh})
	}
	if len(fds.unregs) != 1 || b.open.backings[5] == nil || b.open.backings[5].refs != 1 {
		t.Fatalf("after the dead handles' releases: unregistered %v, backing %+v; want node 5 still at 1 ref", fds.unregs, b.open.backings[5])
	}
	b.Release(nil, &fuse.ReleaseIn{Fh: fh4})
	if !slices.Equal(fds.unregs, []int32{2, 1}) || len(fds.live) != 0 {
		t.Fatalf("unregistered %v, still registered %v; want [2 1] and none", fds.unregs, fds.live)
	}
	if recs := tableB.Records(); len(recs) != 0 {
		t.Fatalf("records after every release: %v", recs)
	}
}

// TestBackingTableToken: a table of another connection (token), of
// another format or size, is never trusted: a new empty one with the
// asked token replaces it.
func TestBackingTableToken(t *testing.T) {
	path := filepath.Join(t.TempDir(), "backing")
	first, _, err := OpenBackingTable(path, "")
	if err != nil {
		t.Fatal(err)
	}
	first.add(1<<fhNodeBits|3, 3, 4)
	other := "00112233445566778899aabbccddeeff"
	for _, tc := range []struct {
		name    string
		prepare func()
	}{
		{"another connection", func() {}},
		{"truncated", func() { must(t, os.Truncate(path, 100)) }},
		{"missing", func() { must(t, os.Remove(path)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.prepare()
			tb, loaded, err := OpenBackingTable(path, other)
			if err != nil || loaded || tb.Token() != other || len(tb.Records()) != 0 || tb.NextFh() != 0 {
				t.Fatalf("loaded %v, token %s, records %v, next %d, err %v: want a new empty table of token %s",
					loaded, tb.Token(), tb.Records(), tb.NextFh(), err, other)
			}
		})
	}
	if _, _, err := OpenBackingTable(path, "../x"); err == nil {
		t.Fatal("a malformed token was accepted")
	}
}

// TestBackingTableFull: past its capacity a handle is not recorded (and
// the table says so); a release frees a slot for the next.
func TestBackingTableFull(t *testing.T) {
	tb, _, err := OpenBackingTable(filepath.Join(t.TempDir(), "backing"), "")
	if err != nil {
		t.Fatal(err)
	}
	for i := range uint64(BackingTableRecords) {
		if !tb.add((i+1)<<fhNodeBits|7, 7, 1) {
			t.Fatalf("record %d refused", i)
		}
	}
	last := uint64(BackingTableRecords+1)<<fhNodeBits | 7
	if tb.add(last, 7, 1) {
		t.Fatal("a record past the capacity was accepted")
	}
	tb.remove(1<<fhNodeBits | 7)
	if !tb.add(last, 7, 1) || len(tb.Records()) != BackingTableRecords {
		t.Fatalf("after a release: %d records, want %d", len(tb.Records()), BackingTableRecords)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
