package controller

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
)

// TestSecretNeedsAuthorAccess: on a real kube-apiserver (RBAC) with the
// admission policy installed, the controller puts a dataset's secretName in
// the PersistentVolume only when the job's author may get that Secret:
// alice (granted get on the Secret) gets her volume with the Secret
// reference; mallory (who may create TrainingJobs but not read the Secret)
// gets condition Valid False, reason SecretNotAllowed, phase Failed and no
// volume. The author annotation cannot be forged: the API server refuses
// mallory's job that names alice as its author, a job naming a Secret
// without the annotation, and a change of the annotation; and with the
// policy's binding gone the controller refuses every Secret reference. On
// today's code mallory's job gets a volume with alice's Secret.
func TestSecretNeedsAuthorAccess(t *testing.T) {
	e := directEnv(t)
	installTemplatePolicy(t, e.kube)
	r := e.reconciler(t, testPolicy)
	ctx, ns := context.Background(), e.namespace(t)
	create := func(o client.Object) {
		t.Helper()
		if err := e.c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "team-s3", Namespace: ns},
		StringData: map[string]string{"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}})
	create(&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "submit", Namespace: ns}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"jobs.epochfs.io"}, Resources: []string{"trainingjobs"}, Verbs: []string{"create", "get", "update"}}}})
	create(&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "read-team-s3", Namespace: ns}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"team-s3"}, Verbs: []string{"get"}}}})
	bind := func(role string, users ...string) {
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role, Namespace: ns},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role}}
		for _, u := range users {
			rb.Subjects = append(rb.Subjects, rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: u})
		}
		create(rb)
	}
	bind("submit", "alice", "mallory", "carol")
	bind("read-team-s3", "alice")
	as := func(user string, groups ...string) client.Client {
		cfg := rest.CopyConfig(e.kube.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
		c, err := client.New(cfg, client.Options{Scheme: e.c.Scheme()})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	alice, mallory := as("alice"), as("mallory")
	// carol may read the Secret only through her group data-team.
	if err := e.c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "team-reads", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "read-team-s3"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "data-team"}}}); err != nil {
		t.Fatal(err)
	}
	job := func(name, author string) *v1alpha1.TrainingJob {
		tj := &v1alpha1.TrainingJob{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: v1alpha1.TrainingJobSpec{Image: "x", Workers: 1,
				Datasets: []v1alpha1.Dataset{{Name: "d", Source: "s3://team/ds", MountPath: "/d", SecretName: "team-s3"}}},
		}
		if author != "" {
			tj.Annotations = map[string]string{v1alpha1.AnnotationAuthor: author}
		}
		return tj
	}

	// The policy takes effect a moment after it is created.
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; ; i++ {
		err := mallory.Create(ctx, job("forged-"+strconv.Itoa(i), "alice"))
		if err != nil {
			if !strings.Contains(err.Error(), "metadata.annotations[jobs.epochfs.io/author]: alice is not you: it must be your own user name, mallory (policy trainingjob-templates, rule author)") {
				t.Fatalf("mallory's job authored by alice: %v", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the API server still accepts a forged author 60s after the policy was created")
		}
		time.Sleep(300 * time.Millisecond)
	}
	if err := mallory.Create(ctx, job("anonymous", "")); err == nil || !strings.Contains(err.Error(), "the job names Secret team-s3 (secretName): set this annotation to your user name, mallory") {
		t.Errorf("a job naming a Secret without an author: %v", err)
	}

	// Groups can be claimed only by their members.
	claim := job("claims-a-group", "mallory")
	claim.Annotations[v1alpha1.AnnotationAuthorGroups] = "data-team"
	if err := mallory.Create(ctx, claim); err == nil || !strings.Contains(err.Error(), "metadata.annotations[jobs.epochfs.io/author-groups]: data-team names a group you are not in") {
		t.Errorf("mallory claiming group data-team: %v", err)
	}

	// alice may read the Secret: her volume names it.
	aj := job("alices", "alice")
	if err := alice.Create(ctx, aj); err != nil {
		t.Fatal(err)
	}
	got := e.reconcile(t, r, aj)
	if !meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionCreated) {
		t.Fatalf("alice's job: conditions %+v, want Created", got.Status.Conditions)
	}
	pv := e.checkBinding(t, got)
	if ref := pv.Spec.CSI.NodeStageSecretRef; ref == nil || ref.Name != "team-s3" || ref.Namespace != ns {
		t.Errorf("alice's volume: nodeStageSecretRef %+v, want team-s3", ref)
	}
	// The author cannot be changed afterwards, not even by an admin.
	got.Annotations[v1alpha1.AnnotationAuthor] = "mallory"
	if err := e.c.Update(ctx, got); err == nil || !strings.Contains(err.Error(), "cannot be changed after submission") {
		t.Errorf("changing the author: %v", err)
	}

	// A grant through a group the author claimed is seen.
	cj := job("carols", "carol")
	cj.Annotations[v1alpha1.AnnotationAuthorGroups] = "data-team"
	if err := as("carol", "data-team").Create(ctx, cj); err != nil {
		t.Fatal(err)
	}
	if got := e.reconcile(t, r, cj); !meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionCreated) {
		t.Errorf("carol's job (Secret granted to her group): conditions %+v, want Created", got.Status.Conditions)
	}

	// mallory may not: no volume, the job fails with SecretNotAllowed.
	mj := job("mallorys", "mallory")
	if err := mallory.Create(ctx, mj); err != nil {
		t.Fatal(err)
	}
	got = e.reconcile(t, r, mj)
	c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionValid)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonSecretNotAllowed || got.Status.Phase != v1alpha1.PhaseFailed ||
		!strings.Contains(c.Message, `the job's author "mallory" may not get Secret "team-s3"`) {
		t.Errorf("mallory's job: phase %s, condition %+v; want Failed, Valid False %s", got.Status.Phase, c, ReasonSecretNotAllowed)
	}
	if pvs := e.volumesOf(t, got); len(pvs) != 0 {
		t.Errorf("mallory's job has volumes: %v", pvs)
	}

	// Without the policy's binding the annotation proves nothing.
	if err := e.c.Delete(ctx, &admissionv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: DefaultAuthorPolicyBinding}}); err != nil {
		t.Fatal(err)
	}
	aj2 := job("alices-2", "alice")
	if err := alice.Create(ctx, aj2); err != nil {
		t.Fatal(err)
	}
	got = e.reconcile(t, r, aj2)
	if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionValid); c == nil || c.Reason != ReasonSecretNotAllowed ||
		!strings.Contains(c.Message, "admission policy binding "+DefaultAuthorPolicyBinding) {
		t.Errorf("without the binding: condition %+v, want %s naming the binding", c, ReasonSecretNotAllowed)
	}
	if pvs := e.volumesOf(t, got); len(pvs) != 0 {
		t.Errorf("a job without the binding has volumes: %v", pvs)
	}
}

// allowSecret lets user get Secret name of namespace ns (RBAC).
func allowSecret(t *testing.T, e *env, ns, user, name string) {
	t.Helper()
	ctx := context.Background()
	if err := e.c.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "read-" + name, Namespace: ns}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{name}, Verbs: []string{"get"}}}}); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "read-" + name, Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "read-" + name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}); err != nil {
		t.Fatal(err)
	}
}
