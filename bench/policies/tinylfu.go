package policies

import (
	"fmt"
	"strconv"
	"sync"

	"github.com/dgraph-io/ristretto/v2"
)

// tinyLFUPolicy is ristretto's TinyLFU admission with sampled-LFU eviction,
// with cost = entry bytes and MaxCost = capacity. It holds no values: the
// ristretto cache maps id -> id and its OnEvict/OnReject callbacks tell the
// store which files to delete.
//
// Ristretto is asynchronous; this adapter makes its decisions synchronous
// enough for a disk store, with these known imprecisions (acceptable for a
// policy that only benchmarks use):
//   - Admit and Restore call Set then Wait, so the decision for the entry
//     and every eviction it caused have been reported through the callbacks
//     before they return. Because the Store serializes calls, the set
//     buffer never overflows; a dropped Set would count as a rejection.
//   - Access frequencies (Touch, and the access recorded at each Admit) go
//     through ristretto's lossy, batched Get buffers: up to 64 accesses per
//     stripe wait until the stripe fills, and a stripe may be dropped under
//     contention or garbage collection, so frequency estimates lag and
//     undercount a little.
//   - The sketch has a fixed number of counters sized from the capacity
//     assuming ~16 KiB entries; with much smaller entries estimates collide
//     more.
type tinyLFUPolicy struct {
	c *ristretto.Cache[string, string]

	mu       sync.Mutex // guards evicted and rejected; taken by ristretto's goroutine
	evicted  []string
	rejected []string
}

func newTinyLFUPolicy(capacity int64) (*tinyLFUPolicy, error) {
	p := &tinyLFUPolicy{}
	counters := min(max(capacity/(16<<10)*10, 1<<12), 1<<22)
	c, err := ristretto.NewCache(&ristretto.Config[string, string]{
		NumCounters:        counters,
		MaxCost:            capacity,
		BufferItems:        64,
		IgnoreInternalCost: true,
		KeyToHash:          idHash,
		OnEvict: func(it *ristretto.Item[string]) {
			p.mu.Lock()
			p.evicted = append(p.evicted, it.Value)
			p.mu.Unlock()
		},
		OnReject: func(it *ristretto.Item[string]) {
			p.mu.Lock()
			p.rejected = append(p.rejected, it.Value)
			p.mu.Unlock()
		},
	})
	if err != nil {
		return nil, fmt.Errorf("policies: tinylfu: %w", err)
	}
	p.c = c
	return p, nil
}

// idHash uses the id's own SHA-256 bits as ristretto's key and conflict
// hashes, so two ids never collide in practice.
func idHash(id string) (uint64, uint64) {
	if len(id) < 32 {
		return 0, 0
	}
	k, err1 := strconv.ParseUint(id[:16], 16, 64)
	c, err2 := strconv.ParseUint(id[16:32], 16, 64)
	if err1 != nil || err2 != nil {
		return 0, 0
	}
	return k, c
}

// set offers id to ristretto and returns the evicted ids (other than id)
// and whether id was admitted.
func (p *tinyLFUPolicy) set(id string, size int64) ([]string, bool) {
	if !p.c.Set(id, id, size) {
		return nil, false
	}
	p.c.Wait()
	p.mu.Lock()
	evicted, rejected := p.evicted, p.rejected
	p.evicted, p.rejected = nil, nil
	p.mu.Unlock()
	ok := true
	for _, r := range rejected {
		ok = ok && r != id
	}
	var evict []string
	for _, e := range evicted {
		if e != "" && e != id {
			evict = append(evict, e)
		}
	}
	return evict, ok
}

func (p *tinyLFUPolicy) Name() string { return TinyLFU }

func (p *tinyLFUPolicy) Admit(id string, size int64) ([]string, bool) {
	p.c.Get(id) // record the access that missed
	return p.set(id, size)
}

func (p *tinyLFUPolicy) Restore(id string, size int64) []string {
	evict, ok := p.set(id, size)
	if !ok {
		evict = append(evict, id)
	}
	return evict
}

func (p *tinyLFUPolicy) Touch(id string) { p.c.Get(id) }

func (p *tinyLFUPolicy) Remove(id string) {
	p.c.Del(id)
	p.c.Wait()
}

// Close stops ristretto's goroutines.
func (p *tinyLFUPolicy) Close() error {
	p.c.Close()
	return nil
}
