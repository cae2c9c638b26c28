package e2e

import (
	"bufio"
	"context"
	"encoding/hex"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/internal/testenv/s3"
)

// streamScript reads the dataset at /data forever, one read-dataset pass
// after another, with every error in the log: read-dataset's own (stderr,
// e.g. "sha256sum: /data/x: Transport endpoint is not connected") and an
// "ERROR" line with its exit code.
const streamScript = `while :; do
	read-dataset /data 1 2>&1 || echo "ERROR read-dataset exit $?"
	sleep 1
done`

// streamLog is a streaming reader's log: its complete passes and every line
// that is neither a pass marker nor a right sha256.
type streamLog struct {
	passes int      // complete passes ("pass 1" … "done"), every file's sum right
	bad    []string // error lines, wrong sums, passes with missing files
}

var sumLine = regexp.MustCompile(`^[0-9a-f]{64}  /data/(.+)$`)

// parseStream checks log against files: every pass must list every file
// with its right sha256, and nothing else may be printed. The last pass may
// still be running (no "done" yet): it is not counted, but its lines are
// checked.
func parseStream(log string, files []datagen.File) streamLog {
	want := make(map[string]string, len(files))
	for _, f := range files {
		s := datagen.Sum(f)
		want[f.Path] = hex.EncodeToString(s[:])
	}
	var out streamLog
	var seen map[string]bool
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		line := sc.Text()
		switch m := sumLine.FindStringSubmatch(line); {
		case line == "pass 1":
			seen = map[string]bool{}
		case line == "done" && seen != nil:
			if len(seen) != len(files) {
				out.bad = append(out.bad, fmt.Sprintf("a pass read %d files, want %d", len(seen), len(files)))
			} else {
				out.passes++
			}
			seen = nil
		case m != nil && seen != nil && want[m[1]] != "":
			if line[:64] != want[m[1]] {
				out.bad = append(out.bad, "wrong sha256: "+line)
			}
			seen[m[1]] = true
		default:
			out.bad = append(out.bad, line)
		}
	}
	return out
}

// TestMountsSurviveDriverRestarts: while a pod streams a dataset in a loop,
// (a) the csi-driver process is killed with SIGKILL, (b) the node plugin pod
// is deleted and the DaemonSet makes a new one, and (c) `helm upgrade` rolls
// the node plugin to a new image tag. The mount process lives in the
// epochfs-mounter DaemonSet's pod, so none of them touches it: after each,
// the reader has seen no error and no wrong byte and has gone on reading,
// the mount process is the same, and a new pod mounting the same PVC reads
// the dataset right (the new driver re-adopted the staged dataset). At the
// end the upgraded driver releases the mount when the last pod goes.
func TestMountsSurviveDriverRestarts(t *testing.T) {
	requireE2E(t)
	mi := s3.StartMinIO(t)
	// The one end-to-end test on global.localImages (images imported into
	// containerd, pull policy Never; every other test pulls from a
	// registry): its upgrade retags the imported image in containerd.
	in := installChartWith(t, installOptions{localImages: true}, minioRules(mi, "training")...)
	_, driverRef := imageArchive(t, "epochfs")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	mounter := in.waitMounterReady(ctx, t)

	mi.MakeBucket(t, "training")
	files := datagen.Spec{Files: 30, Classes: 3, MedianSize: 20_000, MinSize: 500, MaxSize: 200_000, Seed: 17}.Plan()
	mi.PutFiles(t, "training", "imagenet/", files)
	source := "s3://training/imagenet?endpoint=" + mi.Endpoint + "&region=us-east-1"
	v := in.createS3Volume(ctx, t, "tenant-u", "imagenet", source, mi)

	start := time.Now()
	in.readerPod(ctx, t, v, "streamer", "sh", "-c", streamScript)
	t.Cleanup(func() { in.removePod(t, v.ns, "streamer") })
	in.waitPod(ctx, t, v.ns, "streamer", corev1.PodRunning)
	in.waitStreamPasses(ctx, t, v.ns, "streamer", files, 2)
	fmt.Printf("streamer: 2 passes over %d files (%d bytes) %.1fs after its creation\n",
		len(files), datagen.TotalSize(files), time.Since(start).Seconds())
	pids := mountProcesses(t, in.stateDir)
	if len(pids) != 1 {
		t.Fatalf("mount processes %v for one dataset, want 1", pids)
	}
	mountPID := pids[0]

	steps := []struct {
		name    string
		disrupt func() time.Duration // returns the time until the node plugin is Ready again
	}{
		{"kill -9 csi-driver", func() time.Duration {
			old := in.nodePod(ctx, t)
			pid := in.driverProcess(t)
			begin := time.Now()
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			in.waitNodePod(ctx, t, func(p *corev1.Pod) bool {
				return p.UID == old.UID && restarts(p, "csi-driver") > restarts(old, "csi-driver") && podReady(p)
			})
			return time.Since(begin)
		}},
		{"delete the node plugin pod", func() time.Duration {
			old := in.nodePod(ctx, t)
			begin := time.Now()
			if err := in.c.Client.CoreV1().Pods(chartNamespace).Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			in.waitNodePod(ctx, t, func(p *corev1.Pod) bool { return p.UID != old.UID && podReady(p) })
			return time.Since(begin)
		}},
		{"helm upgrade to a new image tag", func() time.Duration {
			old := in.nodePod(ctx, t)
			newRef := driverRef + "-upgrade"
			in.tagImage(t, driverRef, newRef)
			tag := newRef[strings.LastIndexByte(newRef, ':')+1:]
			begin := time.Now()
			in.helmRun(t, "upgrade", chartRelease, filepath.Join(repoRoot(t), "deploy", "helm", "epochfs"),
				"--namespace", chartNamespace, "--reuse-values", "--set-string", "image.tag="+tag)
			in.waitNodePod(ctx, t, func(p *corev1.Pod) bool {
				return p.UID != old.UID && podReady(p) && p.Spec.Containers[0].Image == strings.TrimPrefix(newRef, "docker.io/")
			})
			return time.Since(begin)
		}},
	}
	for i, step := range steps {
		passesBefore := in.streamPasses(ctx, t, v.ns, "streamer", files)
		ready := step.disrupt()
		waitCSINode(ctx, t, in.c, true)
		// Reads through the disruption and after it: two more passes.
		in.waitStreamPasses(ctx, t, v.ns, "streamer", files, passesBefore+2)
		if pids := mountProcesses(t, in.stateDir); len(pids) != 1 || pids[0] != mountPID {
			t.Fatalf("after %s: mount processes %v, want the same one (%d)", step.name, pids, mountPID)
		}
		if m := in.mounterPod(ctx, t); m == nil || m.UID != mounter.UID || restarts(m, "mounter") != 0 {
			t.Fatalf("after %s: the mounter pod was replaced or restarted", step.name)
		}
		name := fmt.Sprintf("new-reader-%d", i+1)
		begin := time.Now()
		in.readerPod(ctx, t, v, name, "read-dataset", "/data", "1")
		in.waitPod(ctx, t, v.ns, name, corev1.PodSucceeded)
		newPod := time.Since(begin)
		log, err := in.c.Client.CoreV1().Pods(v.ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		checkPasses(t, passSums(t, string(log)), files, 1)
		in.removePod(t, v.ns, name)
		passesAfter := in.streamPasses(ctx, t, v.ns, "streamer", files)
		fmt.Printf("%s: node plugin Ready again in %.1fs; streamer %d passes before, %d after, 0 errors, 0 wrong bytes; "+
			"mount process %d unchanged; a new pod mounted the PVC and read it right in %.1fs\n",
			step.name, ready.Seconds(), passesBefore, passesAfter, mountPID, newPod.Seconds())
	}

	// The driver that now runs (the third since the mount was made) also
	// releases it: the last pod gone, the kubelet unstages, the adopted
	// mount process ends and nothing stays mounted.
	in.removePod(t, v.ns, "streamer")
	released := time.Now()
	for len(allMountProcesses(t, in.stateDir)) > 0 || len(fuseMountsUnder(t, in.stateDir)) > 0 || len(fuseMountsUnder(t, in.c.KubeletDir)) > 0 {
		if time.Since(released) > 2*time.Minute {
			t.Fatalf("after the last pod was deleted: mount processes %v, FUSE mounts %v %v remain",
				allMountProcesses(t, in.stateDir), fuseMountsUnder(t, in.stateDir), fuseMountsUnder(t, in.c.KubeletDir))
		}
		time.Sleep(500 * time.Millisecond)
	}
	fmt.Printf("released by the upgraded driver: mount process gone and nothing mounted %.1fs after the last pod was deleted\n",
		time.Since(released).Seconds())
}

// removePod deletes pod ns/name and waits (up to a minute) until it is
// gone: its volume unpublished while the driver still runs.
func (in *install) removePod(t *testing.T, ns, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pods := in.c.Client.CoreV1().Pods(ns)
	if err := pods.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		if !apierrors.IsNotFound(err) {
			t.Logf("delete pod %s/%s: %v", ns, name, err)
		}
		return
	}
	for ctx.Err() == nil {
		if _, err := pods.Get(ctx, name, metav1.GetOptions{}); err != nil {
			return
		}
		time.Sleep(300 * time.Millisecond)
	}
	t.Logf("pod %s/%s not gone after a minute", ns, name)
}

// waitMounterReady waits for the epochfs-mounter DaemonSet's pod to be Ready.
func (in *install) waitMounterReady(ctx context.Context, t *testing.T) *corev1.Pod {
	t.Helper()
	for {
		if p := in.mounterPod(ctx, t); p != nil && podReady(p) {
			return p
		}
		if ctx.Err() != nil {
			t.Fatal("the mounter pod did not become Ready")
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// mounterPod returns the epochfs-mounter pod (one node: one pod).
func (in *install) mounterPod(ctx context.Context, t *testing.T) *corev1.Pod {
	return in.componentPod(ctx, "mounter")
}

func restarts(p *corev1.Pod, container string) int32 {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == container {
			return cs.RestartCount
		}
	}
	return 0
}

// driverProcess is the pid of the node plugin's csi-driver (--mode=node
// with this install's state dir): the node is this machine.
func (in *install) driverProcess(t *testing.T) int {
	t.Helper()
	found, err := testenv.Processes(func(_ int, args []string) bool {
		return filepath.Base(args[0]) == "csi-driver" && slices.Index(args, "--mode=node") > 0 &&
			slices.Index(args, "--state-dir="+in.stateDir) > 0
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 {
		t.Fatalf("csi-driver --mode=node processes of this install: %v, want 1", found)
	}
	return found[0]
}

// tagImage gives image from (imported) a second name in the cluster's
// containerd, as a new release of the same image would be.
func (in *install) tagImage(t *testing.T, from, to string) {
	t.Helper()
	ctr, err := exec.LookPath("ctr")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(ctr, "--address", in.c.ContainerdSocket, "-n", "k8s.io", "images", "tag", "--force", from, to).CombinedOutput()
	if err != nil {
		t.Fatalf("ctr images tag %s %s: %v: %s", from, to, err, out)
	}
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// streamPasses returns the streaming reader's complete passes so far,
// failing the test at its first error line or wrong sum.
func (in *install) streamPasses(ctx context.Context, t *testing.T, ns, name string, files []datagen.File) int {
	t.Helper()
	log, err := in.c.Client.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("logs of %s/%s: %v", ns, name, err)
	}
	s := parseStream(string(log), files)
	if len(s.bad) > 0 {
		if p := in.nodePod(context.Background(), t); p != nil {
			in.describe(t, chartNamespace, p.Name)
		}
		t.Fatalf("the streaming reader saw %d bad lines (after %d good passes); first: %q", len(s.bad), s.passes, s.bad[:min(5, len(s.bad))])
	}
	return s.passes
}

// waitStreamPasses waits until the streaming reader has completed n passes.
func (in *install) waitStreamPasses(ctx context.Context, t *testing.T, ns, name string, files []datagen.File, n int) {
	t.Helper()
	for in.streamPasses(ctx, t, ns, name, files) < n {
		if ctx.Err() != nil {
			in.describe(t, ns, name)
			t.Fatalf("the streaming reader did not reach %d passes", n)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
