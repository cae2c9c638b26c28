package manifest

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
)

// maxVersionEnc is the most bytes a file's version payload takes in the
// body (after its tag): a raw version's uvarint length (padded to 10 bytes
// at worst) and MaxVersionLen bytes; the other encodings take fewer.
const maxVersionEnc = binary.MaxVarintLen64 + MaxVersionLen

// bodyStream reads the decompressed body as parseStream consumes it,
// through a buffer of a fixed size: no copy of the whole body is ever
// held. It remembers the first error; left counts the body's bytes the
// header announced and parseStream has not consumed.
type bodyStream struct {
	r    *bufio.Reader
	left uint64
	err  error
}

// streamBuffer holds the largest field peeked at once (a name of 255 bytes,
// a version of maxVersionEnc) many times over.
const streamBuffer = 64 << 10

func newBodyStream(src io.Reader, n uint64) *bodyStream {
	return &bodyStream{r: bufio.NewReaderSize(src, streamBuffer), left: n}
}

func (s *bodyStream) fail(err error) {
	if s.err == nil {
		s.err = err
	}
}

// peek returns the next min(n, left) bytes without consuming them, valid
// until the next read; n is at most streamBuffer.
func (s *bodyStream) peek(n int) []byte {
	if s.err != nil {
		return nil
	}
	n = int(min(uint64(n), s.left))
	p, err := s.r.Peek(n)
	if len(p) < n {
		if err == nil || errors.Is(err, io.EOF) {
			err = fmt.Errorf("the body ends %d bytes before the header's length", s.left-uint64(len(p)))
		}
		s.fail(err)
		return nil
	}
	return p
}

// skip consumes n bytes that peek returned.
func (s *bodyStream) skip(n int) {
	_, _ = s.r.Discard(n) // buffered by peek: cannot fail
	s.left -= uint64(n)
}

func (s *bodyStream) uvarint() uint64 {
	p := s.peek(binary.MaxVarintLen64)
	if s.err != nil {
		return 0
	}
	v, k := binary.Uvarint(p)
	if k <= 0 {
		if k < 0 {
			s.fail(errOverflow)
		} else {
			s.fail(errTruncated)
		}
		return 0
	}
	s.skip(k)
	return v
}

// bytes consumes n bytes (at most streamBuffer) and returns them, valid
// until the next read.
func (s *bodyStream) bytes(n uint64) []byte {
	if s.err != nil {
		return nil
	}
	if n > s.left || n > streamBuffer {
		s.fail(errTruncated)
		return nil
	}
	p := s.peek(int(n))
	if s.err != nil {
		return nil
	}
	s.skip(int(n))
	return p
}

// end checks, once left is 0, that the source ends there too: for a zstd
// stream this is also when the frame's checksum is verified.
func (s *bodyStream) end() error {
	switch _, err := s.r.ReadByte(); {
	case err == nil:
		return errors.New("it decompresses to more bytes than the header says")
	case errors.Is(err, io.EOF):
		return nil
	default:
		return err
	}
}

// checkFrame checks that comp is exactly one zstd frame (no skippable
// frame, no second frame, no dictionary) declaring bodyLen bytes of
// content, without decompressing it. The writer (klauspost/compress's
// EncodeAll) declares the content size of every frame except those under
// 256 bytes that are not single-segment; those are accepted without it.
//
// The frame's end is found by walking its block headers (RFC 8878 §3.1.1):
// klauspost/compress finds it only by decoding, and its stream decoder
// silently skips skippable frames and runs on into further frames.
func checkFrame(comp []byte, bodyLen uint64) error {
	var zh zstd.Header
	if err := zh.Decode(comp); err != nil {
		return corrupt("body: zstd frame header: %v", err)
	}
	switch {
	case zh.Skippable:
		return corrupt("body: a skippable zstd frame (padding)")
	case zh.DictionaryID != 0:
		return corrupt("body: a zstd frame needing dictionary %d", zh.DictionaryID)
	case zh.HasFCS && zh.FrameContentSize != bodyLen:
		return corrupt("body: the zstd frame declares %d bytes, the header %d", zh.FrameContentSize, bodyLen)
	case !zh.HasFCS && bodyLen >= 256:
		return corrupt("body: the zstd frame of a %d-byte body does not declare its size", bodyLen)
	}
	const maxBlock = 128 << 10
	pos := zh.HeaderSize
	for {
		if len(comp)-pos < 3 {
			return corrupt("body: zstd frame truncated at offset %d", pos)
		}
		bh := uint32(comp[pos]) | uint32(comp[pos+1])<<8 | uint32(comp[pos+2])<<16
		pos += 3
		size := int(bh >> 3)
		if size > maxBlock {
			return corrupt("body: zstd block of %d bytes", size)
		}
		switch bh >> 1 & 3 {
		case 1: // RLE: one byte, repeated size times
			size = 1
		case 3:
			return corrupt("body: reserved zstd block type")
		}
		if size > len(comp)-pos {
			return corrupt("body: zstd frame truncated at offset %d", pos)
		}
		pos += size
		if bh&1 != 0 { // the last block
			break
		}
	}
	if zh.HasCheckSum {
		pos += 4
	}
	switch {
	case pos > len(comp):
		return corrupt("body: zstd frame truncated at its checksum")
	case pos < len(comp):
		return corrupt("body: %d bytes after the zstd frame (a second or skippable frame)", len(comp)-pos)
	}
	return nil
}
