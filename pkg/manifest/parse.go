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
// right after h.bodyLen bytes), into a Manifest, validating every entry;
// see the package doc for the layout of both. It is one long function, as
// parseBody was: every step shares the loop's state (the previous name,
// the block, the counters, the record's growth).
//
// long: every entry of a mount's manifest passes here; split into per-step methods it ran 18% slower (BenchmarkLoad1M).
func parseStream(src io.Reader, h header, lim loadLimits) (*Manifest, error) {
	checksums := h.flags&flagChecksums != 0
	nEntries := int(h.files + h.dirs) // bounded by parseEnvelope
	capped := func(n, unit uint64) int { return int(min(n, lim.plausible/unit)) }
	recCap := capped(h.recordBytes(), 1)
	// The records may grow up to what the rest of the estimate leaves.
	recLimit := lim.maxMemory - int64(min(h.memoryBytes()-h.recordBytes(), math.MaxInt64/2))
	m := &Manifest{
		info:       Info{Source: h.source, Created: time.Unix(0, h.created), Checksums: checksums},
		rec:        make([]byte, 0, recCap),
		blockOff:   make([]uint64, 0, capped(uint64(nEntries+blockSize-1)/blockSize, 8)),
		dirBits:    make([]uint64, (nEntries+63)/64),
		childStart: make([]uint32, 0, capped(h.dirs+1, 4)),
		dirEntry:   make([]uint32, 1, max(capped(h.dirs, 4), 1)),
	}
	if checksums {
		m.sums = make([]byte, SumSize, max(capped(SumSize*uint64(nEntries), 1), SumSize))
	}
	// The root: entry 0, the first of block 0, a directory with no name.
	m.blockOff = append(m.blockOff, 0)
	m.rec = append(m.rec, 0, 0, tagDir)
	m.dirBits[0] |= 1
	n := 1 // entries so far
	var prev [source.MaxNameLen]byte
	prevLen := 0 // the previous entry's name (the previous sibling's when k > 0)
	pathLen := make([]uint32, 1, max(capped(h.dirs, 4), 1))
	var total uint64
	s := newBodyStream(src, h.bodyLen)
	// room makes room for need more bytes of records, up to recLimit:
	// growing them to what the part of the body read so far projects for
	// the whole body (records take about their body bytes), so that a body
	// far larger than its compressed size is copied once or twice, not at
	// every quarter.
	room := func(need int) bool {
		if cap(m.rec)-len(m.rec) >= need {
			return true
		}
		read := h.bodyLen - s.left
		projected := int64(float64(len(m.rec)) * float64(h.bodyLen) / float64(max(read, 1)))
		c := min(max(int64(cap(m.rec))+int64(cap(m.rec))/4, int64(len(m.rec)+need), min(projected+projected/16, int64(h.recordBytes()))), recLimit)
		if c-int64(len(m.rec)) < int64(need) {
			return false
		}
		m.rec = append(make([]byte, 0, c), m.rec...)
		return true
	}
	tooLarge := func() error {
		return fmt.Errorf("%w: the records of %d entries take over %s in memory, more than the limit of %s leaves them",
			ErrTooLarge, n, units.FormatSize(int64(len(m.rec))), units.FormatSize(lim.maxMemory))
	}
	for d := 0; d < len(m.dirEntry); d++ {
		m.childStart = append(m.childStart, uint32(n))
		nChildren := s.uvarint()
		if s.err == nil && nChildren > s.left/minEntrySize {
			return nil, corrupt("directory %d: %d children cannot fit in the body", d, nChildren)
		}
		for k := uint64(0); k < nChildren; k++ {
			if n >= nEntries {
				return nil, corrupt("more entries than the header's %d", nEntries)
			}
			shared := s.uvarint()
			suffixLen := s.uvarint()
			if s.err == nil && suffixLen > source.MaxNameLen {
				return nil, corrupt("directory %d entry %d: bad name lengths", d, k)
			}
			suffix := s.bytes(suffixLen) // valid until the next read of s
			if s.err != nil {
				return nil, corrupt("directory %d entry %d: %v", d, k, s.err)
			}
			sibLen := prevLen
			if k == 0 {
				sibLen = 0 // a directory's first name shares nothing
			}
			if shared > uint64(sibLen) || shared+uint64(len(suffix)) > source.MaxNameLen {
				return nil, corrupt("directory %d entry %d: bad name lengths", d, k)
			}
			// Compare the name with the previous entry's before writing it
			// over it: c, their order; common, the bytes they share.
			old := prev[:prevLen]
			common := int(shared)
			for common < prevLen && common-int(shared) < len(suffix) && old[common] == suffix[common-int(shared)] {
				common++
			}
			less := common-int(shared) < len(suffix) && (common == prevLen || old[common] < suffix[common-int(shared)])
			nameLen := int(shared) + copy(prev[shared:], suffix)
			name := prev[:nameLen]
			if !source.ValidName(string(name)) {
				return nil, corrupt("directory %d: invalid name %q", d, name)
			}
			if k > 0 && !less {
				return nil, corrupt("directory %d: names not sorted at %q", d, name)
			}
			plen := pathLen[d] + uint32(nameLen)
			if d != 0 {
				plen++
			}
			if plen > MaxPathLen {
				return nil, corrupt("directory %d: path of %d bytes at %q", d, plen, name)
			}
			// The record's name: front-coded against the previous entry,
			// whole for the first entry of a block.
			memShared := common
			if n%blockSize == 0 {
				m.blockOff = append(m.blockOff, uint64(len(m.rec)))
				memShared = 0
			}
			if !room(2*binary.MaxVarintLen64 + nameLen - memShared) {
				return nil, tooLarge()
			}
			m.rec = binary.AppendUvarint(m.rec, uint64(memShared))
			m.rec = binary.AppendUvarint(m.rec, uint64(nameLen-memShared))
			m.rec = append(m.rec, name[memShared:]...)
			prevLen = nameLen
			m.nameBytes += int64(nameLen)
			tagAndVer := s.peek(1 + maxVersionEnc)
			if s.err != nil || len(tagAndVer) == 0 {
				return nil, corrupt("directory %d entry %q: truncated", d, name)
			}
			tag := tagAndVer[0]
			if tag == tagDir {
				s.skip(1)
				if uint64(len(m.dirEntry)) >= h.dirs {
					return nil, corrupt("more directories than the header's %d", h.dirs)
				}
				if !room(1) {
					return nil, tooLarge()
				}
				m.rec = append(m.rec, tagDir)
				m.dirBits[n>>6] |= 1 << (n & 63)
				m.dirEntry = append(m.dirEntry, uint32(n))
				pathLen = append(pathLen, plen)
				if checksums {
					m.sums = append(m.sums, make([]byte, SumSize)...)
				}
			} else {
				vlen, err := readVersion(tag, tagAndVer[1:])
				if err != nil {
					return nil, corrupt("file %q: %v", name, err)
				}
				if !room(1 + vlen + binary.MaxVarintLen64) {
					return nil, tooLarge()
				}
				switch {
				case tag == tagPosixCI && h.format < 2:
					return nil, corrupt("file %q: tag %d in a format version %d manifest", name, tag, h.format)
				case tag == tagPosixCI:
					m.posixCI++
				case tag == tagPosix:
					m.legacyPosix++
				}
				m.rec = append(m.rec, tagAndVer[:1+vlen]...)
				s.skip(1 + vlen)
				size := s.uvarint()
				if s.err != nil || size > math.MaxInt64 {
					return nil, corrupt("file %q: bad size", name)
				}
				if total += size; total > math.MaxInt64 {
					return nil, corrupt("total size overflows")
				}
				m.rec = binary.AppendUvarint(m.rec, size)
				if checksums {
					m.sums = append(m.sums, s.bytes(SumSize)...)
					if s.err != nil {
						return nil, corrupt("file %q: truncated checksum", name)
					}
				}
				m.files++
			}
			n++
		}
		if s.err != nil {
			return nil, corrupt("directory %d: %v", d, s.err)
		}
	}
	m.childStart = append(m.childStart, uint32(n))
	switch {
	case s.left != 0:
		return nil, corrupt("%d trailing bytes after the last directory", s.left)
	case uint64(m.files) != h.files || uint64(len(m.dirEntry)) != h.dirs:
		return nil, corrupt("%d files and %d directories, header says %d and %d", m.files, len(m.dirEntry), h.files, h.dirs)
	case total != h.bytes:
		return nil, corrupt("files total %d bytes, header says %d", total, h.bytes)
	}
	if err := s.end(); err != nil {
		return nil, corrupt("body: %v", err)
	}
	m.bytes = int64(total)
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
