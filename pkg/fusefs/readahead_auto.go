package fusefs

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"time"
)

// Adaptive readahead of whole small files (Options.ReadaheadFiles =
// ReadaheadFilesAuto, the mount's default). Readahead pays when a cold
// epoch is bound by the backend's request latency (a remote bucket, a far
// replica: the readers wait on the network while the CPU idles), and is
// wasted work when it is bound by CPU (a local store: more requests in
// flight only queue up for the same cores). So the window follows two
// measurements over the recent small-file fetches:
//
//   - latency: the backend's latency floor, the fastest of the last
//     autoRing fetches of a whole small file (the loader's time, readers'
//     and readahead's fetches alike; failed fetches are not latency). A far
//     store never answers faster than its round trip, so every fetch is
//     slow; a local store under CPU contention answers most fetches slowly
//     but some quickly, and the floor stays low (a mean, or even the lower
//     quartile, follows the contention, which readahead itself adds to:
//     measured on a busy 2-core machine, the quartile of a local MinIO
//     passed 8 ms at times);
//   - local cost: how long a reader's miss spends in this process besides
//     the fetch (writing the cache entry, opening it), an exponentially
//     weighted mean.
//
// Readahead turns on once latency ≥ max(AutoMinLatency, AutoCostFactor ×
// local cost), over at least autoMinSamples fetches, and off again when
// latency falls below half of that (hysteresis, so a noisy backend does not
// flap). While on, the window is latency / AutoLatencyPerFile, between
// AutoMinFiles and AutoMaxFiles: 8 files at 20 ms per request. A backend
// fetch that fails (not a cancelled reader) turns readahead off for
// autoErrorHold, so that a failing backend is not sent more requests.
const (
	// ReadaheadFilesAuto as Options.ReadaheadFiles: adapt to the backend's
	// measured latency (the mount's default, `--readahead-files auto`).
	ReadaheadFilesAuto = -1
	// AutoMinLatency is the least fetch latency at which auto turns
	// readahead on: well above a local store's (MinIO on the same machine
	// answers a small GET in about a millisecond).
	AutoMinLatency = 8 * time.Millisecond
	// AutoCostFactor: the latency must also be this many times the local
	// per-file cost of a miss.
	AutoCostFactor = 4
	// AutoLatencyPerFile: one file of window per this much latency.
	AutoLatencyPerFile = 2500 * time.Microsecond
	// AutoMinFiles and AutoMaxFiles bound the window while on.
	AutoMinFiles = 2
	AutoMaxFiles = 16

	autoMinSamples = 8
	autoRing       = 32  // fetches the latency floor is taken over
	autoWeight     = 0.1 // of a new sample in the local cost's mean
	autoErrorHold  = 10 * time.Second
)

// autoReadahead is the adaptive window's state. Safe for concurrent use; mu
// is a leaf.
type autoReadahead struct {
	now func() time.Time // immutable; a fake clock in tests

	mu        sync.Mutex
	ring      [autoRing]float64 // the last fetch latencies, seconds
	latency   float64           // their minimum (of the first samples, while fewer), seconds
	cost      float64           // mean local cost of a miss, seconds
	samples   int               // fetches observed (successful)
	costs     int               // local costs observed
	on        bool
	heldUntil time.Time // off until then after a failed fetch
}

func newAutoReadahead(now func() time.Time) *autoReadahead {
	return &autoReadahead{now: now}
}

// ewma adds sample x to mean m of n samples: a plain mean for the first
// samples, then exponentially weighted.
func ewma(m float64, n int, x float64) float64 {
	if n <= 0 {
		return x
	}
	w := max(autoWeight, 1/float64(n+1))
	return m + w*(x-m)
}

// fetched records one backend fetch of a whole small file: its duration
// and its error. A cancelled fetch (the reader or the mount went away) is
// not counted at all.
func (a *autoReadahead) fetched(d time.Duration, err error) {
	if errors.Is(err, context.Canceled) {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil {
		a.heldUntil = a.now().Add(autoErrorHold)
		a.on = false
		return
	}
	a.ring[a.samples%autoRing] = d.Seconds()
	a.samples++
	a.latency = slices.Min(a.ring[:min(a.samples, autoRing)])
	a.decideLocked()
}

// localCost records the time a reader's miss spent besides its fetch.
func (a *autoReadahead) localCost(d time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.cost = ewma(a.cost, a.costs, max(d, 0).Seconds())
	a.costs++
	a.decideLocked()
}

func (a *autoReadahead) threshold() float64 {
	return max(AutoMinLatency.Seconds(), AutoCostFactor*a.cost)
}

func (a *autoReadahead) decideLocked() {
	if a.samples < autoMinSamples {
		return
	}
	switch t := a.threshold(); {
	case a.latency >= t:
		a.on = true
	case a.latency < t/2:
		a.on = false
	}
}

// window returns how many files to read ahead after a miss now: 0 when
// off.
func (a *autoReadahead) window() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.on || a.now().Before(a.heldUntil) {
		return 0
	}
	n := int(math.Round(a.latency / AutoLatencyPerFile.Seconds()))
	return min(max(n, AutoMinFiles), AutoMaxFiles)
}

// AutoReadaheadState is what the adaptive readahead measured and decided,
// for metrics.
type AutoReadaheadState struct {
	// Window is the files read ahead after a miss now (0: off).
	Window int
	// Latency is the backend's latency floor: the fastest of the recent
	// fetches of a whole small file.
	Latency time.Duration
	// LocalCost is the mean time of a miss in this process besides the
	// fetch.
	LocalCost time.Duration
}

func (a *autoReadahead) state() AutoReadaheadState {
	w := a.window()
	a.mu.Lock()
	defer a.mu.Unlock()
	return AutoReadaheadState{Window: w, Latency: secs(a.latency), LocalCost: secs(a.cost)}
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
