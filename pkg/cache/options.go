package cache

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// Policy names accepted by Options.Policy.
const (
	PolicyNR      = "nr"      // no replacement: the default, and the one for training
	PolicyLRU     = "lru"     // least recently used (benchmarks only)
	PolicyFIFO    = "fifo"    // first in, first out (benchmarks only)
	PolicyRandom  = "random"  // random replacement (benchmarks only)
	PolicyTinyLFU = "tinylfu" // ristretto's TinyLFU admission + sampled LFU eviction (benchmarks only)
)

// Policies returns the accepted policy names, the default first.
func Policies() []string {
	return []string{PolicyNR, PolicyLRU, PolicyFIFO, PolicyRandom, PolicyTinyLFU}
}

// Options configure a Store. Validated in Open.
type Options struct {
	// Dir is the cache directory, created with mode 0700 if missing.
	// Required. The store only touches LOCK, epochfs-cache.json and
	// entries/ inside it.
	Dir string
	// Capacity is the most bytes of entries the store keeps, > 0. Required.
	Capacity int64
	// Policy is one of Policies(); "" means "nr".
	Policy string
	// KeyScheme names the format of the versions in the callers' keys
	// (the source's source.Source.VersionScheme: "" for S3 ETags, another
	// name since posix versions gained the ctime and inode). When it is
	// not empty, the store records it, and Open removes every entry
	// recorded under another scheme (builds from before KeyScheme recorded
	// none): those keys can never be asked for again, and under NR they
	// would hold their room forever. An empty KeyScheme names none: Open
	// drops nothing and keeps the recorded scheme (tools that only look).
	KeyScheme string
	// Logger receives warnings (write failures, corrupt entries) and an
	// Info line at Open. Default: discard.
	Logger *slog.Logger

	// seed seeds the random policy; 0 picks a random seed. Tests only.
	seed uint64
	// sidecar writes checksum records to .sum sidecar files, as on a
	// filesystem without user xattrs (and as before records moved into
	// the xattr). Tests and benchmarks only.
	sidecar bool
}

// validate checks o and returns a copy with defaults filled in.
func (o Options) validate() (Options, error) {
	if o.Dir == "" {
		return o, fmt.Errorf("%w: Dir is required", ErrInvalidOptions)
	}
	if o.Capacity <= 0 {
		return o, fmt.Errorf("%w: Capacity must be > 0, got %d", ErrInvalidOptions, o.Capacity)
	}
	if o.Policy == "" {
		o.Policy = PolicyNR
	}
	known := false
	for _, p := range Policies() {
		known = known || o.Policy == p
	}
	if !known {
		return o, fmt.Errorf("%w: unknown policy %q (want one of %s)", ErrInvalidOptions, o.Policy, strings.Join(Policies(), ", "))
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return o, nil
}
