package manifest

import (
	"encoding/binary"
	"errors"
	"sort"
	"strings"
	"time"

	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/source"
)

// Limits of the format. Load rejects anything beyond them as ErrCorrupt.
const (
	// MaxPathLen is the longest full path, in bytes (PATH_MAX).
	MaxPathLen = 4096
	// MaxVersionLen is the longest version token, in bytes.
	MaxVersionLen = 1024
	// MaxSourceLen is the longest source ID, in bytes.
	MaxSourceLen = 4096
	// MaxEntries bounds files + directories.
	MaxEntries = 1<<31 - 2
	// maxBlob bounds the names and versions blobs (uint32 offsets).
	maxBlob = 1<<32 - 1
	// SumSize is the size of a file checksum (sha256).
	SumSize = 32
)

// Sentinel errors.
var (
	// ErrCorrupt: the input is not a well-formed manifest (truncated,
	// corrupted, inconsistent, or not a manifest at all).
	ErrCorrupt = errors.New("manifest: corrupt")
	// ErrUnsupported: a manifest of a format version this build cannot read.
	ErrUnsupported = errors.New("manifest: unsupported format version")
	// ErrTooLarge: a manifest file larger than the caller's limit.
	ErrTooLarge = errors.New("manifest: too large")
	// ErrLegacyVersions: a manifest whose posix versions lack the ctime
	// and inode (see Manifest.LegacyPosixVersions); rebuild it.
	ErrLegacyVersions = errors.New("manifest: posix versions without ctime and inode")
)

// Info is the manifest's header.
type Info struct {
	// Source is the backend ID the manifest was built from (see
	// backend.Backend.ID).
	Source string
	// Created is when it was built.
	Created time.Time
	// Checksums tells whether every file has a sha256.
	Checksums bool
}

// Manifest is a loaded dataset index. It is immutable and safe for
// concurrent use.
//
// Entries are numbered 0 (the root) to Len()-1 in breadth-first order; the
// children of a directory are contiguous and sorted by name.
type Manifest struct {
	info  Info
	files int
	bytes int64
	// Files whose version is a posix one with ctime and inode (tag 5),
	// and a posix one of mtime and size only (tag 2, LegacyPosixVersions).
	posixCI, legacyPosix int
	nameBytes            int64 // the base names' total length

	// rec holds one record per entry, in entry order, in blocks of
	// blockSize entries (see the package doc, "In memory"): the name
	// front-coded against the previous entry of its block, then the tag,
	// version payload and size of a file.
	rec      []byte
	blockOff []uint64 // blockOff[b]: offset in rec of entry b·blockSize
	dirBits  []uint64 // bit i: entry i is a directory
	sums     []byte   // SumSize bytes per entry (zero for directories) when info.Checksums

	childStart []uint32 // children of directory d: entries [childStart[d], childStart[d+1])
	dirEntry   []uint32 // entry number of directory d (dirEntry[0] = 0, the root); increasing
}

// blockSize is the number of entries per block of rec: the entry whose
// number is a multiple of it holds its whole name, so any entry is found by
// decoding at most blockSize-1 records before it.
const (
	blockShift = 4
	blockSize  = 1 << blockShift
)

// Info returns the header.
func (m *Manifest) Info() Info { return m.info }

// LegacyPosixVersions returns the number of files whose version is a posix
// "MTIMENANOS-SIZE" without ctime and inode, as `cachefs index` recorded
// before they were added. Such a version never matches a posix backend's
// current one: every read of such a file fails, so Discover refuses these
// manifests (ErrLegacyVersions).
func (m *Manifest) LegacyPosixVersions() int { return m.legacyPosix }

// Len returns the number of entries, the root included.
func (m *Manifest) Len() int { return len(m.childStart) - 1 + m.files }

// Files returns the number of files.
func (m *Manifest) Files() int { return m.files }

// Dirs returns the number of directories, the root included.
func (m *Manifest) Dirs() int { return len(m.dirEntry) }

// TotalBytes returns the sum of the file sizes.
func (m *Manifest) TotalBytes() int64 { return m.bytes }

// Root is the entry number of the root directory.
const Root = 0

// IsDir reports whether entry i is a directory.
func (m *Manifest) IsDir(i int) bool { return m.dirBits[i>>6]>>(i&63)&1 != 0 }

// dirNumber returns the directory number of directory entry i.
func (m *Manifest) dirNumber(i int) int {
	return sort.Search(len(m.dirEntry), func(d int) bool { return int(m.dirEntry[d]) >= i })
}

// decoder reads records one after the other from a block's first entry.
type decoder struct {
	rec  []byte
	pos  int
	nlen int
	name [source.MaxNameLen]byte
}

// seek positions d so that its next call of next decodes entry i.
func (m *Manifest) seek(d *decoder, i int) {
	d.rec, d.pos, d.nlen = m.rec, int(m.blockOff[i>>blockShift]), 0
	for j := i &^ (blockSize - 1); j < i; j++ {
		d.next()
	}
}

// next decodes the record at d.pos: the entry's name is then
// d.name[:d.nlen]; ver is a file's tag and version payload (nil for a
// directory) and size its size (-1 for a directory). rec was built by
// parseBody, which validated everything.
func (d *decoder) next() (ver []byte, size int64) {
	b := d.rec[d.pos:]
	shared, k1 := binary.Uvarint(b)
	suffix, k2 := binary.Uvarint(b[k1:])
	p := k1 + k2
	d.nlen = int(shared) + copy(d.name[shared:], b[p:p+int(suffix)])
	p += int(suffix)
	tag := b[p]
	if tag == tagDir {
		d.pos += p + 1
		return nil, -1
	}
	n := 1 + versionLen(tag, b[p+1:])
	ver = b[p : p+n : p+n]
	p += n
	s, k3 := binary.Uvarint(b[p:])
	d.pos += p + k3
	return ver, int64(s)
}

// decode returns entry i's version encoding and size (nil and -1 for a
// directory), and its name in d.
func (m *Manifest) decode(d *decoder, i int) (ver []byte, size int64) {
	m.seek(d, i)
	return d.next()
}

// headName returns the name of entry i, the first of its block, without
// copying it.
func (m *Manifest) headName(i int) []byte {
	b := m.rec[m.blockOff[i>>blockShift]:]
	_, k1 := binary.Uvarint(b) // 0: the first entry of a block shares nothing
	n, k2 := binary.Uvarint(b[k1:])
	return b[k1+k2 : k1+k2+int(n)]
}

// Name returns entry i's base name ("" for the root).
func (m *Manifest) Name(i int) string {
	var d decoder
	m.decode(&d, i)
	return string(d.name[:d.nlen])
}

// Size returns a file's size (0 for a directory).
func (m *Manifest) Size(i int) int64 {
	if m.IsDir(i) {
		return 0
	}
	var d decoder
	_, size := m.decode(&d, i)
	return size
}

// Version returns a file's version token ("" for a directory).
func (m *Manifest) Version(i int) string {
	if m.IsDir(i) {
		return ""
	}
	var d decoder
	ver, size := m.decode(&d, i)
	return formatVersion(ver, size)
}

// Checksum returns a file's sha256, or nil when the manifest has none. The
// slice must not be modified.
func (m *Manifest) Checksum(i int) []byte {
	if !m.info.Checksums || m.IsDir(i) {
		return nil
	}
	return m.sums[i*SumSize : (i+1)*SumSize : (i+1)*SumSize]
}

// Children returns the entry range [start, end) of directory entry i's
// children (empty for a file).
func (m *Manifest) Children(i int) (start, end int) {
	if !m.IsDir(i) {
		return 0, 0
	}
	d := m.dirNumber(i)
	return int(m.childStart[d]), int(m.childStart[d+1])
}

// Lookup returns the child of directory entry dir named name.
//
// A binary search over the first entries of the blocks among the children
// (and the first child), whose names need no decoding, finds the block
// that would hold name; the records of that block are then decoded in
// order.
func (m *Manifest) Lookup(dir int, name string) (int, bool) {
	lo, hi := m.Children(dir)
	if lo >= hi {
		return 0, false
	}
	first := (lo | (blockSize - 1)) + 1 // the first block head after lo
	heads := 0
	if first < hi {
		heads = (hi - first + blockSize - 1) / blockSize
	}
	// The first head whose name is greater than name.
	k := sort.Search(heads, func(k int) bool { return string(m.headName(first+k*blockSize)) > name })
	start, end := lo, hi
	if k > 0 {
		start = first + (k-1)*blockSize
	}
	if k < heads {
		end = first + k*blockSize
	}
	var d decoder
	m.seek(&d, start)
	for i := start; i < end; i++ {
		d.next()
		switch c := strings.Compare(string(d.name[:d.nlen]), name); {
		case c == 0:
			return i, true
		case c > 0:
			return 0, false
		}
	}
	return 0, false
}

// Find returns the entry at a dataset path ("" is the root).
func (m *Manifest) Find(path string) (int, bool) {
	i := Root
	for path != "" {
		name, rest, _ := strings.Cut(path, "/")
		var ok bool
		if i, ok = m.Lookup(i, name); !ok {
			return 0, false
		}
		path = rest
	}
	return i, true
}

// Parent returns the directory entry holding entry i (the root's parent is
// the root).
func (m *Manifest) Parent(i int) int {
	if i == Root {
		return Root
	}
	// The last directory whose children start at or before i.
	d := sort.Search(len(m.dirEntry), func(d int) bool { return int(m.childStart[d]) > i }) - 1
	return int(m.dirEntry[d])
}

// Path returns entry i's slash-separated path ("" for the root).
func (m *Manifest) Path(i int) string {
	if i == Root {
		return ""
	}
	var parts []string
	n := -1
	for ; i != Root; i = m.Parent(i) {
		name := m.Name(i)
		parts = append(parts, name)
		n += len(name) + 1
	}
	var sb strings.Builder
	sb.Grow(n)
	for k := len(parts) - 1; k >= 0; k-- {
		sb.WriteString(parts[k])
		if k > 0 {
			sb.WriteByte('/')
		}
	}
	return sb.String()
}

// Entry returns entry i as a backend.Entry (without ModTime).
func (m *Manifest) Entry(i int) backend.Entry {
	var d decoder
	ver, size := m.decode(&d, i)
	name := string(d.name[:d.nlen])
	if ver == nil {
		return backend.Entry{Name: name, IsDir: true}
	}
	return backend.Entry{Name: name, Size: size, Version: formatVersion(ver, size)}
}

// Walk calls fn for every file, in path order (components compared
// bytewise), with its entry number and path, until fn returns false.
func (m *Manifest) Walk(fn func(i int, path string) bool) {
	m.walk(Root, "", fn)
}

func (m *Manifest) walk(dir int, prefix string, fn func(int, string) bool) bool {
	start, end := m.Children(dir)
	if start == end {
		return true
	}
	var d decoder
	m.seek(&d, start)
	for i := start; i < end; i++ {
		ver, _ := d.next()
		p := string(d.name[:d.nlen])
		if prefix != "" {
			p = prefix + "/" + p
		}
		if ver == nil {
			if !m.walk(i, p, fn) {
				return false
			}
		} else if !fn(i, p) {
			return false
		}
	}
	return true
}

// NameBytes returns the total length of the base names (held front-coded,
// in fewer bytes; see MemoryBytes).
func (m *Manifest) NameBytes() int64 { return m.nameBytes }

// MemoryBytes returns the bytes the manifest holds in memory: the records
// (names, versions, sizes), the block and directory indexes, the
// checksums.
func (m *Manifest) MemoryBytes() int64 {
	return int64(cap(m.rec)) + 8*int64(cap(m.blockOff)) + 8*int64(cap(m.dirBits)) + int64(cap(m.sums)) +
		4*int64(cap(m.childStart)) + 4*int64(cap(m.dirEntry))
}

// OverheadBytes returns the bytes held in memory beyond the name bytes
// (MemoryBytes − NameBytes, at least 0): since names are front-coded in
// memory, what the versions, sizes and indexes cost once the names' own
// length is set aside.
func (m *Manifest) OverheadBytes() int64 { return max(m.MemoryBytes()-m.nameBytes, 0) }

// comparePaths orders paths component by component: like a bytewise
// comparison in which "/" sorts before every other byte.
func comparePaths(a, b string) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		ca, cb := a[i], b[i]
		if ca == cb {
			continue
		}
		switch {
		case ca == '/':
			return -1
		case cb == '/':
			return 1
		case ca < cb:
			return -1
		default:
			return 1
		}
	}
	switch {
	case len(a) < len(b):
		return -1
	case len(a) > len(b):
		return 1
	}
	return 0
}
