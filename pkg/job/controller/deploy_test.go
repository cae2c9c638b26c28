package controller

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/internal/testenv/kube"
	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
)

// renderDeploy renders the job controller's manifests with kustomize and
// with Helm (jobController.enabled=true).
func renderDeploy(t *testing.T) (kustomize, helm []byte) {
	t.Helper()
	kubectl, helmBin, root := deployTools(t)
	run := func(name string, args ...string) []byte { return runTool(t, name, args...) }
	kustomize = run(kubectl, "kustomize", filepath.Join(root, "deploy", "kustomize", "base", "job-controller"))
	args := []string{"template", "epochfs", filepath.Join(root, "deploy", "helm", "epochfs"), "--namespace", "epochfs-system",
		"--set", "jobController.enabled=true", "--set", "node.allowAnyNetworkSource=true"}
	for _, f := range []string{"crd", "role", "rbac", "deployment"} {
		args = append(args, "--show-only", "templates/job-controller-"+f+".yaml")
	}
	helm = run(helmBin, args...)
	return kustomize, helm
}

func decodeAll(t *testing.T, b []byte) map[string]*unstructured.Unstructured {
	t.Helper()
	out := map[string]*unstructured.Unstructured{}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); err == io.EOF {
			return out
		} else if err != nil {
			t.Fatal(err)
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		out[u.GetKind()+"/"+u.GetNamespace()+"/"+u.GetName()] = u
	}
}

// kubectlApply runs kubectl apply against kube with the manifests on stdin.
func kubectlApply(t *testing.T, kube *kube.Server, manifests []byte, extra ...string) string {
	t.Helper()
	args := append([]string{"apply", "--kubeconfig", kube.Kubeconfig, "-f", "-"}, extra...)
	cmd := exec.Command("kubectl", args...)
	cmd.Stdin = bytes.NewReader(manifests)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestDeployManifests: the kustomize and Helm renderings of the job
// controller are the same objects and pass a server-side dry run; then,
// applied for real, their RBAC is enough for the controller, running as its
// ServiceAccount, to take a job through its life.
func TestDeployManifests(t *testing.T) {
	if testing.Short() {
		t.Skip("kube-apiserver test skipped in -short mode")
	}
	kustomize, helm := renderDeploy(t)
	k, h := decodeAll(t, kustomize), decodeAll(t, helm)
	var keys []string
	for key := range k {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	if len(keys) != 9 {
		t.Errorf("kustomize renders %d objects: %v", len(keys), keys)
	}
	for _, key := range keys {
		if !reflect.DeepEqual(k[key].Object, h[key].Object) {
			t.Errorf("%s differs between kustomize and helm:\nkustomize: %v\nhelm:      %v", key, k[key].Object, h[key].Object)
		}
	}
	if len(h) != len(k) {
		t.Errorf("helm renders %d objects, kustomize %d", len(h), len(k))
	}

	kube := kube.Start(t, crdPaths(t, "volcano")[1:]...)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "epochfs-system"}}
	admin, err := newAdmin(kube)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	for name, m := range map[string][]byte{"kustomize": kustomize, "helm": helm} {
		out := kubectlApply(t, kube, m, "--dry-run=server")
		if strings.Count(out, "(server dry run)") != 9 {
			t.Errorf("%s dry run:\n%s", name, out)
		}
	}
	kubectlApply(t, kube, kustomize)
	kube.InstallCRDs(t, crdPaths(t)[0]) // waits until established

	cfg := rest.CopyConfig(kube.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:epochfs-system:epochfs-job-controller",
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:epochfs-system", "system:authenticated"},
	}
	// The identity is really constrained: it may not read Secrets.
	sa, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sa.CoreV1().Secrets("default").List(context.Background(), metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the controller's ServiceAccount lists Secrets: %v", err)
	}
	e := startController(t, kube, cfg)
	jobNS := e.namespace(t)
	e.node(t, "gpu-a", res("cpu", "32", "nvidia.com/gpu", "4"), nil)
	ctx := context.Background()
	tj := &v1alpha1.TrainingJob{
		ObjectMeta: metav1.ObjectMeta{Name: "rbac", Namespace: jobNS},
		Spec: v1alpha1.TrainingJobSpec{Image: "x", Workers: 2, Mode: v1alpha1.ModeMPI,
			Resources: v1alpha1.WorkerResources{GPUs: 1},
			Datasets:  []v1alpha1.Dataset{{Name: "d", Source: "/data/d", MountPath: "/d"}}},
	}
	if err := e.c.Create(ctx, tj); err != nil {
		t.Fatal(err)
	}
	e.waitJob(t, jobNS, "rbac")
	if _, err := getUnstructured(e, t, "scheduling.volcano.sh/v1beta1", "PodGroup", jobNS, "rbac"); err != nil {
		t.Errorf("podgroup: %v", err)
	}
	e.pod(t, jobNS, "rbac-0-x", "rbac", "") // still pending when the job completes
	e.completeJob(t, jobNS, "rbac", 2)
	e.waitPhase(t, jobNS, "rbac", v1alpha1.PhaseSucceeded, "Succeeded")
	eventually(t, "pending pod cleaned", func() error { return isGone(e.get(t, jobNS, "rbac-0-x", &corev1.Pod{})) })
	if err := e.c.Delete(ctx, tj); err != nil {
		t.Fatal(err)
	}
	eventually(t, "pv deleted", func() error { return pvDeleted(e, t, pvName(tj, "d")) })
	eventually(t, "TrainingJob deleted", func() error { return isGone(e.get(t, jobNS, "rbac", &v1alpha1.TrainingJob{})) })
}

// TestGeneratedCopies: the CRD copies in kustomize and Helm are the one in
// deploy/crds (make generate-job-api writes all of them).
func TestGeneratedCopies(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	read := func(p ...string) string {
		b, err := os.ReadFile(filepath.Join(append([]string{root}, p...)...))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	crd := read("deploy", "crds", "jobs.epochfs.io_trainingjobs.yaml")
	if got := read("deploy", "kustomize", "base", "job-controller", "crd.yaml"); got != crd {
		t.Errorf("deploy/kustomize/base/job-controller/crd.yaml is stale: run make generate-job-api")
	}
	if got := read("deploy", "helm", "epochfs", "templates", "job-controller-crd.yaml"); !strings.Contains(got, crd) {
		t.Errorf("templates/job-controller-crd.yaml is stale: run make generate-job-api")
	}
	role := read("deploy", "kustomize", "base", "job-controller", "role.yaml")
	if got := read("deploy", "helm", "epochfs", "templates", "job-controller-role.yaml"); !strings.Contains(got, role) {
		t.Errorf("templates/job-controller-role.yaml is stale: run make generate-job-api")
	}
}

// TestHelmUninstallKeepsCRD: the chart's CRD carries
// helm.sh/resource-policy=keep, so `helm uninstall` leaves the CRD and
// every TrainingJob in place, and a later `helm install` of the same
// release adopts the CRD again. Real helm against the real API server.
func TestHelmUninstallKeepsCRD(t *testing.T) {
	if testing.Short() {
		t.Skip("kube-apiserver test skipped in -short mode")
	}
	helmBin, err := testenv.FindTool("helm")
	if err != nil {
		testenv.RequireOrSkip(t, "helm not found", "run `make tools`")
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	kube := kube.Start(t)
	helm := func(args ...string) string {
		t.Helper()
		args = append(args, "--kubeconfig", kube.Kubeconfig, "--namespace", "epochfs-system")
		cmd := exec.Command(helmBin, args...)
		cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	install := []string{"install", "epochfs", filepath.Join(root, "deploy", "helm", "epochfs"), "--create-namespace",
		"--set", "jobController.enabled=true", "--set", "node.allowAnyNetworkSource=true"}
	helm(install...)

	e := &env{kube: kube}
	if e.c, err = client.New(kube.Config, client.Options{Scheme: newScheme(t)}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ns := e.namespace(t)
	tj := &v1alpha1.TrainingJob{ObjectMeta: metav1.ObjectMeta{Name: "survivor", Namespace: ns},
		Spec: v1alpha1.TrainingJobSpec{Image: "x", Workers: 1}}
	eventually(t, "create a TrainingJob once the chart's CRD is served", func() error { return e.c.Create(ctx, tj) })

	if err := e.get(t, "epochfs-system", "epochfs-job-controller", &appsv1.Deployment{}); err != nil {
		t.Fatalf("the chart's controller Deployment: %v", err)
	}
	out := helm("uninstall", "epochfs")
	if !strings.Contains(out, "kept due to the resource policy") || !strings.Contains(out, "trainingjobs.jobs.epochfs.io") {
		t.Errorf("helm uninstall does not report the kept CRD:\n%s", out)
	}
	if err := isGone(e.get(t, "epochfs-system", "epochfs-job-controller", &appsv1.Deployment{})); err != nil {
		t.Errorf("the controller Deployment after helm uninstall: %v", err)
	}
	if err := e.get(t, ns, "survivor", &v1alpha1.TrainingJob{}); err != nil {
		t.Fatalf("the TrainingJob did not survive helm uninstall: %v", err)
	}
	helm(install...) // adopts the kept CRD
	if err := e.get(t, ns, "survivor", &v1alpha1.TrainingJob{}); err != nil {
		t.Fatalf("the TrainingJob did not survive a reinstall: %v", err)
	}
}

// TestDeployDryRunEverything: every object of deploy/ — the kustomize base
// (CSI driver and job controller), the production overlay, the examples, and
// the Helm chart with default values and with the job controller — passes a
// server-side dry run against the real kube-apiserver.
func TestDeployDryRunEverything(t *testing.T) {
	if testing.Short() {
		t.Skip("kube-apiserver test skipped in -short mode")
	}
	kubectl, helmBin, root := deployTools(t)
	render := func(name string, args ...string) []byte { return runTool(t, name, args...) }
	deploy := filepath.Join(root, "deploy")
	chart := filepath.Join(deploy, "helm", "epochfs")
	renderings := []struct {
		name      string
		manifests []byte
	}{
		{"kustomize base", render(kubectl, "kustomize", filepath.Join(deploy, "kustomize", "base"))},
		{"kustomize production overlay", render(kubectl, "kustomize", filepath.Join(deploy, "kustomize", "overlays", "production"))},
		{"kustomize examples", render(kubectl, "kustomize", filepath.Join(deploy, "kustomize", "examples"))},
		{"helm defaults", render(helmBin, "template", "epochfs", chart, "--namespace", "epochfs-system")},
		{"helm with the job controller", render(helmBin, "template", "epochfs", chart, "--namespace", "epochfs-system",
			"--set", "jobController.enabled=true", "--set", "node.allowAnyNetworkSource=true")},
	}

	kube := kube.Start(t)
	// Namespaces and the default ServiceAccount that a cluster would have
	// (no controller-manager runs here); a dry run creates nothing.
	kubectlApply(t, kube, []byte(`apiVersion: v1
kind: Namespace
metadata: {name: epochfs-system}
---
apiVersion: v1
kind: Namespace
metadata: {name: ml-training}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: default, namespace: ml-training}
`))
	for _, r := range renderings {
		objs := decodeAll(t, r.manifests)
		if len(objs) == 0 {
			t.Errorf("%s renders nothing", r.name)
			continue
		}
		out := kubectlApply(t, kube, r.manifests, "--dry-run=server")
		if got := strings.Count(out, "(server dry run)"); got != len(objs) {
			t.Errorf("%s: %d of %d objects passed the server dry run:\n%s", r.name, got, len(objs), out)
		}
		t.Logf("%s: %d objects pass a server-side dry run", r.name, len(objs))
	}
}

// deployTools returns kubectl, helm and the repository root, skipping (or
// failing under CI=true) when a tool is missing.
func deployTools(t *testing.T) (kubectl, helm, root string) {
	t.Helper()
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		testenv.RequireOrSkip(t, "kubectl not found", "install kubectl (for kubectl kustomize and apply)")
	}
	helm, err = testenv.FindTool("helm")
	if err != nil {
		testenv.RequireOrSkip(t, "helm not found", "run `make tools`")
	}
	root, err = testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return kubectl, helm, root
}

// runTool runs a command and returns its stdout, failing the test with its
// stderr.
func runTool(t *testing.T, name string, args ...string) []byte {
	t.Helper()
	var out, stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return out.Bytes()
}
