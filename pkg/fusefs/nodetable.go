package fusefs

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// The node table: every node id a backend tree (a mount without a
// manifest) gives the kernel, appended to a file in the cache dir
// (docs/DESIGN.md, "Crash recovery"), so that a process recovering the
// connection of one that died (kill -9, OOM) answers the kernel's ids.
// Node ids of a backend tree are a counter (backendfs.go): without the
// table they die with the process.
//
// A record is written (pwrite(2) at the end of the file) before the reply
// that hands its id to the kernel (LOOKUP, READDIRPLUS): a process killed
// right after replying has it on file. No fsync: the write is in the page
// cache, which outlives the process (a kill -9 or an OOM kill, not a
// machine crash, which ends the FUSE connection anyway). A kill in the
// middle of a write leaves a torn last record, of an id never replied:
// the loader drops it and truncates the file there.
//
// FORGET is not logged: the table only grows, and a recovering process
// keeps every recorded node until unmount (it cannot know which ones the
// kernel still holds, nor their lookup counts). So it is bounded like the
// listings are: at most NodeTableLimits.MaxRecords records (the listing
// cache's entry budget, --listing-cache-entries) and MaxBytes bytes (the
// listing memory, --max-listing-memory). Past a bound, or on a write
// error, recording stops: the header's incomplete flag is set (before the
// reply of the id that did not fit), one ERROR line says so, and a later
// recovery of the connection is refused (the mount itself serves on).
//
// Hand-written: a log of fixed little-endian records needs no library.
//
// Layout (little endian):
//
//	header, 64 bytes: magic "EPFSNOD1", token [16]byte (the connection's,
//	  also in the holder's state), format uint32 (1), flags uint32 (bit 0:
//	  incomplete), 32 bytes reserved (0)
//	records: crc32c uint32 (Castagnoli, of the rest of the record), name
//	  length uint16, version length uint16, id, parent, st_ino uint64,
//	  size, mtime int64, flags uint8 (bit 0: directory), 7 bytes reserved,
//	  then the name and the version
type NodeTable struct {
	f      *os.File // read-write, never closed: a request answered after unmount may write it
	token  string   // hex; immutable
	loaded bool     // the file was the connection's (its records a predecessor's); immutable
	lim    NodeTableLimits

	// Guarded by the owner's backendFS.nmu (the write is a local pwrite,
	// the one syscall made under that lock).
	records    int   // records in the file
	size       int64 // bytes in the file
	incomplete error // why an id was not recorded (the header says so); nil: complete
	buf        []byte
	pending    []NodeRecord // the loaded records, until the tree adopts them
}

// NodeRecord is a node id the kernel was given, as the table holds it.
type NodeRecord struct {
	ID, Parent, Ino uint64
	Size, Mtime     int64
	Name, Version   string
	Dir             bool
}

// NodeTableLimits bound a node table, written and loaded.
type NodeTableLimits struct {
	MaxRecords int   // records (node ids ever given to the kernel)
	MaxBytes   int64 // bytes of the file, header included
}

const (
	nodeMagic       = "EPFSNOD1"
	nodeHeaderSize  = 64
	nodeFormat      = 1
	nodeRecordFixed = 56
	nodeFlagsOff    = 28
	nodeIncomplete  = 1
	// A name the kernel accepts from a FUSE server is at most
	// FUSE_NAME_MAX (1024) bytes; versions (ETags, posix
	// mtime-size-ctime-ino) are far shorter than 1 KiB.
	maxNodeName    = 1024
	maxNodeVersion = 1024
)

// ErrNodeTable: a node table that cannot be trusted: another connection's,
// not one, corrupt, over its limits, or incomplete.
var ErrNodeTable = errors.New("fusefs: node table")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// OpenNodeTable opens the node table at path for the connection named by
// token: with token "", a new connection's (a fresh token, an empty
// table, written to a temp file renamed over any file there); else the
// file there, which must be token's, valid and within lim (ErrNodeTable
// otherwise), its records kept for the tree (Records) and any torn last
// record cut off. The caller must own the directory (pkg/mount opens it
// under the cache lock).
func OpenNodeTable(path, token string, lim NodeTableLimits) (*NodeTable, error) {
	if lim.MaxRecords <= 0 || lim.MaxBytes < nodeHeaderSize {
		return nil, fmt.Errorf("%w: limits %+v", ErrNodeTable, lim)
	}
	if token == "" {
		var b [16]byte
		_, _ = rand.Read(b[:])
		return createNodeTable(path, hex.EncodeToString(b[:]), lim)
	}
	if _, err := hex.DecodeString(token); err != nil || len(token) != 32 {
		return nil, fmt.Errorf("%w: token %q: want 32 hex digits", ErrNodeTable, token)
	}
	return loadNodeTable(path, token, lim)
}

func createNodeTable(path, token string, lim NodeTableLimits) (*NodeTable, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("fusefs: node table: %w", err)
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("fusefs: node table: %w", err)
	}
	hdr := make([]byte, nodeHeaderSize)
	copy(hdr, nodeMagic)
	tok, _ := hex.DecodeString(token)
	copy(hdr[8:24], tok)
	binary.LittleEndian.PutUint32(hdr[24:], nodeFormat)
	if _, err := f.WriteAt(hdr, 0); err != nil {
		f.Close()
		return nil, fmt.Errorf("fusefs: node table: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		f.Close()
		return nil, fmt.Errorf("fusefs: node table: %w", err)
	}
	return &NodeTable{f: f, token: token, lim: lim, size: nodeHeaderSize}, nil
}

// loadNodeTable reads and checks the table at path (a bounded read: the
// file's size within lim.MaxBytes, each record within its name and
// version bounds, at most lim.MaxRecords of them).
func loadNodeTable(path, token string, lim NodeTableLimits) (t *NodeTable, err error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNodeTable, err)
	}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNodeTable, err)
	}
	if st.Size() > lim.MaxBytes {
		return nil, fmt.Errorf("%w: %s: %d bytes, over the limit of %d (--max-listing-memory)", ErrNodeTable, path, st.Size(), lim.MaxBytes)
	}
	if st.Size() < nodeHeaderSize {
		return nil, fmt.Errorf("%w: %s: %d bytes, shorter than its header", ErrNodeTable, path, st.Size())
	}
	r := bufio.NewReaderSize(io.LimitReader(f, st.Size()), 64<<10)
	hdr := make([]byte, nodeHeaderSize)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, fmt.Errorf("%w: %s: header: %w", ErrNodeTable, path, err)
	}
	if string(hdr[:8]) != nodeMagic || binary.LittleEndian.Uint32(hdr[24:]) != nodeFormat {
		return nil, fmt.Errorf("%w: %s: not a node table of this format", ErrNodeTable, path)
	}
	if got := hex.EncodeToString(hdr[8:24]); got != token {
		return nil, fmt.Errorf("%w: %s is another connection's (token %s, want %s)", ErrNodeTable, path, got, token)
	}
	if binary.LittleEndian.Uint32(hdr[nodeFlagsOff:])&nodeIncomplete != 0 {
		return nil, fmt.Errorf("%w: %s is incomplete: its writer could not record every node id (over its limits or a write error)", ErrNodeTable, path)
	}
	t = &NodeTable{f: f, token: token, loaded: true, lim: lim}
	end, err := t.scan(r, path)
	if err != nil {
		return nil, err
	}
	if end < st.Size() {
		// A torn last record: its id was never replied. Cut it off, so
		// that this process appends after the last whole record.
		if err := f.Truncate(end); err != nil {
			return nil, fmt.Errorf("%w: %s: cut its torn last record: %w", ErrNodeTable, path, err)
		}
	}
	t.size = end
	return t, nil
}

// scan reads and checks the records after the header, keeping them in
// t.pending; it returns where the last whole record ends. Checked: each
// record's checksum and bounds, ids unique (above the root's and within
// a file handle's node bits), each parent the root or a directory
// recorded before it, names valid.
func (t *NodeTable) scan(r *bufio.Reader, path string) (int64, error) {
	dirs := map[uint64]bool{fuse.FUSE_ROOT_ID: true}
	end := int64(nodeHeaderSize)
	fixed := make([]byte, nodeRecordFixed)
	var rec []byte
	for {
		if _, err := io.ReadFull(r, fixed); err == io.EOF {
			return end, nil
		} else if err == io.ErrUnexpectedEOF {
			return end, nil // torn
		} else if err != nil {
			return 0, fmt.Errorf("%w: %s: %w", ErrNodeTable, path, err)
		}
		nameLen, verLen := int(binary.LittleEndian.Uint16(fixed[4:])), int(binary.LittleEndian.Uint16(fixed[6:]))
		if nameLen > maxNodeName || verLen > maxNodeVersion {
			return 0, fmt.Errorf("%w: %s: record at %d: name of %d or version of %d bytes, over %d/%d", ErrNodeTable, path, end, nameLen, verLen, maxNodeName, maxNodeVersion)
		}
		n := nodeRecordFixed + nameLen + verLen
		if cap(rec) < n {
			rec = make([]byte, n, nodeRecordFixed+maxNodeName+maxNodeVersion)
		}
		rec = rec[:n]
		copy(rec, fixed)
		if _, err := io.ReadFull(r, rec[nodeRecordFixed:]); err == io.ErrUnexpectedEOF || err == io.EOF {
			return end, nil // torn
		} else if err != nil {
			return 0, fmt.Errorf("%w: %s: %w", ErrNodeTable, path, err)
		}
		if crc32.Checksum(rec[4:], castagnoli) != binary.LittleEndian.Uint32(rec) {
			return 0, fmt.Errorf("%w: %s: record at %d: checksum mismatch (corrupt)", ErrNodeTable, path, end)
		}
		nr := decodeNodeRecord(rec)
		if err := checkNodeRecord(nr, dirs); err != nil {
			return 0, fmt.Errorf("%w: %s: record at %d: %w", ErrNodeTable, path, end, err)
		}
		if len(t.pending) >= t.lim.MaxRecords {
			return 0, fmt.Errorf("%w: %s: more than %d records (--listing-cache-entries)", ErrNodeTable, path, t.lim.MaxRecords)
		}
		dirs[nr.ID] = nr.Dir
		t.pending = append(t.pending, nr)
		t.records++
		end += int64(n)
	}
}

func checkNodeRecord(nr NodeRecord, seen map[uint64]bool) error {
	if nr.ID <= fuse.FUSE_ROOT_ID || nr.ID > fhNodeMask {
		return fmt.Errorf("node id %d out of range", nr.ID)
	}
	if _, dup := seen[nr.ID]; dup {
		return fmt.Errorf("node id %d recorded twice", nr.ID)
	}
	if dir, ok := seen[nr.Parent]; !ok || !dir {
		return fmt.Errorf("node %d: parent %d is not a directory recorded before it", nr.ID, nr.Parent)
	}
	if !validNodeName(nr.Name) {
		return fmt.Errorf("node %d: invalid name %q", nr.ID, nr.Name)
	}
	if nr.Dir && (nr.Size != 0 || nr.Version != "") {
		return fmt.Errorf("node %d: a directory with a size or version", nr.ID)
	}
	return nil
}

// validNodeName: a name a directory entry may have.
func validNodeName(s string) bool {
	return s != "" && s != "." && s != ".." && len(s) <= maxNodeName && !strings.ContainsAny(s, "/\x00")
}

func decodeNodeRecord(rec []byte) NodeRecord {
	le := binary.LittleEndian
	nameLen := int(le.Uint16(rec[4:]))
	return NodeRecord{
		ID: le.Uint64(rec[8:]), Parent: le.Uint64(rec[16:]), Ino: le.Uint64(rec[24:]),
		Size: int64(le.Uint64(rec[32:])), Mtime: int64(le.Uint64(rec[40:])), Dir: rec[48]&1 != 0,
		Name:    string(rec[nodeRecordFixed : nodeRecordFixed+nameLen]),
		Version: string(rec[nodeRecordFixed+nameLen:]),
	}
}

// encodeNodeRecord appends nr's record to b.
func encodeNodeRecord(b []byte, nr NodeRecord) []byte {
	le := binary.LittleEndian
	start := len(b)
	b = append(b, make([]byte, nodeRecordFixed)...)
	r := b[start:]
	le.PutUint16(r[4:], uint16(len(nr.Name)))
	le.PutUint16(r[6:], uint16(len(nr.Version)))
	le.PutUint64(r[8:], nr.ID)
	le.PutUint64(r[16:], nr.Parent)
	le.PutUint64(r[24:], nr.Ino)
	le.PutUint64(r[32:], uint64(nr.Size))
	le.PutUint64(r[40:], uint64(nr.Mtime))
	if nr.Dir {
		r[48] = 1
	}
	b = append(b, nr.Name...)
	b = append(b, nr.Version...)
	le.PutUint32(b[start:], crc32.Checksum(b[start+4:], castagnoli))
	return b
}

// Token names the table's connection (hex).
func (t *NodeTable) Token() string { return t.token }

// Loaded reports whether the table was the connection's file (its records
// are a predecessor's), not a new one.
func (t *NodeTable) Loaded() bool { return t.loaded }

// Records returns the records loaded (in file order: parents first) until
// the tree takes them (take).
func (t *NodeTable) Records() []NodeRecord { return t.pending }

// take returns the loaded records and forgets them. nmu is held.
func (t *NodeTable) take() []NodeRecord {
	p := t.pending
	t.pending = nil
	return p
}

// ErrNodeTableFull: a node id past the table's limits, not recorded.
var ErrNodeTableFull = fmt.Errorf("%w: full", ErrNodeTable)

// nodeBatch is records encoded for one reply (a READDIRPLUS hands the
// kernel many ids at once), written by flush in one pwrite before the
// reply. Its owner is the request that fills it.
type nodeBatch struct {
	buf []byte
	n   int   // records in buf
	err error // a record that cannot be encoded (a name or version too long)
}

// add encodes nr into b. It touches nothing of t but its bounds.
func (t *NodeTable) add(b *nodeBatch, nr NodeRecord) {
	if b.err != nil {
		return
	}
	if len(nr.Name) > maxNodeName || len(nr.Version) > maxNodeVersion {
		b.err = fmt.Errorf("%w: node %d: a name of %d or version of %d bytes, over %d/%d", ErrNodeTable, nr.ID, len(nr.Name), len(nr.Version), maxNodeName, maxNodeVersion)
		return
	}
	b.buf = encodeNodeRecord(b.buf, nr)
	b.n++
}

// append records nr at the end of the file, before its id is replied
// (flush of a batch of one). nmu is held.
func (t *NodeTable) append(nr NodeRecord) error {
	b := nodeBatch{buf: t.buf[:0]}
	t.add(&b, nr)
	err := t.flush(&b)
	t.buf = b.buf
	return err
}

// flush writes b's records at the end of the file, before the reply that
// gives the kernel their ids. After the first failure (the table full, a
// record too long, a write error) nothing more is recorded and the
// header says the table is incomplete: a recovery is then refused. It
// returns that failure once, when it happens (to be logged), and nil
// after. nmu is held.
func (t *NodeTable) flush(b *nodeBatch) error {
	if t.incomplete != nil || (b.n == 0 && b.err == nil) {
		return nil
	}
	if b.err != nil {
		return t.fail(b.err)
	}
	n := int64(len(b.buf))
	if t.records+b.n > t.lim.MaxRecords || t.size+n > t.lim.MaxBytes {
		return t.fail(fmt.Errorf("%w: %d records, %d bytes, %d more (limits %d records, --listing-cache-entries; %d bytes, --max-listing-memory)",
			ErrNodeTableFull, t.records, t.size, b.n, t.lim.MaxRecords, t.lim.MaxBytes))
	}
	if _, err := t.f.WriteAt(b.buf, t.size); err != nil {
		return t.fail(fmt.Errorf("%w: write: %w", ErrNodeTable, err))
	}
	t.records += b.n
	t.size += n
	return nil
}

// fail marks the table incomplete, in memory and in its header (which a
// recovering process checks), and returns why.
func (t *NodeTable) fail(why error) error {
	t.incomplete = why
	var flags [4]byte
	binary.LittleEndian.PutUint32(flags[:], nodeIncomplete)
	if _, err := t.f.WriteAt(flags[:], nodeFlagsOff); err != nil {
		return fmt.Errorf("%w; marking the table incomplete failed too: %w", why, err)
	}
	return why
}
