package csi_test

import (
	"os"
	"path/filepath"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/cachelabel"
	"github.com/epochfs/epochfs/pkg/csi"
	"github.com/epochfs/epochfs/pkg/manifest"
)

// TestNodeCacheLabels: the node plugin records on its Node, against a real
// kube-apiserver, the cached percent of each staged dataset that has a
// manifest, and removes the label when the dataset is unstaged.
func TestNodeCacheLabels(t *testing.T) {
	kube := testenv.StartKube(t)
	client, err := kubernetes.NewForConfig(kube.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: "test-node", Labels: map[string]string{"kubernetes.io/hostname": "test-node", cachelabel.Prefix + "0123456789abcdef": "50"},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	td := startDriver(t, func(c *csi.Config) { c.NodeLabels, c.Kubeconfig = true, kube.Kubeconfig })

	data, files := dataset(t)
	src, _ := backend.Parse(data)
	b, err := backend.Open(ctx, src, backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := manifest.Index(ctx, b, manifest.IndexOptions{Workers: 2})
	b.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(data, ".epochfs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := m.WriteFile(filepath.Join(data, ".epochfs", "manifest")); err != nil {
		t.Fatal(err)
	}

	staging := filepath.Join(td.workDir(t), "staging")
	vctx := map[string]string{"source": data, "cacheSize": "1GiB"}
	stage(t, td, "vol-l", staging, vctx)
	half := files[:len(files)/2]
	checkFiles(t, view(t, td, "vol-l", staging), half)
	var halfBytes int64
	for _, f := range half {
		halfBytes += f.Size
	}
	if err := td.driver.SyncNodeLabels(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := node(td).NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: "vol-l", VolumePath: staging})
	if err != nil {
		t.Fatal(err)
	}
	if u := st.GetUsage()[0]; u.Total != datagen.TotalSize(files) || u.Used != halfBytes || u.Available != u.Total-halfBytes {
		t.Errorf("stats: total %d used %d available %d; want the dataset's size %d, %d cached", u.Total, u.Used, u.Available, datagen.TotalSize(files), halfBytes)
	}
	key, _ := cachelabel.Key(data)
	labels := nodeLabels(t, client)
	wantPct := cachelabel.FormatPercent(int(halfBytes * 100 / datagen.TotalSize(files)))
	if labels[key] != wantPct {
		t.Errorf("label %s = %q, want %q (half the bytes read); labels %v", key, labels[key], wantPct, labels)
	}
	if _, stale := labels[cachelabel.Prefix+"0123456789abcdef"]; stale {
		t.Error("a stale cache label of a dataset not mounted here was kept")
	}
	if labels["kubernetes.io/hostname"] != "test-node" {
		t.Error("another label was touched")
	}

	unstage(t, td, "vol-l", staging)
	if err := td.driver.SyncNodeLabels(ctx); err != nil {
		t.Fatal(err)
	}
	if v, ok := nodeLabels(t, client)[key]; ok {
		t.Errorf("label %s=%s kept after the last unstage", key, v)
	}
}

func nodeLabels(t *testing.T, client kubernetes.Interface) map[string]string {
	t.Helper()
	n, err := client.CoreV1().Nodes().Get(ctx, "test-node", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n.Labels
}
