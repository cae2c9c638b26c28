package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/epochfs/epochfs/internal/testenv/kube"
	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
	"github.com/epochfs/epochfs/pkg/sourcepolicy"
)

// This file tests what a hostile TrainingJob could try: names that collide
// with another job's cluster-scoped volumes, a volume someone else created
// under the name the job would use, and sources the admin's policy forbids.
// The reconciler is called directly (no manager), so every outcome is that
// of one known pass.

// directEnv starts kube-apiserver with the CRDs, without a controller.
func directEnv(t *testing.T) *env {
	t.Helper()
	if testing.Short() {
		t.Skip("kube-apiserver test skipped in -short mode")
	}
	kube := kube.Start(t, crdPaths(t)...)
	c, err := client.New(kube.Config, client.Options{Scheme: newScheme(t)})
	if err != nil {
		t.Fatal(err)
	}
	return &env{kube: kube, c: c}
}

// reconciler is a Reconciler on e's client with the source policy given
// and no capacity check.
func (e *env) reconciler(t *testing.T, pol sourcepolicy.Policy) *Reconciler {
	t.Helper()
	r, err := New(Config{Client: e.c, APIReader: e.c, Scheme: e.c.Scheme(), SkipCapacityCheck: true, SourcePolicy: pol})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// submit creates a one-worker TrainingJob with one source dataset "d".
func (e *env) submit(t *testing.T, ns, name, source string) *v1alpha1.TrainingJob {
	t.Helper()
	tj := &v1alpha1.TrainingJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1alpha1.TrainingJobSpec{Image: "x", Workers: 1,
			Datasets: []v1alpha1.Dataset{{Name: "d", Source: source, MountPath: "/d"}}},
	}
	if err := e.c.Create(context.Background(), tj); err != nil {
		t.Fatal(err)
	}
	return tj
}

// reconcile runs one pass of r for tj and returns tj as stored after it.
func (e *env) reconcile(t *testing.T, r *Reconciler, tj *v1alpha1.TrainingJob) *v1alpha1.TrainingJob {
	t.Helper()
	ctx := context.Background()
	key := client.ObjectKeyFromObject(tj)
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
	got := &v1alpha1.TrainingJob{}
	if err := e.c.Get(ctx, key, got); err != nil {
		t.Fatal(err)
	}
	return got
}

// volumesOf lists the PersistentVolumes labelled as tj's.
func (e *env) volumesOf(t *testing.T, tj *v1alpha1.TrainingJob) []corev1.PersistentVolume {
	t.Helper()
	var pvs corev1.PersistentVolumeList
	if err := e.c.List(context.Background(), &pvs, client.MatchingLabels{v1alpha1.LabelOwnerUID: string(tj.UID)}); err != nil {
		t.Fatal(err)
	}
	return pvs.Items
}

func (e *env) createNamespace(t *testing.T, name string) {
	t.Helper()
	if err := e.c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
}

// checkBinding: tj's claim for dataset "d" names its volume, and the volume
// is pre-bound to exactly that claim (namespace, name and UID) and
// labelled as tj's.
func (e *env) checkBinding(t *testing.T, tj *v1alpha1.TrainingJob) *corev1.PersistentVolume {
	t.Helper()
	pvc := &corev1.PersistentVolumeClaim{}
	if err := e.get(t, tj.Namespace, tj.Name+"-d", pvc); err != nil {
		t.Fatal(err)
	}
	pv := &corev1.PersistentVolume{}
	if err := e.get(t, "", pvName(tj, "d"), pv); err != nil {
		t.Fatal(err)
	}
	ref := pv.Spec.ClaimRef
	if pvc.Spec.VolumeName != pv.Name || ref == nil || ref.Namespace != tj.Namespace || ref.Name != pvc.Name || ref.UID != pvc.UID ||
		pv.Labels[v1alpha1.LabelOwnerUID] != string(tj.UID) || pv.Labels[v1alpha1.LabelOwnerNamespace] != tj.Namespace {
		t.Errorf("%s/%s: claim volumeName %q uid %s; volume %s claimRef %+v labels %v",
			tj.Namespace, tj.Name, pvc.Spec.VolumeName, pvc.UID, pv.Name, ref, pv.Labels)
	}
	return pv
}

// TestVolumeNamesDoNotCollide: namespace "team", job "a-x" and namespace
// "team-a", job "x" once shared the volume epochfs-team-a-x-d, and the
// second job used the first one's. Now each gets a volume of its own,
// pre-bound to its own claim.
func TestVolumeNamesDoNotCollide(t *testing.T) {
	e := directEnv(t)
	r := e.reconciler(t, testPolicy)
	e.createNamespace(t, "team")
	e.createNamespace(t, "team-a")
	a := e.submit(t, "team", "a-x", "/data/a")
	b := e.submit(t, "team-a", "x", "/data/b")
	for _, tj := range []*v1alpha1.TrainingJob{a, b} {
		got := e.reconcile(t, r, tj)
		if !meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionCreated) {
			t.Fatalf("%s/%s: conditions %+v, want Created", tj.Namespace, tj.Name, got.Status.Conditions)
		}
	}
	pa, pb := e.checkBinding(t, a), e.checkBinding(t, b)
	if pa.Name == pb.Name || pa.Spec.CSI.VolumeAttributes["source"] != "/data/a" || pb.Spec.CSI.VolumeAttributes["source"] != "/data/b" {
		t.Errorf("volumes %s (%s) and %s (%s)", pa.Name, pa.Spec.CSI.VolumeAttributes["source"], pb.Name, pb.Spec.CSI.VolumeAttributes["source"])
	}
	if n := len(e.volumesOf(t, a)) + len(e.volumesOf(t, b)); n != 2 {
		t.Errorf("%d volumes, want 2", n)
	}
}

// TestForeignVolumeNotAdopted: a PersistentVolume that exists under the
// name a job would use, and is not that job's, is never used: the job
// waits with reason VolumeConflict, no claim or Job is made, the volume is
// left as it was; once it is gone the job starts.
func TestForeignVolumeNotAdopted(t *testing.T) {
	e := directEnv(t)
	r := e.reconciler(t, testPolicy)
	ctx := context.Background()
	ns := e.namespace(t)
	for _, tc := range []struct {
		name   string
		labels map[string]string
		claim  *corev1.ObjectReference
		want   string
	}{
		{"other-uid", map[string]string{v1alpha1.LabelOwnerUID: "4f1d0c5e-other", v1alpha1.LabelOwnerNamespace: ns}, nil,
			`is owned by another TrainingJob (namespace "` + ns + `", uid "4f1d0c5e-other")`},
		{"other-namespace", map[string]string{v1alpha1.LabelOwnerUID: "4f1d0c5e-other", v1alpha1.LabelOwnerNamespace: "victim"},
			&corev1.ObjectReference{Namespace: "victim", Name: "train-d"}, `is owned by another TrainingJob (namespace "victim"`},
		{"unlabelled-unbound", nil, nil, "is not owned by a TrainingJob"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tj := e.submit(t, ns, tc.name, "/data/d")
			foreign := &corev1.PersistentVolume{
				ObjectMeta: metav1.ObjectMeta{Name: pvName(tj, "d"), Labels: tc.labels},
				Spec: corev1.PersistentVolumeSpec{
					Capacity:    corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadOnlyMany},
					ClaimRef:    tc.claim,
					PersistentVolumeSource: corev1.PersistentVolumeSource{
						HostPath: &corev1.HostPathVolumeSource{Path: "/var/secret"},
					},
				},
			}
			if err := e.c.Create(ctx, foreign); err != nil {
				t.Fatal(err)
			}
			got := e.reconcile(t, r, tj)
			c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionCreated)
			if got.Status.Phase != v1alpha1.PhasePending || got.Status.Reason != ReasonVolumeConflict ||
				!strings.Contains(got.Status.Message, "PersistentVolume "+foreign.Name+" ") || !strings.Contains(got.Status.Message, tc.want) ||
				c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonVolumeConflict {
				t.Fatalf("status %s %s: %s; Created %+v; want a VolumeConflict containing %q", got.Status.Phase, got.Status.Reason, got.Status.Message, c, tc.want)
			}
			t.Logf("%s", got.Status.Message)
			for what, obj := range map[string]client.Object{"claim": &corev1.PersistentVolumeClaim{}, "Job": &batchv1.Job{}} {
				if err := e.get(t, ns, map[string]string{"claim": tc.name + "-d", "Job": tc.name}[what], obj); isGone(err) != nil {
					t.Errorf("%s created beside a foreign volume: %v", what, err)
				}
			}
			after := &corev1.PersistentVolume{}
			if err := e.get(t, "", foreign.Name, after); err != nil {
				t.Fatal(err)
			}
			if after.ResourceVersion != foreign.ResourceVersion {
				t.Errorf("the foreign volume was changed: %+v", after)
			}
			// Still waiting on the next pass; then the volume goes and the job starts.
			if got := e.reconcile(t, r, tj); got.Status.Reason != ReasonVolumeConflict {
				t.Errorf("second pass: reason %q", got.Status.Reason)
			}
			// A volume being deleted is still in the way: the apiserver's
			// pv-protection finalizer, which no controller removes here,
			// is dropped so that it goes.
			if err := e.c.Delete(ctx, foreign); err != nil {
				t.Fatal(err)
			}
			if got := e.reconcile(t, r, tj); got.Status.Reason != ReasonVolumeConflict {
				t.Errorf("foreign volume being deleted: reason %q", got.Status.Reason)
			}
			eventually(t, "foreign volume gone", func() error {
				pv := &corev1.PersistentVolume{}
				if err := e.get(t, "", foreign.Name, pv); err != nil {
					return isGone(err)
				}
				pv.Finalizers = nil
				if err := e.c.Update(ctx, pv); err != nil {
					return err
				}
				return fmt.Errorf("PersistentVolume %s still there", foreign.Name)
			})
			got = e.reconcile(t, r, tj)
			if !meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionCreated) {
				t.Fatalf("after the foreign volume went: conditions %+v", got.Status.Conditions)
			}
			e.checkBinding(t, got)
		})
	}
}

// TestOwnVolumeReused: a volume the job made in an earlier pass (which
// stopped before the Job was created) is its own and is used.
func TestOwnVolumeReused(t *testing.T) {
	e := directEnv(t)
	r := e.reconciler(t, testPolicy)
	ctx := context.Background()
	ns := e.namespace(t)
	tj := e.submit(t, ns, "again", "/data/d")
	e.reconcile(t, r, tj)
	pv := e.checkBinding(t, tj)
	// The Job goes (no garbage collector here: delete it outright).
	if err := e.c.Delete(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "again"}},
		client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Job deleted", func() error { return isGone(e.get(t, ns, "again", &batchv1.Job{})) })
	got := e.reconcile(t, r, tj)
	if err := e.get(t, ns, "again", &batchv1.Job{}); err != nil || got.Status.Reason == ReasonVolumeConflict {
		t.Fatalf("Job not recreated beside its own volume: %v; status %s: %s", err, got.Status.Reason, got.Status.Message)
	}
	if again := e.checkBinding(t, tj); again.UID != pv.UID {
		t.Errorf("volume replaced: %s then %s", pv.UID, again.UID)
	}
}

// TestSourcePolicy: a TrainingJob naming a source the policy forbids fails
// with condition Valid False, reason SourceNotAllowed and a message naming
// the rule, and nothing is created; an allowed source works.
func TestSourcePolicy(t *testing.T) {
	e := directEnv(t)
	strict := e.reconciler(t, sourcepolicy.Policy{
		AllowedLocalRoots: []string{"/data"},
		Network:           []string{"s3://datasets?endpoint=http://minio.storage:9000"},
	})
	byDefault := e.reconciler(t, sourcepolicy.Policy{})
	pinned := e.reconciler(t, sourcepolicy.Policy{Network: []string{"nfs://filer/exports?uid=1000&gid=1000"}})
	ns := e.namespace(t)
	for _, tc := range []struct {
		name   string
		r      *Reconciler
		source string
		want   string // substring of the refusal; "" when allowed
	}{
		{"root", strict, "/", "is the node's whole file system"},
		{"etc", strict, "/etc", `local source "/etc" is not under an allowed local root (/data)`},
		{"proc-root", strict, "/proc/1/root", "overlaps /proc"},
		{"dotdot", strict, "/data/../etc/shadow", "is not under an allowed local root"},
		{"file-url", strict, "file:///etc", "is not under an allowed local root"},
		{"mirror-replica", strict, "mirror:/data/a,/var/lib/kubelet", "mirror replica 2: "},
		{"other-bucket", strict, "s3://secrets/x?endpoint=http://minio.storage:9000", "matches none of the node's network rules"},
		{"other-endpoint", strict, "s3://datasets/x?endpoint=http://169.254.169.254", "matches none of the node's network rules"},
		{"default-local", byDefault, "/data/imagenet", "local sources are disabled"},
		{"allowed-local", strict, "/data/imagenet", ""},
		{"allowed-s3", strict, "s3://datasets/imagenet?endpoint=http://minio.storage:9000", ""},
		{"default-network", byDefault, "nfs://filer/exports/imagenet?uid=1000&gid=1000", ""},
		// A TrainingJob's nfs source may not read as root without a pin.
		{"nfs-default-root", byDefault, "nfs://filer/exports/imagenet", "may not read as root"},
		{"nfs-uid-0", byDefault, "nfs://filer/exports/imagenet?uid=0&gid=1000", "may not read as root"},
		{"nfs-gid-0", byDefault, "nfs://filer/exports/imagenet?uid=1000", "may not read as root"},
		{"nfs-pinned", pinned, "nfs://filer/exports/imagenet", ""},
		{"nfs-other-than-the-pin", pinned, "nfs://filer/exports/imagenet?uid=1001&gid=1000", "pins the identity"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tj := e.submit(t, ns, tc.name, tc.source)
			got := e.reconcile(t, tc.r, tj)
			if tc.want == "" {
				if !meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionCreated) {
					t.Fatalf("status %s %s: %s, want Created", got.Status.Phase, got.Status.Reason, got.Status.Message)
				}
				if pv := e.checkBinding(t, got); pv.Spec.CSI.VolumeAttributes["source"] != tc.source {
					t.Errorf("volume source %q", pv.Spec.CSI.VolumeAttributes["source"])
				}
				return
			}
			c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionValid)
			if got.Status.Phase != v1alpha1.PhaseFailed || got.Status.Reason != ReasonSourceNotAllowed ||
				c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonSourceNotAllowed ||
				!strings.HasPrefix(c.Message, `dataset "d": `) || !strings.Contains(c.Message, "source not allowed: ") || !strings.Contains(c.Message, tc.want) {
				t.Fatalf("status %s %s: %s; Valid %+v; want SourceNotAllowed containing %q", got.Status.Phase, got.Status.Reason, got.Status.Message, c, tc.want)
			}
			t.Logf("%s", got.Status.Message)
			if err := e.get(t, ns, tc.name, &batchv1.Job{}); isGone(err) != nil {
				t.Errorf("Job created for a forbidden source: %v", err)
			}
			if err := e.get(t, ns, tc.name+"-d", &corev1.PersistentVolumeClaim{}); isGone(err) != nil {
				t.Errorf("claim created for a forbidden source: %v", err)
			}
			if pvs := e.volumesOf(t, got); len(pvs) != 0 {
				t.Errorf("%d volumes created for a forbidden source", len(pvs))
			}
			// A later pass leaves the failed job alone.
			if again := e.reconcile(t, tc.r, tj); again.Status.Reason != ReasonSourceNotAllowed {
				t.Errorf("second pass: %s %s", again.Status.Phase, again.Status.Reason)
			}
		})
	}
}
