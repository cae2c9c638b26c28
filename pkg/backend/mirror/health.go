package mirror

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/source"
)

// replica is one place of a mirror and its health: marked down for a while
// after failures (backing off as they repeat), its read latency (moving
// average, a window for the hedge delay, a histogram) and its counters. The
// fields below b, index, name and kind are atomics, safe for concurrent use.
type replica struct {
	b     backend.Backend
	index int
	name  string // the replica's source URL (no credentials)
	kind  source.Kind

	// Reads with another replica's version that this one took as its own
	// (versionsSame) or answered with ErrChanged (versionsDiffer).
	versionsSame, versionsDiffer atomic.Int64

	ewma      atomic.Int64 // moving average latency, ns; 0 = unmeasured
	probing   atomic.Int32 // probe reads under way (see order)
	measured  atomic.Int64 // unix ns of the last update of ewma
	samples   atomic.Int64 // successes averaged into ewma since it was (re)set
	failures  atomic.Int64 // consecutive failures
	downUntil atomic.Int64 // unix ns; tried last until then

	lat latencyWindow

	// Counters for ReplicaStats.
	requests, errCount, hedges, hedgeWins, served, disagreements atomic.Int64
	buckets                                                      [17]atomic.Int64 // by mirrorBuckets, last = +Inf
	latSumNs, latCount                                           atomic.Int64
}

// latencyWindow keeps a replica's last mirrorWindow read latencies and
// their p95.
type latencyWindow struct {
	mu  sync.Mutex // guards buf and n
	buf [mirrorWindow]time.Duration
	n   int
	p95 atomic.Int64 // ns; 0 until mirrorMinSamples reads were seen
}

func (w *latencyWindow) add(d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf[w.n%mirrorWindow] = d
	w.n++
	if w.n < mirrorMinSamples || (w.n > mirrorWindow && w.n%8 != 0) {
		return
	}
	k := min(w.n, mirrorWindow)
	s := slices.Clone(w.buf[:k])
	slices.Sort(s)
	w.p95.Store(int64(s[(k*95+99)/100-1]))
}

// hedgeDelay is how long a read from r may run before it is hedged: its
// recent p95; before it has enough reads for one, twice its moving
// average; never less than mirrorHedgeMin.
func (r *replica) hedgeDelay() time.Duration {
	if p := time.Duration(r.lat.p95.Load()); p > 0 {
		return max(p, mirrorHedgeMin)
	}
	return max(2*time.Duration(r.ewma.Load()), mirrorHedgeMin)
}

// observe records one finished read of r in its histogram and, when it
// succeeded, in the window its hedge delay comes from (a failure's time —
// retries against a dead server — says nothing of how long a good answer
// takes).
func (r *replica) observe(d time.Duration, ok bool) {
	i := len(mirrorBuckets)
	for j, ub := range mirrorBuckets {
		if d.Seconds() <= ub {
			i = j
			break
		}
	}
	r.buckets[i].Add(1)
	r.latSumNs.Add(int64(d))
	r.latCount.Add(1)
	if ok {
		r.lat.add(d)
	}
}

func (r *replica) down(now int64) bool { return r.downUntil.Load() > now }

func (r *replica) succeeded(d time.Duration) {
	r.failures.Store(0)
	r.downUntil.Store(0)
	now := time.Now().UnixNano()
	old := r.ewma.Load()
	switch {
	case old == 0:
		// The first measure: the warm-up starts.
		r.samples.Store(1)
		r.ewma.Store(max(int64(d), 1))
		return
	case now-r.measured.Swap(now) > int64(mirrorRemeasure):
		// A probe of a replica not used for a while: the old measure is
		// too old to mean anything; this one replaces it (no new warm-up).
		r.samples.Store(max(r.samples.Load(), mirrorWarmup))
		r.ewma.Store(max(int64(d), 1))
		return
	}
	// The plain mean of the first mirrorWarmup samples (one slow first
	// request, a new connection, must not decide for long), then a moving
	// average weighting the newest 1/mirrorWarmup. After the warm-up a
	// sample counts for at most 4× the average: one stalled read (a GC
	// pause, a busy machine) must not hand the reads to a far replica
	// for the next mirrorRemeasure, while a replica that really got slow
	// still loses them within about ten reads.
	n := r.samples.Add(1)
	w, v := min(n, mirrorWarmup), int64(d)
	if n > mirrorWarmup {
		v = min(v, 4*old)
	}
	r.ewma.Store(max(old+(v-old)/w, 1))
}

// warming reports whether r has fewer than mirrorWarmup samples since it
// was (re)measured: reads probe it one at a time until it has them.
func (r *replica) warming() bool { return r.samples.Load() < mirrorWarmup }

// stale reports whether r's moving average is older than mirrorRemeasure:
// the next read probes it (see order).
func (r *replica) stale(now int64) bool {
	return r.ewma.Load() != 0 && now-r.measured.Load() > int64(mirrorRemeasure)
}

func (r *replica) failed() {
	n := r.failures.Add(1)
	down := mirrorMaxDown
	if n < 7 {
		down = min(mirrorMinDown<<(n-1), mirrorMaxDown)
	}
	r.downUntil.Store(time.Now().Add(down).UnixNano())
}
