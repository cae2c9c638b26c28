package fusefs

import (
	"errors"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/epochfs/epochfs/pkg/backend"
)

// Listing caps (see backend/listlimit.go). A directory's listing is hostile
// in size (an S3 endpoint answering "truncated" forever), and every mount of
// a node shares one mounter container, so a mount without a manifest bounds
// its listings in three ways:
//
//   - Options.MaxDirEntries: the most entries of one directory (checked by
//     the backend as they arrive, which stops fetching past it);
//   - the pages (requests) one listing may take: MaxDirEntries/100 + 100,
//     room for servers that return pages of 100 keys, so that empty
//     "truncated" pages cannot spin until the read timeout;
//   - Options.MaxListingMemory: the bytes of every listing the mount holds
//     or is fetching (listingMemory below): the listing cache and parked
//     prelistings charge heldSize per listing, listings in flight
//     backend.ListEntryCost per entry. A listing that needs room first
//     drops least recently used listings from the cache; past what the cache
//     can give back, it is refused.
//
// A refused directory fails with EFBIG ("File too large": the directory is
// larger than this mount may hold; EIO would read as a broken source) for
// readdir and for lookups in it, with one ERROR line in the mount log naming
// the directory, the cap and its flag, and cachefs_listing_refusals_total
// counts it by cap. The refusal is remembered for the listing timeout
// (Options.Timeout) when the cap is a property of the directory (entries,
// pages, an oversized page), for refusedMemoryFor when it was memory (other
// listings may be dropped by then), so that a reader retrying in a loop does
// not list it again each time. The rest of the mount serves on.

// DefaultMaxDirEntries is the default Options.MaxDirEntries: the listing
// cache's own default budget, so one directory may fill it (a flat
// directory of a million files mounts; 1M-file benchmarks use 1,000
// directories of 1,000).
const DefaultMaxDirEntries = DefaultListingCacheEntries

// DefaultMaxListingMemory is the default Options.MaxListingMemory: the
// default listing cache full of ImageNet-like S3 entries (~150 MiB) plus a
// directory of a million such entries being fetched beside what the cache
// gives back.
const DefaultMaxListingMemory = 256 << 20

// refusedMemoryFor is how long a refusal for memory is remembered.
const refusedMemoryFor = 30 * time.Second

// maxRefused bounds the refusals remembered.
const maxRefused = 4096

// MaxListingPages is the page cap (requests of one listing) derived from
// the entry cap.
func MaxListingPages(maxEntries int) int { return maxEntries/100 + 100 }

// sizeofEntry is the in-memory size of an Entry without its strings.
const sizeofEntry = int64(unsafe.Sizeof(backend.Entry{}))

// heldSize estimates the bytes a held listing costs: its entries and their
// strings.
func heldSize(entries []backend.Entry) int64 {
	n := int64(len(entries)) * sizeofEntry
	for i := range entries {
		n += int64(len(entries[i].Name) + len(entries[i].Version))
	}
	return n
}

// listingMemory is the mount's budget of listing bytes
// (Options.MaxListingMemory); it implements backend.ListMemory for listings
// in flight. limit and cache are immutable; used is atomic.
type listingMemory struct {
	limit int64
	used  atomic.Int64
	cache *listingCache // gives room back by dropping listings (may be nil)
}

var _ backend.ListMemory = (*listingMemory)(nil)

// Reserve charges n bytes, dropping least recently used cached listings to
// make room; false when even an empty cache leaves no room.
func (m *listingMemory) Reserve(n int64) bool {
	for {
		if m.used.Add(n) <= m.limit {
			return true
		}
		m.used.Add(-n)
		if m.cache == nil || !m.cache.dropOldest() {
			return false
		}
	}
}

// Release gives back n bytes.
func (m *listingMemory) Release(n int64) { m.used.Add(-n) }

// Limit is the budget.
func (m *listingMemory) Limit() int64 { return m.limit }

// charge adds n bytes held (n < 0 gives them back) without a check: the
// listing is fetched already; the cache makes room after it (put).
func (m *listingMemory) charge(n int64) { m.used.Add(n) }

func (m *listingMemory) over() bool { return m.used.Load() > m.limit }

// refusals remembers refused directories and counts refusals by cap. mu
// guards byPath; the counters are atomic.
type refusals struct {
	mu     sync.Mutex
	byPath map[string]refusal

	entries, memory, pages, other atomic.Int64
}

type refusal struct {
	err   error
	until time.Time
}

// get returns the refusal remembered for path, if still valid.
func (r *refusals) get(path string) (error, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	x, ok := r.byPath[path]
	if !ok {
		return nil, false
	}
	if !time.Now().Before(x.until) {
		delete(r.byPath, path)
		return nil, false
	}
	return x.err, true
}

// refuse counts err, a listing of path over a cap, logs it once and
// remembers it.
func (f *FS) refuse(path string, err error) {
	r := f.listings.refused
	ttl := f.opts.Timeout
	var lim *backend.ListLimitError
	which := "page-size"
	switch {
	case !errors.As(err, &lim):
		r.other.Add(1)
	case lim.Cap == backend.CapDirEntries:
		r.entries.Add(1)
		which = lim.Cap
	case lim.Cap == backend.CapListingMemory:
		r.memory.Add(1)
		which, ttl = lim.Cap, min(ttl, refusedMemoryFor)
	default:
		r.pages.Add(1)
		which = lim.Cap
	}
	f.log.Error("fusefs: directory listing refused: over a cap of this mount; the directory reads as EFBIG, the rest of the mount serves on",
		"path", path, "cap", which, "err", err)
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.byPath) >= maxRefused {
		for p, x := range r.byPath {
			if !now.Before(x.until) {
				delete(r.byPath, p)
			}
		}
	}
	if len(r.byPath) < maxRefused {
		r.byPath[path] = refusal{err: err, until: now.Add(ttl)}
	}
}

// ListingRefusals counts listings refused by cap since the mount started
// (cachefs_listing_refusals_total).
type ListingRefusals struct {
	Entries  int64 // over Options.MaxDirEntries
	Memory   int64 // over Options.MaxListingMemory
	Pages    int64 // over the page cap (MaxDirEntries/100 + 100 requests)
	PageSize int64 // an S3 listing page over 8 MiB
}

// ListingRefusals returns the refusals counted so far.
func (f *FS) ListingRefusals() ListingRefusals {
	r := f.listings.refused
	return ListingRefusals{Entries: r.entries.Load(), Memory: r.memory.Load(), Pages: r.pages.Load(), PageSize: r.other.Load()}
}

// tooLarge is the errno of a refused directory.
const tooLarge = syscall.EFBIG
