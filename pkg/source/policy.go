package source

// Cache policy names a volume may ask for (the cache's Options.Policy).
const (
	PolicyNR      = "nr"      // no replacement: the default, and the one for training
	PolicyLRU     = "lru"     // least recently used (benchmarks only)
	PolicyFIFO    = "fifo"    // first in, first out (benchmarks only)
	PolicyRandom  = "random"  // random replacement (benchmarks only)
	PolicyTinyLFU = "tinylfu" // ristretto's TinyLFU admission + sampled LFU eviction (benchmarks only)
)

// Policies returns the policy names a volume may ask for, the default first.
func Policies() []string {
	return []string{PolicyNR, PolicyLRU, PolicyFIFO, PolicyRandom, PolicyTinyLFU}
}
