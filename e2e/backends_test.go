package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/testenv"
)

// TestNFSVolumeOnKubelet: a static PV whose source is an nfs:// export of a
// real NFS-Ganesha (in its own network namespace, reached over a veth pair
// as a filer on the node's network would be) mounts through the chart's node
// plugin and the pure-Go NFS client, with no kernel NFS client. The export
// is allowed by an admin's network rule (an nfs source has no credentials
// of its own); a second PV naming another export is refused with an event
// that names the rule. A pod reads the dataset twice, byte for byte, and the
// second pass comes from the NR cache.
func TestNFSVolumeOnKubelet(t *testing.T) {
	requireE2E(t)
	dir := t.TempDir()
	files, err := datagen.Write(dir, datagen.Spec{Files: 80, Classes: 4, MedianSize: 20_000, MinSize: 500, MaxSize: 200_000, Seed: 41})
	if err != nil {
		t.Fatal(err)
	}
	total := datagen.TotalSize(files)
	g := testenv.StartGanesha(t, dir)
	in := installChart(t, "--set-string", "node.networkRules[0]="+g.URL)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cs := in.c.Client.CoreV1()
	const ns = "tenant-nfs"
	if _, err := cs.Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitServiceAccount(ctx, t, in, ns)

	// Outside the rule: refused at stage, the event says why.
	outside := strings.TrimSuffix(g.URL, g.Export) + "/srv"
	bad := in.createPV(ctx, t, ns, "elsewhere", map[string]string{"source": outside, "cacheSize": "64Mi"}, "")
	in.readerPod(ctx, t, bad, "refused", "read-dataset", "/data", "1")
	ev := in.waitEvent(ctx, t, ns, "refused", "network rules")
	fmt.Printf("nfs export outside the rule refused: %s\n", tail(ev, 300))
	in.deletePod(ctx, t, ns, "refused")
	in.deleteVolume(ctx, t, bad)

	v := in.createPV(ctx, t, ns, "images", map[string]string{"source": g.URL, "cacheSize": "64Mi"}, "")
	start := time.Now()
	in.readerPod(ctx, t, v, "reader", "sh", "-c", "read-dataset /data 2 && sleep 3600")
	in.waitLogLine(ctx, t, ns, "reader", "done")
	fmt.Printf("nfs reader pod: 2 passes over %d files (%d bytes) in %.1fs from create\n", len(files), total, time.Since(start).Seconds())
	checkPasses(t, passSums(t, in.podLog(ctx, t, ns, "reader")), files, 2)

	body := in.scrapeNode(t)
	hit, okHit := sumSamples(body, "cachefs_cache_hit_bytes_total")
	miss, okMiss := sumSamples(body, "cachefs_cache_miss_bytes_total")
	if !okHit || !okMiss {
		t.Fatalf("the node plugin's /metrics has no dataset mount metrics:\n%s", tail(body, 3000))
	}
	if miss > float64(total) || hit < float64(total)/2 {
		t.Errorf("hit %v miss %v bytes over two passes of %d bytes: want every byte missed at most once and pass 2 from the cache", hit, miss, total)
	}
	fmt.Printf("nfs mount metrics: hit %v miss %v bytes\n", hit, miss)
	if n := len(mountProcesses(t, in.stateDir)); n != 1 {
		t.Errorf("%d mount processes for one dataset, want 1", n)
	}

	in.deletePod(ctx, t, ns, "reader")
	in.deleteVolume(ctx, t, v)
	if d := in.waitNoMounts(t, 2*time.Minute); d >= 0 {
		fmt.Printf("nfs volume unstaged %.1fs after its pod and PV were deleted\n", d.Seconds())
	}
	if b, err := os.ReadFile(filepath.Join(in.c.Dir, "logs", "kubelet.log")); err == nil && strings.Contains(string(b), g.Addr+":2049: i/o timeout") {
		t.Error("the kubelet log shows the node plugin timing out on the NFS server")
	}
}
