package csi_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/epochfs/epochfs/internal/dashboardtest"
	"github.com/epochfs/epochfs/pkg/volattr"
)

// dashboardPath is the Grafana dashboard users import.
var dashboardPath = filepath.Join("..", "..", "deploy", "grafana", "epochfs-dashboard.json")

// scrapeText is what one scrape of the node plugin's /metrics returns
// (its volume info and its mounts' series), in the text format.
func scrapeText(t *testing.T, td *testDriver) string {
	t.Helper()
	own := prometheus.NewRegistry()
	own.MustRegister(td.driver.VolumeInfo())
	var b bytes.Buffer
	enc := expfmt.NewEncoder(&b, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range gatherMounts(t, td, own) {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// TestDashboardHitRatioByClaim: the dashboard's hit-ratio panels, evaluated
// by Prometheus's engine over two scrapes of the node plugin, give each
// claim of a dataset (legend namespace/pvc) that dataset's NR byte hit
// ratio between the scrapes: the second epoch over a cache of half the
// dataset, as the mount's own counters say. Two claims of one dataset (one
// mount) each get the ratio.
func TestDashboardHitRatioByClaim(t *testing.T) {
	td := startDriver(t, nil)
	data, files := dataset(t)
	var total int64
	for _, f := range files {
		total += f.Size
	}
	work := td.workDir(t)
	base := map[string]string{"source": data, "cacheSize": strconv.FormatInt(total/2, 10)} // NR: epoch 2 hits about half
	claims := []struct{ id, ns, pvc, pod string }{{"vol-a", "team-a", "imagenet", "trainer-a"}, {"vol-b", "team-b", "imagenet-b", "trainer-b"}}
	var targets []string
	for _, c := range claims {
		attrs := map[string]string{volattr.ClaimName: c.pvc, volattr.ClaimNamespace: c.ns}
		for k, v := range base {
			attrs[k] = v
		}
		staging := filepath.Join(work, c.id, "staging")
		stage(t, td, c.id, staging, attrs)
		pctx := map[string]string{volattr.PodName: c.pod, volattr.PodNamespace: c.ns}
		for k, v := range attrs {
			pctx[k] = v
		}
		target := filepath.Join(work, c.id, "mount")
		publish(t, td, c.id, staging, target, pctx)
		targets = append(targets, target)
	}
	readAll := func() {
		for _, f := range files {
			if _, err := os.ReadFile(filepath.Join(targets[0], f.Path)); err != nil {
				t.Fatal(err)
			}
		}
	}
	readAll() // epoch 1: misses; NR admits what fits
	s1 := scrapeText(t, td)
	readAll() // epoch 2: hits on what epoch 1 cached
	s2 := scrapeText(t, td)

	// The ratio between the scrapes, from the mount's counters.
	value := func(text, name string) float64 {
		t.Helper()
		p := expfmt.NewTextParser(model.UTF8Validation)
		mfs, err := p.TextToMetricFamilies(bytes.NewReader([]byte(text)))
		if err != nil {
			t.Fatal(err)
		}
		sum := 0.0
		for _, m := range mfs[name].GetMetric() {
			sum += m.GetCounter().GetValue()
		}
		return sum
	}
	d := func(name string) float64 { return value(s2, name) - value(s1, name) }
	hit, miss, pre := d("cachefs_cache_hit_bytes_total"), d("cachefs_cache_miss_bytes_total"), d("cachefs_cache_prefetched_hit_bytes_total")
	want := (hit - pre) / (hit + miss)
	if hit+miss != float64(total) || want <= 0 || want >= 1 {
		t.Fatalf("epoch 2: hit %v miss %v of %d bytes: want a partial ratio over every byte", hit, miss, total)
	}
	target := map[string]string{"job": "epochfs-node", "node": "node-1", "instance": "10.0.0.1:9567"}
	scrapes := [][]dashboardtest.Scrape{{{Text: s1, Target: target}}, {{Text: s2, Target: target}}}
	for _, title := range []string{"NR byte hit ratio by claim", "NR byte hit ratio over the time range", "NR byte hit ratio by claim and node"} {
		expr, legend, err := dashboardtest.Query(dashboardPath, title, "A", len(scrapes))
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, s := range dashboardtest.Eval(t, scrapes, expr) {
			got[dashboardtest.Legend(legend, s)] = s.Value
		}
		if len(got) != len(claims) {
			t.Errorf("%s: %v, want one series per claim", title, got)
		}
		for _, c := range claims {
			key := c.ns + "/" + c.pvc
			if title == "NR byte hit ratio by claim and node" {
				key += " node-1"
			}
			if v, ok := got[key]; !ok || !dashboardtest.Close(v, want, 1e-3) {
				t.Errorf("%s: %q = %v (present %v), want %v (epoch 2: hit %v, miss %v bytes)", title, key, v, ok, want, hit, miss)
			}
		}
	}
	for i, c := range claims {
		unpublish(t, td, c.id, targets[i])
		unstage(t, td, c.id, filepath.Join(work, c.id, "staging"))
	}
}
