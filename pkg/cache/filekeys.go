package cache

import "fmt"

// Defaults of the split of files into cache entries, shared by every
// caller that must derive the same keys (the FUSE layer, prefetch).
const (
	// DefaultWholeFileMax: files up to this many bytes are one entry.
	DefaultWholeFileMax = 8 << 20
	// DefaultBlockSize: larger files are cached in blocks of this many bytes.
	DefaultBlockSize = 4 << 20
)

// KeySpan is one cache entry of a file: its key and the bytes of the file
// it holds, [Offset, Offset+Length).
type KeySpan struct {
	Key    Key
	Offset int64
	Length int64
}

// FileKeys returns the cache entries that hold one version of a file of
// size bytes, in file order. This is the one key scheme of EpochFS: every
// reader and writer of a cache derives its keys here, so that what one
// caches (e.g. `cachefs prefetch`) another hits (a mount).
//
// A file of at most wholeFileMax bytes (an empty file included) is one
// entry, Block 0, holding the whole file. A larger file is
// ceil(size/blockSize) entries, Block 1..n, entry n holding bytes
// [(n-1)*blockSize, min(n*blockSize, size)): the block holding byte off is
// span off/blockSize, whose Key.Block is off/blockSize + 1.
//
// It panics if size or wholeFileMax is negative, or if blockSize is not
// positive when the file is split: those are programming errors, validated
// by every caller's options.
func FileKeys(dataset, path, version string, size, wholeFileMax, blockSize int64) []KeySpan {
	switch {
	case size < 0 || wholeFileMax < 0:
		panic(fmt.Sprintf("cache: FileKeys(%q): negative size %d or wholeFileMax %d", path, size, wholeFileMax))
	case size <= wholeFileMax:
		return []KeySpan{{Key: Key{Dataset: dataset, Path: path, Version: version}, Length: size}}
	case blockSize <= 0:
		panic(fmt.Sprintf("cache: FileKeys(%q): block size %d must be positive", path, blockSize))
	}
	n := (size + blockSize - 1) / blockSize
	spans := make([]KeySpan, n)
	for i := range n {
		off := i * blockSize
		spans[i] = KeySpan{
			Key:    Key{Dataset: dataset, Path: path, Version: version, Block: i + 1},
			Offset: off,
			Length: min(blockSize, size-off),
		}
	}
	return spans
}
