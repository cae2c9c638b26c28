package mount

// The mount's Prometheus registry: the cache's and the backend's counters,
// read when scraped, and the backend read latency observed through
// backend.WithObserver.

import (
	"strconv"
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
