package fusefs

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/epochfs/epochfs/pkg/backend"
)

var tableLim = NodeTableLimits{MaxRecords: 100, MaxBytes: 1 << 20}

// goodRecords are a small tree: dir a (2) with file a/x (3), file y (4).
func goodRecords() []NodeRecord {
	return []NodeRecord{
		{ID: 2, Parent: 1, Ino: 1<<63 | 7, Name: "a", Dir: true},
		{ID: 3, Parent: 2, Ino: 1<<63 | 8, Name: "x", Size: 5, Mtime: 99, Version: "v1"},
		{ID: 4, Parent: 1, Ino: 1<<63 | 9, Name: "y", Size: 0, Version: "v2"},
	}
}

// writeTable makes a table at path with recs encoded as they are (no
// check: the loader's checks are under test), and returns its token.
func writeTable(t *testing.T, path string, recs []NodeRecord) string {
	t.Helper()
	nt, err := OpenNodeTable(path, "", tableLim)
	if err != nil {
		t.Fatal(err)
	}
	defer nt.f.Close()
	var b []byte
	for _, r := range recs {
		b = encodeNodeRecord(b, r)
	}
	if _, err := nt.f.WriteAt(b, nodeHeaderSize); err != nil {
		t.Fatal(err)
	}
	return nt.Token()
}

// TestNodeTableRoundTrip: what append writes, a load with the token
// returns, in order; a torn last record (a kill mid-write: its id was
// never replied) is cut off, and the next append follows the last whole
// record.
func TestNodeTableRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "connection", "nodes")
	nt, err := OpenNodeTable(path, "", tableLim)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range goodRecords() {
		if err := nt.append(r); err != nil {
			t.Fatal(err)
		}
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the table file: %v, mode %v; want 0600", err, st.Mode())
	}
	got, err := OpenNodeTable(path, nt.Token(), tableLim)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Loaded() || !slices.Equal(got.Records(), goodRecords()) {
		t.Fatalf("loaded %+v (loaded %v), want %+v", got.Records(), got.Loaded(), goodRecords())
	}

	st, _ := os.Stat(path)
	whole := st.Size()
	torn := encodeNodeRecord(nil, NodeRecord{ID: 5, Parent: 1, Name: "torn", Version: "v"})
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(torn[:len(torn)-3]); err != nil {
		t.Fatal(err)
	}
	f.Close()
	got, err = OpenNodeTable(path, nt.Token(), tableLim)
	if err != nil {
		t.Fatalf("a torn last record: %v, want it cut off", err)
	}
	if len(got.Records()) != 3 {
		t.Fatalf("%d records after a torn one, want 3", len(got.Records()))
	}
	if st, _ := os.Stat(path); st.Size() != whole {
		t.Fatalf("file of %d bytes after the load, want %d (the torn record cut off)", st.Size(), whole)
	}
	if err := got.append(NodeRecord{ID: 6, Parent: 2, Name: "z", Version: "v3"}); err != nil {
		t.Fatal(err)
	}
	again, err := OpenNodeTable(path, nt.Token(), tableLim)
	if err != nil || len(again.Records()) != 4 || again.Records()[3].ID != 6 {
		t.Fatalf("after an append past the cut: %v, %+v", err, again.Records())
	}
}

// TestNodeTableRefused: a table that cannot be trusted is refused with
// ErrNodeTable (a recovery is then refused), each for its reason.
func TestNodeTableRefused(t *testing.T) {
	recs := func(edit func([]NodeRecord) []NodeRecord) func(t *testing.T, path string) string {
		return func(t *testing.T, path string) string { return writeTable(t, path, edit(goodRecords())) }
	}
	for _, tc := range []struct {
		name  string
		make  func(t *testing.T, path string) string // returns the token to open with
		lim   NodeTableLimits
		wants string
	}{
		{"missing", func(t *testing.T, path string) string { return strings.Repeat("ab", 16) }, tableLim, "no such file"},
		{"token mismatch", func(t *testing.T, path string) string {
			writeTable(t, path, goodRecords())
			return strings.Repeat("0f", 16)
		}, tableLim, "another connection's"},
		{"bad token", func(t *testing.T, path string) string { writeTable(t, path, nil); return "xyz" }, tableLim, "32 hex digits"},
		{"truncated header", func(t *testing.T, path string) string {
			tok := writeTable(t, path, goodRecords())
			must(t, os.Truncate(path, 20))
			return tok
		}, tableLim, "shorter than its header"},
		{"not a table", func(t *testing.T, path string) string {
			tok := writeTable(t, path, goodRecords())
			f, _ := os.OpenFile(path, os.O_WRONLY, 0)
			_, _ = f.WriteAt([]byte("NOTATABL"), 0)
			f.Close()
			return tok
		}, tableLim, "not a node table"},
		{"corrupt record", func(t *testing.T, path string) string {
			tok := writeTable(t, path, goodRecords())
			f, _ := os.OpenFile(path, os.O_WRONLY, 0)
			_, _ = f.WriteAt([]byte{'Q'}, nodeHeaderSize+nodeRecordFixed) // record 2's name "a"
			f.Close()
			return tok
		}, tableLim, "checksum mismatch"},
		{"oversized file", recs(func(r []NodeRecord) []NodeRecord { return r }), NodeTableLimits{MaxRecords: 100, MaxBytes: 100}, "over the limit"},
		{"too many records", recs(func(r []NodeRecord) []NodeRecord { return r }), NodeTableLimits{MaxRecords: 2, MaxBytes: 1 << 20}, "more than 2 records"},
		{"oversized name", func(t *testing.T, path string) string {
			tok := writeTable(t, path, nil)
			b := encodeNodeRecord(nil, NodeRecord{ID: 2, Parent: 1, Name: strings.Repeat("n", maxNodeName+1)})
			f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			_, _ = f.Write(b)
			f.Close()
			return tok
		}, tableLim, "over 1024/1024"},
		{"parent missing", recs(func(r []NodeRecord) []NodeRecord { r[1].Parent = 9; return r }), tableLim, "parent 9 is not a directory"},
		{"parent a file", recs(func(r []NodeRecord) []NodeRecord { r[2].Parent = 3; return r }), tableLim, "parent 3 is not a directory"},
		{"child before parent", recs(func(r []NodeRecord) []NodeRecord { return []NodeRecord{r[1], r[0]} }), tableLim, "parent 2 is not a directory"},
		{"duplicate id", recs(func(r []NodeRecord) []NodeRecord { r[2].ID = 3; return r }), tableLim, "recorded twice"},
		{"root id", recs(func(r []NodeRecord) []NodeRecord { r[2].ID = 1; return r }), tableLim, "out of range"},
		{"id past the handle bits", recs(func(r []NodeRecord) []NodeRecord { r[2].ID = fhNodeMask + 1; return r }), tableLim, "out of range"},
		{"name with a slash", recs(func(r []NodeRecord) []NodeRecord { r[2].Name = "b/c"; return r }), tableLim, "invalid name"},
		{"name dot-dot", recs(func(r []NodeRecord) []NodeRecord { r[2].Name = ".."; return r }), tableLim, "invalid name"},
		{"empty name", recs(func(r []NodeRecord) []NodeRecord { r[2].Name = ""; return r }), tableLim, "invalid name"},
		{"incomplete", func(t *testing.T, path string) string {
			nt, err := OpenNodeTable(path, "", NodeTableLimits{MaxRecords: 2, MaxBytes: 1 << 20})
			must(t, err)
			for _, r := range goodRecords()[:2] {
				must(t, nt.append(r))
			}
			if err := nt.append(goodRecords()[2]); !errors.Is(err, ErrNodeTableFull) {
				t.Fatalf("append past the limit: %v, want ErrNodeTableFull", err)
			}
			if err := nt.append(NodeRecord{ID: 9, Parent: 1, Name: "later"}); err != nil {
				t.Fatalf("the append after a failure: %v, want nil (logged once)", err)
			}
			return nt.Token()
		}, tableLim, "incomplete"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "nodes")
			tok := tc.make(t, path)
			nt, err := OpenNodeTable(path, tok, tc.lim)
			if !errors.Is(err, ErrNodeTable) || !strings.Contains(err.Error(), tc.wants) {
				t.Fatalf("OpenNodeTable: %v (records %v), want ErrNodeTable with %q", err, nt, tc.wants)
			}
		})
	}
}

// TestNodeTableAdopt: a backend tree adopts a loaded table's nodes after
// a crash (no nodes in the state): each kept until unmount (a FORGET does
// not drop it), a name recorded twice is the later node's, the counter
// goes on past the largest id, and new ids are appended.
func TestNodeTableAdopt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nodes")
	recs := append(goodRecords(), NodeRecord{ID: 7, Parent: 2, Ino: 1<<63 | 8, Name: "x", Size: 6, Version: "v9"})
	tok := writeTable(t, path, recs)
	nt, err := OpenNodeTable(path, tok, tableLim)
	must(t, err)
	f := &FS{opts: Options{NodeTable: nt}}
	r := newBackendFS(f)
	must(t, r.adopt(&HandoverState{NodeTable: tok}))
	if r.NodeCount() != 5 || r.nextID != 7 {
		t.Fatalf("%d nodes, next id %d; want 5 (root and 4 records) and 7", r.NodeCount(), r.nextID)
	}
	if id := r.byKey[nodeKey{2, "x"}]; id != 7 {
		t.Fatalf("a/x is node %d, want the later record's 7", id)
	}
	r.Forget(3, 1)
	if _, _, ok := r.node(3); !ok {
		t.Fatal("a FORGET dropped a node loaded from the table")
	}
	if _, p, _ := r.node(7); p != "a/x" {
		t.Fatalf("node 7's path %q, want a/x", p)
	}
}

// TestNodeTableRecordsTree: a backend tree records each node id it
// creates, at once (LOOKUP) or in a batch flushed before the reply
// (READDIRPLUS), not a second lookup of a known node; a tree recovering
// from the table answers for every id with the same node.
func TestNodeTableRecordsTree(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nodes")
	nt, err := OpenNodeTable(path, "", tableLim)
	must(t, err)
	old := newBackendFS(&FS{opts: Options{NodeTable: nt}})
	dir := old.ref(1, "a", backend.Entry{Name: "a", IsDir: true}, nil)
	var b nodeBatch
	x := old.ref(dir, "a/x", backend.Entry{Name: "x", Size: 5, Version: "v1"}, &b)
	old.ref(dir, "a/x", backend.Entry{Name: "x", Size: 5, Version: "v1"}, &b) // a second lookup: no record
	y := old.ref(dir, "a/y", backend.Entry{Name: "y", Size: 6, Version: "v2"}, &b)
	if b.n != 2 || nt.records != 1 {
		t.Fatalf("batch of %d, %d records written before the flush; want 2 and 1", b.n, nt.records)
	}
	old.nmu.Lock()
	old.flushLocked(&b)
	old.nmu.Unlock()

	loaded, err := OpenNodeTable(path, nt.Token(), tableLim)
	must(t, err)
	fresh := newBackendFS(&FS{opts: Options{NodeTable: loaded}})
	must(t, fresh.adopt(&HandoverState{NodeTable: nt.Token()}))
	for _, id := range []uint64{dir, x, y} {
		want, wp, _ := old.node(id)
		got, gp, ok := fresh.node(id)
		if !ok || gp != wp || got.ino != want.ino || got.size != want.size || got.version != want.version || got.dir != want.dir {
			t.Fatalf("node %d: %+v at %q, want %+v at %q", id, got, gp, want, wp)
		}
	}
	if next := fresh.ref(dir, "a/z", backend.Entry{Name: "z", Version: "v3"}, nil); next != y+1 {
		t.Fatalf("the recovered tree's next id %d, want %d", next, y+1)
	}
}

// FuzzNodeTableLoad: whatever follows a node table's header, the loader
// neither panics nor allocates past its bounds, and what it accepts is a
// tree: unique ids, each parent the root or a directory before it, valid
// names.
func FuzzNodeTableLoad(f *testing.F) {
	var good []byte
	for _, r := range goodRecords() {
		good = encodeNodeRecord(good, r)
	}
	f.Add(good)
	f.Add(good[:len(good)-2])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, body []byte) {
		path := filepath.Join(t.TempDir(), "nodes")
		nt, err := OpenNodeTable(path, "", tableLim)
		must(t, err)
		_, err = nt.f.WriteAt(body, nodeHeaderSize)
		must(t, err)
		got, err := OpenNodeTable(path, nt.Token(), tableLim)
		if err != nil {
			if !errors.Is(err, ErrNodeTable) {
				t.Fatalf("a refusal without ErrNodeTable: %v", err)
			}
			return
		}
		seen := map[uint64]bool{1: true}
		for _, r := range got.Records() {
			if err := checkNodeRecord(r, seen); err != nil {
				t.Fatalf("accepted a bad record: %v", err)
			}
			seen[r.ID] = r.Dir
		}
	})
}
