package fusefs

import (
	"fmt"
	"testing"
	"time"

	"github.com/epochfs/epochfs/pkg/backend"
)

func entries(n int) []backend.Entry {
	es := make([]backend.Entry, n)
	for i := range es {
		es[i] = backend.Entry{Name: fmt.Sprintf("f%06d", i), Version: "0123456789abcdef"}
	}
	return es
}

// TestListingMemoryBudget: held listings count against the mount's listing
// memory; a listing in flight that needs room first drops the least
// recently used held listings, and is refused only when nothing is left to
// drop; put keeps the memory within the budget by dropping others (never
// the listing just put).
func TestListingMemoryBudget(t *testing.T) {
	one := heldSize(entries(1000))
	mem := &listingMemory{limit: 3*one + one/2}
	c := newListingCache(1<<20, time.Hour, mem)
	for _, p := range []string{"a", "b", "c"} {
		c.put(p, entries(1000))
	}
	if got := mem.used.Load(); got != 3*one {
		t.Fatalf("3 listings held charge %d bytes, want %d", got, 3*one)
	}
	c.get("a") // a is now the most recently used: b goes first
	if !mem.Reserve(one) {
		t.Fatal("Reserve refused though the cache could drop a listing")
	}
	if c.has("b") || !c.has("a") || !c.has("c") {
		t.Errorf("after making room: a %v b %v c %v; want b dropped only", c.has("a"), c.has("b"), c.has("c"))
	}
	if mem.Reserve(10 * one) {
		t.Error("Reserve of more than the whole budget succeeded")
	}
	if c.stats().Dirs != 0 {
		t.Errorf("%d listings held after a refusal that needed them all dropped", c.stats().Dirs)
	}
	mem.Release(one)
	if got := mem.used.Load(); got != 0 {
		t.Errorf("%d bytes charged with nothing held or in flight", got)
	}
	c.put("big", entries(5000)) // larger than the budget: kept alone
	c.put("small", entries(10))
	if c.has("big") || !c.has("small") {
		t.Errorf("put over the budget kept big %v, small %v; want small only", c.has("big"), c.has("small"))
	}
	if mem.over() {
		t.Errorf("%d bytes held, over the %d budget", mem.used.Load(), mem.limit)
	}
}
