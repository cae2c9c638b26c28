package manifest

import (
	"errors"
	"sort"
	"strings"
	"time"

	"github.com/epochfs/epochfs/pkg/backend"
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

	names   []byte   // every base name, entry after entry
	nameEnd []uint32 // nameEnd[i]: end of entry i's name in names (start: nameEnd[i-1], or 0)
	size    []int64  // file size, or -(d+1) for directory number d
	verEnd  []uint32 // end of entry i's encoded version in vers (empty for directories)
	vers    []byte
	sums    []byte // SumSize bytes per entry (zero for directories) when info.Checksums

	childStart []uint32 // children of directory d: entries [childStart[d], childStart[d+1])
	dirEntry   []uint32 // entry number of directory d (dirEntry[0] = 0, the root)
}

// Info returns the header.
func (m *Manifest) Info() Info { return m.info }

// LegacyPosixVersions returns the number of files whose version is a posix
// "MTIMENANOS-SIZE" without ctime and inode, as `cachefs index` recorded
// before they were added. Such a version never matches a posix backend's
// current one: every read of such a file fails, so Discover refuses these
// manifests (ErrLegacyVersions).
func (m *Manifest) LegacyPosixVersions() int { return m.legacyPosix }

// Len returns the number of entries, the root included.
func (m *Manifest) Len() int { return len(m.size) }

// Files returns the number of files.
func (m *Manifest) Files() int { return m.files }

// Dirs returns the number of directories, the root included.
func (m *Manifest) Dirs() int { return len(m.dirEntry) }

// TotalBytes returns the sum of the file sizes.
func (m *Manifest) TotalBytes() int64 { return m.bytes }

// Root is the entry number of the root directory.
const Root = 0

// IsDir reports whether entry i is a directory.
func (m *Manifest) IsDir(i int) bool { return m.size[i] < 0 }

func (m *Manifest) nameBytes(i int) []byte {
	start := uint32(0)
	if i > 0 {
		start = m.nameEnd[i-1]
	}
	return m.names[start:m.nameEnd[i]]
}

// Name returns entry i's base name ("" for the root).
func (m *Manifest) Name(i int) string { return string(m.nameBytes(i)) }

// Size returns a file's size (0 for a directory).
func (m *Manifest) Size(i int) int64 { return max(m.size[i], 0) }

// Version returns a file's version token ("" for a directory).
func (m *Manifest) Version(i int) string {
	start := uint32(0)
	if i > 0 {
		start = m.verEnd[i-1]
	}
	return formatVersion(m.vers[start:m.verEnd[i]], m.size[i])
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
	d := -m.size[i] - 1
	return int(m.childStart[d]), int(m.childStart[d+1])
}

// Lookup returns the child of directory entry dir named name.
func (m *Manifest) Lookup(dir int, name string) (int, bool) {
	lo, hi := m.Children(dir)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if string(m.nameBytes(mid)) < name {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	_, end := m.Children(dir)
	if lo < end && string(m.nameBytes(lo)) == name {
		return lo, true
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
	var parts [][]byte
	n := -1
	for ; i != Root; i = m.Parent(i) {
		b := m.nameBytes(i)
		parts = append(parts, b)
		n += len(b) + 1
	}
	var sb strings.Builder
	sb.Grow(n)
	for k := len(parts) - 1; k >= 0; k-- {
		sb.Write(parts[k])
		if k > 0 {
			sb.WriteByte('/')
		}
	}
	return sb.String()
}

// Entry returns entry i as a backend.Entry (without ModTime).
func (m *Manifest) Entry(i int) backend.Entry {
	if m.IsDir(i) {
		return backend.Entry{Name: m.Name(i), IsDir: true}
	}
	return backend.Entry{Name: m.Name(i), Size: m.size[i], Version: m.Version(i)}
}

// Walk calls fn for every file, in path order (components compared
// bytewise), with its entry number and path, until fn returns false.
func (m *Manifest) Walk(fn func(i int, path string) bool) {
	m.walk(Root, "", fn)
}

func (m *Manifest) walk(dir int, prefix string, fn func(int, string) bool) bool {
	start, end := m.Children(dir)
	for i := start; i < end; i++ {
		p := m.Name(i)
		if prefix != "" {
			p = prefix + "/" + p
		}
		if m.IsDir(i) {
			if !m.walk(i, p, fn) {
				return false
			}
		} else if !fn(i, p) {
			return false
		}
	}
	return true
}

// NameBytes returns the total bytes of the base names held in memory.
func (m *Manifest) NameBytes() int64 { return int64(len(m.names)) }

// OverheadBytes returns the bytes held in memory beyond the name bytes:
// offsets, sizes, versions, checksums and the directory index.
func (m *Manifest) OverheadBytes() int64 {
	return int64(cap(m.names)-len(m.names)) + 4*int64(cap(m.nameEnd)) + 8*int64(cap(m.size)) +
		4*int64(cap(m.verEnd)) + int64(cap(m.vers)) + int64(cap(m.sums)) +
		4*int64(cap(m.childStart)) + 4*int64(cap(m.dirEntry))
}

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
