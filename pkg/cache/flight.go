package cache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sync/singleflight"
)

// Fills: the one load of a missed entry that concurrent lookups of it
// share, and what follows it (admit.go).

// fillKind is what a fill is for.
type fillKind uint8

const (
	fillGet      fillKind = iota // a Get's miss: admitted when the policy says so
	fillPrefetch                 // a Fill: admitted like a miss, counted as a prefetch fill
	fillNoAdmit                  // a GetNoAdmit's miss: read through, never admitted nor rejected
)

// flightKey is the singleflight key of a fill of id: fills that may admit
// (Get, Fill) share one; fills that must not, another.
func (k fillKind) flightKey(id string) string {
	if k == fillNoAdmit {
		return "noadmit:" + id
	}
	return id
}

// fillResult is the outcome of one (possibly shared) fill.
type fillResult struct {
	hit      bool   // the entry was in the cache; load was not called
	prefetch bool   // the fill was a Fill's (a prefetch fill), not a Get's miss
	cached   bool   // an entry file exists: hit, or admitted by this fill
	data     []byte // the loaded bytes when not cached (read through); else nil
}

// flight runs the fill of id, or joins the one in progress, and waits for
// it. A joined fill whose own caller's context ended is tried again. kind
// says what the fill is for when this call leads it; fills of GetNoAdmit
// are coalesced among themselves only (flightKey), never with one that
// admits.
func (s *Store) flight(ctx context.Context, key Key, id string, size int64, load Loader, kind fillKind) (*fillResult, error) {
	for attempt := 1; ; attempt++ {
		ch := s.flights.DoChan(kind.flightKey(id), func() (any, error) {
			// The fill runs on its own goroutine and may outlive a caller
			// whose ctx ended, so it registers itself with Close.
			if err := s.begin(); err != nil {
				return nil, err
			}
			defer s.ops.Done()
			return s.fill(ctx, key, id, size, load, kind)
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

// fill runs once per coalesced group of lookups of id: a hit when id is
// held, else the load, and for kinds that admit, the admission.
func (s *Store) fill(ctx context.Context, key Key, id string, size int64, load Loader, kind fillKind) (*fillResult, error) {
	if s.checkCached(key, id, size) {
		return &fillResult{hit: true, cached: true}, nil
	}
	prefetch := kind == fillPrefetch
	// A pooled buffer when the bytes will probably be admitted (written,
	// then the buffer is free again); an exact one when they will
	// probably be read through and handed to the callers.
	pooled := kind != fillNoAdmit && s.mayAdmit(size)
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
	if kind != fillNoAdmit && s.admit(key, id, buf, prefetch) {
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
