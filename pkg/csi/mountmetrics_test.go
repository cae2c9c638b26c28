package csi_test

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/pkg/csi"
	"github.com/epochfs/epochfs/pkg/metrics"
)

// metricValue sums family name's samples whose labels include want.
func metricValue(mfs []*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	total, found := 0.0, false
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.Metric {
			have := map[string]string{}
			for _, l := range m.Label {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if have[k] != v {
					continue metric
				}
			}
			found = true
			switch {
			case m.Counter != nil:
				total += m.Counter.GetValue()
			case m.Gauge != nil:
				total += m.Gauge.GetValue()
			}
		}
	}
	return total, found
}

// TestMountMetricsThroughDriver: the node plugin's /metrics carries each
// dataset mount's cachefs_* metrics labelled with its dataset key and id:
// after two passes over a dataset that fits the cache, the second pass's
// bytes are all hits (NR), read from the driver, not from the mount.
func TestMountMetricsThroughDriver(t *testing.T) {
	td := startDriver(t, nil)
	data, files := dataset(t)
	work := td.workDir(t)
	staging := filepath.Join(work, "staging")
	vctx := map[string]string{"source": data, "cacheSize": "100MiB"}
	stage(t, td, "vol-m", staging, vctx)
	target := view(t, td, "vol-m", staging)

	g, failed := td.driver.MountMetrics()
	gather := func() []*dto.MetricFamily {
		t.Helper()
		mfs, err := prometheus.Gatherers{g}.Gather()
		if err != nil {
			t.Fatal(err)
		}
		return mfs
	}
	checkFiles(t, target, files) // pass 1: misses, admitted
	mfs := gather()
	key := ""
	for _, mf := range mfs {
		if mf.GetName() == "cachefs_cache_miss_bytes_total" && len(mf.Metric) == 1 {
			for _, l := range mf.Metric[0].Label {
				if l.GetName() == csi.LabelDatasetKey {
					key = l.GetValue()
				}
			}
		}
	}
	if !strings.HasPrefix(key, "ds-") {
		t.Fatalf("no cachefs_cache_miss_bytes_total with a %s label among %d families", csi.LabelDatasetKey, len(mfs))
	}
	sel := map[string]string{csi.LabelDatasetKey: key}
	hit1, _ := metricValue(mfs, "cachefs_cache_hit_bytes_total", sel)
	miss1, _ := metricValue(mfs, "cachefs_cache_miss_bytes_total", sel)
	total := float64(datagen.TotalSize(files))
	if miss1 != total || hit1 != 0 {
		t.Errorf("pass 1: hit %v miss %v bytes, want 0 and %v", hit1, miss1, total)
	}

	checkFiles(t, target, files) // pass 2: every byte a hit
	mfs = gather()
	hit2, _ := metricValue(mfs, "cachefs_cache_hit_bytes_total", sel)
	miss2, _ := metricValue(mfs, "cachefs_cache_miss_bytes_total", sel)
	if ratio := (hit2 - hit1) / ((hit2 - hit1) + (miss2 - miss1)); ratio != 1 {
		t.Errorf("pass 2 byte hit ratio from the driver = %v, want 1 (hit %v miss %v)", ratio, hit2-hit1, miss2-miss1)
	}
	found := false
	for _, mf := range mfs {
		found = found || mf.GetName() == "cachefs_backend_read_seconds"
	}
	if !found {
		t.Error("no cachefs_backend_read_seconds (backend latency) from the mount")
	}
	if n := failed(); n != 0 {
		t.Errorf("%d mounts failed to answer", n)
	}

	// The same over HTTP, beside the driver's own metrics, and without a
	// word of the source's credentials or path beyond the labels' hashes.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, err := metrics.Serve(ctx, "127.0.0.1:0", prometheus.Gatherers{prometheus.NewRegistry(), g})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `cachefs_cache_hit_bytes_total{dataset_id="`) || strings.Contains(string(body), data) {
		t.Errorf("/metrics does not carry the mount's labelled metrics, or names the source path:\n%.2000s", body)
	}
	unpublish(t, td, "vol-m", target)
	unstage(t, td, "vol-m", staging)
}
