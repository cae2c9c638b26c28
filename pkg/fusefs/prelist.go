package fusefs

import (
	"errors"

	"github.com/epochfs/epochfs/pkg/backend"
)

// Prelisting. Without a manifest, a readdir-heavy walk (find, du, a dataset
// loader scanning class directories) would fetch one listing per round
// trip. So when a directory is read with Readdir, the listings of its
// subdirectories are fetched in the background, at most
// DefaultPrelistWorkers at a time, and each is parked until that
// subdirectory is first used, which then takes it instead of fetching its
// listing again. A directory's listing is fetched once per mount unless
// the listing cache drops it (listing.go). Parked listings are bounded: at
// most maxParkedListings of them, and no prelisting starts fetching while
// those fetched hold the listing budget's worth of entries, so they hold at
// most the budget plus the DefaultPrelistWorkers listings in flight (a walk
// takes them soon; one that never does cannot grow the mount without bound).

// DefaultPrelistWorkers bounds the concurrent prelistings.
const DefaultPrelistWorkers = 8

// errPrelistSkipped ends a prelisting that found the budget held by those
// parked before it; its directory is listed in the foreground when used.
var errPrelistSkipped = errors.New("fusefs: prelisting skipped: parked listings hold the budget")

// maxParkedListings bounds the prelistings parked at once.
const maxParkedListings = 4096

// pendingListing is one prelisting: a directory's listing being fetched in
// the background, or fetched and parked until the directory is used.
type pendingListing struct {
	done    chan struct{} // closed when entries and err are set
	entries []backend.Entry
	err     error
	counted bool  // entries are in listings.parkedEntries (guarded by listings.mu)
	bytes   int64 // heldSize(entries), charged to listings.mem while counted
}

// prelist starts prelistings of the dirs whose listing is not fetched or
// being fetched.
func (f *FS) prelist(dirs []string) {
	if len(dirs) < 2 {
		return // nothing to overlap
	}
	ls := &f.listings
	for _, p := range dirs {
		if ls.cache.has(p) {
			continue
		}
		ls.mu.Lock()
		if _, ok := ls.parked[p]; ok {
			ls.mu.Unlock()
			continue
		}
		if len(ls.parked) >= maxParkedListings || ls.parkedEntries >= ls.cache.max {
			ls.mu.Unlock()
			return // the directories are listed when used, as without prelisting
		}
		l := &pendingListing{done: make(chan struct{})}
		ls.parked[p] = l
		ls.mu.Unlock()
		go func() {
			defer close(l.done)
			select {
			case ls.sem <- struct{}{}:
			case <-f.ctx.Done():
				l.err = f.ctx.Err()
				return
			}
			defer func() { <-ls.sem }()
			// Checked again once running: those parked meanwhile may
			// hold the budget now.
			ls.mu.Lock()
			over := ls.parkedEntries >= ls.cache.max
			if over && ls.parked[p] == l {
				delete(ls.parked, p)
			}
			ls.mu.Unlock()
			if over {
				l.err = errPrelistSkipped
				return
			}
			ctx, cancel := f.listCtx()
			l.entries, l.err = f.backend.List(ctx, p)
			cancel()
			ls.mu.Lock()
			if ls.parked[p] == l { // not taken yet: count what it holds
				l.counted = true
				ls.parkedEntries += len(l.entries)
				l.bytes = heldSize(l.entries)
				ls.mem.charge(l.bytes)
			}
			ls.mu.Unlock()
		}()
	}
}

// fetchListing returns the listing of the directory at p, as the backend
// returned it: a parked prelisting if there is one (waiting for it if in
// flight), else a fresh List. Called by listing, at most once at a time
// per path.
func (f *FS) fetchListing(p string) ([]backend.Entry, error) {
	ls := &f.listings
	ls.mu.Lock()
	l, ok := ls.parked[p]
	delete(ls.parked, p)
	if ok && l.counted {
		ls.parkedEntries -= len(l.entries)
		ls.mem.charge(-l.bytes) // the listing cache charges it again (put)
	}
	ls.mu.Unlock()
	if ok {
		<-l.done
		if l.err == nil || errors.Is(l.err, backend.ErrListTooLarge) {
			return l.entries, l.err // a cap: listing again would pass it again
		}
		// Another failed prelisting is retried in the foreground.
	}
	ctx, cancel := f.listCtx()
	defer cancel()
	return f.backend.List(ctx, p)
}
