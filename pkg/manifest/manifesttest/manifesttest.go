// Package manifesttest builds manifest files for tests, hostile ones
// included: a large valid manifest of long versions and decompression
// bombs, written byte by byte after the format of package manifest's doc
// (it does not import that package, whose own tests use it). It streams
// what it compresses, so a 200 MiB body costs the test a few MiB.
package manifesttest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
	"github.com/zeebo/xxh3"
)

// Header is the part of a manifest header these builders vary.
type Header struct {
	Format             uint16 // 0: 1
	Files, Dirs, Bytes uint64
	BodyLen            uint64 // the decompressed body's length it announces
}

// Envelope frames a compressed body (no checksums, source "test"): magic,
// header, body, XXH3-128 checksum.
func Envelope(h Header, comp []byte) []byte {
	out := []byte("EPOCHFSM")
	out = binary.LittleEndian.AppendUint16(out, max(h.Format, 1))
	out = binary.LittleEndian.AppendUint16(out, 0)
	out = binary.AppendUvarint(out, h.Files)
	out = binary.AppendUvarint(out, h.Dirs)
	out = binary.AppendUvarint(out, h.Bytes)
	out = binary.AppendVarint(out, 0)
	out = binary.AppendUvarint(out, 4)
	out = append(out, "test"...)
	out = binary.AppendUvarint(out, h.BodyLen)
	out = binary.AppendUvarint(out, uint64(len(comp)))
	out = append(out, comp...)
	sum := xxh3.Hash128(out).Bytes()
	return append(out, sum[:]...)
}

// Frame compresses body into one zstd frame, as `cachefs index` does.
func Frame(body []byte) []byte {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
	if err != nil {
		panic(err)
	}
	defer enc.Close()
	return enc.EncodeAll(body, nil)
}

// StreamFrame compresses the size bytes that gen writes into one zstd
// frame declaring that size, without holding them.
func StreamFrame(size uint64, gen func(w io.Writer) error) ([]byte, error) {
	var buf bytes.Buffer
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		return nil, err
	}
	enc.ResetContentSize(&buf, int64(size))
	if err := gen(enc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// GarbageFrame is a real zstd frame declaring mib MiB whose content is one
// pseudo-random MiB (from seed) over and over: about 1 MiB compressed, no
// manifest body when decompressed.
func GarbageFrame(mib int, seed uint64) ([]byte, error) {
	return StreamFrame(uint64(mib)<<20, func(w io.Writer) error {
		block := make([]byte, 1<<20)
		x := seed
		for i := range block {
			x = x*6364136223846793005 + 1442695040888963407
			block[i] = byte(x >> 56)
		}
		for range mib {
			if _, err := w.Write(block); err != nil {
				return err
			}
		}
		return nil
	})
}

// Skippable is a zstd skippable frame of n bytes of payload: decoders pass
// over it, and it pads a compressed body to any size.
func Skippable(n int) []byte {
	b := []byte{0x50, 0x2a, 0x4d, 0x18}
	b = binary.LittleEndian.AppendUint32(b, uint32(n))
	return append(b, make([]byte, n)...)
}

// EmptyBody is the body of a manifest with no file: the root, no children.
var EmptyBody = []byte{0}

// SkippableBomb is a decompression bomb: a header announcing a body of
// declared bytes over a real frame of an empty body padded with a
// skippable frame to declared/256 compressed bytes, so that the ratio
// check of the format passes.
func SkippableBomb(declared uint64) []byte {
	comp := Frame(EmptyBody)
	comp = append(comp, Skippable(int(declared/256)+1)...)
	return Envelope(Header{Dirs: 1, BodyLen: declared}, comp)
}

// LongVersionRecord is the body bytes of each file of LongVersions.
const LongVersionRecord = 1 + 1 + 7 + 1 + 2 + 1024 + 1

// LongVersions is a valid manifest of n files (at most 1,000,000) named
// f000000… in the root, of 1 byte each, each with its own raw version of
// 1024 bytes: a few MiB on disk (n = 200,000: 2.3 MB), over 1 KiB per
// file once loaded.
func LongVersions(n int) ([]byte, error) {
	bodyLen := uint64(binary.PutUvarint(make([]byte, binary.MaxVarintLen64), uint64(n))) + uint64(n)*LongVersionRecord
	tail := bytes.Repeat([]byte{'v'}, 1024-16)
	comp, err := StreamFrame(bodyLen, func(w io.Writer) error {
		if _, err := w.Write(binary.AppendUvarint(nil, uint64(n))); err != nil {
			return err
		}
		rec := make([]byte, 0, LongVersionRecord)
		for i := range n {
			rec = append(rec[:0], 0, 7)
			rec = fmt.Appendf(rec, "f%06d", i)
			rec = append(rec, 1, 0x80, 0x08) // tag raw, uvarint 1024
			rec = fmt.Appendf(rec, "%016x", uint64(i)*0x9e3779b97f4a7c15)
			rec = append(rec, tail...)
			rec = append(rec, 1) // size 1
			if _, err := w.Write(rec); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return Envelope(Header{Files: uint64(n), Dirs: 1, Bytes: uint64(n), BodyLen: bodyLen}, comp), nil
}
