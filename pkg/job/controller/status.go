package controller

import (
	"context"
	"fmt"
	"reflect"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
)

func setCondition(tj *v1alpha1.TrainingJob, typ string, status bool, reason, msg string) {
	s := metav1.ConditionFalse
	if status {
		s = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&tj.Status.Conditions, metav1.Condition{
		Type: typ, Status: s, Reason: reason, Message: msg, ObservedGeneration: tj.Generation,
	})
}

func setPhase(tj *v1alpha1.TrainingJob, phase v1alpha1.Phase, reason, msg string) {
	tj.Status.Phase, tj.Status.Reason, tj.Status.Message = phase, reason, msg
}

func finished(tj *v1alpha1.TrainingJob) bool {
	return tj.Status.Phase == v1alpha1.PhaseSucceeded || tj.Status.Phase == v1alpha1.PhaseFailed
}

// equalStatus compares statuses ignoring condition transition times, which
// SetStatusCondition keeps when nothing else changed.
func equalStatus(a, b *v1alpha1.TrainingJobStatus) bool {
	return reflect.DeepEqual(a, b)
}

func replicaStatus(j *batchv1.Job) v1alpha1.ReplicaStatus {
	return v1alpha1.ReplicaStatus{
		Active: j.Status.Active, Ready: ptr.Deref(j.Status.Ready, 0),
		Succeeded: j.Status.Succeeded, Failed: j.Status.Failed,
	}
}

func jobCondition(j *batchv1.Job, t batchv1.JobConditionType) *batchv1.JobCondition {
	for i := range j.Status.Conditions {
		if c := &j.Status.Conditions[i]; c.Type == t && c.Status == corev1.ConditionTrue {
			return c
		}
	}
	return nil
}

// updateStatus derives phase, counts and times from the Jobs of the
// current attempt. The workers' Job decides success, or the chief's when
// there is one (tf-operator's rule); a failed Job (workers, parameter
// servers, chief) is left to attemptFailed.
func (r *Reconciler) updateStatus(tj *v1alpha1.TrainingJob, p *plan, worker, ps, chief *batchv1.Job) {
	st := &tj.Status
	st.Workers = replicaStatus(worker)
	if ps != nil {
		rs := replicaStatus(ps)
		st.ParameterServers = &rs
	}
	decider := worker
	if chief != nil {
		rs := replicaStatus(chief)
		st.Chief = &rs
		decider = chief
	}
	// The first attempt's start: a restart does not move it.
	if worker.Status.StartTime != nil && (st.StartTime == nil || p.attempt == 0) {
		st.StartTime = worker.Status.StartTime.DeepCopy()
	}
	if c := jobCondition(decider, batchv1.JobComplete); c != nil {
		st.CompletionTime = decider.Status.CompletionTime.DeepCopy()
		if st.CompletionTime == nil {
			st.CompletionTime = c.LastTransitionTime.DeepCopy()
		}
		msg := fmt.Sprintf("all %d workers succeeded", tj.Spec.Workers)
		switch {
		case chief != nil:
			msg = "the chief succeeded (tensorflow.chief)"
		case p.success == v1alpha1.SuccessWorker0:
			msg = "worker 0 succeeded (successPolicy Worker0)"
		}
		if p.attempt > 0 {
			msg += fmt.Sprintf(" on attempt %d, after %s of the whole gang", p.attempt, restartCount(p.attempt))
		}
		setCondition(tj, v1alpha1.ConditionRunning, false, "Finished", msg)
		setCondition(tj, v1alpha1.ConditionSucceeded, true, "Succeeded", msg)
		setPhase(tj, v1alpha1.PhaseSucceeded, "Succeeded", msg)
		return
	}
	if failedJob(worker, ps, chief) != nil {
		return // the attempt failed: attemptFailed restarts the gang or fails the job
	}
	if ptr.Deref(worker.Spec.Suspend, false) {
		msg := suspendedMessage(tj)
		setCondition(tj, v1alpha1.ConditionSuspended, true, "Suspended", msg)
		if meta.FindStatusCondition(tj.Status.Conditions, v1alpha1.ConditionRunning) != nil {
			setCondition(tj, v1alpha1.ConditionRunning, false, "Suspended", msg)
		}
		setPhase(tj, v1alpha1.PhasePending, "Suspended", msg)
		return
	}
	if meta.FindStatusCondition(tj.Status.Conditions, v1alpha1.ConditionSuspended) != nil {
		setCondition(tj, v1alpha1.ConditionSuspended, false, "Resumed", "the Jobs are not suspended")
	}
	need := p.minMember
	if !p.gang {
		need = 1
	}
	ready := st.Workers.Ready
	if st.ParameterServers != nil {
		ready += st.ParameterServers.Ready
	}
	if st.Chief != nil {
		ready += st.Chief.Ready
	}
	switch {
	case ready >= need || (tj.Status.Phase == v1alpha1.PhaseRunning && st.Workers.Active > 0):
		msg := fmt.Sprintf("%d of %d workers ready", st.Workers.Ready, tj.Spec.Workers)
		setCondition(tj, v1alpha1.ConditionRunning, true, "Running", msg)
		setPhase(tj, v1alpha1.PhaseRunning, "Running", msg)
	default:
		msg := fmt.Sprintf("%d of %d workers ready; waiting for the scheduler to place them", st.Workers.Ready, tj.Spec.Workers)
		if p.gang {
			msg += fmt.Sprintf(" (gang: %d pods start together)", need)
		}
		setPhase(tj, v1alpha1.PhasePending, "Scheduling", msg)
	}
}

// afterFinish applies the cleanPodPolicy and the TTL to a finished job.
func (r *Reconciler) afterFinish(ctx context.Context, tj *v1alpha1.TrainingJob) (result, error) {
	if err := r.cleanPods(ctx, tj); err != nil {
		return result{}, err
	}
	ttl := tj.Spec.Cleanup.TTLSecondsAfterFinished
	if ttl == nil {
		return result{}, nil
	}
	done := r.cfg.Now()
	if tj.Status.CompletionTime != nil {
		done = tj.Status.CompletionTime.Time
	}
	left := done.Add(time.Duration(*ttl) * time.Second).Sub(r.cfg.Now())
	if left > 0 {
		return result{requeue: left}, nil
	}
	return result{deleteNow: true}, nil
}

// cleanPods deletes pods per the cleanPodPolicy and suspends an unfinished
// parameter-server Job, and with a TensorFlow chief an unfinished workers'
// Job (deleting their pods alone would have them recreated).
func (r *Reconciler) cleanPods(ctx context.Context, tj *v1alpha1.TrainingJob) error {
	policy := tj.Spec.Cleanup.CleanPodPolicy
	if policy == "" {
		policy = v1alpha1.CleanPodRunning
	}
	if policy == v1alpha1.CleanPodNone {
		return nil
	}
	var servers []string // Jobs whose pods serve others and may never exit
	if tj.Spec.ParameterServers > 0 {
		servers = append(servers, tj.Name+"-ps")
	}
	if tf := tj.Spec.TensorFlow; tf != nil && tf.Chief {
		servers = append(servers, tj.Name) // the chief decided; the workers may serve it forever
	}
	for _, name := range servers {
		j := &batchv1.Job{}
		err := r.cfg.Client.Get(ctx, client.ObjectKey{Namespace: tj.Namespace, Name: name}, j)
		if err == nil && metav1.IsControlledBy(j, tj) && !ptr.Deref(j.Spec.Suspend, false) &&
			jobCondition(j, batchv1.JobComplete) == nil && jobCondition(j, batchv1.JobFailed) == nil {
			j.Spec.Suspend = ptr.To(true)
			if err := r.cfg.Client.Update(ctx, j); err != nil {
				return fmt.Errorf("suspend Job %s: %w", j.Name, err)
			}
		} else if client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	var pods corev1.PodList
	if err := r.cfg.APIReader.List(ctx, &pods, client.InNamespace(tj.Namespace), client.MatchingLabels{v1alpha1.LabelJobName: tj.Name}); err != nil {
		return fmt.Errorf("list pods: %w", err)
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if !pod.DeletionTimestamp.IsZero() {
			continue
		}
		if policy == v1alpha1.CleanPodRunning && (pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed) {
			continue
		}
		if err := r.cfg.Client.Delete(ctx, pod); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete pod %s: %w", pod.Name, err)
		}
	}
	return nil
}
