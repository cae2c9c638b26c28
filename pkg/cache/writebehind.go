package cache

import (
	"sync"
	"sync/atomic"
)

// Write-behind (Options.WriteBehind): an entry admitted by a Get's miss is
// written to its file in the background while the Get returns its bytes
// from memory (Result.Data, with Result.WriteBehind set), so that a reader's
// open waits for the backend only, not also for creating, writing and
// renaming the entry's file and opening it again. What stays as without it:
//
//   - the policy decides, and the bytes are reserved (used), before Get
//     returns: NR admits exactly the same entries, in the same order;
//   - the file is written as always (a *.tmp file with its checksum record,
//     renamed into place), so a crash loses pending entries, never tears
//     one; Close waits for the writes in progress;
//   - Admissions (and WriteErrors) count when the write has finished;
//   - a Get of an entry still being written is a hit, served from the same
//     bytes (no second load); a Fill of one waits for its write.
//
// Memory is bounded: pending entries hold at most Options.WriteBehind bytes;
// a miss that would go past it writes its entry before Get returns, as
// without write-behind (the reader waits; nothing is dropped, so NR fills
// the cache in the first epoch exactly as before). At most
// writeBehindWriters files are written at once.

// writeBehindWriters bounds the entry files written in the background at
// once; the others wait, holding their bytes (within Options.WriteBehind).
const writeBehindWriters = 4

// pendingWrite is an admitted entry whose file is being written in the
// background, and its bytes, served meanwhile.
//
// data and done are immutable. mu guards refs and dead; it is a leaf,
// taken under Store.mu (pendingHit) or alone.
type pendingWrite struct {
	data []byte        // the entry's bytes (usually a pooled buffer); read-only
	done chan struct{} // closed when the write has finished, written or failed

	mu   sync.Mutex
	refs int  // the writer's, plus one per lease not yet released
	dead bool // refs reached 0 after a successful write: data went back to the free lists
	// kept: the write failed (or the entry was evicted meanwhile), so
	// there is no file to fall back on: data is never reused, and callers
	// of the fill that acquire it late still get it (the collector frees
	// it).
	kept bool
}

// lease is one caller's hold on a pendingWrite's bytes (Result.Release).
type lease struct {
	p        *pendingWrite
	released atomic.Bool
}

// acquire takes a hold on p's bytes, or returns nil when they are gone
// (the entry was written and every hold released: it is read from its
// file).
func (p *pendingWrite) acquire() *lease {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dead {
		return nil
	}
	p.refs++
	return &lease{p: p}
}

// release drops one hold; the last returns the buffer to the free lists.
func (p *pendingWrite) release() {
	p.mu.Lock()
	p.refs--
	free := p.refs == 0 && !p.kept
	if free {
		p.dead = true
	}
	p.mu.Unlock()
	if free {
		putBuf(p.data)
	}
}

func (l *lease) release() {
	if l != nil && l.released.CompareAndSwap(false, true) {
		l.p.release()
	}
}

// Release ends the caller's use of Data when it holds the bytes of an
// entry still being written in the background (WriteBehind): once the
// write has finished and every caller has released, the buffer is reused.
// Data must not be read after Release. It is idempotent, does nothing for
// other Results, and is optional: an unreleased buffer is left to the
// garbage collector. It does not close File.
func (r Result) Release() { r.lease.release() }

// Hold takes another hold on the bytes of a WriteBehind Result, released
// with the returned Result's Release, e.g. when a reply that references
// Data has been sent. ok is false for other Results (nothing to hold), or
// when r's own hold was released already.
func (r Result) Hold() (Result, bool) {
	if r.lease == nil || r.lease.released.Load() {
		return Result{}, false
	}
	l := r.lease.p.acquire()
	if l == nil {
		return Result{}, false
	}
	r.lease = l
	return r, true
}

// pendingHit returns a hold on id's bytes when id is an admitted entry of
// the given size whose file is still being written, touching the policy
// like a hit; nil otherwise.
func (s *Store) pendingHit(id string, size int64) *lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[id]
	if e == nil || e.pending == nil || e.size != size {
		return nil
	}
	l := e.pending.acquire()
	if l != nil {
		s.policy.Touch(id)
	}
	return l
}

// pendingOf returns id's pending write, if its entry is of the given size
// and being written.
func (s *Store) pendingOf(id string, size int64) *pendingWrite {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.entries[id]; e != nil && e.size == size {
		return e.pending
	}
	return nil
}

// writeBehindEntry writes the pending entry e (id) in the background and
// then settles it like admit's own write: ready, or removed and counted as
// a write error. The caller registered it with s.ops.
func (s *Store) writeBehindEntry(key Key, id string, e *entry, p *pendingWrite) {
	defer s.ops.Done()
	s.writers <- struct{}{}
	err := s.writeEntry(id, p.data)
	<-s.writers
	if s.settle(key, id, e, err, false) {
		s.writtenBehind.Add(1)
	} else {
		p.mu.Lock()
		p.kept = true
		p.mu.Unlock()
	}
	close(p.done)
	p.release() // the writer's hold
}
