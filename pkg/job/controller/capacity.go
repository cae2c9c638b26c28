package controller

// The capacity pre-check as the reconciler runs it: it reads Nodes, Pods
// and TrainingJobs from the manager's cache (informers, no API call per
// check), works out what the gang and the admitted jobs need, and sets the
// job's status while it waits. capacity_fit.go does the arithmetic;
// docs/JOB.md says what the check leaves to the gang scheduler.

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
)

// CacheOptions are the options of the manager's cache the controller
// expects (cmd/job-controller and the tests use them): the capacity
// pre-check lists every Node and every bound Pod from the cache, so Pods
// are cached only once bound to a node (the check counts no other), and
// managed fields are stripped from every cached object.
func CacheOptions() cache.Options {
	return cache.Options{
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}: {Field: fields.OneTermNotEqualSelector("spec.nodeName", "")},
		},
	}
}

// checkCapacity runs the pre-check before anything is created. wait means
// the job must wait (status set, requeue in res).
func (r *Reconciler) checkCapacity(ctx context.Context, tj *v1alpha1.TrainingJob, p *plan) (res result, wait bool, err error) {
	if r.cfg.SkipCapacityCheck {
		return result{}, false, nil
	}
	// From the manager's cache (bound pods only, CacheOptions), read-only:
	// no copies of every Node and Pod.
	var nodes corev1.NodeList
	if err := r.cfg.Client.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		return result{}, false, fmt.Errorf("capacity: list nodes: %w", err)
	}
	var pods corev1.PodList
	if err := r.cfg.Client.List(ctx, &pods, client.UnsafeDisableDeepCopy); err != nil {
		return result{}, false, fmt.Errorf("capacity: list pods: %w", err)
	}
	reserved, err := r.reservations(ctx, tj, pods.Items)
	if err != nil {
		return result{}, false, err
	}
	workers := p.job(v1alpha1.ReplicaWorker, r.cfg.Schedulers).Spec.Template.Spec
	req := capacityRequest{what: p.capacityWhat(), pods: p.capacityPods(r.cfg.Schedulers, 0, 0), spec: &workers}
	short := capacityShortfall(nodes.Items, pods.Items, req, reserved)
	if short == "" {
		if meta.FindStatusCondition(tj.Status.Conditions, v1alpha1.ConditionInsufficientResources) != nil {
			setCondition(tj, v1alpha1.ConditionInsufficientResources, false, "Fits", "the cluster has room for the job")
		}
		return result{}, false, nil
	}
	msg := short + fmt.Sprintf("; no pods are created, the job waits and checks again every %v", r.cfg.CapacityRetry)
	if c := meta.FindStatusCondition(tj.Status.Conditions, v1alpha1.ConditionInsufficientResources); c == nil || c.Status != metav1.ConditionTrue || c.Message != msg {
		r.event(tj, corev1.EventTypeWarning, v1alpha1.ConditionInsufficientResources, short)
	}
	setCondition(tj, v1alpha1.ConditionInsufficientResources, true, v1alpha1.ConditionInsufficientResources, msg)
	setPhase(tj, v1alpha1.PhasePending, v1alpha1.ConditionInsufficientResources, msg)
	return result{requeue: r.cfg.CapacityRetry}, true, nil
}

// capacityWhat names the gang's pods in the check's messages, e.g.
// "2 workers (each nvidia.com/gpu=4)".
func (p *plan) capacityWhat() string {
	gang := p.gangPods()
	what := fmt.Sprintf("%d pods", len(gang))
	if p.tj.Spec.ParameterServers == 0 && !p.chief {
		what = fmt.Sprintf("%d workers", len(gang))
	}
	if len(gang) == 1 {
		what = "1 worker"
	}
	if per := formatList(p.workerReqs); per != "" {
		what += " (each " + per + ")"
	}
	return what
}

// reservations are the other TrainingJobs that passed the check (their
// Jobs exist: condition Created) and have not finished, with the requests
// of their gang pods that are not yet placed: not created, or created and
// not bound to a node. Bound pods are counted on their nodes; succeeded
// ones need nothing more.
func (r *Reconciler) reservations(ctx context.Context, self *v1alpha1.TrainingJob, pods []corev1.Pod) ([]reservation, error) {
	var tjs v1alpha1.TrainingJobList
	if err := r.cfg.Client.List(ctx, &tjs); err != nil {
		return nil, fmt.Errorf("capacity: list TrainingJobs: %w", err)
	}
	type key struct{ ns, name, replica string }
	placed := map[key]int32{}
	for i := range pods {
		pod := &pods[i]
		name, ok := pod.Labels[v1alpha1.LabelJobName]
		if !ok {
			continue
		}
		if (pod.Spec.NodeName != "" && pod.Status.Phase != corev1.PodFailed) || pod.Status.Phase == corev1.PodSucceeded {
			placed[key{pod.Namespace, name, pod.Labels[v1alpha1.LabelReplica]}]++
		}
	}
	var out []reservation
	for i := range tjs.Items {
		tj := &tjs.Items[i]
		if tj.UID == self.UID || finished(tj) || !tj.DeletionTimestamp.IsZero() || tj.Spec.Suspend ||
			!meta.IsStatusConditionTrue(tj.Status.Conditions, v1alpha1.ConditionCreated) {
			continue
		}
		p, err := newPlan(tj)
		if err != nil {
			continue
		}
		// The chief is shaped as a worker and counted with them.
		want := p.capacityPods(r.cfg.Schedulers, placed[key{tj.Namespace, tj.Name, v1alpha1.ReplicaPS}],
			placed[key{tj.Namespace, tj.Name, v1alpha1.ReplicaWorker}]+placed[key{tj.Namespace, tj.Name, v1alpha1.ReplicaChief}])
		if len(want) > 0 {
			out = append(out, reservation{job: tj.Namespace + "/" + tj.Name, pods: want})
		}
	}
	return out, nil
}

// capacityPods are the gang's pods for the capacity check (as gangPods,
// each with its pod template), less placedPS parameter servers and
// placedWorkers workers that are placed already. Pods without requests
// are left out.
func (p *plan) capacityPods(sched Schedulers, placedPS, placedWorkers int32) []item {
	gang := p.gangPods()
	nPS := min(p.tj.Spec.ParameterServers, int32(len(gang)))
	var out []item
	add := func(replica string, reqs corev1.ResourceList, n int32) {
		if n <= 0 || len(reqs) == 0 {
			return
		}
		spec := p.job(replica, sched).Spec.Template.Spec
		for range n {
			out = append(out, item{reqs: reqs, spec: &spec, replica: replica})
		}
	}
	add(v1alpha1.ReplicaPS, p.psReqs, nPS-placedPS)
	add(v1alpha1.ReplicaWorker, p.workerReqs, int32(len(gang))-nPS-placedWorkers)
	return out
}
