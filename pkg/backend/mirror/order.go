package mirror

import (
	"math"
	"slices"
	"time"
)

// order returns the replicas to try: healthy ones first, then the failing
// ones, soonest to recover first. Healthy replicas come fastest first for
// reads (one to probe — unmeasured, warming up or stale — first of all,
// unless a probe of it is already under way: then it comes after the
// measured ones, so that a cold start sends one read at a time, not every
// concurrent one, to a replica that may be far),
// and in URL order for metadata, so that versions stay stable while the
// first replica is healthy.
func (m *mirrorBackend) order(forRead bool) []*replica {
	now := time.Now().UnixNano()
	type keyed struct {
		r          *replica
		down, wait int64
	}
	ks := make([]keyed, len(m.replicas))
	for i, r := range m.replicas {
		k := keyed{r: r}
		if d := r.downUntil.Load(); d > now {
			k.down = d
		} else if forRead {
			k.wait = r.ewma.Load()
			if r.stale(now) || r.warming() {
				k.wait = 0 // measured long ago, or not enough: probe it
			}
			if k.wait == 0 && r.probing.Load() > 0 {
				k.wait = math.MaxInt64
			}
		}
		ks[i] = k
	}
	slices.SortStableFunc(ks, func(a, b keyed) int {
		if a.down != b.down && (a.down == 0 || b.down == 0) {
			return cmpInt64(int64(min(1, a.down)), int64(min(1, b.down))) // healthy first
		}
		if a.down != 0 {
			return cmpInt64(a.down, b.down)
		}
		return cmpInt64(a.wait, b.wait) // 0 for metadata: stable, URL order
	})
	out := make([]*replica, len(ks))
	for i, k := range ks {
		out[i] = k.r
	}
	return out
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
