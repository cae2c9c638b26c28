package peer

import (
	"cmp"
	"math"
	"slices"

	"github.com/zeebo/xxh3"
)

// Byte-balanced, capacity-aware ownership: rendezvous hashing with bounded
// loads (consistent hashing with bounded loads, Mirrokni, Thorup and
// Zadimoghaddam, SODA 2018, applied to rendezvous ranks and bytes).
//
// Plain rendezvous gives each peer 1/N of the files in expectation, but not
// 1/N of the bytes: at a few thousand files of skewed sizes one peer's share
// runs a few percent over D/N, and with C = D/N that peer's NR cache fills
// before it holds all its files, which then come from the backend every
// epoch. With a manifest (a Catalog every peer holds alike) and peers that
// advertise their cache capacity, every peer computes the same Assignment:
//
//   - the files in one fixed order: bytes descending, then the hash of the
//     file key, then the entry number (largest first, so the files that are
//     left when the peers are nearly full are the smallest ones and the
//     capacity is used up to a few small files);
//   - each file to its highest-ranked peer (rendezvous weight order) whose
//     owned bytes plus the file stay within that peer's bound,
//     min(capacity, ⌈(1+ε)·D·w⌉), w the peer's weight: its capacity over
//     all the capacities when every peer advertises one, else 1/N;
//   - a file no peer has room for has no owner: every peer reads it from
//     the backend and none admits it (the cluster holds what fits, and an
//     owner that could not keep it would only add a hop).
//
// A peer joining or leaving changes the bounds and so the tail of the
// order, but most files keep their owner: the unit test measures ≤ 1/N + ε
// moved. Without capacities (none advertised) or without a manifest
// (listing-only datasets: no peer knows the file list or sizes up front,
// so there is nothing to balance), ownership is plain rendezvous (Owner).

// DefaultSlack is ε of the load bound (1+ε)·D·w: the headroom over an
// exactly even split that bounded loads need to keep movement low.
const DefaultSlack = 0.1

// Catalog is the dataset's file list as every peer holds it alike (the
// manifest; *manifest.Manifest implements it).
type Catalog interface {
	// Len is the number of entries (files and directories); entry numbers
	// are 0 ≤ i < Len.
	Len() int
	// Walk calls fn for every file with its entry number and path.
	Walk(fn func(i int, path string) bool)
	// Size is file i's size in bytes.
	Size(i int) int64
	// Find returns the entry number of path.
	Find(path string) (int, bool)
}

// NoOwner is the owner index of a file no peer has room for.
const noOwner = -1

// Assignment is the owner of every file of a Catalog among peers.
// Immutable.
type Assignment struct {
	peers []Peer  // as given (the Membership's list)
	owner []int16 // by entry number: index into peers, noOwner, or noOwner for directories
	load  []int64 // bytes owned, by peer index
	bound []int64 // by peer index
	total int64   // bytes of all the files
	unown int64   // bytes of the files without an owner
	files int     // files of the catalog
}

// Bounded reports whether peers call for an Assignment: some peer
// advertises a capacity.
func Bounded(peers []Peer) bool {
	for _, p := range peers {
		if p.Capacity > 0 {
			return true
		}
	}
	return false
}

// mix64 is the finalizer of SplitMix64: a bijection with full avalanche.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Assign computes the bounded-load ownership of cat's files among peers
// (dataset: the identity in FileKey; slack: ε, ≤ 0 takes DefaultSlack).
// Every peer that calls it with the same arguments gets the same result.
// At most 32767 peers.
func Assign(peers []Peer, dataset string, cat Catalog, slack float64) *Assignment {
	if slack <= 0 {
		slack = DefaultSlack
	}
	n := len(peers)
	a := &Assignment{peers: peers, owner: make([]int16, cat.Len()), load: make([]int64, n), bound: make([]int64, n)}
	for i := range a.owner {
		a.owner[i] = noOwner
	}
	items := a.collect(dataset, cat)
	if n == 0 {
		a.unown = a.total
		return a
	}
	a.setBounds(slack)
	sortItems(items)
	a.place(items)
	return a
}

// assignItem is one file of the catalog as Assign orders it.
type assignItem struct {
	i    int32  // entry number
	size int64  // bytes
	kh   uint64 // hash of its FileKey
}

// collect lists cat's files with their sizes and key hashes, and counts
// them and their bytes into a.
func (a *Assignment) collect(dataset string, cat Catalog) []assignItem {
	items := make([]assignItem, 0, cat.Len())
	key := []byte(FileKey(dataset, ""))
	prefix := len(key)
	cat.Walk(func(i int, path string) bool {
		sz := cat.Size(i)
		a.total += sz
		key = append(key[:prefix], path...) // FileKey(dataset, path), without an allocation
		items = append(items, assignItem{i: int32(i), size: sz, kh: xxh3.Hash(key)})
		return true
	})
	a.files = len(items)
	return items
}

// setBounds sets each peer's bound, min(capacity, ⌈(1+slack)·D·w⌉): w is
// its capacity over all the capacities when every peer advertises one,
// else 1/N.
func (a *Assignment) setBounds(slack float64) {
	n := len(a.peers)
	all := true
	var capSum float64
	for _, p := range a.peers {
		all = all && p.Capacity > 0
		capSum += float64(p.Capacity)
	}
	for k, p := range a.peers {
		w := 1 / float64(n)
		if all {
			w = float64(p.Capacity) / capSum
		}
		b := math.Ceil((1 + slack) * float64(a.total) * w)
		bound := int64(math.MaxInt64)
		if b < float64(math.MaxInt64) {
			bound = int64(b)
		}
		if p.Capacity > 0 {
			bound = min(bound, p.Capacity)
		}
		a.bound[k] = bound
	}
}

// sortItems puts items in the fixed order of the placement: bytes
// descending, then key hash, then entry number.
func sortItems(items []assignItem) {
	slices.SortFunc(items, func(x, y assignItem) int {
		if c := cmp.Compare(y.size, x.size); c != 0 {
			return c
		}
		if c := cmp.Compare(x.kh, y.kh); c != 0 {
			return c
		}
		return cmp.Compare(x.i, y.i)
	})
}

// place gives each item, in order, to its highest-ranked peer (rendezvous
// weight, then peer id) whose load stays within its bound; an item no peer
// has room for is counted unowned.
func (a *Assignment) place(items []assignItem) {
	peers, n := a.peers, len(a.peers)
	ids := make([]uint64, n)
	for k, p := range peers {
		ids[k] = idHash(p.ID)
	}
	rank := make([]int, n)
	ws := make([]uint64, n)
	for _, it := range items {
		for k := range n {
			rank[k], ws[k] = k, rweight(ids[k], it.kh)
		}
		slices.SortFunc(rank, func(x, y int) int {
			if c := cmp.Compare(ws[y], ws[x]); c != 0 {
				return c
			}
			return cmp.Compare(peers[x].ID, peers[y].ID)
		})
		placed := false
		for _, k := range rank {
			if a.load[k]+it.size <= a.bound[k] {
				a.load[k] += it.size
				a.owner[it.i] = int16(k)
				placed = true
				break
			}
		}
		if !placed {
			a.unown += it.size
		}
	}
}

// Peers returns the members the assignment was computed for.
func (a *Assignment) Peers() []Peer { return a.peers }

// OwnerOf returns the owner of entry i: ok false when the file has no
// owner (no peer has room for it) or i is not a file of the catalog.
func (a *Assignment) OwnerOf(i int) (Peer, bool) {
	if i < 0 || i >= len(a.owner) || a.owner[i] == noOwner {
		return Peer{}, false
	}
	return a.peers[a.owner[i]], true
}

// Load returns the bytes peer k (an index into Peers) owns and its bound.
func (a *Assignment) Load(k int) (owned, bound int64) { return a.load[k], a.bound[k] }

// ShareOf returns the files of the catalog, how many of them peer id owns,
// and its share of the bytes (0 when id is not a member).
func (a *Assignment) ShareOf(id string) (files, owned int, bytes float64) {
	k := slices.IndexFunc(a.peers, func(p Peer) bool { return p.ID == id })
	if k < 0 {
		return a.files, 0, 0
	}
	for _, o := range a.owner {
		if o == int16(k) {
			owned++
		}
	}
	if a.total > 0 {
		bytes = float64(a.load[k]) / float64(a.total)
	}
	return a.files, owned, bytes
}

// Unowned returns the bytes of the files no peer has room for, and the
// bytes of all the files.
func (a *Assignment) Unowned() (unowned, total int64) { return a.unown, a.total }
