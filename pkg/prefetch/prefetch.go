// Package prefetch warms a node's cache before training: it fills the set of
// entries that a mount of the same dataset keeps under NR, up to the cache's
// capacity, with parallel backend reads, and then says how much of the
// dataset is cached.
//
// Files come from the dataset manifest when there is one, else from a
// parallel walk of the backend (manifest.Index), and are taken in path order
// — the manifest's order — so repeated runs converge on the same set. Each
// file's entries are derived by cache.FileKeys with the mount's split (whole
// files up to WholeFileMax, blocks of BlockSize beyond), under the backend's
// ID as the dataset, so a later mount of the same source on the same cache
// directory hits what a prefetch cached. Like NR, the plan admits every
// entry that still fits, in order: an entry that does not fit is skipped
// and smaller ones after it are still tried.
//
// Entries already held are skipped (a rerun resumes). Cancelling the
// context stops the reads in flight; the store never holds a partial entry,
// and the Summary reports what is really cached (it is computed from the
// store at the end, never from intentions). A Summary is "complete" only
// when every file of the dataset is cached.
//
// The package knows the backend, the manifest and the cache; it knows
// nothing of FUSE, mounts or CSI (a mount process runs it against its own
// store through its control socket, see pkg/mount).
package prefetch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/cache"
	"github.com/epochfs/epochfs/pkg/manifest"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// Defaults of Config.
const (
	DefaultWorkers     = 16
	DefaultReadTimeout = 2 * time.Minute
	// cancelGrace is how long reads in flight may go on after the run's
	// context ends.
	cancelGrace = 2 * time.Second
	// maxErrors bounds the error messages kept in a Summary.
	maxErrors = 10
)

// Phases of a Progress.
const (
	PhaseListing  = "listing"  // walking the backend (no manifest)
	PhasePlanning = "planning" // checking which entries are held and which fit
	PhaseFetching = "fetching" // reading and caching
	PhaseDone     = "done"
)

// Config of one prefetch. Validated by New.
type Config struct {
	// Backend is the dataset's home; its ID() is the cache keys' dataset.
	// Required.
	Backend backend.Backend
	// Store is the cache to fill. Required. The plan assumes the NR policy
	// (admit while it fits, never evict).
	Store *cache.Store
	// Manifest, when set, names the files; otherwise the backend is walked.
	Manifest *manifest.Manifest
	// WholeFileMax and BlockSize must be the mount's (see cache.FileKeys);
	// zero takes cache.DefaultWholeFileMax and cache.DefaultBlockSize.
	WholeFileMax int64
	BlockSize    int64
	// Workers bounds the concurrent backend reads (and listings). Default
	// DefaultWorkers. Writing an entry into the cache does not hold a read
	// slot: up to Workers entries are being read and up to Workers more
	// written at a time, each held in memory (up to max(WholeFileMax,
	// BlockSize) bytes).
	Workers int
	// ReadTimeout bounds the read of one entry, retries included. Default
	// DefaultReadTimeout.
	ReadTimeout time.Duration
	// Logger receives warnings (unreadable files). Default: discard.
	Logger *slog.Logger
	// Owns, when set, keeps only the files it returns true for: in a
	// cluster-scope cache (pkg/peer) the files this node owns. The others
	// are left out of the plan and of the Summary's dataset (Files, Bytes,
	// "complete"), since this node never caches them.
	Owns func(path string) bool
}

// Progress is a snapshot of a running prefetch (its fields are documented
// at mountapi.PrefetchProgress, which it is so that the control socket
// sends it as is).
type Progress = mountapi.PrefetchProgress

// Prefetcher runs one prefetch. Progress may be called from any goroutine
// while Run runs.
//
// cfg, dataset and log are immutable after New; the counters are atomics;
// mu guards phase, errs, fetchStart and ran.
type Prefetcher struct {
	cfg     Config
	dataset string
	log     *slog.Logger
	start   time.Time

	listing                    manifest.Progress
	files, bytes               atomic.Int64
	alreadyFiles, alreadyBytes atomic.Int64
	plannedFiles, plannedBytes atomic.Int64
	doneFiles, doneBytes       atomic.Int64
	fetchedBytes, failedFiles  atomic.Int64

	mu         sync.Mutex
	phase      string
	fetchStart time.Time
	errs       []string
	ran        bool
}

// New validates cfg and returns a Prefetcher ready to Run.
func New(cfg Config) (*Prefetcher, error) {
	switch {
	case cfg.Backend == nil || cfg.Store == nil:
		return nil, errors.New("prefetch: Backend and Store are required")
	case cfg.WholeFileMax < 0:
		return nil, fmt.Errorf("prefetch: WholeFileMax %d must not be negative", cfg.WholeFileMax)
	case cfg.BlockSize < 0 || cfg.BlockSize > 0 && cfg.BlockSize < 4096:
		return nil, fmt.Errorf("prefetch: BlockSize %d must be at least 4096", cfg.BlockSize)
	case cfg.Workers < 0:
		return nil, fmt.Errorf("prefetch: Workers %d must not be negative", cfg.Workers)
	}
	if cfg.WholeFileMax == 0 {
		cfg.WholeFileMax = cache.DefaultWholeFileMax
	}
	if cfg.BlockSize == 0 {
		cfg.BlockSize = cache.DefaultBlockSize
	}
	if cfg.Workers == 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = DefaultReadTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Prefetcher{cfg: cfg, dataset: cfg.Backend.ID(), log: cfg.Logger, phase: PhaseListing}, nil
}

// Progress returns a snapshot of the counters.
func (p *Prefetcher) Progress() Progress {
	p.mu.Lock()
	phase, fetchStart, start := p.phase, p.fetchStart, p.start
	p.mu.Unlock()
	pr := Progress{
		Phase:        phase,
		DatasetFiles: p.files.Load(),
		DatasetBytes: p.bytes.Load(),
		ListedDirs:   p.listing.Dirs.Load(),
		AlreadyFiles: p.alreadyFiles.Load(),
		AlreadyBytes: p.alreadyBytes.Load(),
		PlannedFiles: p.plannedFiles.Load(),
		PlannedBytes: p.plannedBytes.Load(),
		DoneFiles:    p.doneFiles.Load(),
		DoneBytes:    p.doneBytes.Load(),
		FetchedBytes: p.fetchedBytes.Load(),
		FailedFiles:  p.failedFiles.Load(),
		ETASeconds:   -1,
	}
	if phase == PhaseListing && p.cfg.Manifest == nil {
		pr.DatasetFiles, pr.DatasetBytes = p.listing.Files.Load(), p.listing.Bytes.Load()
	}
	if !start.IsZero() {
		pr.ElapsedSeconds = time.Since(start).Seconds()
	}
	if !fetchStart.IsZero() {
		if el := time.Since(fetchStart).Seconds(); el > 0 {
			pr.BytesPerSecond = float64(pr.DoneBytes) / el
		}
		switch {
		case pr.DoneBytes >= pr.PlannedBytes:
			pr.ETASeconds = 0
		case pr.BytesPerSecond > 0:
			pr.ETASeconds = float64(pr.PlannedBytes-pr.DoneBytes) / pr.BytesPerSecond
		}
	}
	return pr
}

func (p *Prefetcher) setPhase(ph string) {
	p.mu.Lock()
	p.phase = ph
	if ph == PhaseFetching {
		p.fetchStart = time.Now()
	}
	p.mu.Unlock()
}

// task is one entry to fetch: span number span of file number file (an
// index into plan.files).
type task struct {
	file int32
	span int32
}

// plan is what Run works from.
type plan struct {
	m         *manifest.Manifest
	files     []int32 // manifest entry numbers of the files, in path order
	tasks     []task
	remaining []atomic.Int32 // per file: planned entries not yet done
	failed    []atomic.Bool  // per file: an entry could not be cached
	admitted  []atomic.Bool  // per file: this run admitted an entry
	complete  []bool         // per file: every entry held before this run
	handled   atomic.Int64   // tasks done, cached or not
	bytes     int64          // of the files (Config.Owns' share of the dataset)
}

// Run lists (unless a manifest was given), plans and fetches. It returns an
// error only when the run cannot start or the listing fails; per-file
// failures and interruptions are reported in the Summary (State). Run may
// be called once.
func (p *Prefetcher) Run(ctx context.Context) (Summary, error) {
	p.mu.Lock()
	if p.ran {
		p.mu.Unlock()
		return Summary{}, errors.New("prefetch: Run called twice")
	}
	p.ran, p.start = true, time.Now()
	p.mu.Unlock()
	defer p.setPhase(PhaseDone)

	sum := Summary{
		Dataset:      p.dataset,
		Manifest:     p.cfg.Manifest != nil,
		WholeFileMax: p.cfg.WholeFileMax,
		BlockSize:    p.cfg.BlockSize,
		Workers:      p.cfg.Workers,
	}
	m, err := p.manifest(ctx)
	if err != nil {
		if ctx.Err() != nil {
			p.setStore(&sum)
			sum.State, sum.Message = StateInterrupted, "interrupted while listing the dataset: nothing fetched"
			return sum, nil
		}
		return Summary{}, fmt.Errorf("prefetch: %w", err)
	}

	p.setPhase(PhasePlanning)
	pl := p.plan(m)
	p.setPhase(PhaseFetching)
	p.fetch(ctx, pl)
	interrupted := pl.handled.Load() < int64(len(pl.tasks))
	p.tally(&sum, m, pl)
	switch {
	case sum.CachedFiles == sum.Files:
		sum.State = StateComplete
	case interrupted:
		sum.State = StateInterrupted
	case sum.FailedFiles > 0:
		sum.State = StateFailed
	default:
		sum.State = StateCacheFull
	}
	sum.Message = message(sum)
	return sum, nil
}

// manifest returns Config.Manifest, warning when it was built from another
// source, or else lists the backend into one.
func (p *Prefetcher) manifest(ctx context.Context) (*manifest.Manifest, error) {
	if p.cfg.Manifest == nil {
		m, _, err := manifest.Index(ctx, p.cfg.Backend, manifest.IndexOptions{Workers: p.cfg.Workers, Progress: &p.listing, Logger: p.log})
		return m, err
	}
	m := p.cfg.Manifest
	if src := m.Info().Source; src != p.dataset {
		p.log.Warn("prefetch: the manifest was built from another source; if its version tokens differ from this source's, its files cannot be read",
			"manifest_source", src, "source", p.dataset)
	}
	return m, nil
}

// spans returns the cache entries of manifest entry i.
func (p *Prefetcher) spans(m *manifest.Manifest, i int32) []cache.KeySpan {
	idx := int(i)
	return cache.FileKeys(p.dataset, m.Path(idx), m.Version(idx), m.Size(idx), p.cfg.WholeFileMax, p.cfg.BlockSize)
}

// plan walks the files in path order and, like NR reading them in that
// order, takes every entry that is not held and still fits.
func (p *Prefetcher) plan(m *manifest.Manifest) *plan {
	pl := &plan{m: m}
	m.Walk(func(i int, path string) bool {
		if p.cfg.Owns == nil || p.cfg.Owns(path) {
			pl.files = append(pl.files, int32(i))
			pl.bytes += m.Size(i)
		}
		return true
	})
	p.files.Store(int64(len(pl.files)))
	p.bytes.Store(pl.bytes)
	pl.remaining = make([]atomic.Int32, len(pl.files))
	pl.failed = make([]atomic.Bool, len(pl.files))
	pl.admitted = make([]atomic.Bool, len(pl.files))
	pl.complete = make([]bool, len(pl.files))
	st := p.cfg.Store.Stats()
	room := st.CapacityBytes - st.UsedBytes
	for fi, idx := range pl.files {
		spans := p.spans(m, idx)
		held, planned := 0, int32(0)
		for si, sp := range spans {
			switch {
			case p.cfg.Store.Contains(sp.Key):
				held++
				p.alreadyBytes.Add(sp.Length)
			case sp.Length <= room:
				room -= sp.Length
				pl.tasks = append(pl.tasks, task{file: int32(fi), span: int32(si)})
				planned++
				p.plannedBytes.Add(sp.Length)
			}
		}
		if held == len(spans) {
			pl.complete[fi] = true
			p.alreadyFiles.Add(1)
		}
		if planned > 0 {
			pl.remaining[fi].Store(planned)
			p.plannedFiles.Add(1)
		}
	}
	return pl
}

// fetch runs the tasks in plan order, until they are all handled or ctx
// ends, with 2×Workers goroutines of which at most Workers read from the
// backend at a time (see loader): the others are writing what they read
// into the cache, so the backend is kept busy while entries are written.
func (p *Prefetcher) fetch(ctx context.Context, pl *plan) {
	var next atomic.Int64
	var wg sync.WaitGroup
	reads := make(chan struct{}, p.cfg.Workers)
	for range min(2*p.cfg.Workers, max(len(pl.tasks), 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lastFile := int32(-1)
			var spans []cache.KeySpan
			for {
				i := next.Add(1) - 1
				if i >= int64(len(pl.tasks)) || ctx.Err() != nil {
					return
				}
				t := pl.tasks[i]
				if t.file != lastFile {
					lastFile, spans = t.file, p.spans(pl.m, pl.files[t.file])
				}
				admitted, err := p.fetchOne(ctx, spans[t.span], reads)
				if admitted {
					pl.admitted[t.file].Store(true)
				}
				if err != nil && ctx.Err() != nil {
					return // not handled: the run was interrupted
				}
				if err != nil && !pl.failed[t.file].Swap(true) {
					p.failedFiles.Add(1)
				}
				pl.handled.Add(1)
				p.doneBytes.Add(spans[t.span].Length)
				if pl.remaining[t.file].Add(-1) == 0 {
					p.doneFiles.Add(1)
				}
			}
		}()
	}
	wg.Wait()
}

// fetchOne reads one entry through the store and reports whether this run
// admitted it. An entry that no longer fits (another reader of the store
// filled it) is not an error.
func (p *Prefetcher) fetchOne(ctx context.Context, sp cache.KeySpan, reads chan struct{}) (admitted bool, err error) {
	store := p.cfg.Store
	if st := store.Stats(); st.UsedBytes+sp.Length > st.CapacityBytes {
		// Another reader of the store (a mount) filled it meanwhile:
		// reading would be in vain, NR would not admit it.
		return false, nil
	}
	// The read outlives an interruption by up to cancelGrace, so that an
	// entry being written when ctx ends is in the store (or not) before the
	// summary counts what is cached.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.ReadTimeout)
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(cancelGrace, cancel)
		context.AfterFunc(fctx, func() { t.Stop() })
	})
	defer stop()
	// Fill, not Get: a warm-up is not a lookup (a mount's hit and miss
	// counters stay the readers'), and nothing needs the entry opened.
	res, gerr := store.Fill(fctx, sp.Key, sp.Length, p.loader(sp, reads))
	switch {
	case gerr != nil && ctx.Err() != nil:
		return false, gerr
	case gerr != nil:
		p.fail(sp.Key, gerr)
		return false, gerr
	case res.Cached:
		if res.Loaded {
			p.fetchedBytes.Add(sp.Length)
		}
		return res.Loaded, nil
	}
	// Read but not admitted: filled meanwhile by another reader, or the
	// cache disk failed (the store logs that).
	if st := store.Stats(); st.UsedBytes+sp.Length <= st.CapacityBytes {
		err = errors.New("the cache did not admit it although it fits (cache disk full or failing? see the log)")
		p.fail(sp.Key, err)
		return false, err
	}
	return false, nil
}

// fail records an entry that could not be cached.
func (p *Prefetcher) fail(key cache.Key, err error) {
	msg := fmt.Sprintf("%s: %v", key.Path, err)
	p.log.Warn("prefetch: cannot cache", "path", key.Path, "block", key.Block, "err", err)
	p.mu.Lock()
	if len(p.errs) < maxErrors {
		p.errs = append(p.errs, msg)
	}
	p.mu.Unlock()
}

// loader reads one entry's bytes from the backend with the listed version,
// holding one of the read slots (a buffered channel of Workers) meanwhile.
func (p *Prefetcher) loader(sp cache.KeySpan, reads chan struct{}) cache.Loader {
	return func(ctx context.Context, buf []byte) error {
		select {
		case reads <- struct{}{}:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		defer func() { <-reads }()
		return backend.ReadFull(ctx, p.cfg.Backend, sp.Key.Path, sp.Key.Version, buf, sp.Offset)
	}
}
