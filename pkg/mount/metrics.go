package mount

// The mount's Prometheus registry: the cache's and the backend's counters,
// read when scraped, and the backend read latency observed through
// backend.WithObserver.

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/cache"
	"github.com/epochfs/epochfs/pkg/metrics"
)

// readObserver implements backend.Observer: a read-latency histogram and an
// error counter.
type readObserver struct {
	seconds prometheus.Histogram
	errors  prometheus.Counter
}

// ObserveRead records one backend read.
func (b *readObserver) ObserveRead(d time.Duration, _ int, err error) {
	b.seconds.Observe(d.Seconds())
	if err != nil {
		b.errors.Inc()
	}
}

// newRegistry returns a registry holding the cache metrics (read from stats
// at scrape time), the backend metrics (retries read from retries at scrape
// time from src), and the Go and process collectors.
func newRegistry(stats func() cache.Stats, src backend.Backend) (*prometheus.Registry, *readObserver) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	counter := func(name, help string, f func(cache.Stats) int64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(f(stats())) }))
	}
	gauge := func(name, help string, f func(cache.Stats) int64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help},
			func() float64 { return float64(f(stats())) }))
	}
	counter("cachefs_cache_hits_total", "Cache lookups served from the cache (one per small-file open or large-file block).",
		func(s cache.Stats) int64 { return s.Hits })
	counter("cachefs_cache_misses_total", "Cache lookups that went to the backend.",
		func(s cache.Stats) int64 { return s.Misses })
	counter("cachefs_cache_hit_bytes_total", "Bytes of the lookups served from the cache.",
		func(s cache.Stats) int64 { return s.HitBytes })
	counter("cachefs_cache_miss_bytes_total", "Bytes of the lookups that went to the backend.",
		func(s cache.Stats) int64 { return s.MissBytes })
	counter("cachefs_cache_admissions_total", "Entries admitted into the cache.",
		func(s cache.Stats) int64 { return s.Admissions })
	counter("cachefs_cache_rejections_total", "Misses the policy did not admit (read through, uncached).",
		func(s cache.Stats) int64 { return s.Rejections })
	counter("cachefs_cache_evictions_total", "Entries evicted (always 0 under NR).",
		func(s cache.Stats) int64 { return s.Evictions })
	counter("cachefs_cache_corrupt_dropped_total", "Entries dropped because their checksum did not match.",
		func(s cache.Stats) int64 { return s.CorruptDropped })
	counter("cachefs_cache_load_errors_total", "Misses whose backend read failed (the reader got EIO).",
		func(s cache.Stats) int64 { return s.LoadErrors })
	counter("cachefs_cache_write_errors_total", "Entries that could not be written to the cache disk (full, read-only); the reader was served from memory.",
		func(s cache.Stats) int64 { return s.WriteErrors })
	counter("cachefs_cache_prefetch_fills_total", "Entries admitted by a prefetch fill (cachefs prefetch, the mount's readahead of whole files): neither hits nor misses; included in admissions.",
		func(s cache.Stats) int64 { return s.PrefetchFills })
	counter("cachefs_cache_prefetch_fill_bytes_total", "Bytes of the entries admitted by a prefetch fill.",
		func(s cache.Stats) int64 { return s.PrefetchFillBytes })
	counter("cachefs_cache_prefetched_hits_total", "Hits that were the first lookup of an entry a prefetch fill admitted (included in cachefs_cache_hits_total).",
		func(s cache.Stats) int64 { return s.PrefetchedHits })
	counter("cachefs_cache_prefetched_hit_bytes_total", "Bytes of the prefetched hits (included in cachefs_cache_hit_bytes_total).",
		func(s cache.Stats) int64 { return s.PrefetchedHitBytes })
	gauge("cachefs_cache_used_bytes", "Bytes held by cache entries.",
		func(s cache.Stats) int64 { return s.UsedBytes })
	gauge("cachefs_cache_capacity_bytes", "Cache capacity in bytes.",
		func(s cache.Stats) int64 { return s.CapacityBytes })
	gauge("cachefs_cache_entries", "Number of cache entries.",
		func(s cache.Stats) int64 { return s.Entries })

	b := &readObserver{
		seconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "cachefs_backend_read_seconds",
			Help:    "Latency of backend reads (a whole small file or one block), retries included.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16), // 0.5 ms … 16 s
		}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cachefs_backend_errors_total",
			Help: "Backend reads that failed after retries.",
		}),
	}
	reg.MustRegister(b.seconds, b.errors)
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "cachefs_backend_retries_total",
		Help: "Backend requests retried after a transient failure (5xx, throttling, timeout, reset, short body).",
	}, func() float64 { return float64(backend.Retries(src)) }))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "cachefs_backend_skipped_names_total",
		Help: "Listed names hidden from the mount because they would escape it (.., absolute, NUL, control characters, over 255 bytes).",
	}, func() float64 { return float64(backend.Skipped(src)) }))
	if backend.ReplicaStats(src) != nil {
		reg.MustRegister(newReplicaCollector(src))
	}
	return reg, b
}

// replicaCollector exports a mirror's per-replica counters
// (backend.ReplicaStats) at scrape time, labelled replica="N": the
// replica's position in the mirror URL, from 0 (never its URL, which
// could name a private endpoint).
type replicaCollector struct {
	src                                                   backend.Backend
	requests, errors, hedges, hedgeWins, served, disagree *prometheus.Desc
	share, up, seconds                                    *prometheus.Desc
}

func newReplicaCollector(src backend.Backend) *replicaCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, []string{metrics.LabelReplica}, nil)
	}
	return &replicaCollector{
		src:       src,
		requests:  d("cachefs_backend_replica_requests_total", "Calls sent to a mirror replica (stat, list, reads and hedged reads)."),
		errors:    d("cachefs_backend_replica_errors_total", "Calls to a mirror replica that failed with an I/O error (after its own retries); canceled hedge losers are not errors."),
		hedges:    d("cachefs_backend_replica_hedges_total", "Hedged reads sent to a mirror replica because the replica first asked was slower than its recent p95."),
		hedgeWins: d("cachefs_backend_replica_hedge_wins_total", "Hedged reads a mirror replica answered before the replica first asked."),
		served:    d("cachefs_backend_replica_reads_served_total", "Backend reads whose bytes came from a mirror replica."),
		disagree:  d("cachefs_backend_replica_disagreements_total", "Files a mirror replica disagreed on (size, presence or the manifest's sha256); each is never read from it again."),
		share:     d("cachefs_backend_replica_served_ratio", "Share of the mirror's reads served by a replica since the mount started (0 to 1)."),
		up:        d("cachefs_backend_replica_up", "1 when a mirror replica is healthy, 0 while it is tried last after a failure."),
		seconds:   d("cachefs_backend_replica_read_seconds", "Latency of reads from a mirror replica (canceled hedge losers left out)."),
	}
}

func (c *replicaCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.requests, c.errors, c.hedges, c.hedgeWins, c.served, c.disagree, c.share, c.up, c.seconds} {
		ch <- d
	}
}

func (c *replicaCollector) Collect(ch chan<- prometheus.Metric) {
	stats := backend.ReplicaStats(c.src)
	var total int64
	for _, s := range stats {
		total += s.Served
	}
	for _, s := range stats {
		l := strconv.Itoa(s.Index)
		counter := func(d *prometheus.Desc, v int64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), l)
		}
		counter(c.requests, s.Requests)
		counter(c.errors, s.Errors)
		counter(c.hedges, s.Hedges)
		counter(c.hedgeWins, s.HedgeWins)
		counter(c.served, s.Served)
		counter(c.disagree, s.Disagreements)
		share, up := 0.0, 0.0
		if total > 0 {
			share = float64(s.Served) / float64(total)
		}
		if s.Up {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(c.share, prometheus.GaugeValue, share, l)
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up, l)
		buckets := make(map[float64]uint64, len(s.LatencyBuckets))
		for i, ub := range s.LatencyBuckets {
			buckets[ub] = s.LatencyCounts[i]
		}
		ch <- prometheus.MustNewConstHistogram(c.seconds, s.LatencyCount, s.LatencySum, buckets, l)
	}
}

// LabelStallKind labels cachefs_connection_stall_seconds by what changed
// the connection's process: stallTakeover or stallRecovery.
const LabelStallKind = "kind"

// Stall kinds of cachefs_connection_stall_seconds.
const (
	stallTakeover = "takeover"
	stallRecovery = "recovery"
)

// stallBuckets are the upper bounds of cachefs_connection_stall_seconds.
var stallBuckets = prometheus.ExponentialBucketsRange(0.001, 30, 16) // 1 ms … 30 s

// maxStallBuckets bounds the buckets a predecessor's counters may carry.
const maxStallBuckets = 64

// connCounters are a FUSE connection's handovers, recoveries and stalls,
// counted across the processes that served it: carried in
// handover.State.Counters (the takeover state and the held state), so a
// successor starts from its predecessor's values (a Prometheus counter
// never goes back).
type connCounters struct {
	Handovers  uint64                 `json:"handovers"`
	Recoveries uint64                 `json:"recoveries"`
	Stalls     map[string]stallCounts `json:"stalls,omitempty"` // by kind
}

// stallCounts is one kind's histogram: Buckets[i] counts the stalls of at
// most Le[i] seconds (cumulative, as Prometheus's).
type stallCounts struct {
	Count   uint64    `json:"count"`
	Sum     float64   `json:"sum"`
	Le      []float64 `json:"le"`
	Buckets []uint64  `json:"buckets"`
}

// connStats is this process's connCounters, exported as metrics; mu
// guards c (recorded once by serveTaken, read by scrapes and holders).
type connStats struct {
	mu sync.Mutex
	c  connCounters
}

// load starts from a predecessor's counters (raw may be empty: a fresh
// connection, or a predecessor that counted nothing).
func (s *connStats) load(raw json.RawMessage) error {
	var c connCounters
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &c); err != nil {
			return fmt.Errorf("connection counters: %w", err)
		}
	}
	for kind, h := range c.Stalls {
		if kind != stallTakeover && kind != stallRecovery {
			return fmt.Errorf("connection counters: stall kind %q", kind)
		}
		re, err := h.rebucket()
		if err != nil {
			return fmt.Errorf("connection counters: %s stalls: %w", kind, err)
		}
		c.Stalls[kind] = re
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.c = c
	return nil
}

// rebucket checks h and maps it onto stallBuckets: each bound takes the
// count of the largest carried bound not above it (exact when the bounds
// are the same; counts never go back either way).
func (h stallCounts) rebucket() (stallCounts, error) {
	if len(h.Le) != len(h.Buckets) || len(h.Le) > maxStallBuckets || math.IsNaN(h.Sum) || h.Sum < 0 || math.IsInf(h.Sum, 0) {
		return stallCounts{}, errors.New("malformed histogram")
	}
	for i := range h.Le {
		if h.Buckets[i] > h.Count || (i > 0 && (h.Le[i] <= h.Le[i-1] || h.Buckets[i] < h.Buckets[i-1])) {
			return stallCounts{}, errors.New("malformed histogram")
		}
	}
	out := stallCounts{Count: h.Count, Sum: h.Sum, Le: stallBuckets, Buckets: make([]uint64, len(stallBuckets))}
	for i, le := range stallBuckets {
		for j := range h.Le {
			if h.Le[j] <= le {
				out.Buckets[i] = h.Buckets[j]
			}
		}
	}
	return out, nil
}

// record counts one takeover or recovery of the connection with its stall.
func (s *connStats) record(kind string, stall time.Duration) connCounters {
	s.mu.Lock()
	defer s.mu.Unlock()
	if kind == stallTakeover {
		s.c.Handovers++
	} else {
		s.c.Recoveries++
	}
	if s.c.Stalls == nil {
		s.c.Stalls = map[string]stallCounts{}
	}
	h, ok := s.c.Stalls[kind]
	if !ok {
		h = stallCounts{Le: stallBuckets, Buckets: make([]uint64, len(stallBuckets))}
	}
	h.Count++
	h.Sum += stall.Seconds()
	for i, le := range h.Le {
		if stall.Seconds() <= le {
			h.Buckets[i]++
		}
	}
	s.c.Stalls[kind] = h
	return s.c
}

// marshal is what a successor or a holder carries on.
func (s *connStats) marshal() json.RawMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, _ := json.Marshal(s.c) // plain numbers and strings: cannot fail
	return b
}

// The connection's series (connStats).
var (
	handoversDesc = prometheus.NewDesc("cachefs_connection_handovers_total",
		"Graceful takeovers of this mount's FUSE connection (an upgrade in place), by every process that served it.", nil, nil)
	recoveriesDesc = prometheus.NewDesc("cachefs_connection_recoveries_total",
		"Recoveries of this mount's FUSE connection after its serving process died (--supervise, or a holder that lent it), by every process that served it.", nil, nil)
	stallDesc = prometheus.NewDesc("cachefs_connection_stall_seconds",
		"How long readers of the connection waited at each takeover (from the old process being asked to the new one serving) or recovery (from the death to serving).", []string{LabelStallKind}, nil)
)

// Describe and Collect export the counters.
func (s *connStats) Describe(ch chan<- *prometheus.Desc) {
	ch <- handoversDesc
	ch <- recoveriesDesc
	ch <- stallDesc
}

func (s *connStats) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(handoversDesc, prometheus.CounterValue, float64(s.c.Handovers))
	ch <- prometheus.MustNewConstMetric(recoveriesDesc, prometheus.CounterValue, float64(s.c.Recoveries))
	for _, kind := range []string{stallTakeover, stallRecovery} {
		h := s.c.Stalls[kind]
		buckets := make(map[float64]uint64, len(stallBuckets))
		for i, le := range stallBuckets {
			buckets[le] = 0
			if i < len(h.Buckets) {
				buckets[le] = h.Buckets[i]
			}
		}
		ch <- prometheus.MustNewConstHistogram(stallDesc, h.Count, h.Sum, buckets, kind)
	}
}
