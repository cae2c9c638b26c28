package controller

// Creating a job's objects (claims and volumes, hostfile, Service,
// PodGroup, Jobs) so that nothing of someone else's is adopted, and
// deleting its volumes when the job goes.

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
)

// create makes every object of the job, the Jobs last (they start pods):
// each dataset's claim and volume, hostfile, Service, PodGroup, parameter
// servers, workers. An object that exists already is left alone if this
// job owns it.
func (r *Reconciler) create(ctx context.Context, tj *v1alpha1.TrainingJob, p *plan) error {
	// Per dataset: a volume of its name that is not this job's stops
	// everything before a claim naming it exists; then the claim; then the
	// volume, pre-bound to that claim (name and UID), so that no other
	// claim, not even a later one of the same name, can bind it.
	p.locations = r.cacheLocations(ctx)
	pvs, pvcs := p.volumes()
	for i, pvc := range pvcs {
		if _, err := r.checkVolume(ctx, tj, pvs[i]); err != nil {
			return err
		}
		if err := r.createOwned(ctx, tj, pvc); err != nil {
			return err
		}
		pvs[i].Spec.ClaimRef.UID = pvc.UID
		if err := r.createVolume(ctx, tj, pvs[i]); err != nil {
			return err
		}
	}
	var objs []client.Object
	if p.mode == v1alpha1.ModeMPI {
		objs = append(objs, p.hostfile())
	}
	objs = append(objs, p.service())
	if p.gang {
		objs = append(objs, p.podGroup())
	}
	if tj.Spec.ParameterServers > 0 {
		objs = append(objs, p.job(v1alpha1.ReplicaPS, r.cfg.Schedulers))
	}
	if p.chief {
		objs = append(objs, p.job(v1alpha1.ReplicaChief, r.cfg.Schedulers))
	}
	objs = append(objs, p.job(v1alpha1.ReplicaWorker, r.cfg.Schedulers))
	for _, o := range objs {
		if err := r.createOwned(ctx, tj, o); err != nil {
			return err
		}
	}
	return nil
}

// createOwned creates o, or accepts the object of that name if this job
// controls it. Either way o carries the UID of the object in the cluster.
func (r *Reconciler) createOwned(ctx context.Context, tj *v1alpha1.TrainingJob, o client.Object) error {
	err := r.cfg.Client.Create(ctx, o)
	if err == nil {
		return nil
	}
	kind := o.GetObjectKind().GroupVersionKind().Kind
	if kind == "" {
		if gvk, gerr := r.cfg.Client.GroupVersionKindFor(o); gerr == nil {
			kind = gvk.Kind
		}
	}
	if meta.IsNoMatchError(err) {
		gvk := o.GetObjectKind().GroupVersionKind()
		msg := fmt.Sprintf("gang scheduling needs the %s CRD (%s) in the cluster: install %s, or set gang.enabled: false",
			gvk.Kind, gvk.GroupVersion(), p2name(gvk.Group))
		setPhase(tj, v1alpha1.PhasePending, "GangSchedulerMissing", msg)
		r.event(tj, corev1.EventTypeWarning, "GangSchedulerMissing", msg)
		return errWait
	}
	if !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create %s %s: %w", kind, o.GetName(), err)
	}
	existing := &unstructured.Unstructured{}
	gvk, gerr := r.cfg.Client.GroupVersionKindFor(o)
	if gerr != nil {
		return gerr
	}
	existing.SetGroupVersionKind(gvk)
	if err := r.cfg.Client.Get(ctx, client.ObjectKeyFromObject(o), existing); err != nil {
		return err
	}
	if !metav1.IsControlledBy(existing, tj) {
		msg := fmt.Sprintf("a %s named %s exists and is not owned by this TrainingJob: delete it or rename the TrainingJob", gvk.Kind, o.GetName())
		setPhase(tj, v1alpha1.PhasePending, "NameConflict", msg)
		return errWait
	}
	if _, ok := o.(*batchv1.Job); ok && attemptOf(existing) != attemptOf(o) {
		// Still the Job of another attempt (a cache behind the deletion).
		return fmt.Errorf("create Job %s of attempt %d: the Job of attempt %d is still there", o.GetName(), attemptOf(o), attemptOf(existing))
	}
	o.SetUID(existing.GetUID())
	return nil
}

// ReasonVolumeConflict is the reason of a job waiting because a
// PersistentVolume of the name it would create belongs to someone else.
const ReasonVolumeConflict = "VolumeConflict"

// createVolume creates a dataset's PersistentVolume. A volume of that name
// that exists already is used only if it is this job's (see checkVolume).
func (r *Reconciler) createVolume(ctx context.Context, tj *v1alpha1.TrainingJob, pv *corev1.PersistentVolume) error {
	err := r.cfg.Client.Create(ctx, pv)
	if err == nil {
		return nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create PersistentVolume %s: %w", pv.Name, err)
	}
	found, err := r.checkVolume(ctx, tj, pv)
	if err == nil && !found {
		err = fmt.Errorf("create PersistentVolume %s: it exists, then did not: trying again", pv.Name)
	}
	return err
}

// checkVolume looks for the PersistentVolume named as pv. One that exists
// is this job's only when its owner labels name this TrainingJob and it is
// pre-bound to the job's claim (to its UID, once pv has one); otherwise the
// job waits with reason VolumeConflict (errWait) and the volume is left
// alone. PersistentVolumes are read with APIReader: the manager does not
// cache them (the controller may not watch them).
func (r *Reconciler) checkVolume(ctx context.Context, tj *v1alpha1.TrainingJob, pv *corev1.PersistentVolume) (found bool, err error) {
	existing := &corev1.PersistentVolume{}
	if err := r.cfg.APIReader.Get(ctx, client.ObjectKeyFromObject(pv), existing); apierrors.IsNotFound(err) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("get PersistentVolume %s: %w", pv.Name, err)
	}
	why := volumeConflict(tj, pv, existing)
	if why == "" {
		return true, nil
	}
	msg := fmt.Sprintf("the PersistentVolume %s this job would create for claim %s exists and %s; it is not used and the job waits: delete that PersistentVolume, or delete and resubmit the TrainingJob (its volumes are then named anew)",
		pv.Name, pv.Spec.ClaimRef.Name, why)
	if tj.Status.Reason != ReasonVolumeConflict || tj.Status.Message != msg {
		r.event(tj, corev1.EventTypeWarning, ReasonVolumeConflict, msg)
	}
	setCondition(tj, v1alpha1.ConditionCreated, false, ReasonVolumeConflict, msg)
	setPhase(tj, v1alpha1.PhasePending, ReasonVolumeConflict, msg)
	return true, errWait
}

// volumeConflict says why existing, found where want was to be created, is
// not this job's volume ("" when it is).
func volumeConflict(tj *v1alpha1.TrainingJob, want, existing *corev1.PersistentVolume) string {
	uid, ns := existing.Labels[v1alpha1.LabelOwnerUID], existing.Labels[v1alpha1.LabelOwnerNamespace]
	if uid != string(tj.UID) || ns != tj.Namespace {
		if uid == "" && ns == "" {
			return "is not owned by a TrainingJob"
		}
		return fmt.Sprintf("is owned by another TrainingJob (namespace %q, uid %q)", ns, uid)
	}
	ref, w := existing.Spec.ClaimRef, want.Spec.ClaimRef
	if ref == nil || ref.Namespace != w.Namespace || ref.Name != w.Name {
		return "is not pre-bound to this job's claim"
	}
	if ref.UID != "" && w.UID != "" && ref.UID != w.UID {
		return fmt.Sprintf("is pre-bound to an earlier claim %s (uid %s), not to the current one", ref.Name, ref.UID)
	}
	return ""
}

func p2name(group string) string {
	if group == VolcanoPodGroup.Group {
		return "Volcano"
	}
	return "scheduler-plugins"
}

// finalize deletes the job's PersistentVolumes (cluster-scoped, so not
// reached by owner references) and removes the finalizer.
func (r *Reconciler) finalize(ctx context.Context, tj *v1alpha1.TrainingJob) error {
	if !controllerutil.ContainsFinalizer(tj, v1alpha1.FinalizerVolumes) {
		return nil
	}
	var pvs corev1.PersistentVolumeList
	if err := r.cfg.APIReader.List(ctx, &pvs, client.MatchingLabels{v1alpha1.LabelOwnerUID: string(tj.UID)}); err != nil {
		return fmt.Errorf("list PersistentVolumes: %w", err)
	}
	for i := range pvs.Items {
		if err := r.cfg.Client.Delete(ctx, &pvs.Items[i]); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete PersistentVolume %s: %w", pvs.Items[i].Name, err)
		}
	}
	controllerutil.RemoveFinalizer(tj, v1alpha1.FinalizerVolumes)
	return client.IgnoreNotFound(r.cfg.Client.Update(ctx, tj))
}
