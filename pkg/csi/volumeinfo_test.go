package csi_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"

	"github.com/epochfs/epochfs/pkg/csi"
	"github.com/epochfs/epochfs/pkg/volattr"
)

// volumeInfoSeries returns epochfs_volume_info's series as label maps.
func volumeInfoSeries(t *testing.T, c prometheus.Collector) []map[string]string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]string
	for _, mf := range mfs {
		if mf.GetName() != "epochfs_volume_info" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetGauge().GetValue() != 1 {
				t.Errorf("epochfs_volume_info = %v, want 1", m.GetGauge().GetValue())
			}
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			out = append(out, l)
		}
	}
	return out
}

// findSeries returns the series whose pod label is pod, or nil.
func findSeries(series []map[string]string, pod string) map[string]string {
	for _, s := range series {
		if s[csi.LabelPod] == pod {
			return s
		}
	}
	return nil
}

// TestVolumeInfo: NodePublish adds an epochfs_volume_info series naming the
// claim, PV, namespace and pod of the publish context, with the dataset
// mount's labels (those of its cachefs_* series); NodeUnpublish removes
// it; hostile names become "" (never a label value over an object name's
// bounds); without pv/name the PV is the volume id.
func TestVolumeInfo(t *testing.T) {
	td := startDriver(t, nil)
	data, _ := dataset(t)
	work := td.workDir(t)
	staging := filepath.Join(work, "staging")
	attrs := map[string]string{"source": data, "cacheSize": "100MiB",
		volattr.ClaimName: "imagenet", volattr.ClaimNamespace: "team-a", volattr.PVName: "pv-imagenet"}
	stage(t, td, "vol-i", staging, attrs)
	podCtx := func(pod string, extra map[string]string) map[string]string {
		m := map[string]string{volattr.PodName: pod, volattr.PodNamespace: "team-a", "csi.storage.k8s.io/pod.uid": "0b9c2f6e-8a41-4c55-9d2f-3f1f6a2b7c10"}
		for k, v := range attrs {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	t1, t2 := filepath.Join(work, "pod1", "mount"), filepath.Join(work, "pod2", "mount")
	publish(t, td, "vol-i", staging, t1, podCtx("trainer-0", nil))
	publish(t, td, "vol-i", staging, t2, podCtx("trainer-1", nil))

	vi := td.driver.VolumeInfo()
	series := volumeInfoSeries(t, vi)
	if len(series) != 2 {
		t.Fatalf("%d series, want 2 (one per pod): %v", len(series), series)
	}
	s := findSeries(series, "trainer-0")
	if s == nil {
		t.Fatalf("no series of pod trainer-0: %v", series)
	}
	if s[csi.LabelNamespace] != "team-a" || s[csi.LabelPVC] != "imagenet" || s[csi.LabelPV] != "pv-imagenet" {
		t.Errorf("series %v: want namespace team-a, pvc imagenet, pv pv-imagenet", s)
	}
	if !strings.HasPrefix(s[csi.LabelDatasetKey], "ds-") || len(s[csi.LabelDatasetID]) != 16 {
		t.Errorf("series %v: want the dataset mount's key (ds-…) and 16-hex-digit id", s)
	}
	// The join: the mount's cachefs_* series carry the same dataset labels.
	if _, ok := metricValue(gatherMounts(t, td), "cachefs_cache_capacity_bytes", map[string]string{
		csi.LabelDatasetKey: s[csi.LabelDatasetKey], csi.LabelDatasetID: s[csi.LabelDatasetID]}); !ok {
		t.Errorf("no cachefs_cache_capacity_bytes with the info series' dataset labels %v", s)
	}

	unpublish(t, td, "vol-i", t1)
	series = volumeInfoSeries(t, vi)
	if len(series) != 1 || findSeries(series, "trainer-1") == nil {
		t.Fatalf("after unpublishing trainer-0: %v, want trainer-1's series only", series)
	}

	// Hostile names (too long, not object names) are left out; a volume
	// without pv/name is named by its id (its volumeHandle).
	long := strings.Repeat("a", 300)
	t3 := filepath.Join(work, "pod3", "mount")
	hostile := podCtx("trainer-2", map[string]string{volattr.ClaimName: long, volattr.PVName: "",
		volattr.ClaimNamespace: "Team_A"})
	delete(hostile, volattr.PVName)
	publish(t, td, "vol-i", staging, t3, hostile)
	s = findSeries(volumeInfoSeries(t, vi), "trainer-2")
	if s == nil || s[csi.LabelPVC] != "" || s[csi.LabelPV] != "vol-i" || s[csi.LabelNamespace] != "team-a" {
		t.Errorf("hostile context: series %v, want pvc \"\", pv vol-i (the volume id), namespace team-a (the pod's)", s)
	}
	badPod := podCtx(long, nil)
	t4 := filepath.Join(work, "pod4", "mount")
	publish(t, td, "vol-i", staging, t4, badPod)
	for _, s := range volumeInfoSeries(t, vi) {
		for k, v := range s {
			if len(v) > 253 {
				t.Errorf("label %s has %d bytes", k, len(v))
			}
		}
	}

	for _, tg := range []string{t2, t3, t4} {
		unpublish(t, td, "vol-i", tg)
	}
	if series := volumeInfoSeries(t, vi); len(series) != 0 {
		t.Errorf("after every unpublish: %v, want none", series)
	}
	unstage(t, td, "vol-i", staging)
}

// TestMountMemoryMetrics: the node plugin's /metrics carries each mount
// process's resident memory and Go heap, labelled with its dataset, beside
// the driver's own unlabelled series of those names.
func TestMountMemoryMetrics(t *testing.T) {
	td := startDriver(t, nil)
	data, files := dataset(t)
	work := td.workDir(t)
	staging := filepath.Join(work, "staging")
	stage(t, td, "vol-mem", staging, map[string]string{"source": data, "cacheSize": "100MiB"})
	target := view(t, td, "vol-mem", staging)
	checkFiles(t, target, files)

	own := prometheus.NewRegistry()
	own.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mfs := gatherMounts(t, td, own)
	for _, name := range []string{"process_resident_memory_bytes", "go_memstats_alloc_bytes", "go_memstats_heap_inuse_bytes", "go_memstats_sys_bytes"} {
		var labelled, bare int
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, m := range mf.GetMetric() {
				if key := label(m, csi.LabelDatasetKey); key != "" {
					labelled++
					if !strings.HasPrefix(key, "ds-") || label(m, csi.LabelDatasetID) == "" || m.GetGauge().GetValue() <= 0 {
						t.Errorf("%s: %v, want a positive value labelled with the dataset", name, m)
					}
				} else {
					bare++
				}
			}
		}
		if labelled != 1 || bare != 1 {
			t.Errorf("%s: %d series of the mount, %d of the driver; want 1 and 1", name, labelled, bare)
		}
	}
	for _, mf := range mfs {
		if n := mf.GetName(); strings.HasPrefix(n, "go_gc_") && len(mf.GetMetric()) > 1 {
			t.Errorf("%s re-exported from the mounts: only the chosen memory series should be", n)
		}
	}
	unpublish(t, td, "vol-mem", target)
	unstage(t, td, "vol-mem", staging)
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// gatherMounts gathers the node's mounts' metrics after those of regs. A
// scrape a mount did not answer in time (a loaded machine) is asked again,
// up to 5 times.
func gatherMounts(t *testing.T, td *testDriver, regs ...prometheus.Gatherer) []*dto.MetricFamily {
	t.Helper()
	g, failed := td.driver.MountMetrics()
	for range 5 {
		before := failed()
		mfs, err := append(prometheus.Gatherers{}, append(regs, g)...).Gather()
		if err != nil {
			t.Fatalf("the driver's and the mounts' series do not merge: %v", err)
		}
		if failed() == before {
			return mfs
		}
		t.Logf("%d mounts did not answer a scrape; again", failed()-before)
	}
	t.Fatal("the mounts did not answer 5 scrapes")
	return nil
}
