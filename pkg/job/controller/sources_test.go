package controller

import (
	"strings"
	"testing"

	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
	"github.com/epochfs/epochfs/pkg/sourcepolicy"
	"github.com/epochfs/epochfs/pkg/volattr"
)

// TestCheckSourcesManifest: checkSources judges every attribute of a
// dataset's volume that names something to read, the manifest included,
// with the node's rules (a TrainingJob has no manifest field today; the
// check covers whatever volumeAttributes carries). The six hostile manifests
// are refused naming the rule, a manifest within the source is
// not. The real-server path of the same check is TestSourcePolicy
// (SourceNotAllowed through a kube-apiserver).
func TestCheckSourcesManifest(t *testing.T) {
	sources, err := sourcepolicy.New(sourcepolicy.Policy{
		AllowedLocalRoots: []string{"/data"},
		Network:           []string{"s3://bkt/ds?endpoint=http://minio.storage:9000", "nfs://filer/exports?uid=1000&gid=1000"},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{sources: sources}
	plan := func(manifest string) *plan {
		t.Helper()
		p, err := newPlan(testJob("j", v1alpha1.TrainingJobSpec{Workers: 1,
			Datasets: []v1alpha1.Dataset{{Name: "d", Source: "s3://bkt/ds?endpoint=http://minio.storage:9000", MountPath: "/d"}}}))
		if err != nil {
			t.Fatal(err)
		}
		if manifest != "" {
			p.datasets[0].attrs[volattr.Manifest] = manifest
		}
		return p
	}
	for _, tc := range []struct{ manifest, rule string }{
		{"/proc/1/root/etc/shadow", "takes no local manifest"},
		{"/dev/zero", "takes no local manifest"},
		{"nfs://internal-filer/x", "matches none of the node's network rules"},
		{"s3://other-team-bucket/m", "matches none of the node's network rules"},
		{"s3://bkt/m?endpoint=http://169.254.169.254", "matches none of the node's network rules"},
		{"cephfs://admin@mon/x", "matches none of the node's network rules"},
		{"", ""},
		{"s3://bkt/ds/.epochfs/manifest?endpoint=http://minio.storage:9000", ""},
	} {
		err := r.checkSources(plan(tc.manifest))
		if tc.rule == "" {
			if err != nil {
				t.Errorf("manifest %q: %v", tc.manifest, err)
			}
			continue
		}
		if err == nil || !strings.HasPrefix(err.Error(), `dataset "d": source not allowed: `) || !strings.Contains(err.Error(), tc.rule) {
			t.Errorf("manifest %q: %v; want a refusal naming %q", tc.manifest, err, tc.rule)
		}
	}
}
