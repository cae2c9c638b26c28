package controller

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestPodPolicyByAPIServer: the chart's ValidatingAdmissionPolicy, rendered
// with one allowed ServiceAccount (jobController.podServiceAccounts) and
// installed on a real kube-apiserver, refuses pod templates with a hostPath
// volume, hostNetwork, hostPID, hostIPC, a privileged container (init
// containers too) or a ServiceAccount that is neither the namespace's
// default nor allowed, in the worker and the ps templates, naming the field
// and the rule; the default and the allowed ServiceAccount, explicit false
// host settings and unprivileged containers pass. The policy before this
// change accepts every refused case.
func TestPodPolicyByAPIServer(t *testing.T) {
	_, helmBin, root := deployTools(t)
	e := directEnv(t)
	policy := runTool(t, helmBin, "template", "epochfs", filepath.Join(root, "deploy", "helm", "epochfs"), "--namespace", "epochfs-system",
		"--set", "jobController.enabled=true", "--set", "node.allowAnyNetworkSource=true", "--set", "jobController.podServiceAccounts={ml-runner}",
		"--api-versions", "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy", "--show-only", "templates/job-controller-policy.yaml")
	kubectlApply(t, e.kube, policy)
	c, ctx, ns := e.c, context.Background(), e.namespace(t)
	n := 0
	job := func(role string, spec map[string]any) *unstructured.Unstructured {
		n++
		s := map[string]any{"image": "x", "workers": int64(1), "mode": "tensorflow", "parameterServers": int64(1)}
		if role == "" { // spec holds fields of the TrainingJob's spec
			for k, v := range spec {
				s[k] = v
			}
		} else {
			s[role] = map[string]any{"template": map[string]any{"spec": spec}}
		}
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "jobs.epochfs.io/v1alpha1", "kind": "TrainingJob",
			"metadata": map[string]any{"name": "p" + strings.Repeat("x", n), "namespace": ns},
			"spec":     s,
		}}
	}
	ctr := func(name string, sc map[string]any) map[string]any {
		m := map[string]any{"name": name}
		if sc != nil {
			m["securityContext"] = sc
		}
		return m
	}

	// The policy takes effect a moment after it is created.
	deadline := time.Now().Add(60 * time.Second)
	for c.Create(ctx, job("worker", map[string]any{"hostNetwork": true})) == nil {
		if time.Now().After(deadline) {
			t.Fatal("the API server still accepts hostNetwork 60s after the policy was created")
		}
		time.Sleep(300 * time.Millisecond)
	}

	for _, tc := range []struct {
		name, role string
		spec       map[string]any
		want       string
	}{
		{"hostPath", "worker", map[string]any{"volumes": []any{map[string]any{"name": "root", "hostPath": map[string]any{"path": "/"}}}},
			`spec.worker.template.spec.volumes: root is a hostPath volume`},
		{"hostPath in ps", "ps", map[string]any{"volumes": []any{map[string]any{"name": "ok", "emptyDir": map[string]any{}},
			map[string]any{"name": "sock", "hostPath": map[string]any{"path": "/run/containerd/containerd.sock"}}}},
			`spec.ps.template.spec.volumes: sock is a hostPath volume`},
		{"hostNetwork", "worker", map[string]any{"hostNetwork": true}, `spec.worker.template.spec.hostNetwork: TrainingJob pods may not use the node's network namespace (policy trainingjob-templates, rule hostNetwork)`},
		{"hostNetwork in ps", "ps", map[string]any{"hostNetwork": true}, `spec.ps.template.spec.hostNetwork`},
		{"hostNetwork not a bool", "worker", map[string]any{"hostNetwork": "true"}, `hostNetwork`},
		{"hostPID", "worker", map[string]any{"hostPID": true}, `spec.worker.template.spec.hostPID: TrainingJob pods may not use the node's process namespace (policy trainingjob-templates, rule hostPID)`},
		{"hostPID in ps", "ps", map[string]any{"hostPID": true}, `spec.ps.template.spec.hostPID`},
		{"hostIPC", "worker", map[string]any{"hostIPC": true}, `rule hostIPC`},
		{"privileged", "worker", map[string]any{"containers": []any{ctr("trainer", map[string]any{"privileged": true})}},
			`spec.worker.template.spec: container trainer is privileged: TrainingJob pods may not run privileged containers (policy trainingjob-templates, rule privileged)`},
		{"privileged init container in ps", "ps", map[string]any{"containers": []any{ctr("ps", nil)},
			"initContainers": []any{ctr("setup", map[string]any{"privileged": true})}}, `spec.ps.template.spec: container setup is privileged`},
		{"another ServiceAccount", "worker", map[string]any{"serviceAccountName": "cluster-admin-sa"},
			`spec.worker.template.spec.serviceAccountName: TrainingJob pods run as the namespace's default ServiceAccount or one the admin allows (default, ml-runner; chart value jobController.podServiceAccounts) (policy trainingjob-templates, rule serviceAccountName)`},
		{"another ServiceAccount in ps", "ps", map[string]any{"serviceAccountName": "builder"}, `spec.ps.template.spec.serviceAccountName`},
		{"the deprecated serviceAccount field", "worker", map[string]any{"serviceAccount": "builder"}, `rule serviceAccountName`},
		{"the job's serviceAccountName", "", map[string]any{"serviceAccountName": "builder"}, `spec.serviceAccountName: TrainingJob pods run as the namespace's default ServiceAccount or one the admin allows`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := c.Create(ctx, job(tc.role, tc.spec))
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error\n %v\nwant it to contain\n %s", err, tc.want)
			}
		})
	}

	for _, tc := range []struct {
		name, role string
		spec       map[string]any
	}{
		{"the default ServiceAccount", "worker", map[string]any{"serviceAccountName": "default"}},
		{"an allowed ServiceAccount", "worker", map[string]any{"serviceAccountName": "ml-runner", "serviceAccount": "ml-runner"}},
		{"the job's allowed serviceAccountName", "", map[string]any{"serviceAccountName": "ml-runner"}},
		{"host settings false", "ps", map[string]any{"hostNetwork": false, "hostPID": false, "hostIPC": false}},
		{"unprivileged containers", "worker", map[string]any{"containers": []any{ctr("trainer", map[string]any{"privileged": false, "runAsNonRoot": true}), ctr("side", nil)},
			"volumes": []any{map[string]any{"name": "ckpt", "emptyDir": map[string]any{}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := c.Create(ctx, job(tc.role, tc.spec)); err != nil {
				t.Errorf("refused: %v", err)
			}
		})
	}
}
