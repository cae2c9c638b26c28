package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/internal/testenv/cluster"
	"github.com/epochfs/epochfs/pkg/csi"
)

// TestKubeletRegistersDriver runs `csi-driver --mode node` and
// `csi-driver --mode registrar` as host processes on the test cluster's
// kubelet directory, as the node DaemonSet's two containers would: the
// kubelet's plugin watcher finds the registration socket, calls GetInfo,
// asks the driver's NodeGetInfo and records the driver in the Node's
// CSINode object with the node id. Stopping the registrar (SIGTERM)
// removes its socket and the kubelet drops the driver again.
func TestKubeletRegistersDriver(t *testing.T) {
	requireE2E(t)
	c := cluster.Start(t)
	bin := testenv.GoBuild(t, "./cmd/csi-driver")
	dir := t.TempDir()
	csiSock := filepath.Join(c.KubeletDir, "plugins", csi.DriverName, "csi.sock")
	registry := filepath.Join(c.KubeletDir, "plugins_registry")

	// The node driver leaves the tmpfs on its secrets dir mounted when it
	// stops (a restart keeps the credentials): unmount it once the process
	// is killed (cleanups run last-registered first), else t.TempDir's
	// removal fails with EBUSY.
	t.Cleanup(func() {
		mounts, _ := testenv.MountsUnder(dir)
		for i := len(mounts) - 1; i >= 0; i-- {
			_ = syscall.Unmount(mounts[i], syscall.MNT_DETACH)
		}
	})
	start := time.Now()
	startProc(t, "csi-driver node", bin, "--mode", "node", "--endpoint", "unix://"+csiSock,
		"--nodeid", cluster.NodeName, "--state-dir", filepath.Join(dir, "state"),
		"--cache-root", filepath.Join(dir, "cache"), "--cachefs-binary", "/bin/true",
		"--kubelet-dir", c.KubeletDir, "--health-interval", "0", "--log-format", "text")
	reg := startProc(t, "csi-driver registrar", bin, "--mode", "registrar", "--endpoint", "unix://"+csiSock,
		"--kubelet-registration-path", csiSock, "--plugin-registration-dir", registry, "--log-format", "text")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	csiNodes := c.Client.StorageV1().CSINodes()
	var nodeID string
	for nodeID == "" {
		n, err := csiNodes.Get(ctx, cluster.NodeName, metav1.GetOptions{})
		if err == nil {
			for _, d := range n.Spec.Drivers {
				if d.Name == csi.DriverName {
					nodeID = d.NodeID
				}
			}
		}
		if nodeID == "" {
			if ctx.Err() != nil {
				t.Fatalf("CSINode %s never listed %s (last: %+v, %v)", cluster.NodeName, csi.DriverName, n, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	fmt.Printf("kubelet registered %s in %.1fs (CSINode node id %q)\n", csi.DriverName, time.Since(start).Seconds(), nodeID)
	if nodeID != cluster.NodeName {
		t.Fatalf("CSINode node id %q, want %q", nodeID, cluster.NodeName)
	}
	node, err := c.Client.CoreV1().Nodes().Get(ctx, cluster.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ann := node.Annotations["csi.volume.kubernetes.io/nodeid"]; !strings.Contains(ann, `"`+csi.DriverName+`":"`+cluster.NodeName+`"`) {
		t.Errorf("Node annotation csi.volume.kubernetes.io/nodeid = %q", ann)
	}
	// The kubelet's NotifyRegistrationStatus(true) reached the registrar.
	for !strings.Contains(reg.out.String(), "registered with the kubelet") {
		if ctx.Err() != nil {
			t.Fatalf("registrar never heard of the registration:\n%s", reg.out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}

	if err := reg.stop(t); err != nil {
		t.Fatalf("registrar after SIGTERM: %v", err)
	}
	stopped := time.Now()
	for {
		n, err := csiNodes.Get(ctx, cluster.NodeName, metav1.GetOptions{})
		listed := false
		if err == nil {
			for _, d := range n.Spec.Drivers {
				listed = listed || d.Name == csi.DriverName
			}
		}
		if err == nil && !listed {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("CSINode still lists %s after the registrar stopped (%v)", csi.DriverName, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	fmt.Printf("registrar stopped: kubelet dropped the driver in %.1fs\n", time.Since(stopped).Seconds())
}

// TestNodePodRegistersDriver runs the node plugin the way a node DaemonSet
// does, from the epochfs image `make images` wrote (imported, pull policy
// Never): one pod, hostNetwork, a privileged `csi-driver --mode node`
// container and a `csi-driver --mode registrar` container sharing the
// plugin directory, the registrar with the kubelet's plugins_registry at
// /registration, and both with liveness and readiness probes on their own
// /healthz (no sidecars). The pod becomes Ready with no restarts, the
// kubelet lists the driver in CSINode, and deleting the pod (SIGTERM to the
// registrar) deregisters it.
func TestNodePodRegistersDriver(t *testing.T) {
	requireE2E(t)
	imageTar, image := imageArchive(t, "epochfs")
	c := cluster.Start(t)
	start := time.Now()
	if err := c.ImportImage(imageTar); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("imported %s in %.1fs\n", image, time.Since(start).Seconds())

	pluginDir := filepath.Join(c.KubeletDir, "plugins", csi.DriverName)
	driverPort, registrarPort := testenv.FreePort(t), testenv.FreePort(t)
	probe := func(port int) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Host: "127.0.0.1", Path: "/healthz", Port: intstr.FromInt32(int32(port)),
			}},
			PeriodSeconds: 2, TimeoutSeconds: 5, FailureThreshold: 5,
		}
	}
	hostPath := func(name, path string) corev1.Volume {
		dirOrCreate := corev1.HostPathDirectoryOrCreate
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: &dirOrCreate}}}
	}
	emptyDir := func(name string) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	}
	privileged := true
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "epochfs-node"},
		Spec: corev1.PodSpec{
			HostNetwork: true,
			Containers: []corev1.Container{{
				Name: "csi-driver", Image: image, ImagePullPolicy: corev1.PullNever,
				Command: []string{"csi-driver", "--mode", "node", "--endpoint", "unix:///csi/csi.sock",
					"--nodeid", "$(NODE_NAME)", "--state-dir", "/var/lib/epochfs/state", "--cache-root", "/var/lib/epochfs/cache",
					"--kubelet-dir", c.KubeletDir, "--health-interval", "0",
					"--metrics-addr", fmt.Sprintf("127.0.0.1:%d", driverPort)},
				Env: []corev1.EnvVar{{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{
					FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}},
				SecurityContext: &corev1.SecurityContext{Privileged: &privileged},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "plugin-dir", MountPath: "/csi"},
					{Name: "state", MountPath: "/var/lib/epochfs/state"},
					{Name: "cache", MountPath: "/var/lib/epochfs/cache"},
				},
				LivenessProbe: probe(driverPort), ReadinessProbe: probe(driverPort),
			}, {
				Name: "registrar", Image: image, ImagePullPolicy: corev1.PullNever,
				Command: []string{"csi-driver", "--mode", "registrar", "--endpoint", "unix:///csi/csi.sock",
					"--kubelet-registration-path", filepath.Join(pluginDir, "csi.sock"),
					"--plugin-registration-dir", "/registration",
					"--metrics-addr", fmt.Sprintf("127.0.0.1:%d", registrarPort)},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "plugin-dir", MountPath: "/csi"},
					{Name: "registration-dir", MountPath: "/registration"},
				},
				LivenessProbe: probe(registrarPort), ReadinessProbe: probe(registrarPort),
			}},
			Volumes: []corev1.Volume{
				hostPath("plugin-dir", pluginDir),
				hostPath("registration-dir", filepath.Join(c.KubeletDir, "plugins_registry")),
				emptyDir("state"), emptyDir("cache"),
			},
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pods := c.Client.CoreV1().Pods("default")
	start = time.Now()
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			describePod(t, c, pod.Name)
		}
	})
	for {
		p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err == nil && podReady(p) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("pod not Ready after %v", time.Since(start))
		}
		time.Sleep(250 * time.Millisecond)
	}
	fmt.Printf("node pod Ready in %.1fs\n", time.Since(start).Seconds())
	nodeID := waitCSINode(ctx, t, c, true)
	fmt.Printf("kubelet registered %s from the pod (CSINode node id %q) %.1fs after create\n", csi.DriverName, nodeID, time.Since(start).Seconds())
	if nodeID != cluster.NodeName {
		t.Errorf("CSINode node id %q, want %q", nodeID, cluster.NodeName)
	}
	// A few probe periods later: still Ready, nothing restarted.
	time.Sleep(6 * time.Second)
	p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.RestartCount != 0 || !cs.Ready {
			t.Errorf("container %s: ready %v, %d restarts (%+v)", cs.Name, cs.Ready, cs.RestartCount, cs.LastTerminationState)
		}
	}
	for _, name := range []string{"registrar", "csi-driver"} {
		out, err := pods.GetLogs(pod.Name, &corev1.PodLogOptions{Container: name}).DoRaw(ctx)
		if err != nil {
			t.Fatalf("logs of %s: %v", name, err)
		}
		if name == "registrar" && !strings.Contains(string(out), "registered with the kubelet") {
			t.Errorf("registrar log lacks the kubelet's success:\n%s", out)
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", name, out)
		}
	}

	grace := int64(5)
	if err := pods.Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	waitCSINode(ctx, t, c, false)
	fmt.Printf("pod deleted: kubelet dropped the driver in %.1fs\n", time.Since(stopped).Seconds())
}

// podReady reports the pod's Ready condition.
func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitCSINode waits until the node's CSINode lists the driver (want) or
// no longer does (!want), and returns its node id.
func waitCSINode(ctx context.Context, t *testing.T, c *cluster.Cluster, want bool) string {
	t.Helper()
	for {
		n, err := c.Client.StorageV1().CSINodes().Get(ctx, cluster.NodeName, metav1.GetOptions{})
		listed, nodeID := false, ""
		if err == nil {
			for _, d := range n.Spec.Drivers {
				if d.Name == csi.DriverName {
					listed, nodeID = true, d.NodeID
				}
			}
		}
		if err == nil && listed == want {
			return nodeID
		}
		if ctx.Err() != nil {
			t.Fatalf("CSINode %s: listed %v, want %v (%v)", cluster.NodeName, listed, want, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// describePod logs what `kubectl describe pod` and `kubectl logs
// [--previous]` would show of pod name.
func describePod(t *testing.T, c *cluster.Cluster, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pods := c.Client.CoreV1().Pods("default")
	p, err := pods.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Logf("pod %s: %v", name, err)
		return
	}
	t.Logf("pod %s: phase %s, conditions %+v", name, p.Status.Phase, p.Status.Conditions)
	for _, cs := range p.Status.ContainerStatuses {
		t.Logf("container %s: ready %v, restarts %d, state %+v, last %+v", cs.Name, cs.Ready, cs.RestartCount, cs.State, cs.LastTerminationState)
		for _, previous := range []bool{false, true} {
			out, err := pods.GetLogs(name, &corev1.PodLogOptions{Container: cs.Name, Previous: previous}).DoRaw(ctx)
			t.Logf("logs of %s (previous %v): %v\n%s", cs.Name, previous, err, out)
		}
	}
	events, err := c.Client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err == nil {
		for _, e := range events.Items {
			t.Logf("event %s %s: %s", e.Type, e.Reason, e.Message)
		}
	}
}
