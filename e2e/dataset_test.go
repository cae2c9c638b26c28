package e2e

import (
	"bufio"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/internal/testenv/s3"
	"github.com/epochfs/epochfs/pkg/csi"
)

// s3Volume is a static PV + PVC over a MinIO bucket, credentials from a
// Secret through nodeStageSecretRef, as docs/CSI.md tells users to write.
type s3Volume struct {
	ns, pvName, pvcName string
}

// createS3Volume creates namespace ns, a Secret with mi's keys, a PV over
// source and a PVC bound to it.
func (in *install) createS3Volume(ctx context.Context, t *testing.T, ns, name, source string, mi *s3.MinIO) s3Volume {
	t.Helper()
	cs := in.c.Client.CoreV1()
	if _, err := cs.Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	waitServiceAccount(ctx, t, in, ns)
	secret := in.createS3Secret(ctx, t, ns, name+"-s3", mi)
	return in.createPV(ctx, t, ns, name, map[string]string{"source": source, "cacheSize": "64Mi"}, secret)
}

// createS3Secret creates Secret ns/name with mi's keys, as docs/CSI.md
// tells users to write one, and returns its name.
func (in *install) createS3Secret(ctx context.Context, t *testing.T, ns, name string, mi *s3.MinIO) string {
	t.Helper()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		StringData: map[string]string{"AWS_ACCESS_KEY_ID": mi.AccessKey, "AWS_SECRET_ACCESS_KEY": mi.SecretKey}}
	if _, err := in.c.Client.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}

// createNamespace creates namespace ns and waits for its default
// ServiceAccount.
func (in *install) createNamespace(ctx context.Context, t *testing.T, ns string) {
	t.Helper()
	if _, err := in.c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitServiceAccount(ctx, t, in, ns)
}

// waitServiceAccount waits for the namespace's default ServiceAccount (pods
// are refused before the controller makes it).
func waitServiceAccount(ctx context.Context, t *testing.T, in *install, ns string) {
	t.Helper()
	for {
		if _, err := in.c.Client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{}); err == nil {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("namespace %s has no default ServiceAccount", ns)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// readerPod runs the test-reader image over the PVC at /data with command.
func (in *install) readerPod(ctx context.Context, t *testing.T, v s3Volume, name string, command ...string) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: v.ns},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "reader", Image: in.readerImage, ImagePullPolicy: corev1.PullNever,
				Command:      command,
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data", ReadOnly: true}},
			}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: v.pvcName, ReadOnly: true}}}},
			TerminationGracePeriodSeconds: new(int64),
		},
	}
	if _, err := in.c.Client.CoreV1().Pods(v.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitPod waits for pod ns/name to reach phase (or fail), returning it.
func (in *install) waitPod(ctx context.Context, t *testing.T, ns, name string, phase corev1.PodPhase) *corev1.Pod {
	t.Helper()
	for {
		p, err := in.c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil && p.Status.Phase == phase {
			return p
		}
		if err == nil && p.Status.Phase == corev1.PodFailed && phase != corev1.PodFailed {
			in.describe(t, ns, name)
			t.Fatalf("pod %s/%s failed", ns, name)
		}
		if ctx.Err() != nil {
			in.describe(t, ns, name)
			if p := in.nodePod(context.Background(), t); p != nil {
				in.describe(t, chartNamespace, p.Name)
			}
			t.Fatalf("pod %s/%s not %s: %v", ns, name, phase, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// passSums parses read-dataset's output: per pass, sha256 by path under
// /data.
func passSums(t *testing.T, log string) []map[string]string {
	t.Helper()
	var passes []map[string]string
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "pass "):
			passes = append(passes, map[string]string{})
		case line == "done" || line == "":
		default:
			sum, path, ok := strings.Cut(line, "  ")
			if !ok || len(passes) == 0 {
				t.Fatalf("unexpected reader output line %q", line)
			}
			passes[len(passes)-1][strings.TrimPrefix(path, "/data/")] = sum
		}
	}
	return passes
}

// checkPasses compares every pass's sha256s with the dataset's files.
func checkPasses(t *testing.T, passes []map[string]string, files []datagen.File, want int) {
	t.Helper()
	if len(passes) != want {
		t.Fatalf("%d passes in the reader's log, want %d", len(passes), want)
	}
	for i, sums := range passes {
		if len(sums) != len(files) {
			t.Errorf("pass %d read %d files, want %d", i+1, len(sums), len(files))
		}
		bad := 0
		for _, f := range files {
			s := datagen.Sum(f)
			if sums[f.Path] != hex.EncodeToString(s[:]) {
				bad++
			}
		}
		if bad > 0 {
			t.Errorf("pass %d: %d of %d files with a wrong sha256", i+1, bad, len(files))
		}
	}
}

// scrapeNode reads the node plugin's /metrics: the endpoint the chart's
// metrics Service selects (on this single-node cluster the hostNetwork
// pod's endpoint is the node's loopback). Each dataset mount's cachefs_*
// metrics are there, labelled dataset_key and dataset_id.
func (in *install) scrapeNode(t *testing.T) string {
	t.Helper()
	resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(in.metricsPort) + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// sumSamples adds the values of name's samples in a text exposition.
func sumSamples(body, name string) (float64, bool) {
	total, found := 0.0, false
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			total, found = total+v, true
		}
	}
	return total, found
}

// TestStaticPVOverMinIO is a user's first volume on a real kubelet: the
// chart installed with helm, a static PV + PVC over a private MinIO bucket
// whose keys come from a Secret (nodeStageSecretRef), and a pod that reads
// every file twice and prints sha256s. Every sum must match the source, the
// node plugin's /metrics must show the second pass served from the NR
// cache (byte hit ratio 1: the dataset fits), and after the pod, PVC and PV
// are deleted the kubelet must unstage the volume: its mount process ends
// and no mount is left on the node. The PV names its claim in its
// attributes (docs/CSI.md), and the metrics speak of it by that name
// (checkClaimMetrics: epochfs_volume_info, the dashboard's hit ratio of the
// claim, `cachefs stats`).
func TestStaticPVOverMinIO(t *testing.T) {
	requireE2E(t)
	cachefs := testenv.GoBuild(t, "./cmd/cachefs") // before the cluster: the build needs no lock
	mi := s3.StartMinIO(t)
	in := installChart(t, minioRules(mi, "training")...)
	mi.MakeBucket(t, "training")
	files := datagen.Spec{Files: 60, Classes: 3, MedianSize: 30_000, MinSize: 500, MaxSize: 300_000, Seed: 13}.Plan()
	mi.PutFiles(t, "training", "imagenet/", files)
	total := datagen.TotalSize(files)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	source := "s3://training/imagenet?endpoint=" + mi.Endpoint + "&region=us-east-1"
	in.createNamespace(ctx, t, "tenant-a")
	secret := in.createS3Secret(ctx, t, "tenant-a", "imagenet-s3", mi)
	v := in.createPV(ctx, t, "tenant-a", "imagenet",
		claimAttrs(map[string]string{"source": source, "cacheSize": "64Mi"}, "tenant-a", "imagenet", "tenant-a-imagenet"), secret)
	start := time.Now()
	// The pod stays up after its two passes: once it ends, the kubelet
	// unstages the volume and the mount's metrics go with it.
	in.readerPod(ctx, t, v, "reader", "sh", "-c", "read-dataset /data 2 && sleep 3600")
	in.waitLogLine(ctx, t, v.ns, "reader", "done")
	fmt.Printf("reader pod: 2 passes over %d files (%d bytes) in %.1fs from create\n", len(files), total, time.Since(start).Seconds())
	log := in.podLog(ctx, t, v.ns, "reader")
	checkPasses(t, passSums(t, log), files, 2)

	body := in.scrapeNode(t)
	hit, okHit := sumSamples(body, "cachefs_cache_hit_bytes_total")
	miss, okMiss := sumSamples(body, "cachefs_cache_miss_bytes_total")
	if !okHit || !okMiss {
		t.Fatalf("the node plugin's /metrics has no dataset mount metrics:\n%s", tail(body, 3000))
	}
	// Pass 1 misses every byte, pass 2 hits every byte (the page cache
	// may answer some of pass 2 without asking the mount: then hits are
	// fewer, never misses more).
	if miss != float64(total) {
		t.Errorf("miss bytes %v, want the dataset's %d (every byte once)", miss, total)
	}
	if hit > float64(total) || hit < float64(total)/2 {
		t.Errorf("hit bytes %v after the second pass over %d bytes", hit, total)
	}
	fmt.Printf("node plugin metrics: hit %v miss %v bytes; byte hit ratio of pass 2 = %.3f (NR expects 1 when the dataset fits)\n", hit, miss, hit/float64(total))
	if !strings.Contains(body, csi.LabelDatasetID+`="`) || strings.Contains(body, mi.SecretKey) || strings.Contains(body, mi.AccessKey) {
		t.Errorf("mount metrics lack the %s label, or carry a credential", csi.LabelDatasetID)
	}

	// Another pod of the claim reads it once more (the same dataset mount)
	// between two scrapes.
	in.checkClaimMetrics(ctx, t, v, "reader", cachefs, func() {
		in.readerPod(ctx, t, v, "reader2", "sh", "-c", "read-dataset /data 1 && sleep 3600")
		in.waitLogLine(ctx, t, v.ns, "reader2", "done")
		checkPasses(t, passSums(t, in.podLog(ctx, t, v.ns, "reader2")), files, 1)
	})
	in.deletePod(ctx, t, v.ns, "reader2")

	pids := mountProcesses(t, in.stateDir)
	if len(pids) != 1 {
		t.Fatalf("%d mount processes for one dataset, want 1", len(pids))
	}
	// The pod, then its PVC and PV right after: kubelet must still
	// unpublish and unstage, and the mount process end.
	cs := in.c.Client.CoreV1()
	if err := cs.Pods(v.ns).Delete(ctx, "reader", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.PersistentVolumeClaims(v.ns).Delete(ctx, v.pvcName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.PersistentVolumes().Delete(ctx, v.pvName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	for len(allMountProcesses(t, in.stateDir)) > 0 || len(fuseMountsUnder(t, in.stateDir)) > 0 || len(fuseMountsUnder(t, in.c.KubeletDir)) > 0 {
		if time.Since(released) > 2*time.Minute {
			b, _ := os.ReadFile(filepath.Join(in.c.Dir, "logs", "kubelet.log"))
			t.Fatalf("after the pod, PVC and PV were deleted: mount processes %v, FUSE mounts %v %v remain; kubelet log tail:\n%s",
				allMountProcesses(t, in.stateDir), fuseMountsUnder(t, in.stateDir), fuseMountsUnder(t, in.c.KubeletDir), tail(string(b), 4000))
		}
		time.Sleep(500 * time.Millisecond)
	}
	fmt.Printf("unstaged by the kubelet: mount process gone and nothing mounted %.1fs after the pod, PVC and PV were deleted\n", time.Since(released).Seconds())
	if b, err := os.ReadFile(filepath.Join(in.c.Dir, "logs", "kubelet.log")); err == nil && strings.Contains(string(b), "GetDeviceMountRefs check failed") {
		t.Error("the kubelet refused UnmountDevice at least once (GetDeviceMountRefs check failed)")
	}
}

// minioRules are the helm flags of node.networkRules naming buckets of mi.
// MinIO listens on the node's loopback, which the mounts the driver starts
// reach only where a rule names the endpoint (docs/SECURITY.md, "Egress"),
// so MinIO starts before the chart is installed.
func minioRules(mi *s3.MinIO, buckets ...string) []string {
	var out []string
	for i, b := range buckets {
		out = append(out, "--set-string", fmt.Sprintf("node.networkRules[%d]=s3://%s?endpoint=%s", i, b, mi.Endpoint))
	}
	return out
}

// s3Source is the MinIO dataset URL of bucket/prefix.
func s3Source(mi *s3.MinIO, bucket, prefix string) string {
	return "s3://" + bucket + "/" + prefix + "?endpoint=" + mi.Endpoint + "&region=us-east-1"
}

// createS3PV is createS3Volume with attributes of the caller's choice and an
// existing or missing Secret (secretName "" for none).
func (in *install) createPV(ctx context.Context, t *testing.T, ns, name string, attrs map[string]string, secretName string) s3Volume {
	t.Helper()
	cs := in.c.Client.CoreV1()
	v := s3Volume{ns: ns, pvName: ns + "-" + name, pvcName: name}
	src := &corev1.CSIPersistentVolumeSource{Driver: csi.DriverName, VolumeHandle: v.pvName, ReadOnly: true, VolumeAttributes: attrs}
	if secretName != "" {
		src.NodeStageSecretRef = &corev1.SecretReference{Name: secretName, Namespace: ns}
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: v.pvName},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadOnlyMany},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			ClaimRef:                      &corev1.ObjectReference{Namespace: ns, Name: v.pvcName},
			PersistentVolumeSource:        corev1.PersistentVolumeSource{CSI: src},
		},
	}
	if _, err := cs.PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	empty := ""
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: v.pvcName, Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadOnlyMany}, StorageClassName: &empty, VolumeName: v.pvName,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if _, err := cs.PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return v
}

// deleteVolume deletes the PVC and PV.
func (in *install) deleteVolume(ctx context.Context, t *testing.T, v s3Volume) {
	t.Helper()
	cs := in.c.Client.CoreV1()
	if err := cs.PersistentVolumeClaims(v.ns).Delete(ctx, v.pvcName, metav1.DeleteOptions{}); err != nil {
		t.Error(err)
	}
	if err := cs.PersistentVolumes().Delete(ctx, v.pvName, metav1.DeleteOptions{}); err != nil {
		t.Error(err)
	}
}

// deletePod deletes pod ns/name and waits until it is gone.
func (in *install) deletePod(ctx context.Context, t *testing.T, ns, name string) {
	t.Helper()
	pods := in.c.Client.CoreV1().Pods(ns)
	if err := pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := pods.Get(ctx, name, metav1.GetOptions{}); err != nil {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("pod %s/%s not gone", ns, name)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// podLog returns the pod's log.
func (in *install) podLog(ctx context.Context, t *testing.T, ns, name string) string {
	t.Helper()
	b, err := in.c.Client.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("logs of %s/%s: %v", ns, name, err)
	}
	return string(b)
}

// waitNoMounts waits until no mount process and no FUSE mount of the node
// plugin is left (kubelet unstaged everything), within limit.
func (in *install) waitNoMounts(t *testing.T, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for len(allMountProcesses(t, in.stateDir)) > 0 || len(fuseMountsUnder(t, in.stateDir)) > 0 || len(fuseMountsUnder(t, in.c.KubeletDir)) > 0 {
		if time.Since(start) > limit {
			t.Fatalf("after %s: mount processes %v, FUSE mounts %v %v remain", limit,
				allMountProcesses(t, in.stateDir), fuseMountsUnder(t, in.stateDir), fuseMountsUnder(t, in.c.KubeletDir))
		}
		time.Sleep(500 * time.Millisecond)
	}
	return time.Since(start)
}

// loopReader is a reader pod command that reads the dataset over and over
// (one "pass 1" block per round) until it is deleted, and stops at the first
// error with a READ-ERROR line.
var loopReader = []string{"sh", "-c", "while true; do read-dataset /data 1 || { echo READ-ERROR; exit 1; }; sleep 0.2; done"}

// checkLoopLog checks a loopReader log: at least min complete passes, every
// sum right, no error.
func checkLoopLog(t *testing.T, log string, files []datagen.File, min int) int {
	t.Helper()
	if strings.Contains(log, "READ-ERROR") {
		t.Fatalf("the reader hit an error:\n%s", tail(log, 2000))
	}
	// The kubelet rotates a long container log: start at the first whole pass.
	if i := strings.Index(log, "pass 1\n"); i > 0 {
		log = log[i:]
	}
	passes := passSums(t, log)
	// The last block may be cut by the deletion or the log read.
	if len(passes) > 0 && len(passes[len(passes)-1]) < len(files) {
		passes = passes[:len(passes)-1]
	}
	if len(passes) < min {
		t.Fatalf("%d complete passes, want at least %d", len(passes), min)
	}
	checkPasses(t, passes, files, len(passes))
	return len(passes)
}

// waitPasses waits until the loop reader ns/name has logged n passes.
func (in *install) waitPasses(ctx context.Context, t *testing.T, ns, name string, n int) {
	t.Helper()
	count := func() int {
		b, err := in.c.Client.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			return 0 // not started yet
		}
		return strings.Count(string(b), "pass 1\n")
	}
	for count() < n {
		if ctx.Err() != nil {
			in.describe(t, ns, name)
			t.Fatalf("pod %s/%s did not log %d passes", ns, name, n)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// waitLogLine waits until the log of pod ns/name has the line want.
func (in *install) waitLogLine(ctx context.Context, t *testing.T, ns, name, want string) {
	t.Helper()
	for {
		b, err := in.c.Client.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err == nil && slices.Contains(strings.Split(string(b), "\n"), want) {
			return
		}
		if ctx.Err() != nil {
			in.describe(t, ns, name)
			t.Fatalf("pod %s/%s never logged %q", ns, name, want)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// waitEvent waits for a Warning event of the pod whose message holds want,
// the way `kubectl describe pod` shows a mount error, and returns it.
func (in *install) waitEvent(ctx context.Context, t *testing.T, ns, pod, want string) string {
	t.Helper()
	for {
		events, err := in.c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
		if err == nil {
			for _, e := range events.Items {
				if e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, want) {
					return e.Reason + ": " + e.Message
				}
			}
		}
		if ctx.Err() != nil {
			in.describe(t, ns, pod)
			t.Fatalf("no Warning event of pod %s/%s says %q", ns, pod, want)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// TestVolumeLifecycle runs on one chart install (inline volumes enabled):
//   - two pods and two PVs of one dataset share one mount process (stage
//     per PV, publish per pod); deleting a pod leaves the other reading;
//     once the last pod, PVC and PV are gone the kubelet unstages and the
//     process ends;
//   - an inline ephemeral volume with the pod's own Secret reads right and
//     goes with its pod;
//   - bad input through the real path (a missing bucket, wrong
//     credentials, an unknown policy, a cacheSize of 0): each pod gets a
//     mount error event naming the problem, no process or mount is left for
//     it, and a pod reading meanwhile sees no error.
func TestVolumeLifecycle(t *testing.T) {
	requireE2E(t)
	mi := s3.StartMinIO(t)
	// The missing bucket too: its volume must reach MinIO to fail there.
	in := installChart(t, append(minioRules(mi, "shared", "no-such-bucket"), "--set", "node.inlineVolumes=true")...)
	mi.MakeBucket(t, "shared")
	files := datagen.Spec{Files: 40, Classes: 2, MedianSize: 20_000, MinSize: 500, MaxSize: 150_000, Seed: 21}.Plan()
	mi.PutFiles(t, "shared", "ds/", files)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	const ns = "team"
	source := s3Source(mi, "shared", "ds")
	v1 := in.createS3Volume(ctx, t, ns, "ds", source, mi) // also the Secret ds-s3
	secret := "ds-s3"

	t.Run("two pods one dataset", func(t *testing.T) {
		v2 := in.createPV(ctx, t, ns, "ds-again", map[string]string{"source": source, "cacheSize": "64Mi"}, secret)
		in.readerPod(ctx, t, v1, "a", loopReader...)
		in.readerPod(ctx, t, v1, "b", loopReader...)
		in.readerPod(ctx, t, v2, "c", "read-dataset", "/data", "1")
		in.waitPasses(ctx, t, ns, "a", 2)
		in.waitPasses(ctx, t, ns, "b", 2)
		in.waitPod(ctx, t, ns, "c", corev1.PodSucceeded)
		checkPasses(t, passSums(t, in.podLog(ctx, t, ns, "c")), files, 1)
		if p := mountProcesses(t, in.stateDir); len(p) != 1 {
			t.Fatalf("%d mount processes for three pods and two PVs of one dataset, want 1", len(p))
		}
		in.deletePod(ctx, t, ns, "c")
		in.deleteVolume(ctx, t, v2)
		in.deletePod(ctx, t, ns, "a")
		before := strings.Count(in.podLog(ctx, t, ns, "b"), "pass 1\n")
		in.waitPasses(ctx, t, ns, "b", before+2) // b reads on after a is gone
		checkLoopLog(t, in.podLog(ctx, t, ns, "b"), files, before+2)
		if p := mountProcesses(t, in.stateDir); len(p) != 1 {
			t.Errorf("%d mount processes while pod b reads, want 1", len(p))
		}
		in.deletePod(ctx, t, ns, "b")
		took := in.waitNoMounts(t, 2*time.Minute)
		fmt.Printf("two pods, one dataset: one mount process; after the last pod: unstaged in %.1fs\n", took.Seconds())
	})

	t.Run("inline volume", func(t *testing.T) {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "inline", Namespace: ns},
			Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "reader", Image: in.readerImage, ImagePullPolicy: corev1.PullNever,
					Command:      []string{"read-dataset", "/data", "2"},
					VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data", ReadOnly: true}}}},
				Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{
					Driver: csi.DriverName, ReadOnly: boolPtr(true),
					VolumeAttributes:     map[string]string{"source": source, "cacheSize": "32Mi"},
					NodePublishSecretRef: &corev1.LocalObjectReference{Name: secret},
				}}}},
				TerminationGracePeriodSeconds: new(int64),
			},
		}
		if _, err := in.c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		in.waitPod(ctx, t, ns, "inline", corev1.PodSucceeded)
		checkPasses(t, passSums(t, in.podLog(ctx, t, ns, "inline")), files, 2)
		in.deletePod(ctx, t, ns, "inline")
		took := in.waitNoMounts(t, 2*time.Minute)
		fmt.Printf("inline volume: read twice, right; gone %.1fs after its pod\n", took.Seconds())
	})

	t.Run("bad input", func(t *testing.T) {
		// A pod reading meanwhile must see nothing of the failures.
		in.readerPod(ctx, t, v1, "steady", loopReader...)
		in.waitPasses(ctx, t, ns, "steady", 1)
		badSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "wrong-keys", Namespace: ns},
			StringData: map[string]string{"AWS_ACCESS_KEY_ID": mi.AccessKey, "AWS_SECRET_ACCESS_KEY": "not-the-secret-key-0123456789"}}
		if _, err := in.c.Client.CoreV1().Secrets(ns).Create(ctx, badSecret, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name, secret string
			attrs        map[string]string
			want         string // in the pod's mount error event
		}{
			{"missing-bucket", secret, map[string]string{"source": s3Source(mi, "no-such-bucket", "ds"), "cacheSize": "16Mi"}, "not_found"},
			{"wrong-credentials", "wrong-keys", map[string]string{"source": source, "cacheSize": "16Mi"}, "permission_denied"},
			{"unknown-policy", secret, map[string]string{"source": source, "cacheSize": "16Mi", "policy": "mru"}, `"mru" is not a cache policy of EpochFS`},
			{"zero-cache", secret, map[string]string{"source": source, "cacheSize": "0"}, `parameter "cacheSize"`},
		} {
			v := in.createPV(ctx, t, ns, tc.name, tc.attrs, tc.secret)
			in.readerPod(ctx, t, v, tc.name, "read-dataset", "/data", "1")
			event := in.waitEvent(ctx, t, ns, tc.name, tc.want)
			fmt.Printf("bad input %s: %s\n", tc.name, tail(event, 300))
			if strings.Contains(event, "not-the-secret-key") || strings.Contains(event, mi.SecretKey) {
				t.Errorf("%s: the event carries a secret: %s", tc.name, event)
			}
			if p := mountProcesses(t, in.stateDir); len(p) != 1 {
				t.Errorf("%s: %d mount processes, want 1 (the steady reader's)", tc.name, len(p))
			}
			in.deletePod(ctx, t, ns, tc.name)
			in.deleteVolume(ctx, t, v)
		}
		checkLoopLog(t, in.podLog(ctx, t, ns, "steady"), files, 1)
		in.deletePod(ctx, t, ns, "steady")
		in.waitNoMounts(t, 2*time.Minute)
	})
}

func boolPtr(b bool) *bool { return &b }
