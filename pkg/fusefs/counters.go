package fusefs

import "sync/atomic"

// Counters are the FUSE requests that reached this process, for benchmarks
// and debugging: most of all, whether passthrough engaged (then a cached
// whole file is opened here but never read here: CachedReads stays 0).
// They are process-wide (every FS of the process adds to them) and only
// grow.
type Counters struct {
	Opens       uint64 // successful opens of files
	CachedReads uint64 // READ requests on cached whole files (0 when passthrough is engaged)
	MemReads    uint64 // READ requests on whole files served from memory (not admitted)
	BlockReads  uint64 // READ requests on large files (served in blocks)
	ReadBytes   uint64 // bytes returned by all READ requests served here
	// FilesReadAhead counts small files fetched into the cache by readahead
	// (Options.ReadaheadFiles).
	FilesReadAhead uint64
	// PassthroughOpens: opens answered with a passthrough backing id (the
	// kernel reads those files past this process).
	PassthroughOpens uint64
}

// counters are the Counters of the process: atomics, so no lock; not in FS
// because they are process-wide.
var counters struct {
	opens, passthroughOpens, cachedReads, memReads, blockReads, readBytes, filesReadAhead atomic.Uint64
}

// ReadCounters returns the process's counters.
func ReadCounters() Counters {
	return Counters{
		Opens:       counters.opens.Load(),
		CachedReads: counters.cachedReads.Load(),
		MemReads:    counters.memReads.Load(),
		BlockReads:  counters.blockReads.Load(),
		ReadBytes:   counters.readBytes.Load(),

		FilesReadAhead:   counters.filesReadAhead.Load(),
		PassthroughOpens: counters.passthroughOpens.Load(),
	}
}
