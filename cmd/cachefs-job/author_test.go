package main

import (
	"context"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
)

// TestSubmitSetsAuthor: `cachefs job submit --dataset-secret` annotates the
// job with the caller's user name as the API server knows it (admin, the
// test cluster's client certificate), which the admission policy requires
// and the controller's SubjectAccessReview checks; a job without a Secret
// gets no annotation. Without setAuthor the annotation is missing and, with
// the policy installed, the submit is refused.
func TestSubmitSetsAuthor(t *testing.T) {
	const ns = "ml"
	kube, c := startJobKube(t, ns)
	kc := "--kubeconfig=" + kube.Kubeconfig
	for _, args := range [][]string{
		{"submit", "with-secret", "-n", ns, "--image", "x", "--dataset", "d=s3://bucket/p:/d", "--dataset-secret", "b-keys"},
		{"submit", "without", "-n", ns, "--image", "x", "--dataset", "d=s3://bucket/p:/d"},
	} {
		if _, stderr, err := runJob(t, append([]string{"job", kc}, args...)...); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, stderr)
		}
	}
	for name, want := range map[string]string{"with-secret": "admin", "without": ""} {
		tj := &v1alpha1.TrainingJob{}
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, tj); err != nil {
			t.Fatal(err)
		}
		if got := tj.Annotations[v1alpha1.AnnotationAuthor]; got != want {
			t.Errorf("%s: author annotation %q, want %q", name, got, want)
		}
		if groups := tj.Annotations[v1alpha1.AnnotationAuthorGroups]; (want != "") != strings.Contains(groups, "system:masters") {
			t.Errorf("%s: author-groups annotation %q", name, groups)
		}
	}
}
