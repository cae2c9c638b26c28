package e2e

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"

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

// TestMountsSurviveDriverRestarts: while a pod streams a manifest dataset
// in a loop (its volumeMount without HostToContainer), the test disrupts
// every process the mount depends on in turn: (1) kill -9 of csi-driver,
// (2) the node plugin pod deleted (the DaemonSet makes a new one), (3)
// kill -9 of the mount process (the supervisor starts a new one on the
// same FUSE connection), (4) the mounter pod deleted (a new mounter pod
// is handed the mount by a graceful takeover while the old one waits out
// its grace period), (5) kill -9 of the mounter, whose container the
// runtime stops with every process in it (the node plugin, which holds
// the connection, recovers the mount through the restarted mounter), (6)
// `helm upgrade` to a new image tag,
// which rolls the node plugin and, with a surge, the mounter (the new
// mounter pod is handed the mount by a graceful takeover before the old
// one goes). After each the reader has seen no error and no wrong byte,
// its pod was never restarted, the staged mount is the same FUSE
// connection (never remounted), and a new pod mounting the PVC reads the
// dataset right. A probe on the host reads a file of the mount every
// 20 ms throughout and reports the longest read of each step (the stall
// readers see). At the end the upgraded driver releases the mount when
// the last pod goes.
func TestMountsSurviveDriverRestarts(t *testing.T) {
	requireE2E(t)
	mi := s3.StartMinIO(t)
	// The one end-to-end test on global.localImages (images imported into
	// containerd, pull policy Never; every other test pulls from a
	// registry): its upgrade retags the imported image in containerd.
	in := installChartWith(t, installOptions{localImages: true}, minioRules(mi, "training")...)
	_, driverRef := imageArchive(t, "epochfs")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	mounter := in.waitMounterReady(ctx, t)

	mi.MakeBucket(t, "training")
	files := datagen.Spec{Files: 30, Classes: 3, MedianSize: 20_000, MinSize: 500, MaxSize: 200_000, Seed: 17}.Plan()
	mi.PutFiles(t, "training", "imagenet/", files)
	source := "s3://training/imagenet?endpoint=" + mi.Endpoint + "&region=us-east-1"
	// A manifest next to the dataset (SOURCE/.epochfs/manifest), as users
	// make one: node ids are then the manifest's, so another process can
	// serve the connection and the node plugin holds it.
	index := exec.Command(testenv.GoBuild(t, "./cmd/cachefs"), "index", source, "--upload")
	index.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+mi.AccessKey, "AWS_SECRET_ACCESS_KEY="+mi.SecretKey)
	if out, err := index.CombinedOutput(); err != nil {
		t.Fatalf("cachefs index --upload: %v\n%s", err, out)
	}
	v := in.createS3Volume(ctx, t, "tenant-u", "imagenet", source, mi)

	start := time.Now()
	in.readerPod(ctx, t, v, "streamer", "sh", "-c", streamScript)
	t.Cleanup(func() { in.removePod(t, v.ns, "streamer") })
	streamer := in.waitPod(ctx, t, v.ns, "streamer", corev1.PodRunning)
	in.waitStreamPasses(ctx, t, v.ns, "streamer", files, 2)
	fmt.Printf("streamer: 2 passes over %d files (%d bytes) %.1fs after its creation\n",
		len(files), datagen.TotalSize(files), time.Since(start).Seconds())
	sup := mountProcesses(t, in.stateDir)
	if len(sup) != 1 {
		t.Fatalf("mount supervisors %v for one dataset, want 1", sup)
	}
	conn := in.stagedConnection(t)
	waitFor(ctx, t, "the node plugin to hold the mount's connection", func() bool {
		held, _ := filepath.Glob(filepath.Join(in.stateDir, "node", "held", "*.sock"))
		return len(held) == 1
	})
	probe := startReadProbe(t, filepath.Join(conn.mountpoint, files[0].Path), files[0])
	defer probe.stop()

	steps := []struct {
		name string
		// newMount: the step replaces the mount's supervisor (a new
		// mounter's child); newMounter: and the mounter pod.
		newMount, newMounter bool
		disrupt              func() time.Duration // until the disrupted part is back
	}{
		{"kill -9 csi-driver", false, false, func() time.Duration {
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
		{"delete the node plugin pod", false, false, func() time.Duration {
			old := in.nodePod(ctx, t)
			begin := time.Now()
			if err := in.c.Client.CoreV1().Pods(chartNamespace).Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			in.waitNodePod(ctx, t, func(p *corev1.Pod) bool { return p.UID != old.UID && podReady(p) })
			return time.Since(begin)
		}},
		{"kill -9 the mount process", false, false, func() time.Duration {
			sup := mountProcesses(t, in.stateDir)[0]
			child := supervisedChild(t, in.stateDir, sup)
			begin := time.Now()
			if err := syscall.Kill(child, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			waitFor(ctx, t, "a new mount process under the supervisor", func() bool {
				c := supervisedChildOrZero(t, in.stateDir, sup)
				return c != 0 && c != child
			})
			return time.Since(begin)
		}},
		{"delete the mounter pod", true, true, func() time.Duration {
			old := in.mounterPod(ctx, t)
			begin := time.Now()
			if err := in.c.Client.CoreV1().Pods(chartNamespace).Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			in.waitMounterGone(ctx, t, old)
			return time.Since(begin)
		}},
		{"kill -9 the mounter (its container restarts; the runtime kills its mount processes with it)", true, true, func() time.Duration {
			old := in.mounterPod(ctx, t)
			mounters := in.mounterProcesses(t)
			if len(mounters) != 1 {
				t.Fatalf("mounter processes %v, want 1", mounters)
			}
			begin := time.Now()
			if err := syscall.Kill(mounters[0], syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			waitFor(ctx, t, "the mounter container restarted and Ready", func() bool {
				p := in.mounterPod(ctx, t)
				return p != nil && p.UID == old.UID && restarts(p, "mounter") > restarts(old, "mounter") && podReady(p)
			})
			return time.Since(begin)
		}},
		{"helm upgrade to a new image tag (node plugin and mounter rolled)", true, true, func() time.Duration {
			old, oldMounter := in.nodePod(ctx, t), in.mounterPod(ctx, t)
			newRef := driverRef + "-upgrade"
			in.tagImage(t, driverRef, newRef)
			tag := newRef[strings.LastIndexByte(newRef, ':')+1:]
			image := strings.TrimPrefix(newRef, "docker.io/")
			begin := time.Now()
			in.helmRun(t, "upgrade", chartRelease, filepath.Join(repoRoot(t), "deploy", "helm", "epochfs"),
				"--namespace", chartNamespace, "--reuse-values", "--set-string", "image.tag="+tag)
			in.waitNodePod(ctx, t, func(p *corev1.Pod) bool {
				return p.UID != old.UID && podReady(p) && p.Spec.Containers[0].Image == image
			})
			in.waitMounterGone(ctx, t, oldMounter)
			if m := in.mounterPod(ctx, t); m == nil || m.Spec.Containers[0].Image != image {
				t.Fatalf("after the upgrade the mounter pod runs %v, want %s", m, image)
			}
			return time.Since(begin)
		}},
	}
	for i, step := range steps {
		passesBefore := in.streamPasses(ctx, t, v.ns, "streamer", files)
		supBefore := mountProcesses(t, in.stateDir)
		probe.reset()
		back := step.disrupt()
		waitCSINode(ctx, t, in.c, true)
		// Reads through the disruption and after it: two more passes.
		in.waitStreamPasses(ctx, t, v.ns, "streamer", files, passesBefore+2)
		stall, probeErrs := probe.worst()
		if probeErrs != nil {
			t.Fatalf("after %s: the host's probe of the mount failed: %v", step.name, probeErrs)
		}
		sup := mountProcesses(t, in.stateDir)
		if len(sup) != 1 || (sup[0] == supBefore[0]) == step.newMount {
			t.Fatalf("after %s: mount supervisors %v (before %v), want %s", step.name, sup, supBefore,
				map[bool]string{true: "a new one", false: "the same one"}[step.newMount])
		}
		if c := in.stagedConnection(t); c != conn {
			t.Fatalf("after %s: the staged mount is %+v, was %+v: remounted, not recovered", step.name, c, conn)
		}
		m := in.mounterPod(ctx, t)
		if step.newMounter {
			mounter = in.waitMounterReady(ctx, t)
			if parent := testenv.ParentPID(sup[0]); !slices.Contains(in.mounterProcesses(t), parent) {
				t.Fatalf("after %s: the mount's supervisor %d is a child of %d, not of the mounter", step.name, sup[0], parent)
			}
		} else if m == nil || m.UID != mounter.UID || restarts(m, "mounter") != 0 {
			t.Fatalf("after %s: the mounter pod was replaced or restarted", step.name)
		}
		if p, err := in.c.Client.CoreV1().Pods(v.ns).Get(ctx, "streamer", metav1.GetOptions{}); err != nil || p.UID != streamer.UID ||
			restarts(p, "reader") != 0 || p.Status.Phase != corev1.PodRunning {
			t.Fatalf("after %s: the streaming pod was restarted or replaced (%v)", step.name, err)
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
		fmt.Printf("%s: back in %.1fs; streamer %d passes before, %d after, 0 errors, 0 wrong bytes, pod not restarted; "+
			"longest probe read %s (%d reads); mount supervisor %v -> %v, same FUSE connection %s; "+
			"a new pod mounted the PVC and read it right in %.1fs\n",
			step.name, back.Seconds(), passesBefore, passesAfter, stall.Round(time.Millisecond), probe.count(),
			supBefore, sup, conn.dev, newPod.Seconds())
	}
	probe.stop()

	// The driver that now runs (the fourth since the mount was made) also
	// releases it: the last pod gone, the kubelet unstages, the mount's
	// processes end and nothing stays mounted.
	in.removePod(t, v.ns, "streamer")
	released := time.Now()
	for len(allMountProcesses(t, in.stateDir)) > 0 || len(fuseMountsUnder(t, in.stateDir)) > 0 || len(fuseMountsUnder(t, in.c.KubeletDir)) > 0 {
		if time.Since(released) > 2*time.Minute {
			t.Fatalf("after the last pod was deleted: mount processes %v, FUSE mounts %v %v remain",
				allMountProcesses(t, in.stateDir), fuseMountsUnder(t, in.stateDir), fuseMountsUnder(t, in.c.KubeletDir))
		}
		time.Sleep(500 * time.Millisecond)
	}
	if held, _ := filepath.Glob(filepath.Join(in.stateDir, "node", "held", "*.sock")); len(held) != 0 {
		t.Fatalf("after unstage the node plugin still lends %v", held)
	}
	fmt.Printf("released by the upgraded driver: mount processes gone and nothing mounted %.1fs after the last pod was deleted\n",
		time.Since(released).Seconds())
}

// stagedMount is the FUSE mount of the node's one dataset under the state
// dir: its mount point and device (the connection: a remount is another).
type stagedMount struct{ mountpoint, dev string }

func (in *install) stagedConnection(t *testing.T) stagedMount {
	t.Helper()
	infos, err := mountinfo.GetMounts(func(m *mountinfo.Info) (skip, stop bool) {
		return !strings.HasPrefix(m.FSType, "fuse") || !strings.HasPrefix(m.Mountpoint, in.stateDir+"/"), false
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 {
		t.Fatalf("FUSE mounts under the state dir: %d, want 1", len(infos))
	}
	return stagedMount{infos[0].Mountpoint, fmt.Sprintf("%d:%d", infos[0].Major, infos[0].Minor)}
}

// waitMounterGone waits until the mounter pod old is gone and another is
// Ready.
func (in *install) waitMounterGone(ctx context.Context, t *testing.T, old *corev1.Pod) {
	t.Helper()
	waitFor(ctx, t, "the old mounter pod gone and a new one Ready", func() bool {
		if _, err := in.c.Client.CoreV1().Pods(chartNamespace).Get(ctx, old.Name, metav1.GetOptions{}); err == nil {
			return false
		}
		p := in.mounterPod(ctx, t)
		return p != nil && p.UID != old.UID && podReady(p)
	})
}

// mounterProcesses are the pids of the csi-driver --mode=mounter processes
// of this install.
func (in *install) mounterProcesses(t *testing.T) []int {
	t.Helper()
	found, err := testenv.Processes(func(_ int, args []string) bool {
		return filepath.Base(args[0]) == "csi-driver" && slices.Contains(args, "--mode=mounter") &&
			slices.Contains(args, "--state-dir="+in.stateDir)
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// supervisedChild is the mount process the supervisor sup runs.
func supervisedChild(t *testing.T, stateDir string, sup int) int {
	t.Helper()
	c := supervisedChildOrZero(t, stateDir, sup)
	if c == 0 {
		t.Fatalf("mount supervisor %d runs no mount process", sup)
	}
	return c
}

func supervisedChildOrZero(t *testing.T, stateDir string, sup int) int {
	for _, pid := range allMountProcesses(t, stateDir) {
		if pid != sup && testenv.ParentPID(pid) == sup {
			return pid
		}
	}
	return 0
}

// waitFor polls cond every 100 ms until it holds or ctx ends.
func waitFor(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		if ctx.Err() != nil {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// readProbe reads one file of the mount on the host every 20 ms and keeps
// the longest open+read+close since its last reset, and its errors.
type readProbe struct {
	mu     sync.Mutex
	worstD time.Duration
	n      int
	errs   []error
	done   chan struct{}
	once   sync.Once
}

func startReadProbe(t *testing.T, path string, f datagen.File) *readProbe {
	want := datagen.Sum(f)
	p := &readProbe{done: make(chan struct{})}
	go func() {
		for {
			select {
			case <-p.done:
				return
			case <-time.After(20 * time.Millisecond):
			}
			begin := time.Now()
			b, err := os.ReadFile(path)
			d := time.Since(begin)
			if err == nil && sha256.Sum256(b) != want {
				err = fmt.Errorf("%s: wrong bytes", path)
			}
			p.mu.Lock()
			p.n++
			p.worstD = max(p.worstD, d)
			if err != nil && len(p.errs) < 10 {
				p.errs = append(p.errs, err)
			}
			p.mu.Unlock()
		}
	}()
	t.Cleanup(p.stop)
	return p
}

func (p *readProbe) stop() { p.once.Do(func() { close(p.done) }) }

func (p *readProbe) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.worstD, p.n, p.errs = 0, 0, nil
}

func (p *readProbe) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

func (p *readProbe) worst() (time.Duration, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.worstD, errors.Join(p.errs...)
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
