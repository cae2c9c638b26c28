package cache

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// The lookups callers make: Get, GetNoAdmit and Fill. A miss goes to a
// fill (flight.go).

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
	return s.lookup(ctx, key, size, load, fillGet)
}

// GetNoAdmit is Get for bytes this cache must not keep (in cluster scope,
// the files another peer owns): a hit when key is held (e.g. cached
// before the mount joined a cluster), else load's bytes in Result.Data,
// never admitted and never counted as a rejection. Hits and misses count
// as for Get; concurrent GetNoAdmits of one key share one load (never one
// of Get or Fill, which would admit), and retry it as Get does when the
// caller that ran it went away.
func (s *Store) GetNoAdmit(ctx context.Context, key Key, size int64, load Loader) (Result, error) {
	return s.lookup(ctx, key, size, load, fillNoAdmit)
}

// lookup is Get (kind fillGet) and GetNoAdmit (fillNoAdmit): the lookup
// and its counters.
func (s *Store) lookup(ctx context.Context, key Key, size int64, load Loader, kind fillKind) (Result, error) {
	if err := s.start("get", key, size, load); err != nil {
		return Result{}, err
	}
	defer s.ops.Done()
	id := key.id()
	res, err := s.get(ctx, key, id, size, load, kind)
	// Looked up now: no longer unread. (No lock taken when nothing was
	// ever prefetched.)
	prefetched := kind == fillGet && s.prefetchFills.Load() > 0 && s.takePrefetched(id)
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
	s.advanceEpoch()
	return res, err
}

// get serves a lookup of kind fillGet or fillNoAdmit: a hit opens the
// entry's file; a miss joins or runs the fill of id and returns its file
// (admitted) or its bytes (read through).
func (s *Store) get(ctx context.Context, key Key, id string, size int64, load Loader, kind fillKind) (Result, error) {
	for attempt := 1; ; attempt++ {
		if f := s.openHit(id, size); f != nil {
			return Result{File: f, Hit: true}, nil
		}
		out, err := s.flight(ctx, key, id, size, load, kind)
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
	out, err := s.flight(ctx, key, id, size, load, fillPrefetch)
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
