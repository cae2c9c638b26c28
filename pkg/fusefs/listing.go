package fusefs

import (
	"container/list"
	"errors"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/epochfs/epochfs/pkg/backend"
)

// Listings and the listing cache (see the glossary in the package doc).
//
// Without a manifest, every listing the mount has fetched is kept, by
// directory path, so that lookups and stats need no further request. The
// listings outlive the kernel's inodes: when the kernel forgets a directory
// (memory pressure, drop_caches) and looks it up again, its new node finds
// the listing here instead of listing the backend again (for S3, one or more
// LIST requests per directory).
//
// The listings are bounded: listingCache counts the entries held and, past
// Options.ListingCacheEntries or when the mount's listing memory is over
// Options.MaxListingMemory (listlimit.go), drops the listings of the least
// recently used directories (the kernel's own dentry and inode caches keep answering for
// what it holds; a dropped directory is listed again when next needed). The
// listing just added is never dropped, so one directory larger than the
// budget still works. Prelistings (prelist.go) parked until their directory
// takes them are bounded on their own: at most maxParkedListings of them,
// holding at most the same budget of entries.
//
// A listing is held for at most ttl (Options.Timeout, the kernel's entry
// and attribute timeout): once the kernel asks again about a directory
// whose listing is older, it is fetched again, so a file that changed at
// the source (a new version: size, mtime, ctime or inode for posix, the
// ETag for S3) is a new node, read under its new version, at most one
// timeout after the change. Until then the mount serves the listed version
// (cached bytes, or EIO when uncached: see FS.errno).
//
// A held listing is sorted by name, unique and never modified, so callers
// use the slice get returned without a lock, even after it is dropped.
//
// Hand-written rather than ristretto (the bounded cache this project uses
// elsewhere): the budget is shared with listings being fetched, which must
// drop the oldest held listing synchronously (ristretto's Sets are buffered
// and its TinyLFU admission may refuse a new listing, which would make the
// mount list that directory again at every lookup).
//
// max, ttl and mem are immutable; mu guards order, byPath, entries and
// evicted.
type listingCache struct {
	max int            // Options.ListingCacheEntries
	ttl time.Duration  // Options.Timeout
	mem *listingMemory // charged each held listing's heldSize

	mu      sync.Mutex
	order   *list.List // of *cachedListing, most recently used first
	byPath  map[string]*list.Element
	entries int
	evicted int64
}

type cachedListing struct {
	path    string
	entries []backend.Entry
	bytes   int64 // heldSize(entries), charged to mem
	expires time.Time
}

// newListingCache returns a cache that charges mem (and gives it room back
// by dropping listings: mem.cache is set to it).
func newListingCache(max int, ttl time.Duration, mem *listingMemory) *listingCache {
	l := &listingCache{max: max, ttl: ttl, mem: mem, order: list.New(), byPath: map[string]*list.Element{}}
	mem.cache = l
	return l
}

// has reports whether a listing younger than ttl is held for path, without
// marking it used.
func (l *listingCache) has(path string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.byPath[path]
	return ok && time.Now().Before(e.Value.(*cachedListing).expires)
}

// get returns the listing held for path, marking it used, unless it is
// older than ttl (it stays held until put replaces it or it is dropped).
func (l *listingCache) get(path string) ([]backend.Entry, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.byPath[path]
	if !ok || !time.Now().Before(e.Value.(*cachedListing).expires) {
		return nil, false
	}
	l.order.MoveToFront(e)
	return e.Value.(*cachedListing).entries, true
}

// put holds entries as the listing of path, most recently used (replacing
// one held already), then drops least recently used listings, except this
// one, until the entries held fit the budget.
func (l *listingCache) put(path string, entries []backend.Entry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.byPath[path]; ok {
		l.remove(e)
	}
	h := &cachedListing{path: path, entries: entries, bytes: heldSize(entries), expires: time.Now().Add(l.ttl)}
	keep := l.order.PushFront(h)
	l.byPath[path] = keep
	l.entries += len(entries)
	l.mem.charge(h.bytes)
	for l.entries > l.max || l.mem.over() {
		e := l.order.Back()
		if e == keep {
			return
		}
		l.remove(e)
		l.evicted++
	}
}

// dropOldest drops the least recently used listing, giving its memory
// back; false when none is held.
func (l *listingCache) dropOldest() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.order.Back()
	if e == nil {
		return false
	}
	l.remove(e)
	l.evicted++
	return true
}

// remove drops the listing at e. l.mu is held.
func (l *listingCache) remove(e *list.Element) {
	h := e.Value.(*cachedListing)
	l.order.Remove(e)
	delete(l.byPath, h.path)
	l.entries -= len(h.entries)
	l.mem.charge(-h.bytes)
}

// ListingStats describe the listings a mount without a manifest holds.
type ListingStats struct {
	Dirs    int   // directories whose listing is held
	Entries int   // entries held, at most Options.ListingCacheEntries (but for one larger directory)
	Evicted int64 // listings dropped to stay within the budget
	// Bytes is the listing memory the mount holds or is fetching, within
	// Options.MaxListingMemory (but for one larger listing just put).
	Bytes int64
	// Parked and ParkedEntries count prelistings fetched (or being
	// fetched) ahead and not yet taken by their directory, and the entries
	// of those fetched.
	Parked, ParkedEntries int
	// Nodes is the number of inodes the kernel holds lookups of, which
	// the mount tracks (the root included); FORGET removes them.
	Nodes int
}

func (l *listingCache) stats() ListingStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return ListingStats{Dirs: l.order.Len(), Entries: l.entries, Evicted: l.evicted, Bytes: l.mem.used.Load()}
}

func parentPath(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return ""
	}
	return p[:i]
}

// listing returns the listing of the directory at path, sorted by name
// and unique: the one in the listing cache, or one fetched (fetchListing,
// one per path at a time) and put there. A failed fetch is not remembered,
// so a later call retries. The slice is never modified.
func (f *FS) listing(path string) ([]backend.Entry, syscall.Errno) {
	if entries, ok := f.listings.cache.get(path); ok {
		return entries, 0
	}
	if err, ok := f.listings.refused.get(path); ok {
		return nil, f.errno("list", path, err) // refused lately (listlimit.go)
	}
	v, err, _ := f.listings.flight.Do(path, func() (any, error) {
		if entries, ok := f.listings.cache.get(path); ok {
			return entries, nil // fetched while we waited
		}
		entries, err := f.fetchListing(path)
		if errors.Is(err, backend.ErrListTooLarge) {
			f.refuse(path, err)
		}
		if err != nil {
			return nil, err
		}
		sort.SliceStable(entries, func(i, j int) bool { return entries[i].Name < entries[j].Name })
		// A key that is both a file and a prefix: the first wins.
		entries = slices.Clip(slices.CompactFunc(entries, func(a, b backend.Entry) bool { return a.Name == b.Name }))
		f.listings.cache.put(path, entries)
		return entries, nil
	})
	if err != nil {
		return nil, f.errno("list", path, err)
	}
	return v.([]backend.Entry), 0
}

// siblings returns up to k files after the file at path in its directory's
// listing (none when the listing was dropped: readahead is an
// optimisation).
func (f *FS) siblings(path string, k int) []file {
	dir, name := parentPath(path), path[strings.LastIndexByte(path, '/')+1:]
	entries, ok := f.listings.cache.get(dir)
	if !ok {
		return nil
	}
	i, found := search(entries, name)
	if found {
		i++
	}
	var out []file
	for ; i < len(entries) && len(out) < k; i++ {
		if e := entries[i]; !e.IsDir {
			out = append(out, file{fsys: f, path: join(dir, e.Name), version: e.Version, size: e.Size})
		}
	}
	return out
}

// find returns the entry named name of a sorted listing.
func find(entries []backend.Entry, name string) (backend.Entry, bool) {
	i, ok := search(entries, name)
	if !ok {
		return backend.Entry{}, false
	}
	return entries[i], true
}

// search is where name is, or would be, in a sorted listing.
func search(entries []backend.Entry, name string) (int, bool) {
	return slices.BinarySearchFunc(entries, name, func(e backend.Entry, n string) int { return strings.Compare(e.Name, n) })
}
