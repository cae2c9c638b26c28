package backend

// RetryCounter is an optional ability of a Backend that retries transient
// failures: Retries returns how many retries (attempts after the first) it
// has made since it was opened. Use the Retries helper to find it through
// wrappers.
type RetryCounter interface {
	Retries() int64
}

// SkipCounter is an optional ability of a Backend whose listings can
// contain names that ValidName rejects: Skipped returns how many such
// children its listings have skipped since it was opened (a name seen in
// two listings counts twice). Use the Skipped helper to find it through
// wrappers.
type SkipCounter interface {
	Skipped() int64
}

// Unwrapper is implemented by Backends that wrap another one (WithObserver,
// mirror replicas are not wrappers).
type Unwrapper interface {
	Unwrap() Backend
}

// Retries returns the retry count of b or of the first Backend it wraps
// that implements RetryCounter, or 0.
func Retries(b Backend) int64 {
	if rc, ok := as[RetryCounter](b); ok {
		return rc.Retries()
	}
	return 0
}

// Skipped returns the skipped-name count of b or of the first Backend it
// wraps that implements SkipCounter, or 0.
func Skipped(b Backend) int64 {
	if sc, ok := as[SkipCounter](b); ok {
		return sc.Skipped()
	}
	return 0
}

// as returns b, or the first Backend b wraps (through Unwrapper), that
// implements T: how the optional abilities are found through wrappers.
func as[T any](b Backend) (T, bool) {
	for b != nil {
		if t, ok := b.(T); ok {
			return t, true
		}
		u, ok := b.(Unwrapper)
		if !ok {
			break
		}
		b = u.Unwrap()
	}
	var zero T
	return zero, false
}

// ReplicaStat is one mirror replica's counters since the backend was opened
// (see ReplicaStats).
type ReplicaStat struct {
	Index int  // the replica's position in the mirror URL, from 0
	Up    bool // not marked down after a failure

	Requests      int64 // calls sent to it (stat, list, reads, hedges)
	Errors        int64 // calls that failed with an I/O error (not canceled losers)
	Hedges        int64 // hedge reads sent to it because another replica was slow
	HedgeWins     int64 // hedge reads it answered first
	Served        int64 // reads whose answer came from it
	Disagreements int64 // files it disagreed on (size or checksum), never read from it again

	// The read latency histogram: LatencyCounts[i] reads took at most
	// LatencyBuckets[i] seconds (cumulative), of LatencyCount in all,
	// LatencySum seconds together. Canceled hedge losers are left out.
	LatencyBuckets []float64
	LatencyCounts  []uint64
	LatencyCount   uint64
	LatencySum     float64
}

// ReplicaStatser is the optional ability of a mirror to report per-replica
// counters. Use the ReplicaStats helper to find it through wrappers.
type ReplicaStatser interface {
	ReplicaStats() []ReplicaStat
}

// ReplicaStats returns the per-replica counters of b, or of the first
// Backend it wraps that has them (a mirror), or nil.
func ReplicaStats(b Backend) []ReplicaStat {
	if rs, ok := as[ReplicaStatser](b); ok {
		return rs.ReplicaStats()
	}
	return nil
}

// ChecksumSetter is the optional ability of a backend to check whole-file
// reads against known checksums (a mirror: a manifest's sha256s).
type ChecksumSetter interface {
	// SetChecksums gives the backend a function returning a file's
	// sha256, or nil when unknown. Safe to call once before serving.
	SetChecksums(sum func(path string) []byte)
}

// SetChecksums hands sum to b or to the first Backend it wraps that can
// use it, and reports whether one could.
func SetChecksums(b Backend, sum func(path string) []byte) bool {
	if cs, ok := as[ChecksumSetter](b); ok {
		cs.SetChecksums(sum)
		return true
	}
	return false
}
