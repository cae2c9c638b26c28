// Package fusefs is the read-only FUSE file system of an EpochFS mount,
// whose bytes come through the NR cache and whose names and sizes come
// either from a dataset manifest (Options.Manifest: no List or Stat reaches
// the backend; no per-inode state, see manifest.go) or else from the
// backend's listings (each directory's listing fetched on first use and
// kept within a budget, a small node per inode the kernel holds; see
// backendfs.go, listing.go and prelist.go). Both run on go-fuse's raw
// protocol API (rawfs.go), not its node tree.
//
// Small files (≤ Options.WholeFileMax, 8 MiB by default) are fetched whole on
// first open through the cache; once cached, their cache file is handed to
// the kernel with FUSE passthrough when the kernel allows it (root, kernel ≥
// 6.9), so cached reads skip this process entirely. Larger files are read in
// fixed-size blocks, each a cache entry, with readahead of the next blocks.
//
// The dataset is immutable while mounted: entry and attribute timeouts are
// long, the kernel page cache is kept across opens, and every write-type call
// fails with EROFS. Hit and miss counters count what reaches the cache: one
// lookup per open of a small file (its whole size) and one per block of a
// large file read through a handle.
//
// A file that changed or vanished at the source since it was listed or
// indexed reads as EIO with an error log line naming it (unless its listed
// version is cached: those bytes are served); the rest of the mount keeps
// serving. Without a manifest, listings are fetched again once older than
// Options.Timeout, so a changed file is seen, under its new version, at
// most one timeout after the change; with a manifest, the manifest's
// versions hold until it is rebuilt.
//
// Glossary of a mount without a manifest (one name per concept):
//
//   - listing: the entries of one directory as the backend's List returned
//     them, sorted by name and unique ([]backend.Entry, never modified).
//     FS.listing returns one; FS.fetchListing gets it from the backend.
//   - listing cache (listingCache, listing.go): the listings held by
//     directory path, within Options.ListingCacheEntries; what it drops is
//     fetched again when next needed.
//   - prelisting (pendingListing, prelist.go): a listing fetched in the
//     background before its directory is used, parked until it is.
//   - backend tree (backendFS, backendfs.go): the FUSE inode table built
//     from listings: one node (backendNode) per name the kernel holds a
//     lookup of. Its counterpart with a manifest is the manifest tree
//     (manifestFS, manifest.go).
//
// The package knows the manifest, the backend and the cache; it knows
// nothing of CSI.
package fusefs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sync/singleflight"

	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/cache"
	"github.com/epochfs/epochfs/pkg/manifest"
)

// Defaults for Options.
const (
	DefaultWholeFileMax = cache.DefaultWholeFileMax
	DefaultBlockSize    = cache.DefaultBlockSize
	DefaultReadahead    = 4
	DefaultTimeout      = time.Hour
	DefaultReadTimeout  = 2 * time.Minute
	// DefaultListingCacheEntries: about 150 MiB of listings.
	DefaultListingCacheEntries = 1 << 20
)

// Options configure an FS. Zero fields take the defaults above.
type Options struct {
	Backend backend.Backend // required
	Store   *cache.Store    // required
	// Manifest, when set, is the source of every name, size and version:
	// the backend is only read, never listed or stat'ed.
	Manifest *manifest.Manifest
	// WholeFileMax: files up to this many bytes are fetched whole on open.
	WholeFileMax int64
	// BlockSize: larger files are cached in blocks of this many bytes.
	BlockSize int64
	// Readahead: how many blocks after the one being read are fetched in
	// the background for large files.
	Readahead int
	// ReadaheadFiles: when an open of a small file misses, how many of the
	// next files of its directory are fetched into the cache in the
	// background (readahead.go). 0: none; ReadaheadFilesAuto: a window
	// that follows the backend's measured latency (readahead_auto.go).
	ReadaheadFiles int
	// Timeout is the kernel entry, attribute and negative-lookup timeout,
	// and how long a listing is used before it is fetched again.
	Timeout time.Duration
	// ReadTimeout bounds one backend fetch (a whole small file or a block),
	// retries included; a fetch that takes longer fails with EIO.
	ReadTimeout time.Duration
	// NoPassthrough serves cached files through the process instead of
	// kernel passthrough (`cachefs mount --no-passthrough`).
	NoPassthrough bool
	// BackingTable, when set, records the connection's passthrough backing
	// ids and their open handles (backingtable.go), for a process that
	// recovers the connection after this one dies. The FS writes it from
	// Mount or Adopt on; it stays mapped until the process exits.
	BackingTable *BackingTable
	// NodeTable, when set, records every node id a tree without a manifest
	// gives the kernel (nodetable.go), for a process that recovers the
	// connection after this one dies; a loaded one (OpenNodeTable with
	// the connection's token) is where Adopt takes a crashed process's
	// node ids from. Ignored with a manifest (its ids are entry indexes).
	NodeTable *NodeTable
	// ListingCacheEntries bounds the directory entries a mount without a
	// manifest keeps from its listings (listing.go). About 150 bytes each
	// with S3 names and ETags.
	ListingCacheEntries int
	// MaxDirEntries is the most entries one directory may have; a larger
	// one reads as EFBIG (listlimit.go). Default DefaultMaxDirEntries.
	MaxDirEntries int
	// MaxListingMemory is the most bytes the listings of a mount without a
	// manifest may hold, held and being fetched together; a listing that
	// does not fit once the listing cache has given back what it can reads
	// as EFBIG (listlimit.go). Default DefaultMaxListingMemory.
	MaxListingMemory int64
	// Peers, when set, is the cluster-wide cache (peers.go): files this
	// mount does not own are read from their owner and never admitted.
	Peers  Peers
	Logger *slog.Logger
}

// FS is a mountable read-only dataset tree.
//
// Concurrency: the first group of fields is set by New and never changes.
// The rest is grouped by subsystem, each a struct with its own lock
// documented on its type: readahead (background fetches ahead of readers),
// listings (a mount without a manifest), tree (set once by Mount). Open
// files are the mounted tree's (openFiles, rawfs.go); the request counters
// are process-wide atomics (counters.go).
//
// Lock order: every mutex of this package is a leaf. None is held while
// another is taken (readahead.mu, listings.mu, listingCache.mu,
// backendFS.nmu, openFiles.mu, blockHandle.mu), nor across a call into the
// cache or the backend.
type FS struct {
	// Immutable after New.
	opts     Options
	backend  backend.Backend
	manifest *manifest.Manifest // nil: names come from backend listings
	store    *cache.Store
	log      *slog.Logger
	dataset  string
	ctx      context.Context // parent of every backend fetch; cancelled by Close
	cancel   context.CancelFunc

	readahead readahead // readahead.go, handle.go
	listings  listings  // backendfs.go, listing.go, prelist.go

	tree  atomic.Pointer[backendFS] // the backend tree, once mounted without a manifest
	base  atomic.Pointer[rawBase]   // the mounted tree's (either), once mounted
	devFd atomic.Int64              // the connection's /dev/fuse descriptor once mounted (handover.go); -1: unknown
}

// readahead is the state of background fetches ahead of readers: blocks
// of a large file after the one being read (handle.go), and small files
// after one whose open missed (readahead.go). blockSem and fileSem are
// immutable; fileBytes is atomic; mu guards files.
type readahead struct {
	blockSem  chan struct{}  // bounds background fetches of blocks
	fileSem   chan struct{}  // bounds background fetches of whole files
	fileBytes atomic.Int64   // bytes of whole-file readahead in flight
	auto      *autoReadahead // nil unless Options.ReadaheadFiles is ReadaheadFilesAuto

	mu    sync.Mutex
	files map[string]struct{} // paths of files being read ahead
}

// listings is how a mount without a manifest gets listings (see the
// glossary in the package doc). cache, mem, refused, sem and flight are
// immutable (and safe for concurrent use); mu guards parked and
// parkedEntries.
type listings struct {
	cache   *listingCache      // the listings held (listing.go)
	mem     *listingMemory     // the listing memory budget (listlimit.go)
	refused *refusals          // directories over a cap (listlimit.go)
	sem     chan struct{}      // bounds prelistings (prelist.go)
	flight  singleflight.Group // one foreground fetch per directory at a time

	mu            sync.Mutex
	parked        map[string]*pendingListing // prelistings not yet taken, at most maxParkedListings
	parkedEntries int                        // entries of the fetched ones, at most the listing budget
}

// New validates opts and returns an FS ready to mount.
func New(opts Options) (*FS, error) {
	if opts.Backend == nil || opts.Store == nil {
		return nil, errors.New("fusefs: Backend and Store are required")
	}
	opts.WholeFileMax = cmp.Or(opts.WholeFileMax, DefaultWholeFileMax)
	opts.BlockSize = cmp.Or(opts.BlockSize, DefaultBlockSize)
	opts.Readahead = cmp.Or(opts.Readahead, DefaultReadahead)
	opts.Timeout = cmp.Or(opts.Timeout, DefaultTimeout)
	opts.ReadTimeout = cmp.Or(opts.ReadTimeout, DefaultReadTimeout)
	opts.ListingCacheEntries = cmp.Or(opts.ListingCacheEntries, DefaultListingCacheEntries)
	opts.MaxDirEntries = cmp.Or(opts.MaxDirEntries, DefaultMaxDirEntries)
	opts.MaxListingMemory = cmp.Or(opts.MaxListingMemory, DefaultMaxListingMemory)
	switch {
	case opts.WholeFileMax < 0:
		return nil, fmt.Errorf("fusefs: WholeFileMax %d must be positive", opts.WholeFileMax)
	case opts.BlockSize < 4096:
		return nil, fmt.Errorf("fusefs: BlockSize %d must be at least 4096", opts.BlockSize)
	case opts.Readahead < 0:
		return nil, fmt.Errorf("fusefs: Readahead %d must not be negative", opts.Readahead)
	case opts.ReadaheadFiles < 0 && opts.ReadaheadFiles != ReadaheadFilesAuto:
		return nil, fmt.Errorf("fusefs: ReadaheadFiles %d must not be negative (but ReadaheadFilesAuto)", opts.ReadaheadFiles)
	case opts.ListingCacheEntries < 0:
		return nil, fmt.Errorf("fusefs: ListingCacheEntries %d must not be negative", opts.ListingCacheEntries)
	case opts.MaxDirEntries < 0:
		return nil, fmt.Errorf("fusefs: MaxDirEntries %d must not be negative", opts.MaxDirEntries)
	case opts.MaxListingMemory < 0:
		return nil, fmt.Errorf("fusefs: MaxListingMemory %d must not be negative", opts.MaxListingMemory)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	mem := &listingMemory{limit: opts.MaxListingMemory}
	var auto *autoReadahead
	maxFiles := opts.ReadaheadFiles
	if opts.ReadaheadFiles == ReadaheadFilesAuto {
		auto, maxFiles = newAutoReadahead(time.Now), AutoMaxFiles
	}
	fsys := &FS{
		opts:     opts,
		backend:  opts.Backend,
		manifest: opts.Manifest,
		store:    opts.Store,
		log:      opts.Logger,
		dataset:  opts.Backend.ID(),
		ctx:      ctx,
		cancel:   cancel,
		readahead: readahead{
			blockSem: make(chan struct{}, 4*max(opts.Readahead, 1)),
			fileSem:  make(chan struct{}, 4*maxFiles),
			auto:     auto,
			files:    map[string]struct{}{},
		},
		listings: listings{
			cache:   newListingCache(opts.ListingCacheEntries, opts.Timeout, mem),
			mem:     mem,
			refused: &refusals{byPath: map[string]refusal{}},
			sem:     make(chan struct{}, DefaultPrelistWorkers),
			parked:  map[string]*pendingListing{},
		},
	}
	fsys.devFd.Store(-1)
	return fsys, nil
}

// ListingStats returns what the listings of a mount without a manifest hold
// (zero with a manifest).
func (f *FS) ListingStats() ListingStats {
	st := f.listings.cache.stats()
	f.listings.mu.Lock()
	st.Parked, st.ParkedEntries = len(f.listings.parked), f.listings.parkedEntries
	f.listings.mu.Unlock()
	if t := f.tree.Load(); t != nil {
		st.Nodes = t.NodeCount()
	}
	return st
}

// Close cancels in-flight backend fetches. Call it after unmounting.
func (f *FS) Close() { f.cancel() }

// MountOptions are the knobs of Mount that callers may set.
type MountOptions struct {
	// FsName is shown as the mount's source in /proc/mounts (never put
	// credentials in it).
	FsName string
	// AllowOther lets users other than the mounting one read the mount
	// (pods run as any uid). Needs root or user_allow_other.
	AllowOther bool
	// Debug logs every FUSE request.
	Debug bool
}

// Mount mounts the FS read-only at mountpoint and returns the serving
// server. Unmount with server.Unmount; wait for it with server.Wait.
func (f *FS) Mount(mountpoint string, mo MountOptions) (*fuse.Server, error) {
	raw := f.newTree()
	// The descriptor go-fuse opens is found by its appearance (devfd.go),
	// for a handover to pass it on.
	fd, server, err := newServerFd(func() (*fuse.Server, error) {
		return fuse.NewServer(raw, mountpoint, FuseOptions(mo))
	})
	if err != nil {
		return nil, fmt.Errorf("fusefs: mount %s: %w", mountpoint, err)
	}
	f.devFd.Store(int64(fd))
	go server.Serve()
	if err := server.WaitMount(); err != nil {
		_ = server.Unmount()
		return nil, fmt.Errorf("fusefs: mount %s: %w", mountpoint, err)
	}
	return server, nil
}

// FuseOptions are the go-fuse mount options of an FS: what Mount passes
// to go-fuse, and what a process taking over a connection negotiates
// with (pkg/handover replays the kernel's INIT with them).
func FuseOptions(mo MountOptions) *fuse.MountOptions {
	return &fuse.MountOptions{
		FsName:           mo.FsName,
		Name:             "cachefs",
		AllowOther:       mo.AllowOther,
		Debug:            mo.Debug,
		DirectMount:      true, // as root: mount(2) directly; else fusermount
		DirectMountFlags: syscall.MS_RDONLY | syscall.MS_NOSUID | syscall.MS_NODEV,
		Options:          []string{"ro"},
		// READs of up to 1 MiB (max_read and max_pages follow
		// MaxWrite; the default is 128 KiB, which also capped
		// MaxReadAhead): bytes served from memory (a miss whose cache
		// file is being written, a block) cross /dev/fuse in fewer
		// round trips. Cached files do not reach this process at all
		// when passthrough is engaged.
		MaxWrite:      1 << 20,
		MaxReadAhead:  1 << 20,
		MaxBackground: 64,
		DisableXAttrs: true,
	}
}

// newTree makes the tree the FS serves, on the raw API with no go-fuse
// node tree: from the manifest (manifest.go) or from backend listings
// (backendfs.go).
func (f *FS) newTree() fuse.RawFileSystem {
	if f.manifest != nil {
		t := newManifestFS(f)
		t.noBacking.Store(f.opts.NoPassthrough)
		f.base.Store(&t.rawBase)
		return t
	}
	t := newBackendFS(f)
	t.noBacking.Store(f.opts.NoPassthrough)
	f.tree.Store(t)
	f.base.Store(&t.rawBase)
	return t
}

// spans returns a file's cache keys and byte ranges: the one key scheme
// shared with prefetch (cache.FileKeys), so a prefetched cache hits.
func (f *FS) spans(n file) []cache.KeySpan {
	return cache.FileKeys(f.dataset, n.path, n.version, n.size, f.opts.WholeFileMax, f.opts.BlockSize)
}

// errno translates an error from the backend or the cache into the errno
// the reader sees, logging what is not an ordinary "not found".
func (f *FS) errno(op, path string, err error) syscall.Errno {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, backend.ErrChanged):
		f.log.Error("fusefs: file changed at the source since it was listed or indexed; refusing to serve other bytes (EIO)",
			"op", op, "path", path, "err", err)
		return syscall.EIO
	case errors.Is(err, backend.ErrNotExist) && (op == "open" || op == "read"):
		f.log.Error("fusefs: file vanished from the source since it was listed or indexed (EIO)",
			"op", op, "path", path, "err", err)
		return syscall.EIO
	case errors.Is(err, backend.ErrNotExist):
		return syscall.ENOENT
	case errors.Is(err, backend.ErrNotDir):
		return syscall.ENOTDIR
	case errors.Is(err, backend.ErrIsDir):
		return syscall.EISDIR
	case errors.Is(err, backend.ErrInvalidPath):
		return syscall.ENOENT
	case errors.Is(err, context.Canceled) && f.ctx.Err() == nil:
		return syscall.EINTR
	case errors.Is(err, backend.ErrListTooLarge):
		return tooLarge // logged once by refuse (listlimit.go)
	}
	f.log.Error("fusefs: I/O error", "op", op, "path", path, "err", err)
	return syscall.EIO
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// Backend fetches are detached from the FUSE request: coalesced readers
// share a fetch, so one reader's interrupt must not fail the others. The
// cache is asked with the mount's context (f.ctx, no timer: a hit, the
// common case, needs none) and each load bounds itself by ReadTimeout.

// listCtx bounds one backend listing, detached from the FUSE request too
// (a listing serves every later lookup in its directory), in time and by
// the listing caps (listlimit.go).
func (f *FS) listCtx() (context.Context, context.CancelFunc) {
	ctx := backend.WithListLimits(f.ctx, backend.ListLimits{
		MaxEntries: f.opts.MaxDirEntries,
		MaxPages:   MaxListingPages(f.opts.MaxDirEntries),
		Memory:     f.listings.mem,
	})
	return context.WithTimeout(ctx, f.opts.ReadTimeout)
}

// wholeLoader is loader for a whole small file, timed for the adaptive
// readahead (when on auto): fetch, when not nil, gets the fetch's
// duration once it has run.
func (f *FS) wholeLoader(n file, off int64, fetch *atomic.Int64) cache.Loader {
	load := f.loader(n.path, n.version, off)
	auto := f.readahead.auto
	if auto == nil {
		return load
	}
	return func(ctx context.Context, p []byte) error {
		start := time.Now()
		err := load(ctx, p)
		d := time.Since(start)
		auto.fetched(d, err)
		if fetch != nil {
			fetch.Store(int64(d))
		}
		return err
	}
}

// readaheadWindow is how many files to read ahead after a miss now.
func (f *FS) readaheadWindow() int {
	if f.readahead.auto != nil {
		return f.readahead.auto.window()
	}
	return f.opts.ReadaheadFiles
}

// ReadaheadState is the whole-file readahead's setting and, on auto, what
// it measured (readahead_auto.go).
type ReadaheadState struct {
	Auto bool // Options.ReadaheadFiles is ReadaheadFilesAuto
	AutoReadaheadState
}

// ReadaheadState returns the readahead's current window and, on auto, its
// measurements.
func (f *FS) ReadaheadState() ReadaheadState {
	if a := f.readahead.auto; a != nil {
		return ReadaheadState{Auto: true, AutoReadaheadState: a.state()}
	}
	return ReadaheadState{AutoReadaheadState: AutoReadaheadState{Window: f.opts.ReadaheadFiles}}
}

// loader reads [off, off+len(p)) of a file version from the backend, within
// ReadTimeout.
func (f *FS) loader(path, version string, off int64) cache.Loader {
	return func(ctx context.Context, p []byte) error {
		ctx, cancel := context.WithTimeout(ctx, f.opts.ReadTimeout)
		defer cancel()
		return backend.ReadFull(ctx, f.backend, path, version, p, off)
	}
}
