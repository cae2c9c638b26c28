package manifest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/klauspost/compress/zstd"
	"github.com/zeebo/xxh3"

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

// DefaultPath is where a dataset keeps its manifest, relative to the
// dataset root; mounts look for it there when not told otherwise.
const DefaultPath = ".epochfs/manifest"
