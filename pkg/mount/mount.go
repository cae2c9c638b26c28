// Package mount runs one EpochFS mount: it opens the source backend and the
// cache store, loads the dataset manifest when there is one (Config.Manifest;
// by default SOURCE/.epochfs/manifest), mounts the read-only FUSE tree, serves Prometheus metrics, and
// unmounts cleanly when its context ends or the mount goes away. It also
// serves a control socket in the cache directory (control.go) through which
// `cachefs prefetch` runs pkg/prefetch against the mount's own store and the
// node plugin reads its metrics and dataset size. It is what `cachefs mount`
// runs in the foreground and what the CSI node plugin starts, one process
// per staged volume.
//
// ExitCode classifies its errors (and those of the packages it wires) into
// the exit codes of `cachefs mount` (package exitcode). What other programs
// need to start and ask a mount (its flags, command line, credential pipe
// and control client) is package mountapi, which imports none of this.
//
// It wires backend, cache, fusefs and metrics together and knows nothing of
// CSI.
package mount

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/backend/all"
	"github.com/epochfs/epochfs/pkg/cache"
	"github.com/epochfs/epochfs/pkg/fusefs"
	"github.com/epochfs/epochfs/pkg/handover"
	"github.com/epochfs/epochfs/pkg/manifest"
	"github.com/epochfs/epochfs/pkg/metrics"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
	"github.com/epochfs/epochfs/pkg/source"
	"github.com/epochfs/epochfs/pkg/units"
)

// Sentinel errors of New and Start, besides those of pkg/backend and
// pkg/cache that they wrap; ExitCode classifies them all.
var (
	// ErrInvalidConfig: a Config (or command line) that cannot work: a
	// missing required value or a bad one.
	ErrInvalidConfig = errors.New("mount: invalid configuration")
	// ErrMountpoint: the mount point is missing or not a directory, or the
	// FUSE mount on it failed.
	ErrMountpoint = errors.New("mount: unusable mount point")
	// ErrCacheDir: the cache directory cannot be created, locked or
	// written (cache.ErrLocked, another store holding it, is not wrapped).
	ErrCacheDir = errors.New("mount: unusable cache directory")
)

// Config of one mount. Validated by New.
type Config struct {
	Source     string // dataset URL (see source.Parse); required
	Mountpoint string // existing empty directory; required
	CacheDir   string // cache directory; required
	CacheSize  int64  // cache capacity in bytes; required, > 0
	// Policy is the cache policy, built for CacheSize; nil means NR, the
	// product's only one (cachefs mount accepts no other). Benchmarks
	// inject others (bench/policies). The mount's Store owns it.
	Policy cache.Policy

	// MetricsAddr, when set, serves /metrics on HOST:PORT.
	MetricsAddr string
	// Manifest selects the dataset manifest that names, sizes and versions
	// come from (then no List or Stat request reaches the backend):
	// mountapi.ManifestAuto ("") uses SOURCE/.epochfs/manifest when it
	// exists; mountapi.ManifestNone ("none") never uses one; anything else is a local file
	// path or a source URL of the manifest object (e.g.
	// s3://bucket/prefix/manifest?endpoint=…), which must load.
	Manifest string
	// ManifestMaxMemory bounds the memory the manifest may take, as
	// estimated from its header before anything is decompressed: a larger
	// manifest fails the mount (manifest.ErrTooLarge, naming
	// --manifest-max-memory). 0: manifest.DefaultMaxMemory.
	ManifestMaxMemory int64
	// AllowOther lets every uid read the mount (default true for
	// `cachefs mount`: pods run as any user).
	AllowOther bool
	// FUSE tuning; zero takes the fusefs defaults.
	WholeFileMax int64
	BlockSize    int64
	Readahead    int
	ReadTimeout  time.Duration
	// ReadaheadFiles: small files of the same directory fetched into the
	// cache in the background when an open misses (0: none;
	// fusefs.ReadaheadFilesAuto: follow the backend's latency, the CLI's
	// default).
	ReadaheadFiles int
	// ListingCacheEntries bounds the directory entries kept from listings
	// when mounting without a manifest.
	ListingCacheEntries int
	// MaxDirEntries and MaxListingMemory cap listings without a manifest:
	// entries of one directory, bytes of every listing held or being
	// fetched (fusefs.Options; 0 takes fusefs.DefaultMaxDirEntries and
	// fusefs.DefaultMaxListingMemory). A directory past a cap reads as
	// EFBIG; the rest of the mount serves on.
	MaxDirEntries    int
	MaxListingMemory int64
	// Peer is the cache scope: node (the default) or the cluster-wide
	// cache (peer.go, pkg/peer).
	Peer PeerConfig
	// Takeover, when set, is the handover socket of a running mount of
	// this dataset on this mount point, whose connection this one takes
	// over instead of mounting (takeover.go). Version is this binary's,
	// told to the running mount.
	Takeover string
	Version  string
	// Recover, when set, is a connection whose serving process died, from
	// its holder (recover.go): this mount serves it instead of mounting.
	Recover *handover.Held
	// NoPassthrough serves cached files through the process, not with
	// kernel passthrough (FlagNoPassthrough).
	NoPassthrough bool
	// Backend options (credentials, retries); zero takes the defaults.
	Backend backend.Options
	Debug   bool
	Logger  *slog.Logger

	// wrapBackend, when set, wraps the opened backend (tests only: slow or
	// failing sources).
	wrapBackend func(backend.Backend) backend.Backend
	// noNodeTable, when set, mounts without a manifest record no node ids
	// (tests only: the node table's cost, BenchmarkListingWalk).
	noNodeTable bool
}

// Mount is one running (or ready-to-run) mount.
//
// cfg and src are immutable after New; the rest is set by Start and read
// after it returns.
type Mount struct {
	cfg Config
	src source.Source
	log *slog.Logger

	backend     backend.Backend
	manifest    *manifest.Manifest
	store       *cache.Store
	fsys        *fusefs.FS
	server      fuseServer
	metricsAddr string
	registry    *prometheus.Registry // the mount's metrics, also served over the control socket
	stopMetrics context.CancelFunc
	control     *controlServer // nil when the control socket could not be served
	peer        *peerState     // nil in node scope

	// stopRequested is closed (once, stopOnce) when a client of the
	// control socket asks the mount to unmount (OpUnmount); Run unmounts.
	stopRequested chan struct{}
	stopOnce      sync.Once
	handover      handoverState // takeover.go
}

// fuseServer serves the mount's FUSE connection: a go-fuse *fuse.Server
// when this process mounted, a *fuseconn.Conn when it took the connection
// over (takeover.go).
type fuseServer interface {
	Wait()
	Unmount() error
}

// requestStop makes Run unmount as if its context ended.
func (m *Mount) requestStop() { m.stopOnce.Do(func() { close(m.stopRequested) }) }

// New validates cfg.
func New(cfg Config) (*Mount, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	src, err := source.Parse(cfg.Source)
	if err != nil {
		return nil, err
	}
	switch {
	case cfg.Mountpoint == "":
		return nil, fmt.Errorf("%w: the mount point is required", ErrInvalidConfig)
	case cfg.CacheDir == "":
		return nil, fmt.Errorf("%w: --cache-dir is required", ErrInvalidConfig)
	case cfg.CacheSize <= 0:
		return nil, fmt.Errorf("%w: --cache-size must be positive, got %d", ErrInvalidConfig, cfg.CacheSize)
	case cfg.ManifestMaxMemory < 0:
		return nil, fmt.Errorf("%w: --%s must not be negative, got %d", ErrInvalidConfig, mountapi.FlagManifestMaxMemory, cfg.ManifestMaxMemory)
	}
	if err := checkMountpoint(cfg); err != nil {
		return nil, err
	}
	if err := validatePeer(&cfg.Peer); err != nil {
		return nil, err
	}
	return &Mount{cfg: cfg, src: src, log: cfg.Logger, stopRequested: make(chan struct{})}, nil
}

// checkMountpoint checks that the mount point is a directory; not when
// recovering its connection: nobody serves it until this mount does.
func checkMountpoint(cfg Config) error {
	if cfg.Recover != nil {
		return nil
	}
	st, err := os.Stat(cfg.Mountpoint)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrMountpoint, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("%w: %s is not a directory", ErrMountpoint, cfg.Mountpoint)
	}
	return nil
}

// Start opens the backend and the cache, mounts, and starts the metrics
// server. On error nothing is left mounted or open.
func (m *Mount) Start(ctx context.Context) (err error) {
	var undo undoList
	defer func() {
		if err != nil {
			undo.run()
		}
	}()
	b, man, err := m.openSource(ctx, &undo)
	if err != nil {
		return err
	}
	if m.cfg.Recover != nil {
		if err := m.recoverConn(b, man); err != nil {
			return err
		}
	} else if m.cfg.Takeover != "" {
		// The running mount exits once this returns: it held the cache
		// lock, the metrics and peer addresses opened below.
		if err := m.takeOver(ctx, b, man); err != nil {
			return err
		}
	}
	store, err := cache.Open(cache.Options{Dir: m.cfg.CacheDir, Capacity: m.cfg.CacheSize, Policy: m.cfg.Policy,
		KeyScheme: m.src.VersionScheme(), Logger: m.log})
	if err != nil {
		if errors.Is(err, cache.ErrLocked) || errors.Is(err, cache.ErrInvalidOptions) {
			return err
		}
		return fmt.Errorf("%w: %w", ErrCacheDir, err)
	}
	undo.add(func() { store.Close() })
	if man != nil {
		store.SetEpochBytes(man.TotalBytes()) // an epoch reads the dataset once (`cachefs stats`)
	}
	reg, b, err := m.serveMetrics(store, b, &undo)
	if err != nil {
		return err
	}
	var ps *peerState
	var peers fusefs.Peers
	if m.cfg.Peer.Scope == mountapi.ScopeCluster {
		if ps, err = m.startPeer(b.ID(), reg, man); err != nil {
			return err
		}
		peers = ps.cluster
	}
	fsys, err := m.newFS(reg, b, store, man, peers, &undo)
	if err != nil {
		return err
	}
	if ps != nil {
		if err := m.servePeer(ps, b.ID(), fsys); err != nil {
			return err
		}
		undo.add(ps.stop)
		m.recordShare(ps, man)
		go m.followShare(ps, man, 2*time.Second)
	}
	var server fuseServer
	if m.handover.taken != nil {
		server, err = m.serveTaken(fsys)
	} else {
		server, err = m.mountFS(fsys)
	}
	if err != nil {
		return err
	}
	m.backend, m.manifest, m.store, m.fsys, m.server, m.peer = b, man, store, fsys, server, ps
	if m.control, err = m.startControl(); err != nil {
		m.log.Warn("no control socket: `cachefs prefetch` cannot reach this mount", "err", err)
		err = nil
	}
	m.listenHandover()
	m.log.Info("mounted", "source", m.src.String(), "mountpoint", m.cfg.Mountpoint,
		"cache_dir", m.cfg.CacheDir, "cache_size", m.cfg.CacheSize, "policy", store.Stats().Policy,
		"metrics", m.metricsAddr)
	return nil
}

// undoList is what Start undoes when it fails: cleanups run in reverse
// order.
type undoList []func()

func (u *undoList) add(f func()) { *u = append(*u, f) }

func (u undoList) run() {
	for i := len(u) - 1; i >= 0; i-- {
		u[i]()
	}
}

// openSource opens the backend and loads the manifest, and proves the
// dataset reachable: fetching the manifest does, else a listing of the
// root (within the listing caps, as every listing of the mount).
func (m *Mount) openSource(ctx context.Context, undo *undoList) (backend.Backend, *manifest.Manifest, error) {
	bopts := m.cfg.Backend
	if bopts.Logger == nil {
		bopts.Logger = m.log
	}
	// No probe at Open: fetching the manifest, or else listing the root,
	// below proves the dataset reachable with one request fewer.
	bopts.Lazy = true
	b, err := all.Open(ctx, m.src, bopts)
	if err != nil {
		return nil, nil, err
	}
	undo.add(func() { b.Close() })
	if m.cfg.wrapBackend != nil {
		b = m.cfg.wrapBackend(b)
	}
	man, err := m.loadManifest(ctx, b, bopts)
	if err != nil {
		return nil, nil, err
	}
	if man != nil {
		if man.Info().Checksums {
			// A mirror checks whole-file reads against the manifest's
			// sha256s and stops reading a file from a replica that
			// disagrees.
			backend.SetChecksums(b, func(p string) []byte {
				if i, ok := man.Find(p); ok {
					return man.Checksum(i)
				}
				return nil
			})
		}
		return b, man, nil
	}
	maxEntries := cmp.Or(m.cfg.MaxDirEntries, fusefs.DefaultMaxDirEntries)
	lctx := backend.WithListLimits(ctx, backend.ListLimits{
		MaxEntries: maxEntries, MaxPages: fusefs.MaxListingPages(maxEntries),
		Memory: backend.NewListMemory(cmp.Or(m.cfg.MaxListingMemory, fusefs.DefaultMaxListingMemory)),
	})
	if _, err := b.List(lctx, ""); err != nil {
		return nil, nil, fmt.Errorf("mount: source %s: %w", m.src, err)
	}
	return b, nil, nil
}

// serveMetrics makes the mount's registry over the store and the backend,
// which it returns observed, and serves it at MetricsAddr when set.
func (m *Mount) serveMetrics(store *cache.Store, b backend.Backend, undo *undoList) (*prometheus.Registry, backend.Backend, error) {
	reg, observer := newRegistry(store.Stats, b)
	reg.MustRegister(&m.handover.counters)
	m.registry = reg
	b = backend.WithObserver(b, observer)
	if m.cfg.MetricsAddr == "" {
		return reg, b, nil
	}
	mctx, stop := context.WithCancel(context.Background())
	addr, err := metrics.Serve(mctx, m.cfg.MetricsAddr, reg)
	if err != nil {
		stop()
		return nil, nil, err
	}
	m.stopMetrics, m.metricsAddr = stop, addr
	undo.add(stop)
	return reg, b, nil
}

// newFS builds the file system and registers its listing and readahead
// metrics.
func (m *Mount) newFS(reg *prometheus.Registry, b backend.Backend, store *cache.Store, man *manifest.Manifest, peers fusefs.Peers, undo *undoList) (*fusefs.FS, error) {
	nodes, err := m.openNodeTable(man)
	if err != nil {
		return nil, err
	}
	fsys, err := fusefs.New(fusefs.Options{
		Peers:        peers,
		Backend:      b,
		Store:        store,
		Manifest:     man,
		WholeFileMax: m.cfg.WholeFileMax,
		BlockSize:    m.cfg.BlockSize,
		Readahead:    m.cfg.Readahead,
		ReadTimeout:  m.cfg.ReadTimeout,
		Logger:       m.log,
		// The backing table (recover.go): passthrough ids survive a crash.
		NoPassthrough: m.cfg.NoPassthrough,
		BackingTable:  m.openBackingTable(),
		// The node table (recover.go): without a manifest, node ids
		// survive a crash.
		NodeTable: nodes,

		ListingCacheEntries: m.cfg.ListingCacheEntries,
		MaxDirEntries:       m.cfg.MaxDirEntries,
		MaxListingMemory:    m.cfg.MaxListingMemory,
		ReadaheadFiles:      m.cfg.ReadaheadFiles,
	})
	if err != nil {
		return nil, err
	}
	undo.add(fsys.Close)
	metrics.RegisterListings(reg, func() metrics.Listings {
		r := fsys.ListingRefusals()
		return metrics.Listings{Entries: r.Entries, Memory: r.Memory, Pages: r.Pages, PageSize: r.PageSize}
	})
	metrics.RegisterPassthrough(reg, func() metrics.Passthrough {
		c := fusefs.ReadCounters()
		return metrics.Passthrough{Opens: c.PassthroughOpens, CachedReads: c.CachedReads}
	})
	metrics.RegisterReadahead(reg, func() metrics.Readahead {
		st := fsys.ReadaheadState()
		return metrics.Readahead{Auto: st.Auto, Window: st.Window, Latency: st.Latency, Files: fusefs.ReadCounters().FilesReadAhead}
	})
	return fsys, nil
}

// mountFS mounts fsys on the mount point and waits for the kernel.
func (m *Mount) mountFS(fsys *fusefs.FS) (*fuse.Server, error) {
	server, err := fsys.Mount(m.cfg.Mountpoint, m.mountOptions())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMountpoint, err)
	}
	if err := server.WaitMount(); err != nil {
		_ = server.Unmount()
		return nil, fmt.Errorf("%w: waiting for the mount: %w", ErrMountpoint, err)
	}
	return server, nil
}

// loadManifest returns the manifest selected by cfg.Manifest (see
// manifest.Discover), or nil to mount from backend listings.
func (m *Mount) loadManifest(ctx context.Context, b backend.Backend, bopts backend.Options) (*manifest.Manifest, error) {
	start := time.Now()
	man, where, err := manifest.DiscoverMax(ctx, b, m.cfg.Manifest, bopts, m.cfg.ManifestMaxMemory)
	switch {
	case errors.Is(err, manifest.ErrTooLarge):
		limit := m.cfg.ManifestMaxMemory
		if limit == 0 {
			limit = manifest.DefaultMaxMemory
		}
		return nil, fmt.Errorf("mount: %w: raise --%s (now %s) or mount with --%s %s",
			err, mountapi.FlagManifestMaxMemory, units.FormatSize(limit), mountapi.FlagManifest, mountapi.ManifestNone)
	case err != nil:
		return nil, fmt.Errorf("mount: %w", err)
	case man == nil && m.cfg.Manifest == mountapi.ManifestNone:
		m.log.Info("no manifest: names come from backend listings", "reason", "--manifest none")
		return nil, nil
	case man == nil:
		m.log.Info("no manifest: names come from backend listings", "looked_for", where)
		return nil, nil
	}
	info := man.Info()
	m.log.Info("manifest loaded", "manifest", where, "files", man.Files(), "dirs", man.Dirs(),
		"bytes", man.TotalBytes(), "created", info.Created, "checksums", info.Checksums,
		"load_time", time.Since(start).Round(time.Millisecond),
		"memory_overhead_bytes_per_file", float64(man.OverheadBytes())/float64(max(man.Files(), 1)))
	if info.Source != b.ID() {
		m.log.Warn("the manifest was built from another source; if its version tokens differ from this source's, every read fails with EIO",
			"manifest_source", info.Source, "source", b.ID())
	}
	return man, nil
}

// Manifest returns the manifest the mount serves from, or nil (after Start).
func (m *Mount) Manifest() *manifest.Manifest { return m.manifest }

// MetricsAddr is the bound metrics address after Start ("" when disabled).
func (m *Mount) MetricsAddr() string { return m.metricsAddr }

// Stats returns the cache counters (after Start).
func (m *Mount) Stats() cache.Stats { return m.store.Stats() }

// Wait blocks until the file system is unmounted.
func (m *Mount) Wait() { m.server.Wait() }

// Unmount unmounts (lazily if the mount is busy), waits for the server to
// stop, and closes the cache and the backend.
//
// go-fuse's unmount waits for every FUSE request in flight, and a request
// may wait for a backend fetch (bounded only by --read-timeout, minutes).
// So when the unmount has not finished after unmountGrace, the backend
// fetches are cancelled (their readers get EINTR: the mount is going away)
// and, if it still hangs after unmountStacks more, every goroutine's stack
// goes to stderr (the mount's log) so that the hang can be diagnosed.
func (m *Mount) Unmount() error {
	var errs []error
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := m.server.Unmount(); err != nil {
			// Busy (a reader still has files open): detach now; the kernel
			// finishes the unmount when the last file closes.
			if derr := syscall.Unmount(m.cfg.Mountpoint, syscall.MNT_DETACH); derr != nil {
				errs = append(errs, fmt.Errorf("mount: unmount %s: %v; lazy unmount: %w", m.cfg.Mountpoint, err, derr))
			}
		}
		m.server.Wait()
	}()
	select {
	case <-done:
	case <-time.After(unmountGrace):
		m.log.Warn("unmount is waiting for FUSE requests in flight; cancelling backend fetches",
			"mountpoint", m.cfg.Mountpoint, "waited", unmountGrace)
		m.fsys.Close()
		select {
		case <-done:
		case <-time.After(unmountStacks):
			m.log.Error("unmount still waiting; every goroutine's stack follows on stderr",
				"mountpoint", m.cfg.Mountpoint, "waited", unmountGrace+unmountStacks)
			_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 2)
			<-done
		}
	}
	return errors.Join(append(errs, m.close())...)
}

// How long Unmount waits before cancelling backend fetches, then before
// dumping stacks (variables for tests).
var (
	unmountGrace  = 5 * time.Second
	unmountStacks = 10 * time.Second
)

func (m *Mount) close() error {
	if m.handover.ln != nil {
		m.handover.ln.Close()
	}
	if m.control != nil {
		m.control.close() // cancels and waits for prefetches using the store
	}
	if m.peer != nil {
		m.peer.stop()
	}
	m.fsys.Close()
	if m.stopMetrics != nil {
		m.stopMetrics()
	}
	return errors.Join(m.store.Close(), m.backend.Close())
}

// Run mounts and serves until ctx is done (then unmounts) or the mount is
// unmounted from outside (e.g. `umount`).
func (m *Mount) Run(ctx context.Context) error {
	if err := m.Start(ctx); err != nil {
		return err
	}
	unmounted := make(chan struct{})
	go func() { m.Wait(); close(unmounted) }()
	select {
	case <-ctx.Done():
		m.log.Info("unmounting", "mountpoint", m.cfg.Mountpoint, "reason", context.Cause(ctx))
		return m.Unmount()
	case <-m.stopRequested:
		m.log.Info("unmounting", "mountpoint", m.cfg.Mountpoint, "reason", "asked over the control socket (cachefs umount)")
		return m.Unmount()
	case <-unmounted:
		m.log.Info("unmounted from outside", "mountpoint", m.cfg.Mountpoint)
		return m.close()
	case <-m.handover.done:
		// The successor serves the connection and waits for this process
		// to end: exit without unmounting, and soon.
		m.log.Info("handed over", "mountpoint", m.cfg.Mountpoint)
		return m.closeWithin(handedOverClose)
	}
}
