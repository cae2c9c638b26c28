package cache

import (
	"bytes"
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
	"golang.org/x/sys/unix"
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
// or dropped entries). Lock order: mu, then the policy's own lock
// (tinyLFUPolicy.mu); nothing else is taken under mu. Fills of one entry id
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
// held, NR keeps everything and admits nothing; the other policies evict
// down to capacity. Recovered entries are verified against their checksum
// when first served.
//
// Errors: ErrInvalidOptions for bad options, ErrLocked if another store
// holds the directory.
func Open(opts Options) (*Store, error) {
	opts, err := opts.validate()
	if err != nil {
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
		policyName: opts.Policy,
		log:        opts.Logger,
		lockFile:   lf,
		entries:    map[string]*entry{},
	}
	s.sidecar.Store(opts.sidecar)
	if err := s.open(opts); err != nil {
		if c, ok := s.policy.(io.Closer); ok {
			_ = c.Close()
		}
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
	if s.policy, err = newPolicy(s.policyName, s.capacity, opts.seed); err != nil {
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

// Get returns the bytes of key, which are size bytes long, from the cache
// or, on a miss, from load.
//
// Every Get that passes its argument checks counts exactly one hit or one
// miss, adding size to HitBytes or MissBytes, whether it then succeeds or
// not. Concurrent Gets of one key that miss are coalesced into one load;
// each caller counts a miss (the bytes were not in the cache when it asked)
// and, if the entry was admitted, gets its own *os.File. A caller whose
// context ends stops waiting (the shared load goes on for the others; if
// the load's own caller went away, the others try again).
//
// On a miss the store allocates size bytes in memory for load, so size is
// meant to be a whole small file or one fixed-size block of a large one.
//
// A load error is returned wrapped ("cache: load KEY: ...") and nothing is
// admitted. A failure of the cache disk is never returned: the loaded bytes
// come back in Result.Data instead.
func (s *Store) Get(ctx context.Context, key Key, size int64, load Loader) (Result, error) {
	if err := s.start("get", key, size, load); err != nil {
		return Result{}, err
	}
	defer s.ops.Done()
	id := key.id()
	res, err := s.get(ctx, key, id, size, load)
	// Looked up now: no longer unread. (No lock taken when nothing was
	// ever prefetched.)
	prefetched := s.prefetchFills.Load() > 0 && s.takePrefetched(id)
	if res.Hit {
		s.hits.Add(1)
		s.hitBytes.Add(size)
		if prefetched {
			s.prefetchedHits.Add(1)
			s.prefetchedHitBytes.Add(size)
		}
	} else {
		s.misses.Add(1)
		s.missBytes.Add(size)
	}
	return res, err
}

// takePrefetched reports whether id is an entry a prefetch fill admitted
// that no Get has looked up since, and clears the mark.
func (s *Store) takePrefetched(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[id]
	if e == nil || !e.prefetched {
		return false
	}
	e.prefetched = false
	return true
}

// start checks the arguments of a Get or Fill (op) and registers it (see
// begin); the caller calls s.ops.Done when start returned nil.
func (s *Store) start(op string, key Key, size int64, load Loader) error {
	switch {
	case size < 0:
		return fmt.Errorf("cache: %s %s: negative size %d", op, key, size)
	case key.Block < 0:
		return fmt.Errorf("cache: %s %s: negative block %d", op, key, key.Block)
	case load == nil:
		return fmt.Errorf("cache: %s %s: nil loader", op, key)
	}
	return s.begin()
}

// FillResult is what Fill returns.
type FillResult struct {
	// Cached is true when the entry is in the cache after the call.
	Cached bool
	// Loaded is true when the fill that answered this call (its own, or
	// one it joined) called a Loader; with Cached it means "admitted by
	// that fill", without it "read, but not admitted".
	Loaded bool
	// Prefetched is true when the entry was admitted by a prefetch fill
	// (this call's, or another Fill's it joined: counted once in
	// PrefetchFills), not by a Get's miss that this call joined.
	Prefetched bool
}

// Fill makes sure key, which is size bytes long, is in the cache: it
// loads and admits it like a miss of Get when it is not held, and does
// nothing when it is. It is for warming the cache (prefetch, readahead):
// unlike Get it counts no hit and no miss, adds nothing to HitBytes or
// MissBytes, opens no file and leaves an entry that is already held and
// verified as it is (no policy touch: warming is not an access).
// Admissions, Rejections, LoadErrors and WriteErrors count as for Get.
// Fills and Gets of one key are coalesced into one load.
//
// Errors are Get's: a load error is returned wrapped and nothing is
// admitted; a failing cache disk is not an error (Cached is false).
func (s *Store) Fill(ctx context.Context, key Key, size int64, load Loader) (FillResult, error) {
	if err := s.start("fill", key, size, load); err != nil {
		return FillResult{}, err
	}
	defer s.ops.Done()
	id := key.id()
	if s.held(id, size) {
		return FillResult{Cached: true}, nil
	}
	out, err := s.flight(ctx, key, id, size, load, true)
	if err != nil {
		return FillResult{}, err
	}
	return FillResult{Cached: out.cached, Loaded: !out.hit, Prefetched: out.cached && !out.hit && out.prefetch}, nil
}

// held reports whether id is a ready, verified entry of the given size.
func (s *Store) held(id string, size int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[id]
	return e != nil && e.ready && e.verified && e.size == size
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

// fillResult is the outcome of one (possibly shared) fill.
type fillResult struct {
	hit      bool   // the entry was in the cache; load was not called
	prefetch bool   // the fill was a Fill's (a prefetch fill), not a Get's
	cached   bool   // an entry file exists: hit, or admitted by this fill
	data     []byte // the loaded bytes when not cached (read through); else nil
}

func (s *Store) get(ctx context.Context, key Key, id string, size int64, load Loader) (Result, error) {
	for attempt := 1; ; attempt++ {
		if f := s.openHit(id, size); f != nil {
			return Result{File: f, Hit: true}, nil
		}
		out, err := s.flight(ctx, key, id, size, load, false)
		if err != nil {
			return Result{}, err
		}
		if !out.cached {
			return Result{Data: out.data}, nil
		}
		f, err := os.Open(s.dataPath(id))
		switch {
		case err == nil:
			return Result{File: f, Hit: out.hit}, nil
		case errors.Is(err, fs.ErrNotExist) && attempt < maxAttempts:
			continue // evicted between the fill and the open
		}
		// An entry we cannot open (EMFILE, EACCES, or evicted again and
		// again): read through.
		s.log.Warn("cache: cannot open entry, reading through", "key", key.String(), "err", err)
		buf := make([]byte, size)
		if err := load(ctx, buf); err != nil {
			s.loadErrors.Add(1)
			return Result{}, fmt.Errorf("cache: load %s: %w", key, err)
		}
		return Result{Data: buf}, nil
	}
}

// flight runs the fill of id, or joins the one in progress, and waits for
// it. A joined fill whose own caller's context ended is tried again.
// prefetch tells a Fill (a prefetch fill) from a Get's miss, for the
// counters, when this call leads the fill.
func (s *Store) flight(ctx context.Context, key Key, id string, size int64, load Loader, prefetch bool) (*fillResult, error) {
	for attempt := 1; ; attempt++ {
		ch := s.flights.DoChan(id, func() (any, error) {
			// The fill runs on its own goroutine and may outlive a caller
			// whose ctx ended, so it registers itself with Close.
			if err := s.begin(); err != nil {
				return nil, err
			}
			defer s.ops.Done()
			return s.fill(ctx, key, id, size, load, prefetch)
		})
		var r singleflight.Result
		select {
		case r = <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("cache: get %s: %w", key, context.Cause(ctx))
		}
		if r.Err != nil {
			if r.Shared && ctx.Err() == nil && attempt < maxAttempts &&
				(errors.Is(r.Err, context.Canceled) || errors.Is(r.Err, context.DeadlineExceeded)) {
				continue // the leader's context ended, not ours
			}
			return nil, r.Err
		}
		return r.Val.(*fillResult), nil
	}
}

// openHit is the fast path: a ready, verified entry of the right size,
// opened without coalescing. It returns nil when the slow path must decide.
func (s *Store) openHit(id string, size int64) *os.File {
	s.mu.Lock()
	e := s.entries[id]
	if e == nil || !e.ready || !e.verified || e.size != size {
		s.mu.Unlock()
		return nil
	}
	s.policy.Touch(id)
	s.mu.Unlock()
	f, err := os.Open(s.dataPath(id))
	if err != nil {
		return nil
	}
	return f
}

// fill runs once per coalesced group of Gets of id.
func (s *Store) fill(ctx context.Context, key Key, id string, size int64, load Loader, prefetch bool) (*fillResult, error) {
	if s.checkCached(key, id, size) {
		return &fillResult{hit: true, cached: true}, nil
	}
	// A pooled buffer when the bytes will probably be admitted (written,
	// then the buffer is free again); an exact one when they will
	// probably be read through and handed to the callers.
	pooled := s.mayAdmit(size)
	var buf []byte
	if pooled {
		buf = getBuf(size)
	} else {
		buf = make([]byte, size)
	}
	if err := load(ctx, buf); err != nil {
		s.loadErrors.Add(1)
		if pooled {
			putBuf(buf)
		}
		return nil, fmt.Errorf("cache: load %s: %w", key, err)
	}
	if s.admit(key, id, buf, prefetch) {
		if pooled {
			putBuf(buf)
		}
		return &fillResult{cached: true, prefetch: prefetch}, nil
	}
	if pooled {
		// Read through after all: the callers get (and keep) the bytes.
		data := bytes.Clone(buf)
		putBuf(buf)
		buf = data
	}
	return &fillResult{data: buf}, nil
}

// mayAdmit guesses whether an entry of size bytes will be admitted: it
// fits in the free room and admissions are not paused. (Only a guess: the
// policy decides, and other fills change the room meanwhile.)
func (s *Store) mayAdmit(size int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used+size <= s.capacity && !time.Now().Before(s.pausedUntil)
}

// checkCached reports whether id is held, servable and of the given size.
// A recovered entry's checksum is verified first; one that fails is
// dropped (CorruptDropped). An entry whose file vanished, or whose size
// disagrees with the caller's, is dropped too.
func (s *Store) checkCached(key Key, id string, size int64) bool {
	s.mu.Lock()
	e := s.entries[id]
	if e == nil || !e.ready {
		s.mu.Unlock()
		return false
	}
	verified := e.verified
	s.mu.Unlock()

	var err error
	corrupt := false
	if verified {
		_, err = os.Stat(s.dataPath(id))
	} else {
		var recSize int64
		recSize, err = verifyEntry(s.dataPath(id))
		corrupt = err != nil
		if err == nil && recSize != e.size {
			err, corrupt = fmt.Errorf("entry holds %d bytes, its checksum record says %d", e.size, recSize), true
		}
	}
	if err == nil && e.size != size {
		err = fmt.Errorf("entry holds %d bytes, the caller asked for %d", e.size, size)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.entries[id] != e {
		return false // evicted meanwhile
	}
	if err != nil {
		if corrupt {
			s.corruptDropped.Add(1)
		}
		s.log.Warn("cache: dropping a bad entry; it will be fetched again", "key", key.String(), "id", id, "corrupt", corrupt, "err", err)
		s.dropLocked(id, e)
		return false
	}
	e.verified = true
	s.policy.Touch(id)
	return true
}

// admit offers the loaded bytes of id to the policy and, if admitted,
// writes them into the cache. It reports whether the entry is now in the
// cache.
func (s *Store) admit(key Key, id string, data []byte, prefetch bool) bool {
	size := int64(len(data))
	s.mu.Lock()
	if s.entries[id] != nil || time.Now().Before(s.pausedUntil) {
		// (A held id cannot get here: fills of one id are coalesced.)
		s.rejections.Add(1)
		s.mu.Unlock()
		return false
	}
	evict, ok := s.policy.Admit(id, size)
	s.evictLocked(evict)
	if !ok {
		s.rejections.Add(1)
		s.mu.Unlock()
		return false
	}
	e := &entry{size: size}
	s.entries[id] = e // reserve: used stays exact while we write
	s.used += size
	s.mu.Unlock()

	err := s.writeEntry(id, data)
	return s.settle(key, id, e, err, prefetch)
}

// settle records the end of entry e's write (err: its outcome): ready, or
// forgotten and counted as a write error. It reports whether the entry is
// now in the cache.
func (s *Store) settle(key Key, id string, e *entry, err error, prefetch bool) bool {
	size := e.size
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.entries[id] != e {
		// Evicted by another admission while being written: the evictor
		// released the bytes and left the files to us.
		if err == nil {
			s.removeFilesLocked(id)
		}
		return false
	}
	if err != nil {
		delete(s.entries, id)
		s.used -= size
		s.policy.Remove(id)
		s.writeFailedLocked(key, err)
		return false
	}
	e.ready, e.verified, e.prefetched = true, true, prefetch
	s.nready++
	s.admissions.Add(1)
	if prefetch {
		s.prefetchFills.Add(1)
		s.prefetchFillBytes.Add(size)
	}
	return true
}

// writeFailedLocked records a failed entry write: counted, logged at most
// once per writeLogEvery, and, when the disk is full or read-only,
// admissions pause for writePause.
func (s *Store) writeFailedLocked(key Key, err error) {
	s.writeErrors.Add(1)
	now := time.Now()
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) || errors.Is(err, unix.EROFS) {
		s.pausedUntil = now.Add(writePause)
	}
	if now.Sub(s.lastWarn) < writeLogEvery {
		s.suppressed++
		return
	}
	s.log.Warn("cache: cannot write entry; serving it uncached", "key", key.String(), "err", err,
		"similar_since_last_warning", s.suppressed, "admissions_paused_until", s.pausedUntil)
	s.lastWarn, s.suppressed = now, 0
}

// evictLocked removes the policy's victims from the index and the disk.
// A victim still being written has no files yet; its writer removes them.
func (s *Store) evictLocked(ids []string) {
	for _, id := range ids {
		e := s.entries[id]
		if e == nil {
			continue
		}
		s.forgetLocked(id, e)
		s.evictions.Add(1)
	}
}

// dropLocked removes an entry the store gave up on (not an eviction).
func (s *Store) dropLocked(id string, e *entry) {
	s.forgetLocked(id, e)
	s.policy.Remove(id)
}

func (s *Store) forgetLocked(id string, e *entry) {
	delete(s.entries, id)
	s.used -= e.size
	if e.ready {
		s.nready--
		s.removeFilesLocked(id)
	}
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
	return Stats{
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

// GetNoAdmit is Get for bytes this cache must not keep (in cluster scope,
// the files another peer owns): a hit when key is held (e.g. cached
// before the mount joined a cluster), else load's bytes in Result.Data,
// never admitted and never counted as a rejection. Hits and misses count
// as for Get; concurrent GetNoAdmits of one key share one load (never one
// of Get or Fill, which would admit).
func (s *Store) GetNoAdmit(ctx context.Context, key Key, size int64, load Loader) (Result, error) {
	if err := s.start("get", key, size, load); err != nil {
		return Result{}, err
	}
	defer s.ops.Done()
	id := key.id()
	res, err := s.getNoAdmit(ctx, key, id, size, load)
	if res.Hit {
		s.hits.Add(1)
		s.hitBytes.Add(size)
	} else {
		s.misses.Add(1)
		s.missBytes.Add(size)
	}
	return res, err
}

func (s *Store) getNoAdmit(ctx context.Context, key Key, id string, size int64, load Loader) (Result, error) {
	if f := s.openHit(id, size); f != nil {
		return Result{File: f, Hit: true}, nil
	}
	if s.checkCached(key, id, size) { // a recovered entry, verified now
		if f, err := os.Open(s.dataPath(id)); err == nil {
			return Result{File: f, Hit: true}, nil
		}
	}
	ch := s.flights.DoChan("noadmit:"+id, func() (any, error) {
		if err := s.begin(); err != nil {
			return nil, err
		}
		defer s.ops.Done()
		buf := make([]byte, size)
		if err := load(ctx, buf); err != nil {
			s.loadErrors.Add(1)
			return nil, fmt.Errorf("cache: load %s: %w", key, err)
		}
		return buf, nil
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return Result{}, r.Err
		}
		return Result{Data: r.Val.([]byte)}, nil
	case <-ctx.Done():
		return Result{}, fmt.Errorf("cache: get %s: %w", key, context.Cause(ctx))
	}
}
