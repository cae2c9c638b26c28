package manifest

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/renameio/v2"
	"github.com/klauspost/compress/zstd"
	"github.com/zeebo/xxh3"
)

// bodyWriter appends directory records to a body (see the package doc).
type bodyWriter struct {
	b    []byte
	prev []byte
}

func (w *bodyWriter) dir(children int) {
	w.b = binary.AppendUvarint(w.b, uint64(children))
	w.prev = w.prev[:0]
}

// child appends one entry; ver is the encoded tag and payload of a file, nil
// for a directory.
func (w *bodyWriter) child(name []byte, ver []byte, size int64, sum []byte) {
	shared := 0
	for shared < len(name) && shared < len(w.prev) && name[shared] == w.prev[shared] {
		shared++
	}
	w.b = binary.AppendUvarint(w.b, uint64(shared))
	w.b = binary.AppendUvarint(w.b, uint64(len(name)-shared))
	w.b = append(w.b, name[shared:]...)
	w.prev = append(w.prev[:0], name...)
	if ver == nil {
		w.b = append(w.b, tagDir)
		return
	}
	w.b = append(w.b, ver...)
	w.b = binary.AppendUvarint(w.b, uint64(size))
	w.b = append(w.b, sum...)
}

// body returns the uncompressed body of m.
func (m *Manifest) body() []byte {
	w := bodyWriter{b: make([]byte, 0, len(m.rec)+len(m.sums)+len(m.dirEntry)*4)}
	var dec decoder
	for d := range m.dirEntry {
		start, end := int(m.childStart[d]), int(m.childStart[d+1])
		w.dir(end - start)
		if start == end {
			continue
		}
		m.seek(&dec, start)
		for i := start; i < end; i++ {
			ver, size := dec.next()
			w.child(dec.name[:dec.nlen], ver, size, m.Checksum(i))
		}
	}
	return w.b
}

// Encode serialises m in the current format version.
func (m *Manifest) Encode() ([]byte, error) {
	format := uint16(1) // readable by builds from before version 2
	if m.posixCI > 0 {
		format = FormatVersion
	}
	return encode(format, m.info, uint64(m.files), uint64(len(m.dirEntry)), uint64(m.bytes), m.body())
}

func encode(format uint16, info Info, files, dirs, bytes uint64, body []byte) ([]byte, error) {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstd.SpeedBetterCompression))
	if err != nil {
		return nil, fmt.Errorf("manifest: zstd: %w", err)
	}
	comp := enc.EncodeAll(body, nil)
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("manifest: zstd: %w", err)
	}
	return envelope(format, info, files, dirs, bytes, uint64(len(body)), comp), nil
}

// envelope frames a compressed body of bodyLen bytes: header, body,
// checksum (see the package doc).
func envelope(format uint16, info Info, files, dirs, bytes, bodyLen uint64, comp []byte) []byte {
	out := make([]byte, 0, len(comp)+len(info.Source)+64)
	out = append(out, Magic...)
	out = binary.LittleEndian.AppendUint16(out, format)
	var flags uint16
	if info.Checksums {
		flags |= flagChecksums
	}
	out = binary.LittleEndian.AppendUint16(out, flags)
	out = binary.AppendUvarint(out, files)
	out = binary.AppendUvarint(out, dirs)
	out = binary.AppendUvarint(out, bytes)
	out = binary.AppendVarint(out, info.Created.UnixNano())
	out = binary.AppendUvarint(out, uint64(len(info.Source)))
	out = append(out, info.Source...)
	out = binary.AppendUvarint(out, bodyLen)
	out = binary.AppendUvarint(out, uint64(len(comp)))
	out = append(out, comp...)
	sum := xxh3.Hash128(out).Bytes()
	return append(out, sum[:]...)
}

// WriteFile writes m to path atomically (a temporary file in the same
// directory, synced, then renamed) and returns the bytes written.
func (m *Manifest) WriteFile(path string) (int64, error) {
	data, err := m.Encode()
	if err != nil {
		return 0, err
	}
	if err := writeFileAtomic(path, data); err != nil {
		return 0, err
	}
	return int64(len(data)), nil
}

// writeFileAtomic writes data to path (mode 0644, whatever the umask or the
// mode of the file it replaces) through a synced temporary file in the same
// directory, renamed over path (renameio).
func writeFileAtomic(path string, data []byte) error {
	err := func() error {
		dir := filepath.Dir(path)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		pf, err := renameio.NewPendingFile(path, renameio.WithTempDir(dir), renameio.WithStaticPermissions(0o644))
		if err != nil {
			return err
		}
		defer func() { _ = pf.Cleanup() }()
		if _, err := pf.Write(data); err != nil {
			return err
		}
		return pf.CloseAtomicallyReplace() // fsync, close, rename
	}()
	if err != nil {
		return fmt.Errorf("manifest: write %s: %w", path, err)
	}
	return nil
}
