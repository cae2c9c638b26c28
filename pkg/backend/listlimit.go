package backend

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"
)

// Listing caps. A directory's listing comes from a server (or a file system)
// the tenant chose, so its size is hostile: an S3 endpoint can answer
// IsTruncated=true forever, each page full of new keys, or with empty
// pages; an NFS server can keep sending entries with new cookies. List
// gathers a whole directory in memory, so a caller that shares its process
// with others (a mount, every mount of a node in one mounter container)
// bounds it with ListLimits carried in the ctx (WithListLimits). Each
// backend's List checks them as it goes and stops fetching at the first cap
// it passes, returning a *ListLimitError (errors.Is ErrListTooLarge): never
// a partial listing. A List without limits in its ctx is unbounded (the
// admin's own tools: cachefs index, prefetch).

// ErrListTooLarge: a List passed one of its ListLimits; the error is a
// *ListLimitError naming the cap.
var ErrListTooLarge = errors.New("directory listing over a cap")

// The caps, named after the `cachefs mount` flags that set them (pkg/mount
// spells the same names), so that the error a reader's log shows says
// which flag to raise; the page cap has no flag of its own (the mount
// derives it from max-dir-entries).
const (
	CapDirEntries    = "max-dir-entries"    // ListLimits.MaxEntries
	CapListingMemory = "max-listing-memory" // ListLimits.Memory
	CapListingPages  = "listing-pages"      // ListLimits.MaxPages
	// CapProbePages: an S3 probe for one key (is this a directory? does
	// the dataset exist?) sent probeMaxPages requests without a key or the
	// end, whatever the caller's limits.
	CapProbePages = "probe-pages"
)

// probeMaxPages bounds the requests of an S3 probe for one key: a server
// answering empty truncated pages cannot make a Stat or an open spin until
// its deadline.
const probeMaxPages = 100

// ListLimits bound one List call. Zero fields are no cap.
type ListLimits struct {
	// MaxEntries is the most entries one directory may have (valid names
	// counted as they arrive, before sorting or deduplication).
	MaxEntries int
	// MaxPages is the most requests one List sends: S3 ListObjectsV2
	// pages, NFS READDIRPLUS replies, retries included. It bounds a server
	// that answers "truncated, more to come" with pages that add nothing.
	MaxPages int
	// Memory, when set, is charged ListEntryCost for every entry gathered,
	// and released when List returns (the caller then holds the result
	// and accounts for it itself).
	Memory ListMemory
}

// ListMemory is a budget of bytes shared by the listings of one caller
// (fusefs: every listing of a mount). It must be safe for concurrent use.
type ListMemory interface {
	// Reserve charges n bytes, or reports false, charging nothing, when
	// the budget cannot hold them.
	Reserve(n int64) bool
	// Release gives back n bytes Reserve charged.
	Release(n int64)
	// Limit is the budget in bytes, for error messages.
	Limit() int64
}

// ListLimitError is the error of a List that passed a cap.
type ListLimitError struct {
	Path  string // the directory ("" is the root)
	Cap   string // CapDirEntries, CapListingMemory or CapListingPages
	Limit int64  // the cap's value (entries, bytes or pages)
}

func (e *ListLimitError) Error() string {
	switch e.Cap {
	case CapDirEntries:
		return fmt.Sprintf("listing of %q refused: more than %d entries (--%s)", e.Path, e.Limit, e.Cap)
	case CapListingMemory:
		return fmt.Sprintf("listing of %q refused: the mount's listings would hold more than %d bytes (--%s)", e.Path, e.Limit, e.Cap)
	case CapProbePages:
		return fmt.Sprintf("probe of %q refused: %d requests without a key or the end of the listing", e.Path, e.Limit)
	}
	return fmt.Sprintf("listing of %q refused: %d requests without reaching its end (the page cap, --%s / 100 + 100)", e.Path, e.Limit, CapDirEntries)
}

func (e *ListLimitError) Unwrap() error { return ErrListTooLarge }

type listLimitsKey struct{}

// WithListLimits returns ctx carrying lim for every List called with it
// (through wrappers such as a mirror).
func WithListLimits(ctx context.Context, lim ListLimits) context.Context {
	return context.WithValue(ctx, listLimitsKey{}, lim)
}

// ListLimitsFrom returns the limits ctx carries (zero: none).
func ListLimitsFrom(ctx context.Context) ListLimits {
	lim, _ := ctx.Value(listLimitsKey{}).(ListLimits)
	return lim
}

// sizeofEntry is the in-memory size of an Entry without its strings.
const sizeofEntry = int64(unsafe.Sizeof(Entry{}))

// ListEntryCost estimates what one gathered entry costs while its List
// runs: the Entry twice (the backend's working set — a map by name for S3,
// handles for NFS — and the result) plus its strings.
func ListEntryCost(name, version string) int64 {
	return 2*sizeofEntry + int64(len(name)+len(version))
}

// listReserveChunk: memory is reserved from the shared budget in chunks,
// so that gathering an entry costs no atomic operation on a shared counter.
const listReserveChunk = 64 << 10

// ListGuard checks one List call against its ListLimits, for backends: each
// List makes one (NewListGuard), counts every request (Page) and gathered
// entry (Entry), and releases it when it returns. It is used by that call's
// goroutine only.
type ListGuard struct {
	lim      ListLimits
	path     string
	pageCap  string // "" is CapListingPages
	entries  int
	pages    int
	used     int64 // bytes of the entries gathered
	reserved int64 // bytes reserved from lim.Memory (≥ used)
}

// NewListGuard returns the guard of a List of directory p under the
// ListLimits of ctx.
func NewListGuard(ctx context.Context, p string) *ListGuard {
	return &ListGuard{lim: ListLimitsFrom(ctx), path: p}
}

// NewProbeGuard returns the guard of a probe for one key under p: at most
// probeMaxPages requests, refused as CapProbePages.
func NewProbeGuard(p string) *ListGuard {
	return &ListGuard{lim: ListLimits{MaxPages: probeMaxPages}, path: p, pageCap: CapProbePages}
}

// Entry counts one gathered entry, or returns the *ListLimitError of the
// cap it passes.
func (g *ListGuard) Entry(name, version string) error {
	g.entries++
	if g.lim.MaxEntries > 0 && g.entries > g.lim.MaxEntries {
		return &ListLimitError{Path: g.path, Cap: CapDirEntries, Limit: int64(g.lim.MaxEntries)}
	}
	if g.lim.Memory == nil {
		return nil
	}
	g.used += ListEntryCost(name, version)
	if g.used > g.reserved {
		n := max(g.used-g.reserved, listReserveChunk)
		if !g.lim.Memory.Reserve(n) {
			return &ListLimitError{Path: g.path, Cap: CapListingMemory, Limit: g.lim.Memory.Limit()}
		}
		g.reserved += n
	}
	return nil
}

// Page counts one request, or returns the *ListLimitError of the page cap.
func (g *ListGuard) Page() error {
	g.pages++
	if g.lim.MaxPages > 0 && g.pages > g.lim.MaxPages {
		return &ListLimitError{Path: g.path, Cap: cmp.Or(g.pageCap, CapListingPages), Limit: int64(g.lim.MaxPages)}
	}
	return nil
}

// Restart forgets the entries gathered (a retry that lists again from the
// start); pages stay counted.
func (g *ListGuard) Restart() {
	g.entries, g.used = 0, 0
}

// Release gives the reserved memory back; call it when List returns.
func (g *ListGuard) Release() {
	if g.reserved > 0 {
		g.lim.Memory.Release(g.reserved)
		g.reserved = 0
	}
}

// NewListMemory returns a ListMemory of limit bytes that only counts (a
// caller that holds no listings between calls: a probe, a test).
func NewListMemory(limit int64) ListMemory { return &countedMemory{limit: limit} }

type countedMemory struct {
	limit int64
	used  atomic.Int64
}

func (m *countedMemory) Reserve(n int64) bool {
	if m.used.Add(n) > m.limit {
		m.used.Add(-n)
		return false
	}
	return true
}

func (m *countedMemory) Release(n int64) { m.used.Add(-n) }
func (m *countedMemory) Limit() int64    { return m.limit }
