package fusefs

import (
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/epochfs/epochfs/pkg/cache"
)

// file is one version of a dataset file, as opened: what the handles need.
// Immutable.
type file struct {
	fsys    *FS
	path    string
	version string
	size    int64
	// next, when set, returns the files to read ahead when this one misses
	// (readahead.go): up to k files after it in its directory.
	next func(k int) []file
}

const writeFlags = syscall.O_WRONLY | syscall.O_RDWR | syscall.O_TRUNC | syscall.O_APPEND | syscall.O_CREAT

// open opens f read-only: whole through the cache when small, in blocks
// otherwise.
func (n file) open(flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&writeFlags != 0 {
		return nil, 0, syscall.EROFS
	}
	if n.size <= n.fsys.opts.WholeFileMax {
		fh, fl, errno := n.openWhole()
		if errno == 0 {
			counters.opens.Add(1)
		}
		return fh, fl, errno
	}
	counters.opens.Add(1)
	return newBlockHandle(n), fuse.FOPEN_KEEP_CACHE | fuse.FOPEN_NOFLUSH, 0
}

// openWhole fetches a small file whole through the cache and returns a
// handle on its bytes: the cache file (passthrough-capable) or, when the
// policy did not admit it, the bytes in memory.
func (n file) openWhole() (fs.FileHandle, uint32, syscall.Errno) {
	span := n.fsys.spans(n)[0] // a small file is one span: the whole file
	auto := n.fsys.readahead.auto
	var fetch *atomic.Int64 // on auto: the duration of this open's own fetch, if it fetched
	var start time.Time
	if auto != nil {
		fetch, start = new(atomic.Int64), time.Now()
	}
	res, err := n.fsys.get(n, span, n.fsys.wholeLoader(n, span.Offset, fetch))
	if err != nil {
		return nil, 0, n.fsys.errno("open", n.path, err)
	}
	if auto != nil && !res.Hit && res.File != nil {
		if d := time.Duration(fetch.Load()); d > 0 {
			// This miss's own fetch, admitted: the rest is the local cost.
			auto.localCost(time.Since(start) - d)
		}
	}
	if !res.Hit && n.next != nil {
		if k := n.fsys.readaheadWindow(); k > 0 {
			n.fsys.readaheadFiles(n.next(k))
		}
	}
	flags := uint32(fuse.FOPEN_KEEP_CACHE | fuse.FOPEN_NOFLUSH)
	if res.File != nil {
		return &cachedFile{f: res.File, size: n.size}, flags, 0
	}
	return &memFile{data: res.Data}, flags, 0
}

// cachedFile serves a cache entry. The kernel reads it directly when
// passthrough is engaged; otherwise Read splices from the file.
type cachedFile struct {
	f    *os.File // immutable; closed by Release
	size int64    // immutable
}

var (
	_ = (fs.FilePassthroughFder)((*cachedFile)(nil))
	_ = (fs.FileReader)((*cachedFile)(nil))
	_ = (fs.FileReleaser)((*cachedFile)(nil))
)

func (h *cachedFile) PassthroughFd() (int, bool) { return int(h.f.Fd()), true }

func (h *cachedFile) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	counters.cachedReads.Add(1)
	counters.readBytes.Add(uint64(max(min(int64(len(dest)), h.size-off), 0)))
	return fuse.ReadResultFd(h.f.Fd(), off, len(dest)), 0
}

func (h *cachedFile) Release(ctx context.Context) syscall.Errno {
	h.f.Close()
	return 0
}

// memFile serves bytes read through without being cached.
type memFile struct {
	data []byte // immutable, shared with coalesced readers
}

var _ = (fs.FileReader)((*memFile)(nil))

func (h *memFile) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	b := sliceAt(h.data, off, len(dest))
	counters.memReads.Add(1)
	counters.readBytes.Add(uint64(len(b)))
	return fuse.ReadResultData(b), 0
}

func sliceAt(b []byte, off int64, n int) []byte {
	if off >= int64(len(b)) {
		return nil
	}
	end := min(off+int64(n), int64(len(b)))
	return b[off:end]
}

// blockHandle reads a large file block by block through the cache, fetching
// the next Readahead blocks in the background. Each block is looked up in the
// cache once per handle (so counted once), when first needed or read ahead.
//
// node is immutable; mu guards blocks and closed.
type blockHandle struct {
	node  file
	spans []cache.KeySpan // the file's blocks (cache.FileKeys); immutable

	mu     sync.Mutex
	blocks map[int64]*block // by block index (0-based)
	closed bool
}

// block is one block's fetch, shared by the reads that need it.
type block struct {
	done chan struct{} // closed when res/err are set
	res  cache.Result
	err  error
	refs int // foreground reads using res; guarded by blockHandle.mu
}

func (b *block) release() {
	if b.res.File != nil {
		b.res.File.Close()
	}
}

var (
	_ = (fs.FileReader)((*blockHandle)(nil))
	_ = (fs.FileReleaser)((*blockHandle)(nil))
)

func newBlockHandle(n file) *blockHandle {
	return &blockHandle{node: n, spans: n.fsys.spans(n), blocks: map[int64]*block{}}
}

func (h *blockHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	size := h.node.size
	bs := h.node.fsys.opts.BlockSize
	if off >= size {
		return fuse.ReadResultData(nil), 0
	}
	end := min(off+int64(len(dest)), size)
	n := 0
	for pos := off; pos < end; {
		idx := pos / bs
		b := h.get(idx, true)
		select {
		case <-b.done:
		case <-ctx.Done():
			h.put(b)
			return nil, syscall.EINTR
		}
		if b.err != nil {
			h.put(b)
			h.forget(idx, b)
			return nil, h.node.fsys.errno("read", h.node.path, b.err)
		}
		inBlock := pos - idx*bs
		want := int(min(end-pos, bs-inBlock))
		got, err := readBlock(b.res, dest[n:n+want], inBlock)
		h.put(b)
		if err != nil {
			return nil, h.node.fsys.errno("read", h.node.path, err)
		}
		n += got
		pos += int64(got)
		if got < want {
			break
		}
	}
	h.readahead(off/bs + 1)
	h.trim((end - 1) / bs)
	counters.blockReads.Add(1)
	counters.readBytes.Add(uint64(n))
	return fuse.ReadResultData(dest[:n]), 0
}

func readBlock(r cache.Result, dest []byte, off int64) (int, error) {
	if r.File == nil {
		return copy(dest, sliceAt(r.Data, off, len(dest))), nil
	}
	n, err := r.File.ReadAt(dest, off)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return n, err
}

// get returns block idx's fetch, starting it if needed. wait tells whether
// the caller will wait for it and use it (a foreground read, which must call
// put when done) or not (readahead).
func (h *blockHandle) get(idx int64, wait bool) *block {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		b := &block{done: make(chan struct{}), err: context.Canceled}
		close(b.done)
		return b
	}
	b, ok := h.blocks[idx]
	if !ok {
		b = &block{done: make(chan struct{})}
		h.blocks[idx] = b
	}
	if wait {
		b.refs++
	}
	h.mu.Unlock()
	if ok {
		return b
	}
	if wait {
		h.fetch(idx, b)
	} else {
		go func() {
			select {
			case h.node.fsys.readahead.blockSem <- struct{}{}:
				h.fetch(idx, b)
				<-h.node.fsys.readahead.blockSem
			case <-h.node.fsys.ctx.Done():
				b.err = h.node.fsys.ctx.Err()
				close(b.done)
			}
		}()
	}
	return b
}

func (h *blockHandle) fetch(idx int64, b *block) {
	fsys := h.node.fsys
	span := h.spans[idx]
	b.res, b.err = fsys.get(h.node, span, fsys.loader(h.node.path, h.node.version, span.Offset))

	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed { // Release has come and gone: nobody else will free it
		b.release()
	}
	close(b.done)
}

// put ends a foreground read's use of b.
func (h *blockHandle) put(b *block) {
	h.mu.Lock()
	b.refs--
	h.mu.Unlock()
}

// readahead starts fetching the Readahead blocks from idx on.
func (h *blockHandle) readahead(idx int64) {
	bs := h.node.fsys.opts.BlockSize
	last := (h.node.size - 1) / bs
	for i := idx; i <= last && i < idx+int64(h.node.fsys.opts.Readahead); i++ {
		h.get(i, false)
	}
}

// trim releases finished blocks before cur-1, bounding what a handle holds.
func (h *blockHandle) trim(cur int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for idx, b := range h.blocks {
		if idx >= cur-1 {
			continue
		}
		select {
		case <-b.done:
			if b.refs == 0 {
				b.release()
				delete(h.blocks, idx)
			}
		default:
		}
	}
}

// forget drops a failed block so that a later read retries it.
func (h *blockHandle) forget(idx int64, b *block) {
	h.mu.Lock()
	if h.blocks[idx] == b {
		delete(h.blocks, idx)
	}
	h.mu.Unlock()
}

func (h *blockHandle) Release(ctx context.Context) syscall.Errno {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for _, b := range h.blocks {
		select {
		case <-b.done:
			b.release()
		default: // fetch still running: it releases the block itself
		}
	}
	h.blocks = nil
	return 0
}
