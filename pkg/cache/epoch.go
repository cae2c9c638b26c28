package cache

import (
	"sync"
	"sync/atomic"
)

// Epochs: when the dataset's size D is known (a manifest's bytes,
// SetEpochBytes), the store counts its lookups in epochs of D bytes — a
// data loader's pass reads every file once, so a pass is D bytes of
// lookups — and keeps the counters as the current epoch began, for the
// byte hit ratio of the current epoch (`cachefs stats`). The boundary is
// the lookup that crosses a multiple of D: an approximation of the
// reader's own pass (a lookup of a file read twice in one pass moves it
// early), exact for a loader that reads each file once per epoch.
type epochs struct {
	bytes atomic.Int64 // D; 0: no epochs
	index atomic.Int64 // epochs completed (lookup bytes / D when last advanced)

	mu    sync.Mutex // guards start
	start epochStart
}

// epochStart is what the byte counters held when the current epoch began.
type epochStart struct{ hitBytes, missBytes, prefetchedHitBytes int64 }

// SetEpochBytes sets the dataset's size in bytes, the length of an epoch
// of lookups (0: epochs unknown). Set once, before lookups.
func (s *Store) SetEpochBytes(d int64) { s.epoch.bytes.Store(max(d, 0)) }

// advanceEpoch starts a new epoch when the lookups since Open crossed the
// next multiple of D (no lock taken otherwise). Called after each lookup
// was counted.
func (s *Store) advanceEpoch() {
	d := s.epoch.bytes.Load()
	if d <= 0 {
		return
	}
	k := (s.hitBytes.Load() + s.missBytes.Load()) / d
	if k <= s.epoch.index.Load() {
		return
	}
	s.epoch.mu.Lock()
	defer s.epoch.mu.Unlock()
	if k <= s.epoch.index.Load() {
		return
	}
	s.epoch.index.Store(k)
	s.epoch.start = epochStart{s.hitBytes.Load(), s.missBytes.Load(), s.prefetchedHitBytes.Load()}
}

// epochStats fills st's epoch fields from its since-Open counters.
func (s *Store) epochStats(st *Stats) {
	if s.epoch.bytes.Load() <= 0 {
		return
	}
	s.epoch.mu.Lock()
	start, k := s.epoch.start, s.epoch.index.Load()
	s.epoch.mu.Unlock()
	st.Epoch = k + 1
	st.EpochHitBytes = max(st.HitBytes-start.hitBytes, 0) // max: Stats read the counters first
	st.EpochMissBytes = max(st.MissBytes-start.missBytes, 0)
	st.EpochPrefetchedHitBytes = max(st.PrefetchedHitBytes-start.prefetchedHitBytes, 0)
}
