package controller

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/internal/testenv/kube"
)

// installTemplatePolicy applies deploy/policies/trainingjob-templates.yaml
// (the ValidatingAdmissionPolicy and its binding) to kube.
func installTemplatePolicy(t *testing.T, kube *kube.Server) {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "deploy", "policies", "trainingjob-templates.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	kubectlApply(t, kube, b)
}

// TestTemplatePolicyByAPIServer: with the chart's ValidatingAdmissionPolicy
// installed, the API server itself refuses pod templates that mount a
// dataset writable, take the controller's volume names or restart pods in
// place, naming the field; good templates pass, and so does a job with no
// template at all.
func TestTemplatePolicyByAPIServer(t *testing.T) {
	e := directEnv(t)
	installTemplatePolicy(t, e.kube)
	c, ctx, ns := e.c, context.Background(), e.namespace(t)
	n := 0
	job := func(mutate func(spec map[string]any)) *unstructured.Unstructured {
		n++
		spec := map[string]any{"image": "x", "workers": int64(2), "mode": "tensorflow", "parameterServers": int64(1),
			"datasets": []any{
				map[string]any{"name": "imagenet", "source": "/data/imagenet", "mountPath": "/data"},
				map[string]any{"name": "shared", "existingClaim": "team-data", "mountPath": "/shared"},
			}}
		mutate(spec)
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "jobs.epochfs.io/v1alpha1", "kind": "TrainingJob",
			"metadata": map[string]any{"name": "j" + string(rune('a'+n%26)) + strings.Repeat("x", n/26), "namespace": ns},
			"spec":     spec,
		}}
	}
	tmpl := func(spec map[string]any) map[string]any {
		return map[string]any{"template": map[string]any{"spec": spec}}
	}
	trainer := func(mounts ...any) []any {
		return []any{map[string]any{"name": "trainer", "volumeMounts": mounts}}
	}

	// The policy takes effect a moment after it is created.
	writable := func(s map[string]any) {
		s["worker"] = tmpl(map[string]any{"containers": trainer(map[string]any{"name": "dataset-imagenet", "mountPath": "/x"})})
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := c.Create(ctx, job(writable))
		if err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the API server still accepts a writable dataset mount 60s after the policy was created")
		}
		time.Sleep(300 * time.Millisecond)
	}

	for _, tc := range []struct {
		name   string
		mutate func(spec map[string]any)
		want   string
	}{
		{"writable dataset mount", writable, `spec.worker.template.spec: container trainer mounts a dataset writable`},
		{"writable dataset mount in an init container", func(s map[string]any) {
			s["worker"] = tmpl(map[string]any{"initContainers": []any{map[string]any{"name": "warm",
				"volumeMounts": []any{map[string]any{"name": "dataset-shared", "mountPath": "/s", "readOnly": false}}}}})
		}, `container warm mounts a dataset writable`},
		{"writable dataset mount in ps", func(s map[string]any) {
			s["ps"] = tmpl(map[string]any{"containers": trainer(map[string]any{"name": "dataset-imagenet", "mountPath": "/x"})})
		}, `spec.ps.template.spec: container trainer mounts a dataset writable`},
		{"controller's volume name", func(s map[string]any) {
			s["worker"] = tmpl(map[string]any{"volumes": []any{map[string]any{"name": "dshm", "emptyDir": map[string]any{}}}})
		}, `spec.worker.template.spec.volumes: dshm is the name of a volume the controller adds`},
		{"dataset volume name", func(s map[string]any) {
			s["ps"] = tmpl(map[string]any{"volumes": []any{map[string]any{"name": "dataset-shared", "emptyDir": map[string]any{}}}})
		}, `spec.ps.template.spec.volumes: dataset-shared is the name of a volume the controller adds`},
		{"dataset claim writable", func(s map[string]any) {
			s["worker"] = tmpl(map[string]any{"volumes": []any{map[string]any{"name": "d", "persistentVolumeClaim": map[string]any{"claimName": "team-data"}}}})
		}, `spec.worker.template.spec.volumes: a dataset's claim is mounted writable`},
		{"read-only dataset claim mounted writable", func(s map[string]any) {
			s["worker"] = tmpl(map[string]any{
				"volumes":    []any{map[string]any{"name": "d", "persistentVolumeClaim": map[string]any{"claimName": "team-data", "readOnly": true}}},
				"containers": trainer(map[string]any{"name": "d", "mountPath": "/d"}),
			})
		}, `container trainer mounts a dataset writable`},
		{"restartPolicy", func(s map[string]any) { s["worker"] = tmpl(map[string]any{"restartPolicy": "OnFailure"}) },
			`spec.worker.template.spec.restartPolicy: the controller's Jobs restart failed pods`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := c.Create(ctx, job(tc.mutate))
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error\n %v\nwant it to contain\n %s", err, tc.want)
			}
		})
	}

	for _, tc := range []struct {
		name   string
		mutate func(spec map[string]any)
	}{
		{"no template", func(map[string]any) {}},
		{"read-only dataset mount and a checkpoint volume", func(s map[string]any) {
			s["worker"] = tmpl(map[string]any{
				"volumes": []any{map[string]any{"name": "ckpt", "emptyDir": map[string]any{}},
					map[string]any{"name": "d", "persistentVolumeClaim": map[string]any{"claimName": "team-data", "readOnly": true}}},
				"containers": trainer(map[string]any{"name": "ckpt", "mountPath": "/ckpt"},
					map[string]any{"name": "dataset-imagenet", "mountPath": "/also", "readOnly": true},
					map[string]any{"name": "d", "mountPath": "/d", "readOnly": true}),
				"restartPolicy": "Never",
			})
			s["ps"] = tmpl(map[string]any{"containers": []any{map[string]any{"name": "sidecar"}}})
		}},
		// docs/JOB.md's tf-wide: a ps template of metadata only.
		{"ps labels only", func(s map[string]any) {
			s["ps"] = map[string]any{"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"role": "ps"}}}}
		}},
		// The same from a typed client (corev1.PodSpec has no omitempty on
		// containers: cachefs job submit --ps-template sends null).
		{"containers null, as typed clients send it", func(s map[string]any) {
			s["ps"] = map[string]any{"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"role": "ps"}}, "spec": map[string]any{"containers": nil}}}
			s["worker"] = map[string]any{"template": map[string]any{"spec": map[string]any{"containers": nil, "initContainers": nil, "volumes": nil}}}
		}},
		{"another claim writable", func(s map[string]any) {
			s["worker"] = tmpl(map[string]any{"volumes": []any{map[string]any{"name": "out", "persistentVolumeClaim": map[string]any{"claimName": "outputs"}}},
				"containers": trainer(map[string]any{"name": "out", "mountPath": "/out"})})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := c.Create(ctx, job(tc.mutate)); err != nil {
				t.Errorf("refused: %v", err)
			}
		})
	}

	// (The policy's type check, status.typeChecking, is written by
	// kube-controller-manager, which this test does not run: every rule is
	// exercised above instead.)
}

// TestPolicyRenderings: the chart renders the policy (the same objects as
// deploy/kustomize/base/job-policy) when the cluster serves
// ValidatingAdmissionPolicy, and leaves it out on an older cluster.
func TestPolicyRenderings(t *testing.T) {
	kubectl, helmBin, root := deployTools(t)
	kustomize := decodeAll(t, runTool(t, kubectl, "kustomize", filepath.Join(root, "deploy", "kustomize", "base", "job-policy")))
	chart := filepath.Join(root, "deploy", "helm", "epochfs")
	with := decodeAll(t, runTool(t, helmBin, "template", "epochfs", chart, "--namespace", "epochfs-system",
		"--set", "jobController.enabled=true", "--set", "node.allowAnyNetworkSource=true", "--api-versions", "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy",
		"--show-only", "templates/job-controller-policy.yaml"))
	if len(kustomize) != 2 || len(with) != 2 {
		t.Fatalf("kustomize renders %d objects, helm %d; want the policy and its binding", len(kustomize), len(with))
	}
	for key, k := range kustomize {
		if h, ok := with[key]; !ok || !reflect.DeepEqual(k.Object, h.Object) {
			t.Errorf("%s differs between kustomize and helm (or helm lacks it)", key)
		}
		if k.GetNamespace() != "" {
			t.Errorf("%s has a namespace: it is cluster-scoped", key)
		}
	}
	without := decodeAll(t, runTool(t, helmBin, "template", "epochfs", chart, "--namespace", "epochfs-system",
		"--set", "jobController.enabled=true", "--set", "node.allowAnyNetworkSource=true"))
	for key := range without {
		if strings.HasPrefix(key, "ValidatingAdmissionPolicy") {
			t.Errorf("helm renders %s for a cluster without admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy", key)
		}
	}
}
