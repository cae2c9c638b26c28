package fusefs

import (
	"container/list"
	"sync"

	"github.com/epochfs/epochfs/pkg/backend"
)

// Without a manifest, every directory listing the mount has fetched is kept,
// by directory path, so that lookups and stats need no further request. The
// listings outlive the kernel's inodes: when the kernel forgets a directory
// (memory pressure, drop_caches) and looks it up again, its new node finds
// the listing here instead of listing the backend again (for S3, one or more
// LIST requests per directory).
//
// The listings are bounded: listingLRU counts the entries held and, past
// Options.ListingCacheEntries, drops the listings of the least recently used
// directories (the kernel's own dentry and inode caches keep answering for
// what it holds; a dropped directory is listed again when next needed). The
// listing just added is never dropped, so one directory larger than the
// budget still works. Listings fetched ahead in the background (prelist.go)
// are not counted until their directory takes them, which a walk does soon
// after.
//
// A held listing is sorted by name, unique and never modified, so callers
// use the slice get returned without a lock, even after it is dropped.
//
// mu guards order, byPath, entries and evicted.
type listingLRU struct {
	max int

	mu      sync.Mutex
	order   *list.List // of *heldListing, most recently used first
	byPath  map[string]*list.Element
	entries int
	evicted int64
}

type heldListing struct {
	path    string
	entries []backend.Entry
}

func newListingLRU(max int) *listingLRU {
	return &listingLRU{max: max, order: list.New(), byPath: map[string]*list.Element{}}
}

// get returns the listing held for path, marking it used.
func (l *listingLRU) get(path string) ([]backend.Entry, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.byPath[path]
	if !ok {
		return nil, false
	}
	l.order.MoveToFront(e)
	return e.Value.(*heldListing).entries, true
}

// put holds entries as the listing of path, most recently used (replacing
// one held already), then drops least recently used listings, except this
// one, until the entries held fit the budget.
func (l *listingLRU) put(path string, entries []backend.Entry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.byPath[path]; ok {
		l.entries -= len(e.Value.(*heldListing).entries)
		l.order.Remove(e)
	}
	keep := l.order.PushFront(&heldListing{path: path, entries: entries})
	l.byPath[path] = keep
	l.entries += len(entries)
	for l.entries > l.max {
		e := l.order.Back()
		if e == keep {
			return
		}
		h := e.Value.(*heldListing)
		l.order.Remove(e)
		delete(l.byPath, h.path)
		l.entries -= len(h.entries)
		l.evicted++
	}
}

// ListingStats describe the listings a mount without a manifest holds.
type ListingStats struct {
	Dirs    int   // directories whose listing is held
	Entries int   // entries held, at most Options.ListingCacheEntries (but for one larger directory)
	Evicted int64 // listings dropped to stay within the budget
	// Nodes is the number of inodes the kernel holds lookups of, which
	// the mount tracks (the root included); FORGET removes them.
	Nodes int
}

func (l *listingLRU) stats() ListingStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return ListingStats{Dirs: l.order.Len(), Entries: l.entries, Evicted: l.evicted}
}
