package fusefs

import (
	"github.com/epochfs/epochfs/pkg/backend"
)

// Prelisting. Without a manifest, a readdir-heavy walk (find, du, a dataset
// loader scanning class directories) would fetch one listing per round
// trip. So when a directory is read with Readdir, the listings of its
// subdirectories are fetched in the background, at most
// DefaultPrelistWorkers at a time, and each is parked until that
// subdirectory is first used, which then takes it instead of fetching its
// listing again. A directory's listing is fetched once per mount unless
// the listing cache drops it (listing.go); a parked listing that is never
// taken costs its entries' memory.

// DefaultPrelistWorkers bounds the concurrent prelistings.
const DefaultPrelistWorkers = 8

// pendingListing is one prelisting: a directory's listing being fetched in
// the background, or fetched and parked until the directory is used.
type pendingListing struct {
	done    chan struct{} // closed when entries and err are set
	entries []backend.Entry
	err     error
}

// prelist starts prelistings of the dirs whose listing is not fetched or
// being fetched.
func (f *FS) prelist(dirs []string) {
	if len(dirs) < 2 {
		return // nothing to overlap
	}
	ls := &f.listings
	for _, p := range dirs {
		ls.mu.Lock()
		if _, ok := ls.parked[p]; ok || ls.fetched[p] {
			ls.mu.Unlock()
			continue
		}
		l := &pendingListing{done: make(chan struct{})}
		ls.parked[p] = l
		ls.mu.Unlock()
		go func() {
			select {
			case ls.sem <- struct{}{}:
				ctx, cancel := f.listCtx()
				l.entries, l.err = f.backend.List(ctx, p)
				cancel()
				<-ls.sem
			case <-f.ctx.Done():
				l.err = f.ctx.Err()
			}
			close(l.done)
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
	ls.fetched[p] = true
	ls.mu.Unlock()
	if ok {
		<-l.done
		if l.err == nil {
			return l.entries, nil
		}
		// A failed prelisting is retried in the foreground.
	}
	ctx, cancel := f.listCtx()
	defer cancel()
	return f.backend.List(ctx, p)
}
