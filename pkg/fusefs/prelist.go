package fusefs

import (
	"github.com/epochfs/epochfs/pkg/backend"
)

// Without a manifest, a readdir-heavy walk (find, du, a dataset loader
// scanning class directories) would list one directory per round trip. So
// when a directory is read with Readdir, its subdirectories are listed in
// the background, at most DefaultPrelistWorkers at a time, and each result
// is parked until that subdirectory is first used, which then takes it
// instead of listing again. A directory is listed once per mount unless the
// listing budget drops its listing (listcache.go); a parked listing that is
// never used costs its entries' memory.
//
// prelistMu guards prelisted and listed.

// DefaultPrelistWorkers bounds the concurrent background listings.
const DefaultPrelistWorkers = 8

// listing is one directory's listing, done or in flight.
type listing struct {
	done    chan struct{} // closed when entries and err are set
	entries []backend.Entry
	err     error
}

// prelist starts background listings of dirs not listed or being listed.
func (f *FS) prelist(dirs []string) {
	if len(dirs) < 2 {
		return // nothing to overlap
	}
	for _, p := range dirs {
		f.prelistMu.Lock()
		if _, ok := f.prelisted[p]; ok || f.listed[p] {
			f.prelistMu.Unlock()
			continue
		}
		l := &listing{done: make(chan struct{})}
		f.prelisted[p] = l
		f.prelistMu.Unlock()
		go func() {
			select {
			case f.listSem <- struct{}{}:
				ctx, cancel := f.listCtx()
				l.entries, l.err = f.backend.List(ctx, p)
				cancel()
				<-f.listSem
			case <-f.ctx.Done():
				l.err = f.ctx.Err()
			}
			close(l.done)
		}()
	}
}

// list returns the listing of the directory at p: a parked background
// listing if there is one (waiting for it if in flight), else a fresh List.
// Called by dirListing, at most once at a time per path.
func (f *FS) list(p string) ([]backend.Entry, error) {
	f.prelistMu.Lock()
	l, ok := f.prelisted[p]
	delete(f.prelisted, p)
	f.listed[p] = true
	f.prelistMu.Unlock()
	if ok {
		<-l.done
		if l.err == nil {
			return l.entries, nil
		}
		// A failed background listing is retried in the foreground.
	}
	ctx, cancel := f.listCtx()
	defer cancel()
	return f.backend.List(ctx, p)
}
