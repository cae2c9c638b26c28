package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/testenv/ceph"
	"github.com/epochfs/epochfs/internal/testenv/nfs"
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
	g := nfs.StartGanesha(t, dir)
	in := installChart(t, "--set-string", "node.networkRules[0]="+g.URL)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const ns = "tenant-nfs"
	in.createNamespace(ctx, t, ns)

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
	d := in.waitNoMounts(t, 2*time.Minute)
	fmt.Printf("nfs volume unstaged %.1fs after its pod and PV were deleted\n", d.Seconds())
	if b, err := os.ReadFile(filepath.Join(in.c.Dir, "logs", "kubelet.log")); err == nil && strings.Contains(string(b), g.Addr+":2049: i/o timeout") {
		t.Error("the kubelet log shows the node plugin timing out on the NFS server")
	}
}

// TestMain stops the Ceph cluster a test of this binary started.
func TestMain(m *testing.M) { os.Exit(ceph.Main(m)) }

// TestCephFSVolumeOnKubelet: a static PV whose source is a cephfs:// path of
// a real Ceph cluster mounts through the chart's node plugin, whose image
// carries the libcephfs build of cachefs, with a CephFS client of its own
// (userID/userKey in the node-stage Secret, the names ceph-csi uses): no
// kernel CephFS client, no keyring on the node. The client may read only
// /datasets; a second PV with a wrong key gets a mount error event and
// leaves nothing behind. A pod reads the dataset twice, byte for byte,
// the second pass from the NR cache.
func TestCephFSVolumeOnKubelet(t *testing.T) {
	requireE2E(t)
	ceph := ceph.Start(t)
	dir := t.TempDir()
	files, err := datagen.Write(dir, datagen.Spec{Files: 60, Classes: 3, MedianSize: 20_000, MinSize: 500, MaxSize: 200_000, Seed: 43})
	if err != nil {
		t.Fatal(err)
	}
	total := datagen.TotalSize(files)
	ceph.CopyIn(t, dir, "/datasets/e2e")
	// A client that may read /datasets only, as an admin would make one.
	if out, err := exec.Command("ceph", "-c", ceph.Conf, "fs", "authorize", ceph.FS, "client.e2e-reader", "/datasets", "r").CombinedOutput(); err != nil {
		t.Fatalf("ceph fs authorize: %v\n%s", err, out)
	}
	key, err := exec.Command("ceph", "-c", ceph.Conf, "auth", "print-key", "client.e2e-reader").Output()
	if err != nil {
		t.Fatalf("ceph auth print-key: %v", err)
	}
	wrong, err := exec.Command("ceph-authtool", "--gen-print-key").Output()
	if err != nil {
		t.Fatalf("ceph-authtool --gen-print-key: %v", err)
	}
	// The monitor listens on the node's loopback: the admin names it in a
	// network rule (the mounts' egress is closed to loopback otherwise).
	in := installChart(t, "--set-string", "node.networkRules[0]=cephfs://"+ceph.Mon+"/datasets?fs="+ceph.FS)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cs := in.c.Client.CoreV1()
	const ns = "tenant-ceph"
	in.createNamespace(ctx, t, ns)
	for name, k := range map[string]string{"ceph-reader": strings.TrimSpace(string(key)), "ceph-wrong": strings.TrimSpace(string(wrong))} {
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			StringData: map[string]string{"userID": "e2e-reader", "userKey": k}}
		if _, err := cs.Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	source := "cephfs://" + ceph.Mon + "/datasets/e2e?fs=" + ceph.FS

	bad := in.createPV(ctx, t, ns, "wrong-key", map[string]string{"source": source, "cacheSize": "64Mi"}, "ceph-wrong")
	in.readerPod(ctx, t, bad, "refused", "read-dataset", "/data", "1")
	ev := in.waitEvent(ctx, t, ns, "refused", "permission denied")
	fmt.Printf("cephfs volume with a wrong key refused: %s\n", tail(ev, 300))
	if strings.Contains(ev, string(key)) {
		t.Error("the event quotes the key")
	}
	in.deletePod(ctx, t, ns, "refused")
	in.deleteVolume(ctx, t, bad)

	v := in.createPV(ctx, t, ns, "images", map[string]string{"source": source, "cacheSize": "64Mi"}, "ceph-reader")
	start := time.Now()
	in.readerPod(ctx, t, v, "reader", "sh", "-c", "read-dataset /data 2 && sleep 3600")
	in.waitLogLine(ctx, t, ns, "reader", "done")
	fmt.Printf("cephfs reader pod: 2 passes over %d files (%d bytes) in %.1fs from create\n", len(files), total, time.Since(start).Seconds())
	checkPasses(t, passSums(t, in.podLog(ctx, t, ns, "reader")), files, 2)
	body := in.scrapeNode(t)
	hit, _ := sumSamples(body, "cachefs_cache_hit_bytes_total")
	miss, _ := sumSamples(body, "cachefs_cache_miss_bytes_total")
	if miss > float64(total) || hit < float64(total)/2 {
		t.Errorf("hit %v miss %v bytes over two passes of %d bytes: want every byte missed at most once and pass 2 from the cache", hit, miss, total)
	}
	fmt.Printf("cephfs mount metrics: hit %v miss %v bytes\n", hit, miss)
	if strings.Contains(body, strings.TrimSpace(string(key))) {
		t.Error("the node's metrics carry the key")
	}
	in.deletePod(ctx, t, ns, "reader")
	in.deleteVolume(ctx, t, v)
	d := in.waitNoMounts(t, 2*time.Minute)
	fmt.Printf("cephfs volume unstaged %.1fs after its pod and PV were deleted\n", d.Seconds())
}
