package manifest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/epochfs/epochfs/pkg/backend"
)

// readAtFunc reads a manifest file like io.ReaderAt: n < len(p) only with
// an error, io.EOF at the end of the file.
type readAtFunc func(p []byte, off int64) (int, error)

// readFull fills p from off; it returns io.EOF, with the bytes read, when
// the file ends first.
func readFull(readAt readAtFunc, p []byte, off int64) (int, error) {
	n := 0
	for n < len(p) {
		k, err := readAt(p[n:], off+int64(n))
		n += k
		if err != nil {
			return n, err
		}
		if k == 0 {
			return n, io.ErrNoProgress
		}
	}
	return n, nil
}

// fetchChunk is the most one read of readManifest asks for (one ranged
// GET of an object store).
const fetchChunk = 8 << 20

// firstRead is the first read of a manifest file: its header (at most
// maxHeaderLen bytes), and the whole of a small manifest.
const firstRead = 64 << 10

// openHeader reads the start of a manifest file and parses its header,
// refusing what the header announces (ErrTooLarge beyond maxMemory,
// ErrCorrupt) before anything more is read. It returns the header, the
// file's size as the header gives it, and the bytes read (the whole file
// when it is shorter than firstRead).
func openHeader(readAt readAtFunc, maxMemory int64) (h header, size int64, head []byte, err error) {
	head = make([]byte, firstRead)
	n, err := readFull(readAt, head, 0)
	head = head[:n]
	eof := errors.Is(err, io.EOF)
	if err != nil && !eof {
		return h, 0, nil, err
	}
	if n < fixedHeader+trailerLen {
		if n >= len(Magic) && string(head[:len(Magic)]) != Magic {
			return h, 0, nil, corrupt("not a manifest (bad magic)")
		}
		return h, 0, nil, corrupt("truncated: %d bytes", n)
	}
	h, hlen, err := parseHeader(head[:min(n-trailerLen, maxHeaderLen)])
	if err != nil {
		return h, 0, nil, err
	}
	if err := h.checkMemory(memoryLimit(maxMemory)); err != nil {
		return h, 0, nil, err
	}
	size = int64(hlen) + int64(h.compLen) + trailerLen // compLen ≤ compressBound(4 GiB): no overflow
	switch {
	case int64(n) > size:
		return h, 0, nil, corrupt("%d bytes after the %d the header gives the file", int64(n)-size, size)
	case eof && int64(n) < size:
		return h, 0, nil, corrupt("truncated: %d bytes, the header says %d", n, size)
	}
	return h, size, head, nil
}

// checkEnd checks that the file ends at size.
func checkEnd(readAt readAtFunc, size int64) error {
	var b [1]byte
	n, err := readAt(b[:], size)
	switch {
	case n > 0:
		return corrupt("the file goes on after the %d bytes its header gives it", size)
	case errors.Is(err, io.EOF):
		return nil
	case err == nil:
		return io.ErrNoProgress
	}
	return err
}

// readManifest reads a whole manifest file: first its header, whose
// limits are checked (maxMemory, 0: DefaultMaxMemory), then exactly the
// bytes the header gives the file, into one buffer of that size.
func readManifest(readAt readAtFunc, maxMemory int64) ([]byte, error) {
	_, size, head, err := openHeader(readAt, maxMemory)
	if err != nil {
		return nil, err
	}
	if int64(len(head)) == size {
		if len(head) == firstRead {
			if err := checkEnd(readAt, size); err != nil {
				return nil, err
			}
		}
		return head, nil
	}
	data := make([]byte, size)
	copy(data, head)
	for off := int64(len(head)); off < size; {
		end := min(off+fetchChunk, size)
		n, err := readFull(readAt, data[off:end], off)
		if errors.Is(err, io.EOF) {
			return nil, corrupt("truncated: %d bytes, the header says %d", off+int64(n), size)
		}
		if err != nil {
			return nil, err
		}
		off = end
	}
	if err := checkEnd(readAt, size); err != nil {
		return nil, err
	}
	return data, nil
}

// located names where a manifest was read in an error: the format's own
// errors get "(where)", others "manifest: read where: …".
func located(err error, where string) error {
	if errors.Is(err, ErrCorrupt) || errors.Is(err, ErrUnsupported) || errors.Is(err, ErrTooLarge) {
		return fmt.Errorf("%w (%s)", err, where)
	}
	return fmt.Errorf("manifest: read %s: %w", where, err)
}

// ReadFile loads a manifest from a local file, refusing (ErrTooLarge) one
// that would take more than maxMemory bytes in memory (0:
// DefaultMaxMemory) before reading more than its header.
func ReadFile(path string, maxMemory int64) (*Manifest, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	defer f.Close()
	data, err := readManifest(f.ReadAt, maxMemory)
	if err != nil {
		return nil, located(err, "file "+path)
	}
	m, err := LoadLimit(data, maxMemory)
	if err != nil {
		return nil, located(err, "file "+path)
	}
	return m, nil
}

// Fetch loads the manifest stored at path in a backend (e.g. DefaultPath
// next to the dataset), reading it with ReadAt only (no List or Stat),
// within maxMemory as ReadFile. A missing manifest returns an error
// wrapping backend.ErrNotExist.
func Fetch(ctx context.Context, b backend.Backend, path string, maxMemory int64) (*Manifest, error) {
	where := path + " in " + b.ID()
	readAt := func(p []byte, off int64) (int, error) { return b.ReadAt(ctx, path, "", p, off) }
	data, err := readManifest(readAt, maxMemory)
	if err != nil {
		if errors.Is(err, ErrCorrupt) || errors.Is(err, ErrUnsupported) || errors.Is(err, ErrTooLarge) {
			return nil, located(err, where)
		}
		return nil, fmt.Errorf("manifest: fetch %s: %w", path, err)
	}
	m, err := LoadLimit(data, maxMemory)
	if err != nil {
		return nil, located(err, where)
	}
	return m, nil
}

// Summary is what a manifest's header says: ReadInfo returns it without
// loading (or decompressing) the manifest.
type Summary struct {
	Info
	Files, Dirs int64 // directories include the root
	TotalBytes  int64 // the sum of the file sizes
	FileSize    int64 // the manifest file's size
	// MemoryBytes is the estimate of what the loaded manifest takes, the
	// figure LoadLimit compares with its limit.
	MemoryBytes int64
}

// infoChunk is the size of one read of ReadInfo.
const infoChunk = 1 << 20

// ReadInfo finds a manifest as Discover does (loc) and returns its
// header's Summary, or nil when there is none (LocNone, or LocAuto without
// one), with where it looked. It reads the file in chunks of 1 MiB, hashing
// them, and trusts the header only once the checksum of the whole file
// matches; it never decompresses the body and never holds the file, so a
// small process (the CSI node plugin) can size a dataset of any size. A
// header announcing more than maxMemory bytes in memory (0:
// DefaultMaxMemory), which a mount with that limit would refuse, is
// ErrTooLarge, refused before the rest of the file is read.
func ReadInfo(ctx context.Context, b backend.Backend, loc string, opts backend.Options, maxMemory int64) (s *Summary, where string, err error) {
	switch {
	case loc == LocNone:
		return nil, "", nil
	case loc == LocAuto:
		where = b.ID() + "/" + DefaultPath
		s, err = summarize(func(p []byte, off int64) (int, error) { return b.ReadAt(ctx, DefaultPath, "", p, off) }, maxMemory)
		if errors.Is(err, backend.ErrNotExist) {
			return nil, where, nil
		}
	case isURL(loc):
		where = loc
		var d backend.Backend
		var name string
		if d, name, err = openURLDir(ctx, loc, opts); err == nil {
			s, err = summarize(func(p []byte, off int64) (int, error) { return d.ReadAt(ctx, name, "", p, off) }, maxMemory)
			d.Close()
		}
	default:
		where = loc
		var f *os.File
		if f, err = os.Open(loc); err == nil {
			s, err = summarize(f.ReadAt, maxMemory)
			f.Close()
		}
	}
	if err != nil {
		return nil, where, fmt.Errorf("manifest %s: %w", where, err)
	}
	return s, where, nil
}

// summarize reads a manifest file through readAt, checking its checksum
// as a stream, and returns its header's Summary.
func summarize(readAt readAtFunc, maxMemory int64) (*Summary, error) {
	h, size, head, err := openHeader(readAt, maxMemory)
	if err != nil {
		return nil, err
	}
	hasher := xxh3.New()
	payload := size - trailerLen
	var trailer [trailerLen]byte
	// take hashes the bytes of chunk (at offset off) before the trailer
	// and keeps those of the trailer.
	take := func(chunk []byte, off int64) {
		if k := min(int64(len(chunk)), max(payload-off, 0)); k > 0 {
			_, _ = hasher.Write(chunk[:k])
		}
		for i := max(payload-off, 0); i < int64(len(chunk)); i++ {
			trailer[off+i-payload] = chunk[i]
		}
	}
	take(head, 0)
	if off := int64(len(head)); off < size {
		buf := make([]byte, min(infoChunk, size-off))
		for off < size {
			n, err := readFull(readAt, buf[:min(int64(len(buf)), size-off)], off)
			if errors.Is(err, io.EOF) {
				return nil, corrupt("truncated: %d bytes, the header says %d", off+int64(n), size)
			}
			if err != nil {
				return nil, err
			}
			take(buf[:n], off)
			off += int64(n)
		}
	}
	if len(head) == firstRead || int64(len(head)) < size {
		if err := checkEnd(readAt, size); err != nil {
			return nil, err
		}
	}
	if sum := hasher.Sum128().Bytes(); string(sum[:]) != string(trailer[:]) {
		return nil, corrupt("checksum mismatch (truncated or corrupted file)")
	}
	return &Summary{
		Info:        Info{Source: h.source, Created: time.Unix(0, h.created), Checksums: h.flags&flagChecksums != 0},
		Files:       int64(h.files),
		Dirs:        int64(h.dirs),
		TotalBytes:  int64(h.bytes),
		FileSize:    size,
		MemoryBytes: int64(h.memoryBytes()),
	}, nil
}
