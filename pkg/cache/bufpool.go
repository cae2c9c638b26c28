package cache

import (
	"math/bits"
	"sync"
)

// Fill buffers come from per-size-class pools, so that filling the cache
// does not allocate (and clear, and collect) one new buffer per entry.
const (
	minBufShift = 12 // 4 KiB: the smallest pooled class
	maxBufShift = 24 // 16 MiB: larger buffers are allocated, never pooled
)

var bufPools [maxBufShift - minBufShift + 1]sync.Pool // of *[]byte, cap 1<<(minBufShift+i)

// bufClass returns the pool index for a buffer of size bytes, or -1 when
// such buffers are not pooled.
func bufClass(size int64) int {
	if size <= 0 || size > 1<<maxBufShift {
		return -1
	}
	shift := max(bits.Len64(uint64(size-1)), minBufShift)
	return shift - minBufShift
}

// getBuf returns a buffer of len size whose bytes are not cleared (the
// Loader overwrites all of them).
func getBuf(size int64) []byte {
	c := bufClass(size)
	if c < 0 {
		return make([]byte, size)
	}
	if bp, ok := bufPools[c].Get().(*[]byte); ok {
		return (*bp)[:size]
	}
	return make([]byte, size, 1<<(c+minBufShift))
}

// putBuf returns b, which nobody may use any more, to its pool.
func putBuf(b []byte) {
	c := bufClass(int64(cap(b)))
	if c < 0 || cap(b) != 1<<(c+minBufShift) {
		return // not from a pool
	}
	b = b[:0]
	bufPools[c].Put(&b)
}
