package cache

// PolicyNR names NR (no replacement), the product's only policy: admit on
// a miss while the entry fits, never evict.
const PolicyNR = "nr"

// Policy decides which entries a Store keeps. Ids are entry ids (see
// Key.id); sizes are bytes. A policy keeps its own view of the bytes it
// holds and of the capacity; the Store applies every eviction it returns.
// The product's policy is NR (NewNR); benchmarks compare it with others
// (bench/policies) through Options.Policy.
//
// A Policy need not be safe for concurrent use: the Store calls it with
// Store.mu held. It must not call the Store. A Policy that is also an
// io.Closer is closed by the Store's Close.
type Policy interface {
	// Name names the policy in Stats and in the cache directory's metadata.
	Name() string
	// Admit is called on a miss of id, which is not held. ok reports
	// whether id may enter; evict lists held ids the store must delete,
	// and may be non-empty even when ok is false (a policy may evict some
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

var _ Policy = (*nrPolicy)(nil)

// NewNR returns NR for capacity bytes: the policy of a Store whose
// Options.Policy is nil.
func NewNR(capacity int64) Policy {
	return &nrPolicy{capacity: capacity, sizes: map[string]int64{}}
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

func (p *nrPolicy) Name() string { return PolicyNR }
