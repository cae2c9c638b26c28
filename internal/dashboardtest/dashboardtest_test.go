package dashboardtest

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

var dashboardFile = filepath.Join("..", "..", "deploy", "grafana", "epochfs-dashboard.json")

// scrape is a node plugin scrape with one dataset mount (dataset d1, used
// by claims team-a/imagenet and team-b/imagenet-b) and another (d2, used
// by nobody), at the given counters of d1.
func scrape(hit, miss, prefetched, rss float64) string {
	return fmt.Sprintf(`# TYPE epochfs_volume_info gauge
epochfs_volume_info{dataset_id="d1",dataset_key="ds-1",namespace="team-a",pod="p-a",pv="pv-a",pvc="imagenet"} 1
epochfs_volume_info{dataset_id="d1",dataset_key="ds-1",namespace="team-b",pod="p-b",pv="pv-b",pvc="imagenet-b"} 1
# TYPE cachefs_cache_hit_bytes_total counter
cachefs_cache_hit_bytes_total{dataset_id="d1",dataset_key="ds-1"} %g
cachefs_cache_hit_bytes_total{dataset_id="d2",dataset_key="ds-2"} 0
# TYPE cachefs_cache_miss_bytes_total counter
cachefs_cache_miss_bytes_total{dataset_id="d1",dataset_key="ds-1"} %g
cachefs_cache_miss_bytes_total{dataset_id="d2",dataset_key="ds-2"} 0
# TYPE cachefs_cache_prefetched_hit_bytes_total counter
cachefs_cache_prefetched_hit_bytes_total{dataset_id="d1",dataset_key="ds-1"} %g
cachefs_cache_prefetched_hit_bytes_total{dataset_id="d2",dataset_key="ds-2"} 0
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes %g
process_resident_memory_bytes{dataset_id="d1",dataset_key="ds-1"} %g
process_resident_memory_bytes{dataset_id="d2",dataset_key="ds-2"} 7e+06
`, hit, miss, prefetched, 3e7, rss)
}

// TestHitRatioSubtractsPrefetched: the hit-ratio panels show (Δhit −
// Δprefetched hit) / (Δhit + Δmiss) of each claim's dataset, not the plain
// byte ratio, per claim (two claims of one dataset each), and leave out a
// dataset no claim uses.
func TestHitRatioSubtractsPrefetched(t *testing.T) {
	target := map[string]string{"job": "epochfs-node", "node": "n1"}
	// Between the scrapes: 600 hit bytes, 200 of them prefetched, 400 miss.
	scrapes := [][]Scrape{{{Text: scrape(1000, 5000, 100, 5e7), Target: target}}, {{Text: scrape(1600, 5400, 300, 6e7), Target: target}}}
	want := (600.0 - 200) / (600 + 400) // 0.4; the plain byte ratio is 0.6
	for _, title := range []string{"NR byte hit ratio by claim", "NR byte hit ratio over the time range"} {
		expr, legend, err := Query(dashboardFile, title, "A", len(scrapes))
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, s := range Eval(t, scrapes, expr) {
			got[Legend(legend, s)] = s.Value
		}
		if len(got) != 2 || !Close(got["team-a/imagenet"], want, 1e-3) || !Close(got["team-b/imagenet-b"], want, 1e-3) {
			t.Errorf("%s: %v, want %v for team-a/imagenet and team-b/imagenet-b only", title, got, want)
		}
	}
	expr, legend, err := Query(dashboardFile, "Memory of each dataset mount", "A", len(scrapes))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, s := range Eval(t, scrapes, expr) {
		got[Legend(legend, s)] = s.Value
	}
	if len(got) != 2 || got["resident team-a/imagenet (n1)"] != 6e7 || got["resident team-b/imagenet-b (n1)"] != 6e7 {
		t.Errorf("memory panel: %v, want the d1 mount's 6e7 bytes for each of its claims", got)
	}
}

// TestQueryVariables: variables become "All" and windows span the scrapes.
func TestQueryVariables(t *testing.T) {
	expr, _, err := Query(dashboardFile, "NR byte hit ratio by claim", "A", 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"$", "__rate_interval"} {
		if contains(expr, bad) {
			t.Errorf("%q left in %s", bad, expr)
		}
	}
	if !contains(expr, "[120001ms]") {
		t.Errorf("window of 3 scrapes is not 2 intervals and a millisecond: %s", expr)
	}
	if _, _, err := Query(dashboardFile, "no such panel", "A", 2); err == nil {
		t.Error("a missing panel is no error")
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
