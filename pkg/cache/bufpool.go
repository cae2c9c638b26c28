package cache

import (
	"math/bits"
	"sync"
)

// Fill buffers come from per-size-class free lists, so that filling the
// cache does not allocate (and clear, and collect) one new buffer per
// entry. Free lists rather than sync.Pool: a pool is emptied by every
// other garbage collection, and filling allocates little else, so the
// buffers would be dropped and allocated again all the time. What the
// lists keep is bounded by maxPooledBytes over all classes; a buffer
// returned beyond that is left to the collector.
const (
	minBufShift    = 12       // 4 KiB: the smallest pooled class
	maxBufShift    = 24       // 16 MiB: larger buffers are allocated, never pooled
	maxPooledBytes = 64 << 20 // kept in the free lists at most
)

var bufFree struct {
	sync.Mutex
	lists [maxBufShift - minBufShift + 1][][]byte // per class, cap 1<<(minBufShift+i)
	bytes int64                                   // held by lists
}

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
	bufFree.Lock()
	if l := bufFree.lists[c]; len(l) > 0 {
		b := l[len(l)-1]
		l[len(l)-1] = nil
		bufFree.lists[c] = l[:len(l)-1]
		bufFree.bytes -= int64(cap(b))
		bufFree.Unlock()
		return b[:size]
	}
	bufFree.Unlock()
	return make([]byte, size, 1<<(c+minBufShift))
}

// putBuf returns b, which nobody may use any more, to its free list.
func putBuf(b []byte) {
	c := bufClass(int64(cap(b)))
	if c < 0 || cap(b) != 1<<(c+minBufShift) {
		return // not from a pool
	}
	bufFree.Lock()
	defer bufFree.Unlock()
	if bufFree.bytes+int64(cap(b)) > maxPooledBytes {
		return
	}
	bufFree.lists[c] = append(bufFree.lists[c], b[:0])
	bufFree.bytes += int64(cap(b))
}

// pooledBytes is what the free lists hold (for tests).
func pooledBytes() int64 {
	bufFree.Lock()
	defer bufFree.Unlock()
	return bufFree.bytes
}
