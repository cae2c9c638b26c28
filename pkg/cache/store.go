package cache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"
)

const (
	// maxAttempts bounds how often one Get goes round again after losing
	// a race (an entry evicted between the fill and the open, a coalesced
	// leader whose own context ended).
	maxAttempts = 3
	// writePause is how long the store stops admitting after the disk
	// said it is full or read-only.
	writePause = 30 * time.Second
	// writeLogEvery rate-limits the warning for failed entry writes.
	writeLogEvery = time.Minute
)

// Loader fills p completely with the bytes of the entry (len(p) == the
// entry size), or returns an error. A Loader that cannot fill p (a short
// read) must return an error such as io.ErrUnexpectedEOF: the store cannot
// tell a partly filled p from a complete one (p is not cleared: it may
// hold another entry's bytes). A Loader must not use p after it returns:
// the store reuses its buffers.
type Loader func(ctx context.Context, p []byte) error

// Result is what Get returns: exactly one of File and Data is set.
type Result struct {
	// File is the entry's cache file, opened read-only; offset 0 is byte 0
	// of the entry. Set on a hit or a new admission. The caller closes it.
	File *os.File
	// Data holds the bytes when they were read through and not admitted
	// (File is nil then). It is shared read-only between coalesced callers:
	// never modify it.
	Data []byte
	// Hit is true when the bytes came from the cache without calling load.
	Hit bool
}

// Stats are the store's counters since Open, and its current occupancy.
type Stats struct {
	Hits, Misses        int64 // Gets served from the cache / not
	HitBytes, MissBytes int64 // the size of each Get, added to one of them
	Entries             int64 // complete entries held
	UsedBytes           int64 // bytes of held entries, plus entries being written
	CapacityBytes       int64
	Admissions          int64 // entries written into the cache
	Rejections          int64 // misses the policy (or a full disk) did not admit
	Evictions           int64 // entries removed by the policy (never for NR)
	CorruptDropped      int64 // recovered entries that failed their checksum, dropped
	LoadErrors          int64 // loader calls that failed (once per coalesced load)
	WriteErrors         int64 // admitted entries whose write failed; served uncached
	// Prefetch fills: entries admitted by Fill (cachefs prefetch, the
	// mount's readahead), counted neither as hits nor as misses, and
	// included in Admissions.
	PrefetchFills, PrefetchFillBytes int64
	// Prefetched hits: the hits (included in Hits and HitBytes) that were
	// the first lookup of an entry a prefetch fill admitted in this
	// process. Hits − PrefetchedHits are the lookups served from entries
	// that an earlier lookup cached (or that were recovered at Open, or
	// were read before).
	PrefetchedHits, PrefetchedHitBytes int64
	Policy                             string
	// Epoch is the current epoch (from 1) when SetEpochBytes gave the
	// dataset's size, else 0; the Epoch…Bytes are its share of HitBytes,
	// MissBytes and PrefetchedHitBytes (epoch.go).
	Epoch                                                  int64
	EpochHitBytes, EpochMissBytes, EpochPrefetchedHitBytes int64
}

// entry is the in-memory record of one cache entry.
type entry struct {
	size     int64
	ready    bool // false while being written: not servable, bytes reserved
	verified bool // checksum known good in this process (always, for entries written by it)
	// prefetched: admitted by a prefetch fill (Fill) and not looked up by
	// a Get since.
	prefetched bool
}

// Store is a node-local disk cache. It is safe for concurrent use.
//
// Concurrency: the fields in the first group are set by Open and never
// change. Counters are atomics. mu guards the in-memory index (entries,
// used, nready), closed, the write-failure state and every call into
// policy; it is never held across a Loader call or across reading or
// writing entry bytes, only across metadata operations (unlinking evicted
// or dropped entries). Lock order: mu, then whatever lock the policy takes
// inside its own methods (NR takes none); nothing else is taken under mu. Fills of one entry id
// are serialized by flights, so at most one goroutine loads, writes,
// verifies or drops a given id at a time (evictions by other fills are the
// exception, and are handled under mu: see admit).
type Store struct {
	// Immutable after Open.
	dir        string
	entriesDir string
	capacity   int64
	policyName string
	log        *slog.Logger
	lockFile   *os.File           // the flocked <dir>/LOCK; released by Close
	flights    singleflight.Group // keyed by entry id; coalesces fills

	// sidecar: write checksum records to .sum files, not to the data
	// file's xattr (set at Open for tests, or once the filesystem turned
	// out to have no user xattrs; never cleared).
	sidecar atomic.Bool

	// ops counts Gets and fills in progress; Close waits for it. Add(1)
	// happens only in begin, with mu held and closed false.
	ops sync.WaitGroup

	hits, misses, hitBytes, missBytes       atomic.Int64
	admissions, rejections, evictions       atomic.Int64
	corruptDropped, loadErrors, writeErrors atomic.Int64
	prefetchFills, prefetchFillBytes        atomic.Int64
	prefetchedHits, prefetchedHitBytes      atomic.Int64
	epoch                                   epochs // epoch.go

	mu          sync.Mutex
	closed      bool
	entries     map[string]*entry // by id, entries being written included
	used        int64             // sum of entries[*].size: exact, reservations included
	nready      int64             // entries with ready set
	policy      Policy
	pausedUntil time.Time // admit nothing before this (disk full or read-only)
	lastWarn    time.Time // last write-failure warning
	suppressed  int       // write failures not logged since lastWarn
}

// Open opens (creating it if needed) the cache directory opts.Dir, takes
// its lock, and recovers the entries already there: *.tmp files and
// orphans (data without a checksum record, in its xattr or a .sum sidecar,
// or a sidecar without data) are removed,
// used bytes are recomputed from the files, and the policy is seeded with
// the entries oldest first (by mtime). If the capacity shrank below what is
// held, NR keeps everything and admits nothing (a policy that evicts may
// evict down to capacity). Recovered entries are verified against their checksum
// when first served.
//
// Errors: ErrInvalidOptions for bad options, ErrLocked if another store
// holds the directory. A failed Open closes opts.Policy when it is an
// io.Closer.
func Open(opts Options) (_ *Store, err error) {
	defer func() {
		if c, ok := opts.Policy.(io.Closer); ok && err != nil {
			_ = c.Close()
		}
	}()
	if opts, err = opts.validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("cache: create %s: %w", opts.Dir, err)
	}
	lf, err := lockDir(opts.Dir)
	if err != nil {
		return nil, err
	}
	s := &Store{
		dir:        opts.Dir,
		entriesDir: filepath.Join(opts.Dir, entriesName),
		capacity:   opts.Capacity,
		policyName: opts.Policy.Name(),
		policy:     opts.Policy,
		log:        opts.Logger,
		lockFile:   lf,
		entries:    map[string]*entry{},
	}
	s.sidecar.Store(opts.sidecar)
	if err := s.open(opts); err != nil {
		_ = unlockDir(lf)
		return nil, err
	}
	return s, nil
}

func (s *Store) open(opts Options) error {
	prev, err := readMeta(s.dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		s.log.Warn("cache: ignoring unreadable metadata, rewriting it", "dir", s.dir, "err", err)
	case prev.FormatVersion > formatVersion:
		return fmt.Errorf("cache: %s has format version %d, this build knows only %d", s.dir, prev.FormatVersion, formatVersion)
	}
	// Entries keyed under another scheme are dropped; a caller that names
	// none changes nothing. Until they are gone, the metadata keeps naming
	// the old scheme, so that a crash in between drops them at the next
	// Open instead of keeping them unreachable.
	drop := opts.KeyScheme != "" && prev.KeyScheme != opts.KeyScheme
	m := meta{FormatVersion: formatVersion, Policy: s.policyName, CapacityBytes: s.capacity, KeyScheme: prev.KeyScheme}
	if err := writeMeta(s.dir, m); err != nil {
		return err
	}
	if err := makeEntriesDir(s.entriesDir); err != nil {
		return err
	}
	if drop {
		s.log.Info("cache: dropping the entries keyed under another version scheme", "dir", s.dir,
			"recorded", prev.KeyScheme, "now", opts.KeyScheme)
	}
	if err := s.recover(drop); err != nil {
		return err
	}
	if drop {
		m.KeyScheme = opts.KeyScheme
		return writeMeta(s.dir, m)
	}
	return nil
}

// begin registers an operation, unless the store is closed.
func (s *Store) begin() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.ops.Add(1)
	return nil
}

// Contains reports whether key is held (complete, or recovered and not yet
// verified). It touches no counter and no policy state.
func (s *Store) Contains(key Key) bool {
	id := key.id()
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[id]
	return e != nil && e.ready
}

// Stats returns the counters and occupancy.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	entries, used := s.nready, s.used
	s.mu.Unlock()
	st := Stats{
		Hits:           s.hits.Load(),
		Misses:         s.misses.Load(),
		HitBytes:       s.hitBytes.Load(),
		MissBytes:      s.missBytes.Load(),
		Entries:        entries,
		UsedBytes:      used,
		CapacityBytes:  s.capacity,
		Admissions:     s.admissions.Load(),
		Rejections:     s.rejections.Load(),
		Evictions:      s.evictions.Load(),
		CorruptDropped: s.corruptDropped.Load(),
		LoadErrors:     s.loadErrors.Load(),
		WriteErrors:    s.writeErrors.Load(),
		Policy:         s.policyName,

		PrefetchFills:      s.prefetchFills.Load(),
		PrefetchFillBytes:  s.prefetchFillBytes.Load(),
		PrefetchedHits:     s.prefetchedHits.Load(),
		PrefetchedHitBytes: s.prefetchedHitBytes.Load(),
	}
	s.epochStats(&st)
	return st
}

// Close waits for Gets in progress (cancel their contexts to hurry them),
// stops the policy's goroutines and releases the directory lock. Files
// returned by Get stay valid. Later Gets fail with ErrClosed; Close is
// idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.ops.Wait()
	var errs []error
	if c, ok := s.policy.(io.Closer); ok {
		errs = append(errs, c.Close())
	}
	if err := unlockDir(s.lockFile); err != nil {
		errs = append(errs, fmt.Errorf("cache: unlock %s: %w", s.dir, err))
	}
	return errors.Join(errs...)
}
