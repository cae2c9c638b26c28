package fusefs

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The backing table: a connection's passthrough backing ids and the open
// handles that use them, in a file mapped MAP_SHARED (docs/DESIGN.md,
// "Crash recovery"), so that a process recovering the connection of one
// that died (kill -9, OOM) knows them. Backing ids belong to the kernel
// connection; while a file opened with one is open, the kernel refuses any
// open of its inode that is not passthrough with that same id, so a
// recovered process that cannot name the id fails every such open (EIO).
//
// It is written in memory only (no syscall per open or release): stores to
// a shared mapping are in the page cache, which outlives the process. The
// order of the writes bounds what a crash can leave (rawfs.go, passthrough.go):
// a record is added after the id is registered and before the OPEN reply,
// removed before the id is unregistered, so a record always names a
// registered id of its node. A crash between the register ioctl and the
// record, or between the record's removal and the unregister, leaks an id
// (registered until unmount, never named); one between the record and the
// OPEN reply leaves a record of a handle the kernel never got, which keeps
// the id registered (leaked) but right: its node's bytes.
//
// Hand-written: no library keeps crash-ordered records in a shared
// mapping; x/sys/unix maps it.
//
// Layout (little endian):
//
//	header, 64 bytes: magic "EPFSBKT1", token [16]byte (the connection's,
//	  also in the holder's state), records uint32, record size uint32,
//	  next file-handle count uint64, 24 bytes reserved (0)
//	records × 24 bytes: fh uint64 (0: free slot; stored last when a
//	  record is filled, first when it is cleared), node uint64, id int32,
//	  4 bytes reserved
//
// A process maps the table until it exits (a request still answered after
// unmount may write it): the mapping is never unmapped.
type BackingTable struct {
	mem    []byte // the mapping; immutable
	token  string // hex; immutable
	loaded bool   // the file was the connection's (OpenBackingTable); immutable

	// Guarded by the owner's openFiles.mu (rawfs.go).
	slots map[uint64]int // slot by file handle
	free  []int          // free slots, last first
	full  bool           // a record did not fit (logged once)
}

// BackingRecord is an open handle that uses its node's passthrough
// backing id, as the table holds it.
type BackingRecord struct {
	Fh   uint64
	Node uint64
	ID   int32
}

const (
	backingMagic      = "EPFSBKT1"
	backingHeaderSize = 64
	backingRecordSize = 24
	// BackingTableRecords is the table's capacity: open passthrough
	// handles at once (1.5 MiB, sparse: only used pages take memory).
	// Handles past it are served with passthrough but not recorded: after
	// a crash, opens of their inodes may fail (EIO) until they close.
	BackingTableRecords = 1 << 16
)

// ErrBackingTable: a table file that is not one (wrong size or format).
var ErrBackingTable = errors.New("fusefs: backing table")

// OpenBackingTable maps the backing table at path for the connection
// named by token: with token "", a new connection's (a fresh token, an
// empty table, replacing any file there); else the file there if its
// token is token (loaded reports that), otherwise a new empty table with
// that token. The caller must own the directory (pkg/mount opens it
// under the cache lock).
func OpenBackingTable(path, token string) (t *BackingTable, loaded bool, err error) {
	if token != "" {
		if _, err := hex.DecodeString(token); err != nil || len(token) != 32 {
			return nil, false, fmt.Errorf("%w: token %q: want 32 hex digits", ErrBackingTable, token)
		}
		t, err := loadBackingTable(path, token)
		if err == nil {
			return t, true, nil
		}
		if !errors.Is(err, os.ErrNotExist) && !errors.Is(err, ErrBackingTable) {
			return nil, false, err
		}
	} else {
		var b [16]byte
		_, _ = rand.Read(b[:])
		token = hex.EncodeToString(b[:])
	}
	t, err = createBackingTable(path, token)
	return t, false, err
}

func backingTableSize() int { return backingHeaderSize + BackingTableRecords*backingRecordSize }

// createBackingTable writes an empty table (temp file, rename) and maps it.
func createBackingTable(path, token string) (*BackingTable, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("fusefs: backing table: %w", err)
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("fusefs: backing table: %w", err)
	}
	defer f.Close()
	hdr := make([]byte, backingHeaderSize)
	copy(hdr, backingMagic)
	tok, _ := hex.DecodeString(token)
	copy(hdr[8:24], tok)
	binary.LittleEndian.PutUint32(hdr[24:], BackingTableRecords)
	binary.LittleEndian.PutUint32(hdr[28:], backingRecordSize)
	if _, err := f.WriteAt(hdr, 0); err != nil {
		return nil, fmt.Errorf("fusefs: backing table: %w", err)
	}
	if err := f.Truncate(int64(backingTableSize())); err != nil {
		return nil, fmt.Errorf("fusefs: backing table: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return nil, fmt.Errorf("fusefs: backing table: %w", err)
	}
	return mapBackingTable(f, token, false)
}

// loadBackingTable maps the table at path if it is token's.
func loadBackingTable(path, token string) (*BackingTable, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() != int64(backingTableSize()) {
		return nil, fmt.Errorf("%w: %s: %d bytes, want %d", ErrBackingTable, path, st.Size(), backingTableSize())
	}
	hdr := make([]byte, backingHeaderSize)
	if _, err := f.ReadAt(hdr, 0); err != nil {
		return nil, err
	}
	if string(hdr[:8]) != backingMagic || binary.LittleEndian.Uint32(hdr[24:]) != BackingTableRecords ||
		binary.LittleEndian.Uint32(hdr[28:]) != backingRecordSize {
		return nil, fmt.Errorf("%w: %s: not a backing table of this format", ErrBackingTable, path)
	}
	if got := hex.EncodeToString(hdr[8:24]); got != token {
		return nil, fmt.Errorf("%w: %s is another connection's (token %s)", ErrBackingTable, path, got)
	}
	return mapBackingTable(f, token, true)
}

// mapBackingTable maps f (closed by the caller: the mapping stays) and
// indexes its records.
func mapBackingTable(f *os.File, token string, loaded bool) (*BackingTable, error) {
	mem, err := unix.Mmap(int(f.Fd()), 0, backingTableSize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("fusefs: backing table: mmap: %w", err)
	}
	t := &BackingTable{mem: mem, token: token, loaded: loaded, slots: map[uint64]int{}}
	for i := BackingTableRecords - 1; i >= 0; i-- {
		if fh := t.fhWord(i).Load(); fh != 0 {
			t.slots[fh] = i
		} else {
			t.free = append(t.free, i)
		}
	}
	return t, nil
}

// Token names the table's connection (hex).
func (t *BackingTable) Token() string { return t.token }

// Loaded reports whether the table was the connection's file (its records
// are a predecessor's), not a new one.
func (t *BackingTable) Loaded() bool { return t.loaded }

// word returns the 8-byte word at off as an atomic: the stores that order
// a record (fh last when filling, first when clearing) must not be
// reordered by the compiler.
func (t *BackingTable) word(off int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&t.mem[off]))
}

func (t *BackingTable) fhWord(slot int) *atomic.Uint64 {
	return t.word(backingHeaderSize + slot*backingRecordSize)
}

// Records returns the valid records: a handle's low bits are its node and
// its id is positive (the rest is skipped).
func (t *BackingTable) Records() []BackingRecord {
	var out []BackingRecord
	for fh, slot := range t.slots {
		off := backingHeaderSize + slot*backingRecordSize
		node := t.word(off + 8).Load()
		id := int32(t.word(off+16).Load() & 0xffffffff)
		if node == 0 || node != fh&fhNodeMask || id <= 0 {
			continue
		}
		out = append(out, BackingRecord{Fh: fh, Node: node, ID: id})
	}
	return out
}

// NextFh is the file-handle count the table's last writer reached.
func (t *BackingTable) NextFh() uint64 { return t.word(32).Load() }

func (t *BackingTable) setNextFh(n uint64) { t.word(32).Store(n) }

// add records that handle fh of node uses backing id; false when the
// table is full (the handle is then not recorded).
func (t *BackingTable) add(fh, node uint64, id int32) bool {
	if _, ok := t.slots[fh]; ok {
		return true
	}
	if len(t.free) == 0 {
		return false
	}
	slot := t.free[len(t.free)-1]
	t.free = t.free[:len(t.free)-1]
	off := backingHeaderSize + slot*backingRecordSize
	t.word(off + 8).Store(node)
	t.word(off + 16).Store(uint64(uint32(id)))
	t.fhWord(slot).Store(fh) // last: the record is valid from here
	t.slots[fh] = slot
	return true
}

// remove drops fh's record, if any.
func (t *BackingTable) remove(fh uint64) {
	slot, ok := t.slots[fh]
	if !ok {
		return
	}
	t.fhWord(slot).Store(0) // first: the record is invalid from here
	delete(t.slots, fh)
	t.free = append(t.free, slot)
}
