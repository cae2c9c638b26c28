package controller

// spec.suspend on a started job: the Jobs follow it, resuming after the
// capacity pre-check.

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
)

// syncSuspend makes the unfinished Jobs (parameter servers first) follow
// spec.suspend: it suspends them, marking each with AnnotationSuspended,
// and resumes only Jobs so marked, after the capacity check (wait: the job
// waits with its status set). A Job suspended by someone else (Kueue, which
// resumes it on admission) is left alone.
func (r *Reconciler) syncSuspend(ctx context.Context, tj *v1alpha1.TrainingJob, p *plan, jobs ...*batchv1.Job) (res result, wait bool, err error) {
	var resume []*batchv1.Job
	for _, j := range jobs {
		if j == nil || jobCondition(j, batchv1.JobComplete) != nil || jobCondition(j, batchv1.JobFailed) != nil {
			continue
		}
		suspended := ptr.Deref(j.Spec.Suspend, false)
		switch {
		case tj.Spec.Suspend && !suspended:
			j.Spec.Suspend = ptr.To(true)
			metav1.SetMetaDataAnnotation(&j.ObjectMeta, v1alpha1.AnnotationSuspended, "true")
			if err := r.cfg.Client.Update(ctx, j); err != nil {
				return result{}, false, fmt.Errorf("suspend Job %s: %w", j.Name, err)
			}
			r.event(tj, corev1.EventTypeNormal, "Suspended", "suspended Job "+j.Name+": its pods are deleted")
		case !tj.Spec.Suspend && suspended && j.Annotations[v1alpha1.AnnotationSuspended] == "true":
			resume = append(resume, j)
		}
	}
	if len(resume) == 0 {
		return result{}, false, nil
	}
	if res, wait, err := r.checkCapacity(ctx, tj, p); err != nil || wait {
		return res, true, err
	}
	for _, j := range resume {
		j.Spec.Suspend = ptr.To(false)
		delete(j.Annotations, v1alpha1.AnnotationSuspended)
		if err := r.cfg.Client.Update(ctx, j); err != nil {
			return result{}, false, fmt.Errorf("resume Job %s: %w", j.Name, err)
		}
		r.event(tj, corev1.EventTypeNormal, "Resumed", "resumed Job "+j.Name)
	}
	return result{}, false, nil
}

// suspendedMessage says who holds a job whose Jobs are suspended.
func suspendedMessage(tj *v1alpha1.TrainingJob) string {
	switch {
	case tj.Spec.Suspend:
		return fmt.Sprintf("suspended (spec.suspend): no pods run; resume with `cachefs job resume %s` (spec.suspend: false)", tj.Name)
	case tj.Spec.QueueName != "":
		return fmt.Sprintf("waiting for Kueue to admit the job from queue %s: its Jobs are suspended until then", tj.Spec.QueueName)
	default:
		return "its Jobs are suspended by another controller: no pods run until it resumes them"
	}
}
