package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/epochfs/epochfs/internal/dashboardtest"
	"github.com/epochfs/epochfs/pkg/volattr"
)

// claimAttrs adds to attrs the names a static PV's volumeAttributes carry
// so that the node plugin's metrics name its claim (docs/CSI.md): the
// claim ns/pvc and the PV pv.
func claimAttrs(attrs map[string]string, ns, pvc, pv string) map[string]string {
	out := map[string]string{volattr.ClaimNamespace: ns, volattr.ClaimName: pvc, volattr.PVName: pv}
	for k, v := range attrs {
		out[k] = v
	}
	return out
}

// checkClaimMetrics checks, on the real kubelet, what a user asks of
// volume v's metrics: the node plugin's /metrics has epochfs_volume_info
// with the claim's namespace, PVC and PV and a reader pod's name; the
// dashboard's hit-ratio queries, evaluated by Prometheus's engine over
// the scrapes before and after more reads (read, which must read through
// the volume), return that claim's NR byte hit ratio between them, as the
// mount's counters give it; and `cachefs stats -o json` of the dataset's
// cache directory shows the live mount with its hits and ratios.
func (in *install) checkClaimMetrics(ctx context.Context, t *testing.T, v s3Volume, pod, cachefs string, read func()) {
	t.Helper()
	s1 := in.scrapeNode(t)
	info := volumeInfo(t, s1)
	found := false
	for _, l := range info {
		found = found || (l["namespace"] == v.ns && l["pvc"] == v.pvcName && l["pv"] == v.pvName && l["pod"] == pod)
	}
	if !found {
		t.Fatalf("no epochfs_volume_info{namespace=%q, pvc=%q, pv=%q, pod=%q} on the node plugin's /metrics: %v", v.ns, v.pvcName, v.pvName, pod, info)
	}
	fmt.Printf("epochfs_volume_info: %v\n", info)
	read()
	s2 := in.scrapeNode(t)

	hit := func(s, name string) float64 { x, _ := sumSamples(s, name); return x }
	dHit := hit(s2, "cachefs_cache_hit_bytes_total") - hit(s1, "cachefs_cache_hit_bytes_total")
	dMiss := hit(s2, "cachefs_cache_miss_bytes_total") - hit(s1, "cachefs_cache_miss_bytes_total")
	dPre := hit(s2, "cachefs_cache_prefetched_hit_bytes_total") - hit(s1, "cachefs_cache_prefetched_hit_bytes_total")
	if dHit+dMiss <= 0 {
		t.Fatalf("no lookups between the scrapes (hit %v, miss %v bytes): the reads did not reach the mount", dHit, dMiss)
	}
	want := (dHit - dPre) / (dHit + dMiss)
	node := "node-1"
	if p := in.nodePod(ctx, t); p != nil {
		node = p.Spec.NodeName
	}
	target := map[string]string{"job": "epochfs-node", "node": node}
	scrapes := [][]dashboardtest.Scrape{{{Text: s1, Target: target}}, {{Text: s2, Target: target}}}
	key := v.ns + "/" + v.pvcName
	for _, title := range []string{"NR byte hit ratio by claim", "NR byte hit ratio over the time range"} {
		expr, legend, err := dashboardtest.Query(filepath.Join("..", "deploy", "grafana", "epochfs-dashboard.json"), title, "A", len(scrapes))
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, s := range dashboardtest.Eval(t, scrapes, expr) {
			got[dashboardtest.Legend(legend, s)] = s.Value
		}
		if r, ok := got[key]; !ok || !dashboardtest.Close(r, want, 1e-3) {
			t.Errorf("dashboard %q over the scrapes: %v, want %s = %v (hit %v, miss %v, prefetched %v bytes)", title, got, key, want, dHit, dMiss, dPre)
		}
		fmt.Printf("dashboard %q: %s = %.3f (the mount's counters: %.3f)\n", title, key, got[key], want)
	}

	// cachefs stats of the dataset's cache directory, through the live
	// mount's control socket (a host path of the node).
	dirs, _ := filepath.Glob(filepath.Join(in.cacheRoot, "ds-*"))
	if len(dirs) != 1 {
		t.Fatalf("cache directories %v under %s, want the dataset's one", dirs, in.cacheRoot)
	}
	out, err := exec.CommandContext(ctx, cachefs, "stats", "--cache-dir", dirs[0], "-o", "json").Output()
	if err != nil {
		t.Fatalf("cachefs stats -o json: %v", err)
	}
	var st struct {
		Live  bool `json:"live"`
		Mount *struct {
			Source       string   `json:"source"`
			Hits         int64    `json:"hits"`
			HitBytes     int64    `json:"hit_bytes"`
			ByteHitRatio *float64 `json:"byte_hit_ratio"`
			NRHitRatio   *float64 `json:"nr_hit_ratio"`
			Epoch        int64    `json:"epoch"`
			Resident     int64    `json:"resident_memory_bytes"`
		} `json:"mount"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("cachefs stats -o json: %v\n%s", err, out)
	}
	m := st.Mount
	if !st.Live || m == nil || m.Hits == 0 || float64(m.HitBytes) != hit(s2, "cachefs_cache_hit_bytes_total") ||
		m.ByteHitRatio == nil || m.NRHitRatio == nil || *m.ByteHitRatio <= 0 || m.Resident <= 0 {
		t.Errorf("cachefs stats -o json of %s: %s\nwant the live mount with its hits (%v bytes), ratios and memory", dirs[0], out, hit(s2, "cachefs_cache_hit_bytes_total"))
	}
	if m != nil {
		if strings.Contains(string(out), "SECRET") || strings.Contains(m.Source, "@") {
			t.Errorf("cachefs stats shows a credential: %s", m.Source)
		}
		fmt.Printf("cachefs stats: hits %d (%d bytes), byte hit ratio %.3f since mount, NR %.3f, epoch %d, resident %d bytes\n",
			m.Hits, m.HitBytes, *m.ByteHitRatio, *m.NRHitRatio, m.Epoch, m.Resident)
	}
}

// volumeInfo returns the label sets of epochfs_volume_info in a scrape.
func volumeInfo(t *testing.T, text string) []map[string]string {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader([]byte(text)))
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]string
	for _, m := range mfs["epochfs_volume_info"].GetMetric() {
		l := map[string]string{}
		for _, p := range m.GetLabel() {
			l[p.GetName()] = p.GetValue()
		}
		out = append(out, l)
	}
	return out
}
