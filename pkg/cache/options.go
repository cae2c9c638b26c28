package cache

import (
	"fmt"
	"io"
	"log/slog"
)

// Options configure a Store. Validated in Open.
type Options struct {
	// Dir is the cache directory, created with mode 0700 if missing.
	// Required. The store only touches LOCK, epochfs-cache.json and
	// entries/ inside it.
	Dir string
	// Capacity is the most bytes of entries the store keeps, > 0. Required.
	Capacity int64
	// Policy decides admissions and evictions, built for Capacity; nil
	// means NR (NewNR), the product's policy. Benchmarks inject others
	// (bench/policies). The Store owns it from Open on (see Policy).
	Policy Policy
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
	if o.Policy == nil {
		o.Policy = NewNR(o.Capacity)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return o, nil
}
