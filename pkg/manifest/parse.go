package manifest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/epochfs/epochfs/pkg/source"
	"github.com/epochfs/epochfs/pkg/units"
)

// Decoding a body into a Manifest's records, one entry at a time, with
// every entry validated as it is read (see the package doc for the layout
// of both).

// loadLimits bounds what parseStream allocates.
type loadLimits struct {
	// maxMemory bounds what the Manifest holds: the records grow up to
	// what the indexes leave of it.
	maxMemory int64
	// plausible bounds the capacity reserved up front for the records and
	// the checksums; more grows as the body proves to need it.
	plausible uint64
}

// noLimits is for a body this process built (Build).
var noLimits = loadLimits{maxMemory: math.MaxInt64, plausible: math.MaxUint64}

// parseBody decodes a body held in memory (Build's, the fuzz target's):
// h.bodyLen is its length.
func parseBody(body []byte, h header) (*Manifest, error) {
	h.bodyLen = uint64(len(body))
	return parseStream(bytes.NewReader(body), h, noLimits)
}

// parseStream decodes the decompressed body, read from src (which must end
// right after h.bodyLen bytes), into a Manifest, validating every entry.
func parseStream(src io.Reader, h header, lim loadLimits) (*Manifest, error) {
	p := newBodyParser(src, h, lim)
	for d := 0; d < len(p.m.dirEntry); d++ {
		if err := p.dir(d); err != nil {
			return nil, err
		}
	}
	return p.finish()
}

// bodyParser is parseStream's state: the Manifest it fills, the stream it
// reads, and what the checks of an entry need of those before it.
type bodyParser struct {
	h         header
	lim       loadLimits
	s         *bodyStream
	m         *Manifest
	checksums bool
	nEntries  int   // files and directories, from the header
	recLimit  int64 // the records may grow up to what the rest of the estimate leaves
	n         int   // entries so far
	total     uint64
	pathLen   []uint32 // by directory: the length of its path
	// prev is the previous entry's name (the previous sibling's when it
	// is not a directory's first).
	prev    [source.MaxNameLen]byte
	prevLen int
}

// newBodyParser allocates the Manifest for header h, within lim, and
// records its root: entry 0, the first of block 0, a directory with no
// name.
func newBodyParser(src io.Reader, h header, lim loadLimits) *bodyParser {
	checksums := h.flags&flagChecksums != 0
	nEntries := int(h.files + h.dirs) // bounded by parseEnvelope
	capped := func(n, unit uint64) int { return int(min(n, lim.plausible/unit)) }
	m := &Manifest{
		info:       Info{Source: h.source, Created: time.Unix(0, h.created), Checksums: checksums},
		rec:        make([]byte, 0, capped(h.recordBytes(), 1)),
		blockOff:   make([]uint64, 0, capped(uint64(nEntries+blockSize-1)/blockSize, 8)),
		dirBits:    make([]uint64, (nEntries+63)/64),
		childStart: make([]uint32, 0, capped(h.dirs+1, 4)),
		dirEntry:   make([]uint32, 1, max(capped(h.dirs, 4), 1)),
	}
	if checksums {
		m.sums = make([]byte, SumSize, max(capped(SumSize*uint64(nEntries), 1), SumSize))
	}
	m.blockOff = append(m.blockOff, 0)
	m.rec = append(m.rec, 0, 0, tagDir)
	m.dirBits[0] |= 1
	return &bodyParser{
		h: h, lim: lim, s: newBodyStream(src, h.bodyLen), m: m, checksums: checksums, nEntries: nEntries,
		recLimit: lim.maxMemory - int64(min(h.memoryBytes()-h.recordBytes(), math.MaxInt64/2)),
		n:        1,
		pathLen:  make([]uint32, 1, max(capped(h.dirs, 4), 1)),
	}
}

// room makes room for need more bytes of records, up to recLimit: growing
// them to what the part of the body read so far projects for the whole
// body (records take about their body bytes), so that a body far larger
// than its compressed size is copied once or twice, not at every quarter.
func (p *bodyParser) room(need int) bool {
	m := p.m
	if cap(m.rec)-len(m.rec) >= need {
		return true
	}
	read := p.h.bodyLen - p.s.left
	projected := int64(float64(len(m.rec)) * float64(p.h.bodyLen) / float64(max(read, 1)))
	c := min(max(int64(cap(m.rec))+int64(cap(m.rec))/4, int64(len(m.rec)+need), min(projected+projected/16, int64(p.h.recordBytes()))), p.recLimit)
	if c-int64(len(m.rec)) < int64(need) {
		return false
	}
	m.rec = append(make([]byte, 0, c), m.rec...)
	return true
}

// tooLarge is the error of records that outgrow recLimit.
func (p *bodyParser) tooLarge() error {
	return fmt.Errorf("%w: the records of %d entries take over %s in memory, more than the limit of %s leaves them",
		ErrTooLarge, p.n, units.FormatSize(int64(len(p.m.rec))), units.FormatSize(p.lim.maxMemory))
}

// dir decodes the children of directory d.
func (p *bodyParser) dir(d int) error {
	s := p.s
	p.m.childStart = append(p.m.childStart, uint32(p.n))
	nChildren := s.uvarint()
	if s.err == nil && nChildren > s.left/minEntrySize {
		return corrupt("directory %d: %d children cannot fit in the body", d, nChildren)
	}
	for k := uint64(0); k < nChildren; k++ {
		if p.n >= p.nEntries {
			return corrupt("more entries than the header's %d", p.nEntries)
		}
		name, common, err := p.name(d, k)
		if err != nil {
			return err
		}
		plen := p.pathLen[d] + uint32(len(name))
		if d != 0 {
			plen++
		}
		if plen > MaxPathLen {
			return corrupt("directory %d: path of %d bytes at %q", d, plen, name)
		}
		if err := p.appendName(name, common); err != nil {
			return err
		}
		if err := p.entry(d, name, plen); err != nil {
			return err
		}
		p.n++
	}
	if s.err != nil {
		return corrupt("directory %d: %v", d, s.err)
	}
	return nil
}

// name decodes the name of entry k of directory d, front-coded against its
// previous sibling's, into prev, and checks that it is valid and sorts
// after that sibling. It returns the name (valid until the next entry's)
// and how many bytes it shares with the previous entry's.
func (p *bodyParser) name(d int, k uint64) (name []byte, common int, err error) {
	s := p.s
	shared := s.uvarint()
	suffixLen := s.uvarint()
	if s.err == nil && suffixLen > source.MaxNameLen {
		return nil, 0, corrupt("directory %d entry %d: bad name lengths", d, k)
	}
	suffix := s.bytes(suffixLen) // valid until the next read of s
	if s.err != nil {
		return nil, 0, corrupt("directory %d entry %d: %v", d, k, s.err)
	}
	sibLen := p.prevLen
	if k == 0 {
		sibLen = 0 // a directory's first name shares nothing
	}
	if shared > uint64(sibLen) || shared+uint64(len(suffix)) > source.MaxNameLen {
		return nil, 0, corrupt("directory %d entry %d: bad name lengths", d, k)
	}
	// Compare the name with the previous entry's before writing it over
	// it: less, their order; common, the bytes they share.
	old := p.prev[:p.prevLen]
	common = int(shared)
	for common < p.prevLen && common-int(shared) < len(suffix) && old[common] == suffix[common-int(shared)] {
		common++
	}
	less := common-int(shared) < len(suffix) && (common == p.prevLen || old[common] < suffix[common-int(shared)])
	nameLen := int(shared) + copy(p.prev[shared:], suffix)
	name = p.prev[:nameLen]
	p.prevLen = nameLen
	if !source.ValidName(string(name)) {
		return nil, 0, corrupt("directory %d: invalid name %q", d, name)
	}
	if k > 0 && !less {
		return nil, 0, corrupt("directory %d: names not sorted at %q", d, name)
	}
	return name, common, nil
}

// appendName writes the record's name: front-coded against the previous
// entry (it shares common bytes with it), whole for the first entry of a
// block.
func (p *bodyParser) appendName(name []byte, common int) error {
	m := p.m
	memShared := common
	if p.n%blockSize == 0 {
		m.blockOff = append(m.blockOff, uint64(len(m.rec)))
		memShared = 0
	}
	if !p.room(2*binary.MaxVarintLen64 + len(name) - memShared) {
		return p.tooLarge()
	}
	m.rec = binary.AppendUvarint(m.rec, uint64(memShared))
	m.rec = binary.AppendUvarint(m.rec, uint64(len(name)-memShared))
	m.rec = append(m.rec, name[memShared:]...)
	m.nameBytes += int64(len(name))
	return nil
}

// entry decodes the rest of entry name of directory d, whose path is plen
// bytes long: a directory's tag, or a file's version, size and checksum.
func (p *bodyParser) entry(d int, name []byte, plen uint32) error {
	tagAndVer := p.s.peek(1 + maxVersionEnc)
	if p.s.err != nil || len(tagAndVer) == 0 {
		return corrupt("directory %d entry %q: truncated", d, name)
	}
	if tagAndVer[0] == tagDir {
		return p.subdir(plen)
	}
	return p.file(name, tagAndVer)
}

// subdir records a directory entry whose path is plen bytes long.
func (p *bodyParser) subdir(plen uint32) error {
	m := p.m
	p.s.skip(1)
	if uint64(len(m.dirEntry)) >= p.h.dirs {
		return corrupt("more directories than the header's %d", p.h.dirs)
	}
	if !p.room(1) {
		return p.tooLarge()
	}
	m.rec = append(m.rec, tagDir)
	m.dirBits[p.n>>6] |= 1 << (p.n & 63)
	m.dirEntry = append(m.dirEntry, uint32(p.n))
	p.pathLen = append(p.pathLen, plen)
	if p.checksums {
		m.sums = append(m.sums, make([]byte, SumSize)...)
	}
	return nil
}

// file records file name, whose tag and version payload start tagAndVer
// (peeked, not consumed): its version, size and checksum.
func (p *bodyParser) file(name, tagAndVer []byte) error {
	m, s, tag := p.m, p.s, tagAndVer[0]
	vlen, err := readVersion(tag, tagAndVer[1:])
	if err != nil {
		return corrupt("file %q: %v", name, err)
	}
	if !p.room(1 + vlen + binary.MaxVarintLen64) {
		return p.tooLarge()
	}
	switch {
	case tag == tagPosixCI && p.h.format < 2:
		return corrupt("file %q: tag %d in a format version %d manifest", name, tag, p.h.format)
	case tag == tagPosixCI:
		m.posixCI++
	case tag == tagPosix:
		m.legacyPosix++
	}
	m.rec = append(m.rec, tagAndVer[:1+vlen]...)
	s.skip(1 + vlen)
	size := s.uvarint()
	if s.err != nil || size > math.MaxInt64 {
		return corrupt("file %q: bad size", name)
	}
	if p.total += size; p.total > math.MaxInt64 {
		return corrupt("total size overflows")
	}
	m.rec = binary.AppendUvarint(m.rec, size)
	if p.checksums {
		m.sums = append(m.sums, s.bytes(SumSize)...)
		if s.err != nil {
			return corrupt("file %q: truncated checksum", name)
		}
	}
	m.files++
	return nil
}

// finish checks the counts against the header and that the body ends
// here, and returns the Manifest.
func (p *bodyParser) finish() (*Manifest, error) {
	m, s, h := p.m, p.s, p.h
	m.childStart = append(m.childStart, uint32(p.n))
	switch {
	case s.left != 0:
		return nil, corrupt("%d trailing bytes after the last directory", s.left)
	case uint64(m.files) != h.files || uint64(len(m.dirEntry)) != h.dirs:
		return nil, corrupt("%d files and %d directories, header says %d and %d", m.files, len(m.dirEntry), h.files, h.dirs)
	case p.total != h.bytes:
		return nil, corrupt("files total %d bytes, header says %d", p.total, h.bytes)
	}
	if err := s.end(); err != nil {
		return nil, corrupt("body: %v", err)
	}
	m.bytes = int64(p.total)
	m.rec = shrink(m.rec)
	return m, nil
}

// shrink copies b into an exact-size slice when much of its capacity is
// unused.
func shrink(b []byte) []byte {
	if cap(b)-len(b) <= len(b)/16 {
		return b
	}
	return append(make([]byte, 0, len(b)), b...)
}
