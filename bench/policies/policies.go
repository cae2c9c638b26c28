// Package policies holds the cache replacement policies that benchmarks
// compare NR with: LRU, FIFO, Random and ristretto's TinyLFU, as
// cache.Policy implementations injected into a cache.Store
// (cache.Options.Policy, mount.Config.Policy). Under shuffled epochs they
// hit no more than NR (most thrash), which is why the product uses NR only.
//
// This package is for benchmarks and their tests: nothing outside bench/
// imports it, and it must not know about FUSE, CSI or the mount.
package policies

import (
	"container/list"
	crand "crypto/rand"
	"encoding/binary"
	"fmt"
	"math/rand/v2"

	"github.com/epochfs/epochfs/pkg/cache"
)

// Policy names, as benchmarks spell them in flags and reports.
const (
	LRU     = "lru"     // least recently used
	FIFO    = "fifo"    // first in, first out
	Random  = "random"  // random replacement
	TinyLFU = "tinylfu" // ristretto's TinyLFU admission + sampled LFU eviction
)

// Names returns every policy a benchmark may compare, NR first.
func Names() []string {
	return []string{cache.PolicyNR, LRU, FIFO, Random, TinyLFU}
}

var (
	_ cache.Policy = (*listPolicy)(nil)
	_ cache.Policy = (*randomPolicy)(nil)
	_ cache.Policy = (*tinyLFUPolicy)(nil)
)

// New returns the policy called name (one of Names) for capacity bytes.
// seed seeds Random; 0 picks a random seed.
func New(name string, capacity int64, seed uint64) (cache.Policy, error) {
	switch name {
	case cache.PolicyNR:
		return cache.NewNR(capacity), nil
	case LRU:
		return newListPolicy(capacity, true), nil
	case FIFO:
		return newListPolicy(capacity, false), nil
	case Random:
		if seed == 0 {
			var b [8]byte
			_, _ = crand.Read(b[:])
			seed = binary.LittleEndian.Uint64(b[:])
		}
		return &randomPolicy{capacity: capacity, index: map[string]int{}, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}, nil
	case TinyLFU:
		return newTinyLFUPolicy(capacity)
	}
	return nil, fmt.Errorf("policies: unknown policy %q (want one of %v)", name, Names())
}

// listPolicy is LRU (touch moves to the front) or FIFO (it does not);
// victims come from the back.
type listPolicy struct {
	capacity, used int64
	lru            bool
	order          *list.List // of *listItem, front = newest
	items          map[string]*list.Element
}

type listItem struct {
	id   string
	size int64
}

func newListPolicy(capacity int64, lru bool) *listPolicy {
	return &listPolicy{capacity: capacity, lru: lru, order: list.New(), items: map[string]*list.Element{}}
}

func (p *listPolicy) Name() string {
	if p.lru {
		return LRU
	}
	return FIFO
}

func (p *listPolicy) Admit(id string, size int64) ([]string, bool) {
	if size > p.capacity {
		return nil, false
	}
	evict := p.shrink(p.capacity - size)
	p.items[id] = p.order.PushFront(&listItem{id, size})
	p.used += size
	return evict, true
}

func (p *listPolicy) Restore(id string, size int64) []string {
	p.items[id] = p.order.PushFront(&listItem{id, size})
	p.used += size
	return p.shrink(p.capacity)
}

// shrink evicts from the back until used <= limit.
func (p *listPolicy) shrink(limit int64) []string {
	var evict []string
	for p.used > limit && p.order.Len() > 0 {
		it := p.order.Remove(p.order.Back()).(*listItem)
		delete(p.items, it.id)
		p.used -= it.size
		evict = append(evict, it.id)
	}
	return evict
}

func (p *listPolicy) Touch(id string) {
	if e, ok := p.items[id]; ok && p.lru {
		p.order.MoveToFront(e)
	}
}

func (p *listPolicy) Remove(id string) {
	if e, ok := p.items[id]; ok {
		p.used -= p.order.Remove(e).(*listItem).size
		delete(p.items, id)
	}
}

// randomPolicy evicts uniformly random held entries until the new one fits.
type randomPolicy struct {
	capacity, used int64
	held           []listItem
	index          map[string]int // id -> position in held
	rng            *rand.Rand
}

func (p *randomPolicy) Name() string { return Random }

func (p *randomPolicy) Admit(id string, size int64) ([]string, bool) {
	if size > p.capacity {
		return nil, false
	}
	evict := p.shrink(p.capacity - size)
	p.add(id, size)
	return evict, true
}

func (p *randomPolicy) Restore(id string, size int64) []string {
	p.add(id, size)
	return p.shrink(p.capacity)
}

func (p *randomPolicy) add(id string, size int64) {
	p.index[id] = len(p.held)
	p.held = append(p.held, listItem{id, size})
	p.used += size
}

func (p *randomPolicy) shrink(limit int64) []string {
	var evict []string
	for p.used > limit && len(p.held) > 0 {
		id := p.held[p.rng.IntN(len(p.held))].id
		p.Remove(id)
		evict = append(evict, id)
	}
	return evict
}

func (p *randomPolicy) Touch(string) {}

func (p *randomPolicy) Remove(id string) {
	i, ok := p.index[id]
	if !ok {
		return
	}
	p.used -= p.held[i].size
	last := len(p.held) - 1
	p.held[i] = p.held[last]
	p.index[p.held[i].id] = i
	p.held = p.held[:last]
	delete(p.index, id)
}
