package manifest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/zeebo/xxh3"

	"github.com/epochfs/epochfs/pkg/backend"
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
	// maxRatio bounds bodyLen / compLen: more is a decompression bomb.
	maxRatio = 256
	// DefaultMaxFileSize bounds the manifest files ReadFile and Fetch
	// accept when the caller passes 0.
	DefaultMaxFileSize = 2 << 30
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

// Load parses a manifest. It returns a complete Manifest or an error
// wrapping ErrCorrupt (or ErrUnsupported); it never panics on any input and
// allocates at most a bounded multiple of len(data).
func Load(data []byte) (*Manifest, error) {
	h, body, err := parseEnvelope(data)
	if err != nil {
		return nil, err
	}
	raw, err := decompress(body, h.bodyLen)
	if err != nil {
		return nil, err
	}
	return parseBody(raw, h)
}

func parseEnvelope(data []byte) (header, []byte, error) {
	var h header
	if len(data) < fixedHeader+trailerLen {
		if len(data) >= len(Magic) && string(data[:len(Magic)]) != Magic {
			return h, nil, corrupt("not a manifest (bad magic)")
		}
		return h, nil, corrupt("truncated: %d bytes", len(data))
	}
	if string(data[:len(Magic)]) != Magic {
		return h, nil, corrupt("not a manifest (bad magic)")
	}
	h.format = binary.LittleEndian.Uint16(data[8:])
	if h.format < 1 || h.format > FormatVersion {
		return h, nil, fmt.Errorf("%w %d (this build reads versions 1 to %d)", ErrUnsupported, h.format, FormatVersion)
	}
	h.flags = binary.LittleEndian.Uint16(data[10:])
	if h.flags&^flagChecksums != 0 {
		return h, nil, corrupt("unknown flags %#x", h.flags)
	}
	payload, trailer := data[:len(data)-trailerLen], data[len(data)-trailerLen:]
	sum := xxh3.Hash128(payload).Bytes()
	if string(sum[:]) != string(trailer) {
		return h, nil, corrupt("checksum mismatch (truncated or corrupted file)")
	}
	r := reader{b: payload, pos: fixedHeader}
	h.files = r.uvarint()
	h.dirs = r.uvarint()
	h.bytes = r.uvarint()
	h.created = r.varint()
	srcLen := r.uvarint()
	if r.err == nil && srcLen > MaxSourceLen {
		return h, nil, corrupt("source ID of %d bytes", srcLen)
	}
	h.source = string(r.bytes(srcLen))
	h.bodyLen = r.uvarint()
	h.compLen = r.uvarint()
	if r.err != nil {
		return h, nil, corrupt("header: %v", r.err)
	}
	if !backendIDValid(h.source) {
		return h, nil, corrupt("source ID is not printable")
	}
	if rest := uint64(len(payload) - r.pos); h.compLen != rest {
		return h, nil, corrupt("body is %d bytes, header says %d", rest, h.compLen)
	}
	if h.bodyLen > h.compLen*maxRatio+1024 {
		return h, nil, corrupt("body of %d bytes from %d compressed bytes", h.bodyLen, h.compLen)
	}
	if err := h.validate(); err != nil {
		return h, nil, err
	}
	return h, payload[r.pos:], nil
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

func backendIDValid(s string) bool { return ValidVersion(s) }

func decompress(comp []byte, n uint64) ([]byte, error) {
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxMemory(max(n, 1<<20)), zstd.IgnoreChecksum(false))
	if err != nil {
		return nil, fmt.Errorf("manifest: zstd: %w", err)
	}
	defer dec.Close()
	out, err := dec.DecodeAll(comp, make([]byte, 0, n))
	if err != nil {
		return nil, corrupt("body: %v", err)
	}
	if uint64(len(out)) != n {
		return nil, corrupt("body decompresses to %d bytes, header says %d", len(out), n)
	}
	return out, nil
}

// reader reads varints from a byte slice, remembering the first error.
type reader struct {
	b   []byte
	pos int
	err error
}

var errTruncated = errors.New("truncated")

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, k := binary.Uvarint(r.b[r.pos:])
	if k <= 0 {
		r.err = errTruncated
		if k < 0 {
			r.err = errors.New("varint overflows")
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

// parseBody decodes the decompressed body into a Manifest, validating every
// entry; see the package doc for the layout of both.
func parseBody(body []byte, h header) (*Manifest, error) {
	checksums := h.flags&flagChecksums != 0
	nEntries := int(h.files + h.dirs) // bounded by parseEnvelope
	sumBytes := 0
	if checksums {
		sumBytes = SumSize * int(h.files)
	}
	m := &Manifest{
		info: Info{Source: h.source, Created: time.Unix(0, h.created), Checksums: checksums},
		// The records take about the body's bytes (less the checksums),
		// plus the whole names of the first entries of the blocks: room
		// for 1 byte per entry of those (more grows the slice).
		rec:        make([]byte, 0, min(len(body)-min(sumBytes, len(body))+nEntries+64, 8*len(body)+64)),
		blockOff:   make([]uint64, 0, (nEntries+blockSize-1)/blockSize),
		dirBits:    make([]uint64, (nEntries+63)/64),
		childStart: make([]uint32, 0, h.dirs+1),
		dirEntry:   make([]uint32, 1, h.dirs),
	}
	if checksums {
		m.sums = make([]byte, SumSize, SumSize*nEntries)
	}
	// The root: entry 0, the first of block 0, a directory with no name.
	m.blockOff = append(m.blockOff, 0)
	m.rec = append(m.rec, 0, 0, tagDir)
	m.dirBits[0] |= 1
	n := 1 // entries so far
	var prev [backend.MaxNameLen]byte
	prevLen := 0 // the previous entry's name (the previous sibling's when k > 0)
	pathLen := make([]uint32, 1, h.dirs)
	var total uint64
	r := reader{b: body}
	for d := 0; d < len(m.dirEntry); d++ {
		m.childStart = append(m.childStart, uint32(n))
		nChildren := r.uvarint()
		if r.err == nil && nChildren > uint64(len(body)-r.pos)/minEntrySize {
			return nil, corrupt("directory %d: %d children cannot fit in the body", d, nChildren)
		}
		for k := uint64(0); k < nChildren; k++ {
			if n >= nEntries {
				return nil, corrupt("more entries than the header's %d", nEntries)
			}
			shared := r.uvarint()
			suffix := r.bytes(r.uvarint())
			if r.err != nil {
				return nil, corrupt("directory %d entry %d: %v", d, k, r.err)
			}
			sibLen := prevLen
			if k == 0 {
				sibLen = 0 // a directory's first name shares nothing
			}
			if shared > uint64(sibLen) || shared+uint64(len(suffix)) > backend.MaxNameLen {
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
			if !backend.ValidName(string(name)) {
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
			m.rec = binary.AppendUvarint(m.rec, uint64(memShared))
			m.rec = binary.AppendUvarint(m.rec, uint64(nameLen-memShared))
			m.rec = append(m.rec, name[memShared:]...)
			prevLen = nameLen
			m.nameBytes += int64(nameLen)
			if r.pos >= len(body) {
				return nil, corrupt("directory %d entry %q: truncated", d, name)
			}
			tag := body[r.pos]
			if tag == tagDir {
				r.pos++
				if uint64(len(m.dirEntry)) >= h.dirs {
					return nil, corrupt("more directories than the header's %d", h.dirs)
				}
				m.rec = append(m.rec, tagDir)
				m.dirBits[n>>6] |= 1 << (n & 63)
				m.dirEntry = append(m.dirEntry, uint32(n))
				pathLen = append(pathLen, plen)
				if checksums {
					m.sums = append(m.sums, make([]byte, SumSize)...)
				}
			} else {
				vlen, err := readVersion(tag, body[r.pos+1:])
				if err != nil {
					return nil, corrupt("file %q: %v", name, err)
				}
				switch {
				case tag == tagPosixCI && h.format < 2:
					return nil, corrupt("file %q: tag %d in a format version %d manifest", name, tag, h.format)
				case tag == tagPosixCI:
					m.posixCI++
				case tag == tagPosix:
					m.legacyPosix++
				}
				m.rec = append(m.rec, body[r.pos:r.pos+1+vlen]...)
				r.pos += 1 + vlen
				size := r.uvarint()
				if r.err != nil || size > math.MaxInt64 {
					return nil, corrupt("file %q: bad size", name)
				}
				if total += size; total > math.MaxInt64 {
					return nil, corrupt("total size overflows")
				}
				m.rec = binary.AppendUvarint(m.rec, size)
				if checksums {
					m.sums = append(m.sums, r.bytes(SumSize)...)
					if r.err != nil {
						return nil, corrupt("file %q: truncated checksum", name)
					}
				}
				m.files++
			}
			n++
		}
		if r.err != nil {
			return nil, corrupt("directory %d: %v", d, r.err)
		}
	}
	m.childStart = append(m.childStart, uint32(n))
	switch {
	case r.pos != len(body):
		return nil, corrupt("%d trailing bytes after the last directory", len(body)-r.pos)
	case uint64(m.files) != h.files || uint64(len(m.dirEntry)) != h.dirs:
		return nil, corrupt("%d files and %d directories, header says %d and %d", m.files, len(m.dirEntry), h.files, h.dirs)
	case total != h.bytes:
		return nil, corrupt("files total %d bytes, header says %d", total, h.bytes)
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

// ReadFile loads a manifest from a local file of at most maxSize bytes (0:
// DefaultMaxFileSize).
func ReadFile(path string, maxSize int64) (*Manifest, error) {
	if maxSize <= 0 {
		maxSize = DefaultMaxFileSize
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	if fi.Size() > maxSize {
		return nil, fmt.Errorf("%w: %s is %d bytes (limit %d)", ErrTooLarge, path, fi.Size(), maxSize)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxSize+1))
	if err != nil {
		return nil, fmt.Errorf("manifest: read %s: %w", path, err)
	}
	return loadLimited(data, maxSize, path, "file "+path)
}

// loadLimited is the end of ReadFile and Fetch: data, read from path (where
// names it in errors), must be at most maxSize bytes and a valid manifest.
func loadLimited(data []byte, maxSize int64, path, where string) (*Manifest, error) {
	if int64(len(data)) > maxSize {
		return nil, fmt.Errorf("%w: %s is over %d bytes", ErrTooLarge, path, maxSize)
	}
	m, err := Load(data)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, where)
	}
	return m, nil
}

// fetchChunk is the size of one ReadAt of Fetch.
const fetchChunk = 8 << 20

// Fetch loads the manifest stored at path in a backend (e.g. DefaultPath
// next to the dataset), reading it with ReadAt only (no List or Stat), at
// most maxSize bytes (0: DefaultMaxFileSize). A missing manifest returns an
// error wrapping backend.ErrNotExist.
func Fetch(ctx context.Context, b backend.Backend, path string, maxSize int64) (*Manifest, error) {
	if maxSize <= 0 {
		maxSize = DefaultMaxFileSize
	}
	var data []byte
	for {
		if int64(len(data)) > maxSize {
			return nil, fmt.Errorf("%w: %s is over %d bytes", ErrTooLarge, path, maxSize)
		}
		chunk := make([]byte, fetchChunk)
		n, err := b.ReadAt(ctx, path, "", chunk, int64(len(data)))
		data = append(data, chunk[:n]...)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("manifest: fetch %s: %w", path, err)
		}
	}
	return loadLimited(data, maxSize, path, path+" in "+b.ID())
}

// DefaultPath is where a dataset keeps its manifest, relative to the
// dataset root; mounts look for it there when not told otherwise.
const DefaultPath = ".epochfs/manifest"
