package mount

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/backend/all"
	"github.com/epochfs/epochfs/pkg/cache"
	"github.com/epochfs/epochfs/pkg/metrics"
	"github.com/epochfs/epochfs/pkg/source"
)

// TestPrefetchAndReadaheadMetrics: the prefetch-fill and prefetched-hit
// counters come from the store's Stats, the readahead gauges and counter
// from the mount's state, under the names docs/DESIGN.md fixes.
func TestPrefetchAndReadaheadMetrics(t *testing.T) {
	st := cache.Stats{Hits: 10, HitBytes: 1000, PrefetchFills: 7, PrefetchFillBytes: 700, PrefetchedHits: 4, PrefetchedHitBytes: 400}
	u, err := source.Parse(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	src, err := all.Open(t.Context(), u, backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reg, _ := newRegistry(func() cache.Stats { return st }, src)
	ra := metrics.Readahead{Auto: true, Window: 8, Latency: 21 * time.Millisecond, Files: 5}
	metrics.RegisterReadahead(reg, func() metrics.Readahead { return ra })
	want := map[string]float64{
		"cachefs_cache_hits_total":                 10,
		"cachefs_cache_prefetch_fills_total":       7,
		"cachefs_cache_prefetch_fill_bytes_total":  700,
		"cachefs_cache_prefetched_hits_total":      4,
		"cachefs_cache_prefetched_hit_bytes_total": 400,
		"cachefs_readahead_auto":                   1,
		"cachefs_readahead_window_files":           8,
		"cachefs_readahead_latency_seconds":        0.021,
		"cachefs_readahead_files_total":            5,
	}
	got := gatherValues(t, reg)
	for name, v := range want {
		if g, ok := got[name]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", name, g, ok, v)
		}
	}
	ra = metrics.Readahead{Window: 3} // pinned
	if got := gatherValues(t, reg); got["cachefs_readahead_auto"] != 0 || got["cachefs_readahead_window_files"] != 3 {
		t.Errorf("pinned at 3: auto %v, window %v; want 0 and 3", got["cachefs_readahead_auto"], got["cachefs_readahead_window_files"])
	}
}

// gather returns the value of every unlabelled counter and gauge of reg.
func gatherValues(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch {
			case m.GetCounter() != nil:
				got[mf.GetName()] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				got[mf.GetName()] = m.GetGauge().GetValue()
			}
		}
	}
	return got
}
