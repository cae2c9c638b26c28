package cache

import (
	"container/list"
	crand "crypto/rand"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
)

// Policy decides which entries a Store keeps. Ids are entry ids (see
// Key.id); sizes are bytes. A policy keeps its own view of the bytes it
// holds and of the capacity; the Store applies every eviction it returns.
//
// A Policy is not safe for concurrent use: the Store calls it with Store.mu
// held.
type Policy interface {
	// Admit is called on a miss of id, which is not held. ok reports
	// whether id may enter; evict lists held ids the store must delete,
	// and may be non-empty even when ok is false (TinyLFU can evict some
	// victims before it rejects).
	Admit(id string, size int64) (evict []string, ok bool)
	// Restore re-inserts an entry recovered from disk at Open, oldest first,
	// whatever the room, and returns the ids (possibly id itself) that must
	// go to get back within capacity. NR returns none: it never evicts.
	Restore(id string, size int64) (evict []string)
	// Touch records a hit on a held id.
	Touch(id string)
	// Remove forgets a held id that the store dropped on its own (corrupt,
	// failed write); it is not an eviction.
	Remove(id string)
}

var (
	_ Policy = (*nrPolicy)(nil)
	_ Policy = (*listPolicy)(nil)
	_ Policy = (*randomPolicy)(nil)
	_ Policy = (*tinyLFUPolicy)(nil)
)

// newPolicy returns the policy called name for capacity bytes.
func newPolicy(name string, capacity int64, seed uint64) (Policy, error) {
	switch name {
	case PolicyNR:
		return &nrPolicy{capacity: capacity, sizes: map[string]int64{}}, nil
	case PolicyLRU:
		return newListPolicy(capacity, true), nil
	case PolicyFIFO:
		return newListPolicy(capacity, false), nil
	case PolicyRandom:
		if seed == 0 {
			var b [8]byte
			_, _ = crand.Read(b[:])
			seed = binary.LittleEndian.Uint64(b[:])
		}
		return &randomPolicy{capacity: capacity, index: map[string]int{}, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}, nil
	case PolicyTinyLFU:
		return newTinyLFUPolicy(capacity)
	}
	return nil, fmt.Errorf("%w: unknown policy %q", ErrInvalidOptions, name)
}

// nrPolicy is no replacement: admit while the entry fits, never evict.
type nrPolicy struct {
	capacity, used int64
	sizes          map[string]int64
}

func (p *nrPolicy) Admit(id string, size int64) ([]string, bool) {
	if p.used+size > p.capacity {
		return nil, false
	}
	p.used += size
	p.sizes[id] = size
	return nil, true
}

func (p *nrPolicy) Restore(id string, size int64) []string {
	p.used += size
	p.sizes[id] = size
	return nil
}

func (p *nrPolicy) Touch(string) {}

func (p *nrPolicy) Remove(id string) {
	if size, ok := p.sizes[id]; ok {
		p.used -= size
		delete(p.sizes, id)
	}
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
