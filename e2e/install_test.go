package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/internal/testenv/cluster"
)

// The chart's namespace and release in the end-to-end tests.
const (
	chartNamespace = cluster.ChartNamespace
	chartRelease   = cluster.ChartRelease
)

// install is the chart installed on a test cluster as a user would
// (`helm install` of deploy/helm/epochfs), its image pulled by the kubelet
// from a registry on 127.0.0.1 that the test pushed bin/images/epochfs.tar
// to (the chart's default pull settings, image.registry pointed there),
// or, for one test (installOptions.localImages), imported into containerd.
type install struct {
	c           *cluster.Cluster
	stateDir    string // the node's --state-dir (a host dir of the test)
	cacheRoot   string // the node's --cache-root
	metricsPort int    // csi-driver's /metrics on the node
	readerImage string // epochfs/test-reader, imported (pods' imagePullPolicy Never)
	helm        string
	// registry serves the images (nil with localImages); the test's
	// extra images (torch-example) may be pushed there.
	registry *cluster.Registry
}

// installOptions are installChartWith's settings besides helm flags.
type installOptions struct {
	// prepare runs on the cluster before `helm install` (e.g. to create a
	// Secret the chart's pods mount).
	prepare func(c *cluster.Cluster)
	// localImages imports the epochfs image into containerd and installs
	// with global.localImages (pull policy Never) instead of the registry.
	localImages bool
}

// installChart starts a test cluster and a registry on 127.0.0.1 that its
// containerd trusts over plain HTTP, pushes the epochfs image there,
// imports the test-reader image, and installs the chart with its default
// pull settings and image.registry pointed at the registry, so the kubelet
// pulls the image as on any cluster, and with only what a single-node
// cluster without a Service proxy needs set besides
// (docs/CLUSTER.md, "The chart on the test cluster"):
// the cluster's kubelet dir, host dirs of the test for the state and the
// caches, node.hostNetwork (MinIO and the API server on the node's
// loopback) and the API server's address for the in-cluster clients. It
// waits for the node plugin to be Ready and the kubelet to list the driver
// in CSINode. Teardown (uninstall, unmount) is in t.Cleanup.
func installChart(t *testing.T, extra ...string) *install {
	t.Helper()
	return installChartWith(t, installOptions{}, extra...)
}

// installChartPrepared is installChart with prepare run on the cluster
// before `helm install` (e.g. to create a Secret the chart's pods mount).
func installChartPrepared(t *testing.T, prepare func(c *cluster.Cluster), extra ...string) *install {
	t.Helper()
	return installChartWith(t, installOptions{prepare: prepare}, extra...)
}

// installChartWith is installChart with o.
func installChartWith(t *testing.T, o installOptions, extra ...string) *install {
	t.Helper()
	requireE2E(t)
	driverTar, driverRef := imageArchive(t, "epochfs")
	readerTar, readerRef := imageArchive(t, "test-reader")
	helm, err := testenv.FindTool("helm")
	if err != nil {
		testenv.RequireOrSkip(t, "helm", "run `make tools`")
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	c := cluster.Start(t)
	dir := c.HostDir // shared, like a node's /: the chart mounts the state dir Bidirectional
	if err := c.ImportImage(readerTar); err != nil {
		t.Fatal(err)
	}
	in := &install{c: c, stateDir: filepath.Join(dir, "state"), cacheRoot: filepath.Join(dir, "cache"),
		metricsPort: testenv.FreePort(t), readerImage: readerRef, helm: helm}
	setup := cluster.ChartSetup{ImageTag: driverRef[strings.LastIndexByte(driverRef, ':')+1:],
		StateDir: in.stateDir, CacheRoot: in.cacheRoot, MetricsPort: in.metricsPort, RegistrarHealthPort: testenv.FreePort(t)}
	if o.localImages {
		if err := c.ImportImage(driverTar); err != nil {
			t.Fatal(err)
		}
		setup.LocalImages = true
	} else {
		in.registry = c.StartRegistry(t)
		pushStart := time.Now()
		if _, err := in.registry.Push(context.Background(), driverTar); err != nil {
			t.Fatal(err)
		}
		fmt.Printf("registry %s: pushed %s in %.1fs\n", in.registry.Host, filepath.Base(driverTar), time.Since(pushStart).Seconds())
		setup.Registry = in.registry.Host
	}
	start := time.Now()
	t.Cleanup(func() { in.teardown(t) })
	if o.prepare != nil {
		o.prepare(c)
	}
	// The same values as `make cluster-up` (cluster.Cluster.ChartValues).
	if _, err := c.InstallChart(helm, filepath.Join(root, "deploy", "helm", "epochfs"), setup, extra...); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pod := in.waitNodePluginReady(ctx, t)
	waitCSINode(ctx, t, c, true)
	fmt.Printf("helm install: node plugin Ready and registered in %.1fs\n", time.Since(start).Seconds())
	in.checkNodeImage(t, pod, setup)
	return in
}

// checkNodeImage checks that the node plugin runs the image the way the
// test installed it: pulled from the registry with the chart's default
// pull policy, or the imported one with Never.
func (in *install) checkNodeImage(t *testing.T, pod *corev1.Pod, s cluster.ChartSetup) {
	t.Helper()
	want, policy := s.Registry+"/epochfs/epochfs:"+s.ImageTag, corev1.PullIfNotPresent
	if s.LocalImages {
		want, policy = "epochfs/epochfs:"+s.ImageTag, corev1.PullNever
	}
	for _, ctr := range pod.Spec.Containers {
		if ctr.Image != want || ctr.ImagePullPolicy != policy {
			t.Fatalf("node plugin container %s: image %s (%s), want %s (%s)", ctr.Name, ctr.Image, ctr.ImagePullPolicy, want, policy)
		}
	}
	if s.LocalImages {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	events, err := in.c.Client.CoreV1().Events(chartNamespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod.Name})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if e.Reason == "Pulled" && strings.Contains(e.Message, want) {
			t.Logf("node plugin: %s", e.Message) // "Successfully pulled image … in 2.1s …"
			return
		}
	}
	t.Fatalf("no Pulled event for %s on the node plugin pod %s", want, pod.Name)
}

// apiServerAddress is the API server's host and port from the cluster's
// config (the in-cluster clients' KUBERNETES_SERVICE_HOST/PORT).
func apiServerAddress(t *testing.T, c *cluster.Cluster) (string, string) {
	t.Helper()
	hostPort := strings.TrimPrefix(c.Config.Host, "https://")
	i := strings.LastIndexByte(hostPort, ':')
	if i < 0 {
		t.Fatalf("API server address %q has no port", c.Config.Host)
	}
	return hostPort[:i], hostPort[i+1:]
}

func (in *install) helmRun(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(in.helm, append(args, "--kubeconfig", in.c.Kubeconfig)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", args[0], err, out)
	}
	return string(out)
}

// nodePod returns the node plugin pod (one node: one pod), or nil.
func (in *install) nodePod(ctx context.Context, t *testing.T) *corev1.Pod {
	return in.componentPod(ctx, "node")
}

// componentPod returns the chart's pod of component (node, mounter) that is
// not being deleted, or nil.
func (in *install) componentPod(ctx context.Context, component string) *corev1.Pod {
	pods, err := in.c.Client.CoreV1().Pods(chartNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=" + component})
	if err != nil {
		return nil
	}
	for i := range pods.Items {
		if pods.Items[i].DeletionTimestamp == nil {
			return &pods.Items[i]
		}
	}
	return nil
}

// waitNodePluginReady waits for the node DaemonSet's pod to be Ready.
func (in *install) waitNodePluginReady(ctx context.Context, t *testing.T) *corev1.Pod {
	t.Helper()
	return in.waitNodePod(ctx, t, podReady)
}

// waitNodePod waits until the node plugin pod satisfies ok.
func (in *install) waitNodePod(ctx context.Context, t *testing.T, ok func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	for {
		if p := in.nodePod(ctx, t); p != nil && ok(p) {
			return p
		}
		if ctx.Err() != nil {
			if p := in.nodePod(context.Background(), t); p != nil {
				in.describe(t, chartNamespace, p.Name)
			}
			t.Fatal("the node plugin pod did not become Ready")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// teardown uninstalls the chart and undoes what the node plugin left on
// the host: the dataset mounts under the state dir and its secrets tmpfs
// (the cluster's own teardown, which runs next, stops the pods' processes).
func (in *install) teardown(t *testing.T) {
	cmd := exec.Command(in.helm, "uninstall", chartRelease, "--namespace", chartNamespace, "--wait", "--timeout", "60s", "--kubeconfig", in.c.Kubeconfig)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Logf("helm uninstall: %v\n%s", err, out)
	}
	for _, dir := range []string{in.stateDir, in.cacheRoot} {
		mounts, _ := testenv.MountsUnder(dir)
		for i := len(mounts) - 1; i >= 0; i-- {
			_ = syscall.Unmount(mounts[i], syscall.MNT_DETACH)
		}
	}
}

// describe logs a pod's state, logs and events (kubectl describe + logs).
func (in *install) describe(t *testing.T, ns, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pods := in.c.Client.CoreV1().Pods(ns)
	p, err := pods.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Logf("pod %s/%s: %v", ns, name, err)
		return
	}
	t.Logf("pod %s/%s: phase %s, conditions %+v", ns, name, p.Status.Phase, p.Status.Conditions)
	for _, cs := range p.Status.ContainerStatuses {
		t.Logf("container %s: ready %v, restarts %d, state %+v, last %+v", cs.Name, cs.Ready, cs.RestartCount, cs.State, cs.LastTerminationState)
		out, err := pods.GetLogs(name, &corev1.PodLogOptions{Container: cs.Name}).DoRaw(ctx)
		t.Logf("logs of %s: %v\n%s", cs.Name, err, tail(string(out), 4000))
	}
	events, err := in.c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err == nil {
		for _, e := range events.Items {
			t.Logf("event %s %s: %s", e.Type, e.Reason, e.Message)
		}
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// mountProcesses lists the pids of the supervisors of the cachefs mounts
// whose command line names dir (the node's state dir): one per dataset
// mount. The node is this machine.
func mountProcesses(t *testing.T, dir string) []int { return testenv.MountSupervisors(t, dir) }

// allMountProcesses lists every cachefs process whose command line names
// dir: the supervisors and their children. A node with no mount has none.
func allMountProcesses(t *testing.T, dir string) []int { return testenv.MountProcesses(t, dir) }

// fuseMountsUnder lists the FUSE mount points under dir.
func fuseMountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	infos, err := mountinfo.GetMounts(func(m *mountinfo.Info) (skip, stop bool) {
		return !strings.HasPrefix(m.FSType, "fuse") || !strings.HasPrefix(m.Mountpoint, dir+"/"), false
	})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range infos {
		out = append(out, m.Mountpoint)
	}
	return out
}
