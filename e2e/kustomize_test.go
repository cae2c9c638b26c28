package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/internal/testenv/cluster"
	"github.com/epochfs/epochfs/internal/testenv/s3"
	"github.com/epochfs/epochfs/pkg/csi"
)

// The base's defaults that the test cluster changes (deploy/kustomize/base,
// equal to the chart's defaults).
const (
	baseKubeletDir    = "/var/lib/kubelet"
	baseStateDir      = "/var/lib/epochfs/state"
	baseCacheRoot     = "/var/lib/epochfs/cache"
	baseMetricsPort   = 9567
	baseRegistrarPort = 9809
	baseImage         = "ghcr.io/epochfs/epochfs"
)

// overlaySetup is what the test cluster needs besides the base's defaults:
// the same list as cluster.ChartSetup / ChartValues (docs/CLUSTER.md, "The
// chart on the test cluster").
type overlaySetup struct {
	imageName, imageTag              string // the image in the test's registry (127.0.0.1:PORT/epochfs/epochfs, the tag of make images)
	kubeletDir, stateDir, cacheRoot  string
	metricsPort, registrarHealthPort int
	apiHost, apiPort                 string // KUBERNETES_SERVICE_HOST/PORT
	// networkRules, when set, is added to the node plugin's args as
	// --network-rules (MinIO on the node's loopback: the mounts reach it
	// only where a rule names it). The chart comparison is made without.
	networkRules string
}

// jsonOp is one RFC 6902 operation.
type jsonOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// writeKustomizeOverlay writes dir/kustomization.yaml: a user's overlay of
// base (a path relative to dir: kustomize refuses an absolute one, and
// `kubectl apply -k` has no --load-restrictor) that sets the image with
// `images:` and everything else with JSON 6902 patches. The patches are
// computed from the rendered base (`kubectl kustomize base`): every string
// in the pod specs that names the kubelet dir, the state dir or the cache
// root is replaced (a `test` op first, so a base that moved a value fails
// the apply instead of being patched blindly), as are the metrics and
// registrar ports and the health interval; hostNetwork, dnsPolicy, the API
// server's address and the probes' host 127.0.0.1 are added. It returns
// the kustomization's text.
func writeKustomizeOverlay(t *testing.T, kubectl, dir, base string, s overlaySetup) string {
	t.Helper()
	rel, err := filepath.Rel(dir, base)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(kubectl, "kustomize", base).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v", base, err)
	}
	type target struct {
		Kind string `json:"kind"`
		Name string `json:"name"`
	}
	type patch struct {
		Target target `json:"target"`
		Patch  string `json:"patch"`
	}
	var patches []patch
	for _, doc := range strings.Split(string(out), "\n---\n") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("rendered base: %v\n%s", err, doc)
		}
		kind, _ := obj["kind"].(string)
		name, _ := obj["metadata"].(map[string]any)["name"].(string)
		var ops []jsonOp
		switch kind {
		case "DaemonSet":
			ops = daemonSetOps(t, obj, s)
		case "Service":
			ops = serviceOps(t, obj, s)
		}
		if len(ops) == 0 {
			continue
		}
		b, err := yaml.Marshal(ops)
		if err != nil {
			t.Fatal(err)
		}
		patches = append(patches, patch{Target: target{Kind: kind, Name: name}, Patch: string(b)})
	}
	if len(patches) != 3 {
		t.Fatalf("patches for %d objects of the base, want 3 (two DaemonSets, the metrics Service)", len(patches))
	}
	k := map[string]any{
		"apiVersion": "kustomize.config.k8s.io/v1beta1",
		"kind":       "Kustomization",
		"resources":  []string{rel},
		// The pull policy stays the base's IfNotPresent, as the chart's
		// default: the kubelet pulls the image from the test's registry.
		"images":  []map[string]string{{"name": baseImage, "newName": s.imageName, "newTag": s.imageTag}},
		"patches": patches,
	}
	b, err := yaml.Marshal(k)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// daemonSetOps patches a DaemonSet of the base for the test cluster.
func daemonSetOps(t *testing.T, ds map[string]any, s overlaySetup) []jsonOp {
	t.Helper()
	const spec = "/spec/template/spec"
	podSpec := ds["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	// The host paths (hostPath volumes, mount paths, args): inside the
	// containers the paths are the host's, as in the base.
	repl := strings.NewReplacer(
		baseKubeletDir, s.kubeletDir, baseStateDir, s.stateDir, baseCacheRoot, s.cacheRoot,
		"--metrics-addr=0.0.0.0:"+strconv.Itoa(baseMetricsPort), "--metrics-addr=0.0.0.0:"+strconv.Itoa(s.metricsPort),
		"--metrics-addr=:"+strconv.Itoa(baseRegistrarPort), "--metrics-addr=:"+strconv.Itoa(s.registrarHealthPort),
		"--health-interval=30s", "--health-interval=2s")
	var ops []jsonOp
	stringOps(podSpec, spec, repl, &ops)
	// MinIO and the API server listen on the node's loopback and there is
	// no Service proxy: the node's network, the API server's own address.
	ops = append(ops,
		jsonOp{Op: "add", Path: spec + "/hostNetwork", Value: true},
		jsonOp{Op: "add", Path: spec + "/dnsPolicy", Value: "ClusterFirstWithHostNet"})
	env := []map[string]string{{"name": "KUBERNETES_SERVICE_HOST", "value": s.apiHost}, {"name": "KUBERNETES_SERVICE_PORT", "value": s.apiPort}}
	for i, ci := range podSpec["containers"].([]any) {
		c := ci.(map[string]any)
		p := spec + "/containers/" + strconv.Itoa(i)
		if c["name"] == "csi-driver" && s.networkRules != "" {
			ops = append(ops, jsonOp{Op: "add", Path: p + "/args/-", Value: "--network-rules=" + s.networkRules})
		}
		if c["name"] == "csi-driver" || c["name"] == "mounter" {
			if _, ok := c["env"]; ok {
				for _, e := range env {
					ops = append(ops, jsonOp{Op: "add", Path: p + "/env/-", Value: e})
				}
			} else {
				ops = append(ops, jsonOp{Op: "add", Path: p + "/env", Value: env})
			}
		}
		ports, _ := c["ports"].([]any)
		for j, pi := range ports {
			port := pi.(map[string]any)
			to := map[any]int{"metrics": s.metricsPort, "registrar": s.registrarHealthPort}[port["name"]]
			if to == 0 {
				t.Fatalf("%s: container %s has port %v, which the test cluster does not know", ds["metadata"], c["name"], port["name"])
			}
			pp := p + "/ports/" + strconv.Itoa(j) + "/containerPort"
			ops = append(ops, jsonOp{Op: "test", Path: pp, Value: port["containerPort"]}, jsonOp{Op: "replace", Path: pp, Value: to})
		}
		// Under hostNetwork the kubelet probes the pod's IP, the node's
		// address: the driver and the registrar listen on its loopback.
		for _, probe := range []string{"livenessProbe", "readinessProbe", "startupProbe"} {
			if pr, ok := c[probe].(map[string]any); ok {
				if _, ok := pr["httpGet"]; ok {
					ops = append(ops, jsonOp{Op: "add", Path: p + "/" + probe + "/httpGet/host", Value: "127.0.0.1"})
				}
			}
		}
	}
	return ops
}

// serviceOps moves the metrics Service to the test cluster's metrics port.
func serviceOps(t *testing.T, svc map[string]any, s overlaySetup) []jsonOp {
	t.Helper()
	var ops []jsonOp
	ann, _ := svc["metadata"].(map[string]any)["annotations"].(map[string]any)
	if ann["prometheus.io/port"] == strconv.Itoa(baseMetricsPort) {
		p := "/metadata/annotations/prometheus.io~1port"
		ops = append(ops, jsonOp{Op: "test", Path: p, Value: strconv.Itoa(baseMetricsPort)}, jsonOp{Op: "replace", Path: p, Value: strconv.Itoa(s.metricsPort)})
	}
	ports, _ := svc["spec"].(map[string]any)["ports"].([]any)
	for j, pi := range ports {
		if port := pi.(map[string]any); port["name"] == "metrics" {
			p := "/spec/ports/" + strconv.Itoa(j) + "/port"
			ops = append(ops, jsonOp{Op: "test", Path: p, Value: port["port"]}, jsonOp{Op: "replace", Path: p, Value: s.metricsPort})
		}
	}
	return ops
}

// stringOps appends a test and a replace op for every string under v (at
// JSON pointer ptr) that repl changes.
func stringOps(v any, ptr string, repl *strings.Replacer, ops *[]jsonOp) {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			stringOps(x[k], ptr+"/"+strings.NewReplacer("~", "~0", "/", "~1").Replace(k), repl, ops)
		}
	case []any:
		for i, e := range x {
			stringOps(e, ptr+"/"+strconv.Itoa(i), repl, ops)
		}
	case string:
		if n := repl.Replace(x); n != x {
			*ops = append(*ops, jsonOp{Op: "test", Path: ptr, Value: x}, jsonOp{Op: "replace", Path: ptr, Value: n})
		}
	}
}

// checkOverlayMatchesChart renders the overlay (`kubectl kustomize`) and
// the chart with the values the Helm e2e installs it with
// (Cluster.ChartValues, the image from the same registry) and wants the
// same objects, pull policies included (both IfNotPresent). The chart's
// Namespace comes from
// `helm install --create-namespace`, the base's from namespace.yaml.
func checkOverlayMatchesChart(t *testing.T, c *cluster.Cluster, kubectl, helm, dir, chart string, s cluster.ChartSetup) {
	t.Helper()
	values, err := c.ChartValues(s)
	if err != nil {
		t.Fatal(err)
	}
	render := func(name string, args ...string) map[string]any {
		out, err := exec.Command(args[0], args[1:]...).Output()
		if err != nil {
			t.Fatalf("%s: %v", strings.Join(args, " "), err)
		}
		objs := map[string]any{}
		for _, doc := range strings.Split(string(out), "\n---") {
			var obj map[string]any
			if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if obj == nil || obj["kind"] == "Namespace" {
				continue
			}
			objs[fmt.Sprint(obj["kind"], "/", obj["metadata"].(map[string]any)["name"])] = obj
		}
		return objs
	}
	k := render("kubectl kustomize", kubectl, "kustomize", dir)
	h := render("helm template", append([]string{helm, "template", chartRelease, chart, "--namespace", chartNamespace}, values...)...)
	if len(k) < 7 {
		t.Fatalf("the overlay renders %d objects besides the Namespace, want the base's 7", len(k))
	}
	for name, obj := range k {
		if !reflect.DeepEqual(obj, h[name]) {
			ky, _ := yaml.Marshal(obj)
			hy, _ := yaml.Marshal(h[name])
			t.Errorf("%s: the overlay renders\n%s\nthe chart with the e2e's values\n%s", name, ky, hy)
		}
	}
	for name := range h {
		if _, ok := k[name]; !ok {
			t.Errorf("the chart renders %s, the overlay does not", name)
		}
	}
}

// kubectlRun runs kubectl against the cluster.
func kubectlRun(c *cluster.Cluster, kubectl string, args ...string) (string, error) {
	var out bytes.Buffer
	cmd := exec.Command(kubectl, append(args, "--kubeconfig", c.Kubeconfig)...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// TestKustomizeInstall installs the node plugin as a kustomize user would:
// `kubectl apply -k` of an overlay whose only resource is
// deploy/kustomize/base, with the image pushed to the test's registry set by `images:` and the
// test cluster's settings (the chart values table of docs/CLUSTER.md) as
// patches. The node plugin and the mounter must become Ready and register
// the driver; a static PV + PVC over a private MinIO bucket must give a
// reader pod every sha256 right in two passes; after the pod, PVC and PV
// are deleted the mount process must end; and `kubectl delete -k` must
// remove every object of the base, the driver included from CSINode.
func TestKustomizeInstall(t *testing.T) {
	requireE2E(t)
	driverTar, _ := imageArchive(t, "epochfs")
	readerTar, readerRef := imageArchive(t, "test-reader")
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		testenv.RequireOrSkip(t, "kubectl", "install kubectl (it renders the kustomize overlay)")
	}
	root := repoRoot(t)
	c := cluster.Start(t)
	if err := c.ImportImage(readerTar); err != nil {
		t.Fatal(err)
	}
	reg := c.StartRegistry(t) // the kubelet pulls the epochfs image, as with the chart
	ref, err := reg.Push(context.Background(), driverTar)
	if err != nil {
		t.Fatal(err)
	}
	in := &install{c: c, stateDir: filepath.Join(c.HostDir, "state"), cacheRoot: filepath.Join(c.HostDir, "cache"),
		metricsPort: testenv.FreePort(t), readerImage: readerRef, registry: reg}
	apiHost, apiPort := apiServerAddress(t, c)
	i := strings.LastIndexByte(ref, ':')
	s := overlaySetup{imageName: ref[:i], imageTag: ref[i+1:],
		kubeletDir: c.KubeletDir, stateDir: in.stateDir, cacheRoot: in.cacheRoot,
		metricsPort: in.metricsPort, registrarHealthPort: testenv.FreePort(t),
		apiHost: apiHost, apiPort: apiPort}
	dir := t.TempDir()
	writeKustomizeOverlay(t, kubectl, dir, filepath.Join(root, "deploy", "kustomize", "base"), s)

	// The overlay is the Helm e2e's install (docs/CLUSTER.md's values
	// table), object for object.
	if helm, err := testenv.FindTool("helm"); err == nil {
		checkOverlayMatchesChart(t, c, kubectl, helm, dir, filepath.Join(root, "deploy", "helm", "epochfs"), cluster.ChartSetup{
			ImageTag: s.imageTag, Registry: reg.Host, StateDir: s.stateDir, CacheRoot: s.cacheRoot,
			MetricsPort: s.metricsPort, RegistrarHealthPort: s.registrarHealthPort})
	} else {
		testenv.RequireOrSkip(t, "helm", "run `make tools`")
	}
	// MinIO listens on the node's loopback: the overlay applied names it
	// in a network rule (the admin's part), which the chart comparison
	// above left out.
	mi := s3.StartMinIO(t)
	s.networkRules = "s3://training?endpoint=" + mi.Endpoint
	kustomization := writeKustomizeOverlay(t, kubectl, dir, filepath.Join(root, "deploy", "kustomize", "base"), s)

	start := time.Now()
	if out, err := kubectlRun(c, kubectl, "apply", "-k", dir); err != nil {
		t.Fatalf("kubectl apply -k: %v\n%s\nkustomization.yaml:\n%s", err, out, kustomization)
	}
	deleted := false
	t.Cleanup(func() {
		if !deleted {
			if out, err := kubectlRun(c, kubectl, "delete", "-k", dir, "--ignore-not-found", "--wait", "--timeout", "60s"); err != nil {
				t.Logf("kubectl delete -k: %v\n%s", err, out)
			}
		}
		for _, d := range []string{in.stateDir, in.cacheRoot} {
			mounts, _ := testenv.MountsUnder(d)
			for i := len(mounts) - 1; i >= 0; i-- {
				_ = syscall.Unmount(mounts[i], syscall.MNT_DETACH)
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	node := in.waitNodePluginReady(ctx, t)
	in.waitMounterReady(ctx, t)
	waitCSINode(ctx, t, c, true)
	fmt.Printf("kubectl apply -k: node plugin and mounter Ready, driver registered in %.1fs\n", time.Since(start).Seconds())
	if !node.Spec.HostNetwork || node.Spec.Containers[0].Image != ref {
		t.Fatalf("node plugin pod: hostNetwork %v, image %s; want true, %s", node.Spec.HostNetwork, node.Spec.Containers[0].Image, ref)
	}
	// The driver's /metrics on the overlay's port (the probes' too).
	if body := in.scrapeNode(t); !strings.Contains(body, "# TYPE") {
		t.Fatalf("no metrics on 127.0.0.1:%d:\n%s", in.metricsPort, tail(body, 2000))
	}

	mi.MakeBucket(t, "training")
	files := datagen.Spec{Files: 40, Classes: 2, MedianSize: 30_000, MinSize: 500, MaxSize: 200_000, Seed: 17}.Plan()
	mi.PutFiles(t, "training", "imagenet/", files)
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	v := in.createS3Volume(ctx, t, "tenant-k", "imagenet", s3Source(mi, "training", "imagenet"), mi)
	start = time.Now()
	// The pod stays up after its passes: once it ends, the kubelet unstages
	// the volume (and the mount process goes) before it could be counted.
	in.readerPod(ctx, t, v, "reader", "sh", "-c", "read-dataset /data 2 && sleep 3600")
	in.waitLogLine(ctx, t, v.ns, "reader", "done")
	fmt.Printf("reader pod: 2 passes over %d files (%d bytes) in %.1fs from create\n", len(files), datagen.TotalSize(files), time.Since(start).Seconds())
	checkPasses(t, passSums(t, in.podLog(ctx, t, v.ns, "reader")), files, 2)
	if pids := mountProcesses(t, in.stateDir); len(pids) != 1 {
		t.Fatalf("%d mount processes for one dataset, want 1", len(pids))
	}

	in.deletePod(ctx, t, v.ns, "reader")
	in.deleteVolume(ctx, t, v)
	fmt.Printf("unstaged: mount process gone and nothing mounted %.1fs after the pod, PVC and PV were deleted\n", in.waitNoMounts(t, 2*time.Minute).Seconds())

	start = time.Now()
	if out, err := kubectlRun(c, kubectl, "delete", "-k", dir, "--wait", "--timeout", "120s"); err != nil {
		t.Fatalf("kubectl delete -k: %v\n%s", err, out)
	}
	deleted = true
	waitCSINode(ctx, t, c, false)
	fmt.Printf("kubectl delete -k: every object gone and the driver out of CSINode in %.1fs\n", time.Since(start).Seconds())
	// Nothing of the base is left (the namespace takes its DaemonSets,
	// pods, ServiceAccount and Service with it).
	notFound := func(what string, err error) {
		if !apierrors.IsNotFound(err) {
			t.Errorf("%s after kubectl delete -k: %v (want not found)", what, err)
		}
	}
	_, err = c.Client.CoreV1().Namespaces().Get(ctx, chartNamespace, metav1.GetOptions{})
	notFound("namespace "+chartNamespace, err)
	_, err = c.Client.StorageV1().CSIDrivers().Get(ctx, csi.DriverName, metav1.GetOptions{})
	notFound("CSIDriver", err)
	_, err = c.Client.RbacV1().ClusterRoles().Get(ctx, "epochfs-node", metav1.GetOptions{})
	notFound("ClusterRole epochfs-node", err)
	_, err = c.Client.RbacV1().ClusterRoleBindings().Get(ctx, "epochfs-node", metav1.GetOptions{})
	notFound("ClusterRoleBinding epochfs-node", err)
	if n := allMountProcesses(t, in.stateDir); len(n) != 0 {
		t.Errorf("mount processes left after kubectl delete -k: %v", n)
	}
}
