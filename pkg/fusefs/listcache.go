package fusefs

import (
	"container/list"
	"sync"
)

// Without a manifest, every directory listing the mount has fetched is kept
// in its dirNode so that lookups and stats need no further request. The
// listings are bounded: listingLRU counts the entries held by all loaded
// directories and, past Options.ListingCacheEntries, drops the listings of
// the least recently used directories (the kernel's own dentry and inode
// caches keep answering for what it holds; a dropped directory is listed
// again on its next lookup or readdir). The directory being loaded is never
// dropped, so one directory larger than the budget still works. Listings
// fetched ahead in the background (prelist.go) are not counted until their
// directory takes them, which a walk does soon after.
//
// mu guards order, elems and entries. Lock order: a dirNode's mu may be held
// while calling touch or add; evict takes a dirNode's mu with no other
// dirNode lock held.
type listingLRU struct {
	max int

	mu      sync.Mutex
	order   *list.List // of *dirNode, most recently used first
	elems   map[*dirNode]*list.Element
	entries int
	evicted int64
}

func newListingLRU(max int) *listingLRU {
	return &listingLRU{max: max, order: list.New(), elems: map[*dirNode]*list.Element{}}
}

// add records that d, which was not loaded, now holds n entries, most
// recently used. (trim removes a node from the list before it unloads it, so
// a node being loaded is never in the list.)
func (l *listingLRU) add(d *dirNode, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.elems[d] = l.order.PushFront(d)
	l.entries += n
}

// touch marks d as used.
func (l *listingLRU) touch(d *dirNode) {
	l.mu.Lock()
	if e, ok := l.elems[d]; ok {
		l.order.MoveToFront(e)
	}
	l.mu.Unlock()
}

// trim drops least recently used listings, except keep's, until the entries
// held fit the budget. Call it with no dirNode lock held.
func (l *listingLRU) trim(keep *dirNode) {
	for {
		l.mu.Lock()
		if l.entries <= l.max {
			l.mu.Unlock()
			return
		}
		e := l.order.Back()
		for e != nil && e.Value.(*dirNode) == keep {
			e = e.Prev()
		}
		if e == nil {
			l.mu.Unlock()
			return
		}
		d := e.Value.(*dirNode)
		l.order.Remove(e)
		delete(l.elems, d)
		l.mu.Unlock()

		d.mu.Lock()
		n := len(d.entries)
		d.entries, d.loaded = nil, false
		d.mu.Unlock()

		l.mu.Lock()
		l.entries -= n
		l.evicted++
		l.mu.Unlock()
	}
}

// ListingStats describe the listings a mount without a manifest holds.
type ListingStats struct {
	Dirs    int   // directories whose listing is held
	Entries int   // entries held, at most Options.ListingCacheEntries (but for one larger directory)
	Evicted int64 // listings dropped to stay within the budget
}

func (l *listingLRU) stats() ListingStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return ListingStats{Dirs: l.order.Len(), Entries: l.entries, Evicted: l.evicted}
}
