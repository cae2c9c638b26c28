package cache

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

// Admission: a loaded entry offered to the policy, written, and settled
// (ready, or forgotten); evictions and drops.

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
		// released the bytes and left the files to us. Only a policy that
		// evicts (a benchmark's) gets here: NR's Admit evicts nothing, its
		// Restore runs at Open before any write, and a drop
		// (checkCached) only takes ready entries.
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
