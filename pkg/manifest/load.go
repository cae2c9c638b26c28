package manifest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/zeebo/xxh3"

	"github.com/epochfs/epochfs/pkg/source"
	"github.com/epochfs/epochfs/pkg/units"
)

// Magic starts every manifest file.
const Magic = "EPOCHFSM"

// FormatVersion is the newest format version this build writes and reads.
// Version 2 adds posix versions with ctime and inode (entry tag 5); a
// manifest without them is written as version 1, which older builds read.
// Load reads both.
const FormatVersion = 2

const (
	flagChecksums = 1 << 0
	fixedHeader   = len(Magic) + 2 + 2
	trailerLen    = 16
	// maxHeaderLen bounds the header: the fixed part, seven varints and
	// the source ID.
	maxHeaderLen = fixedHeader + 7*binary.MaxVarintLen64 + MaxSourceLen
	// maxRatio bounds bodyLen / compLen: more is a decompression bomb.
	maxRatio = 256
	// plausibleRatio: see plausibleBytes.
	plausibleRatio = 16
	// maxWindow is the largest zstd window a body may need: the writer's
	// (klauspost/compress at SpeedBetterCompression: 8 MiB, and a frame of
	// at most that size is one segment of its own size).
	maxWindow = 8 << 20
	// DefaultMaxMemory bounds the memory a loaded manifest may take, as
	// estimated from its header (about 30–40 bytes per file of an
	// ImageNet-like dataset, 32 more with checksums: some 7M files) when
	// the caller passes 0; `cachefs mount --manifest-max-memory` sets it.
	DefaultMaxMemory = 256 << 20
)

type header struct {
	format  uint16 // 1 or 2
	flags   uint16
	files   uint64
	dirs    uint64
	bytes   uint64
	created int64
	source  string
	bodyLen uint64
	compLen uint64
}

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}

// Load parses a manifest held in memory, within DefaultMaxMemory (see
// LoadLimit).
func Load(data []byte) (*Manifest, error) { return LoadLimit(data, 0) }

// LoadLimit parses a manifest. It returns a complete Manifest or an error
// wrapping ErrCorrupt (or ErrUnsupported, or ErrTooLarge when the header
// announces a manifest that would hold more than maxMemory bytes in memory,
// 0: DefaultMaxMemory); it never panics on any input. Every limit is checked
// from the header before anything is decompressed, the body must be exactly
// one zstd frame declaring the header's body size, and it is decompressed
// as a stream straight into the in-memory records: what LoadLimit
// allocates besides data is bounded by maxMemory, and by a small multiple
// of len(data) until the body proves larger.
func LoadLimit(data []byte, maxMemory int64) (*Manifest, error) {
	maxMemory = memoryLimit(maxMemory)
	h, body, err := parseEnvelope(data)
	if err != nil {
		return nil, err
	}
	if err := h.checkMemory(maxMemory); err != nil {
		return nil, err
	}
	if err := checkFrame(body, h.bodyLen); err != nil {
		return nil, err
	}
	dec, err := zstd.NewReader(bytes.NewReader(body), zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxWindow(maxWindow), zstd.WithDecoderMaxMemory(max(h.bodyLen, 1<<20)), zstd.IgnoreChecksum(false))
	if err != nil {
		return nil, fmt.Errorf("manifest: zstd: %w", err)
	}
	defer dec.Close()
	return parseStream(dec, h, loadLimits{maxMemory: maxMemory, plausible: plausibleBytes(h.compLen)})
}

// memoryLimit is the limit a caller's maxMemory stands for.
func memoryLimit(maxMemory int64) int64 {
	if maxMemory <= 0 {
		return DefaultMaxMemory
	}
	return maxMemory
}

// plausibleBytes bounds the memory a load reserves up front for a body of
// compLen compressed bytes (manifests written by `cachefs index` decompress
// to 2–10 times their size): more is allocated only as the body proves to
// need it, so that a header announcing a large body over a small
// compressed one costs little before it is refused.
func plausibleBytes(compLen uint64) uint64 { return plausibleRatio*compLen + 1<<20 }

// compressBound is the most compressed bytes a body of n bytes takes in a
// frame the writer makes (zstd's own bound is n + n/256 + 64): a larger
// compressed body is padding.
func compressBound(n uint64) uint64 { return n + n/128 + 1024 }

func parseEnvelope(data []byte) (header, []byte, error) {
	var h header
	if len(data) < fixedHeader+trailerLen {
		if len(data) >= len(Magic) && string(data[:len(Magic)]) != Magic {
			return h, nil, corrupt("not a manifest (bad magic)")
		}
		return h, nil, corrupt("truncated: %d bytes", len(data))
	}
	if err := checkPrefix(data); err != nil {
		return h, nil, err
	}
	payload, trailer := data[:len(data)-trailerLen], data[len(data)-trailerLen:]
	sum := xxh3.Hash128(payload).Bytes()
	if string(sum[:]) != string(trailer) {
		return h, nil, corrupt("checksum mismatch (truncated or corrupted file)")
	}
	h, hlen, err := parseHeader(payload)
	if err != nil {
		return h, nil, err
	}
	if rest := uint64(len(payload) - hlen); h.compLen != rest {
		return h, nil, corrupt("body is %d bytes, header says %d", rest, h.compLen)
	}
	return h, payload[hlen:], nil
}

// checkPrefix checks the magic, format version and flags at the start of a
// manifest file (at least fixedHeader bytes).
func checkPrefix(data []byte) error {
	if string(data[:len(Magic)]) != Magic {
		return corrupt("not a manifest (bad magic)")
	}
	format := binary.LittleEndian.Uint16(data[8:])
	if format < 1 || format > FormatVersion {
		return fmt.Errorf("%w %d (this build reads versions 1 to %d)", ErrUnsupported, format, FormatVersion)
	}
	if flags := binary.LittleEndian.Uint16(data[10:]); flags&^flagChecksums != 0 {
		return corrupt("unknown flags %#x", flags)
	}
	return nil
}

// parseHeader parses the header at the start of b (a whole manifest file
// without its checksum, or at least its first maxHeaderLen bytes) and
// returns it with its length. It checks every field's bounds, but neither
// the checksum nor the compressed length against the file's.
func parseHeader(b []byte) (header, int, error) {
	var h header
	if len(b) < fixedHeader {
		return h, 0, corrupt("truncated: %d bytes", len(b))
	}
	if err := checkPrefix(b); err != nil {
		return h, 0, err
	}
	h.format = binary.LittleEndian.Uint16(b[8:])
	h.flags = binary.LittleEndian.Uint16(b[10:])
	r := reader{b: b, pos: fixedHeader}
	h.files = r.uvarint()
	h.dirs = r.uvarint()
	h.bytes = r.uvarint()
	h.created = r.varint()
	srcLen := r.uvarint()
	if r.err == nil && srcLen > MaxSourceLen {
		return h, 0, corrupt("source ID of %d bytes", srcLen)
	}
	h.source = string(r.bytes(srcLen))
	h.bodyLen = r.uvarint()
	h.compLen = r.uvarint()
	if r.err != nil {
		return h, 0, corrupt("header: %v", r.err)
	}
	if !backendIDValid(h.source) {
		return h, 0, corrupt("source ID is not printable")
	}
	if h.bodyLen > h.compLen*maxRatio+1024 {
		return h, 0, corrupt("body of %d bytes from %d compressed bytes", h.bodyLen, h.compLen)
	}
	if h.compLen > compressBound(h.bodyLen) {
		return h, 0, corrupt("%d compressed bytes for a body of %d bytes", h.compLen, h.bodyLen)
	}
	if err := h.validate(); err != nil {
		return h, 0, err
	}
	return h, r.pos, nil
}

// validate checks the header fields that bound what parseBody allocates.
func (h header) validate() error {
	switch {
	case h.dirs == 0:
		return corrupt("no root directory")
	case h.files > MaxEntries || h.dirs > MaxEntries || h.files+h.dirs > MaxEntries:
		return corrupt("%d files and %d directories exceed the limit", h.files, h.dirs)
	case h.bytes > math.MaxInt64:
		return corrupt("total size overflows")
	case h.bodyLen > maxBlob:
		return corrupt("body of %d bytes", h.bodyLen)
	case (h.files+h.dirs-1)*minEntrySize > h.bodyLen:
		return corrupt("%d entries cannot fit in a %d-byte body", h.files+h.dirs-1, h.bodyLen)
	case h.flags&flagChecksums != 0 && h.files*SumSize > h.bodyLen:
		return corrupt("%d checksums cannot fit in a %d-byte body", h.files, h.bodyLen)
	}
	return nil
}

// recordBytes is what the records of a manifest with header h take at
// first: the body's bytes less its checksums, plus one byte per entry (the
// first entry of each block holds its whole name) — about what they take
// in the end.
func (h header) recordBytes() uint64 {
	body := h.bodyLen
	if h.flags&flagChecksums != 0 {
		body -= min(body, h.files*SumSize)
	}
	return body + h.files + h.dirs + 64
}

// memoryBytes estimates, from the header alone, what the Manifest holds
// (Manifest.MemoryBytes) and what loading it holds at its peak besides the
// file: the records, the block and directory indexes, the checksums (32
// bytes per entry) and the path lengths kept while parsing. validate bounds
// every field, so nothing overflows.
func (h header) memoryBytes() uint64 {
	n := h.files + h.dirs
	est := h.recordBytes() + 8*((n+blockSize-1)/blockSize) + 8*((n+63)/64) + 12*h.dirs + 4
	if h.flags&flagChecksums != 0 {
		est += SumSize * n
	}
	return est
}

// checkMemory refuses (ErrTooLarge) a manifest whose header announces more
// than maxMemory bytes in memory.
func (h header) checkMemory(maxMemory int64) error {
	if est := h.memoryBytes(); est > uint64(maxMemory) {
		return fmt.Errorf("%w: %d files and %d directories (a %d-byte body) would take about %s in memory, over the limit of %s",
			ErrTooLarge, h.files, h.dirs, h.bodyLen, units.FormatSize(int64(est)), units.FormatSize(maxMemory))
	}
	return nil
}

func backendIDValid(s string) bool { return ValidVersion(s) }

// reader reads varints from a byte slice, remembering the first error.
type reader struct {
	b   []byte
	pos int
	err error
}

var (
	errTruncated = errors.New("truncated")
	errOverflow  = errors.New("varint overflows")
)

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, k := binary.Uvarint(r.b[r.pos:])
	if k <= 0 {
		r.err = errTruncated
		if k < 0 {
			r.err = errOverflow
		}
		return 0
	}
	r.pos += k
	return v
}

func (r *reader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, k := binary.Varint(r.b[r.pos:])
	if k <= 0 {
		r.err = errTruncated
		return 0
	}
	r.pos += k
	return v
}

func (r *reader) bytes(n uint64) []byte {
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)-r.pos) {
		r.err = errTruncated
		return nil
	}
	b := r.b[r.pos : r.pos+int(n)]
	r.pos += int(n)
	return b
}

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

// DefaultPath is where a dataset keeps its manifest, relative to the
// dataset root; mounts look for it there when not told otherwise.
const DefaultPath = ".epochfs/manifest"
