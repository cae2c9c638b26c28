package controller

// One pass of the reconciler over a TrainingJob that is not being deleted:
// validate it into a plan, find the Jobs of its current attempt, then
// either start the attempt (checks, capacity, create) or follow it
// (suspend, status, restarts, finish).

import (
	"context"
	"errors"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
)

func (r *Reconciler) reconcile(ctx context.Context, tj *v1alpha1.TrainingJob) (result, error) {
	// The finalizer first: Update replaces tj, status included.
	if needsVolumes(tj) && controllerutil.AddFinalizer(tj, v1alpha1.FinalizerVolumes) {
		if err := r.cfg.Client.Update(ctx, tj); err != nil {
			return result{}, fmt.Errorf("add finalizer: %w", err)
		}
	}
	if tj.Status.Phase == "" {
		tj.Status.Phase = v1alpha1.PhasePending
	}
	if finished(tj) {
		return r.afterFinish(ctx, tj)
	}
	p, err := newPlan(tj)
	if err != nil {
		r.refuse(tj, "InvalidSpec", err.Error(), "; the job was not started: fix it and submit again")
		return result{}, nil
	}
	setCondition(tj, v1alpha1.ConditionValid, true, "Valid", "the spec is valid")

	worker, err := r.getJob(ctx, tj, p.workerJobName())
	if err != nil {
		return result{}, err
	}
	if worker != nil && !metav1.IsControlledBy(worker, tj) {
		msg := fmt.Sprintf("a Job named %s exists and is not owned by this TrainingJob: delete it or rename the TrainingJob", worker.Name)
		setPhase(tj, v1alpha1.PhasePending, "NameConflict", msg)
		return result{requeue: r.cfg.CapacityRetry}, nil
	}
	ps, chief, err := r.otherJobs(ctx, tj, p)
	if err != nil {
		return result{}, err
	}
	// The gang's attempt: status.restarts, or an existing Job's if newer.
	// Anything of an older attempt goes before the new one starts.
	adoptAttempt(tj, p, worker, ps, chief)
	if stale, err := r.clearOldAttempts(ctx, tj, p, worker, ps, chief); err != nil || stale {
		return result{requeue: restartPoll}, err
	}
	// Jobs of an older attempt were deleted by clearOldAttempts.
	worker, ps, chief = p.current(worker), p.current(ps), p.current(chief)
	if worker == nil {
		return r.start(ctx, tj, p)
	}
	return r.follow(ctx, tj, p, worker, ps, chief)
}

// otherJobs gets the parameter servers' and the chief's Jobs the plan has
// (nil where it has none or they do not exist).
func (r *Reconciler) otherJobs(ctx context.Context, tj *v1alpha1.TrainingJob, p *plan) (ps, chief *batchv1.Job, err error) {
	if tj.Spec.ParameterServers > 0 {
		if ps, err = r.getJob(ctx, tj, p.psJobName()); err != nil {
			return nil, nil, err
		}
	}
	if p.chief {
		if chief, err = r.getJob(ctx, tj, p.chiefJobName()); err != nil {
			return nil, nil, err
		}
	}
	return ps, chief, nil
}

// current is j if it is a live Job of the plan's attempt, else nil.
func (p *plan) current(j *batchv1.Job) *batchv1.Job {
	if j == nil || !j.DeletionTimestamp.IsZero() || attemptOf(j) < p.attempt {
		return nil
	}
	return j
}

// refuse fails a job that will not start: condition Valid False, phase
// Failed with reason and msg (and hint in the phase's message), a Warning
// event.
func (r *Reconciler) refuse(tj *v1alpha1.TrainingJob, reason, msg, hint string) {
	setCondition(tj, v1alpha1.ConditionValid, false, reason, msg)
	setPhase(tj, v1alpha1.PhaseFailed, reason, msg+hint)
	tj.Status.CompletionTime = ptrTime(r.cfg.Now())
	r.event(tj, corev1.EventTypeWarning, reason, msg)
}

// start starts the plan's attempt, whose Jobs do not exist: the source and
// Secret checks (first attempt only), the capacity pre-check (unless
// suspended), then every object.
func (r *Reconciler) start(ctx context.Context, tj *v1alpha1.TrainingJob, p *plan) (result, error) {
	restart := p.attempt > 0 || meta.IsStatusConditionTrue(tj.Status.Conditions, v1alpha1.ConditionRestarting)
	// Sources are checked before anything is created, not on every pass
	// (nor when the gang restarts): a policy tightened later does not fail
	// running jobs (the node refuses their new mounts).
	if !restart {
		if refused, err := r.admit(ctx, tj, p); err != nil || refused {
			return result{}, err
		}
	}
	// A suspended job runs nothing, so it needs no room yet: the check runs
	// when it is resumed.
	if !tj.Spec.Suspend {
		if res, wait, err := r.checkCapacity(ctx, tj, p); err != nil || wait {
			return res, err
		}
	}
	if err := r.create(ctx, tj, p); errors.Is(err, errWait) {
		return result{requeue: r.cfg.CapacityRetry}, nil
	} else if err != nil {
		return result{}, err
	}
	markCreated(tj)
	what := "created Job " + p.workerJobName()
	if restart {
		what = fmt.Sprintf("restarted the whole gang: created the Jobs of attempt %d", p.attempt)
		setCondition(tj, v1alpha1.ConditionRestarting, false, "Restarted", what)
	}
	if tj.Spec.Suspend {
		msg := suspendedMessage(tj)
		setCondition(tj, v1alpha1.ConditionSuspended, true, "Suspended", msg)
		setPhase(tj, v1alpha1.PhasePending, "Suspended", msg)
		r.event(tj, corev1.EventTypeNormal, "Suspended", what+" suspended")
		return result{}, nil
	}
	setPhase(tj, v1alpha1.PhasePending, "Created", fmt.Sprintf("waiting for %d workers to be scheduled", tj.Spec.Workers))
	if restart {
		r.event(tj, corev1.EventTypeNormal, "Restarted", what)
	} else {
		r.event(tj, corev1.EventTypeNormal, "Created", what)
	}
	return result{}, nil
}

// admit applies the source policy and the Secret access check to a job
// before its first attempt; refused means the job failed (status set).
func (r *Reconciler) admit(ctx context.Context, tj *v1alpha1.TrainingJob, p *plan) (refused bool, err error) {
	if err := r.checkSources(p); err != nil {
		r.refuse(tj, ReasonSourceNotAllowed, err.Error(), "; the job was not started: use a source the cluster's policy allows and submit again")
		return true, nil
	}
	if err := r.checkSecretAccess(ctx, p); err != nil {
		var denied *refusedError
		if !errors.As(err, &denied) {
			return false, fmt.Errorf("check secret access: %w", err)
		}
		r.refuse(tj, ReasonSecretNotAllowed, err.Error(), "; the job was not started")
		return true, nil
	}
	return false, nil
}

// follow brings the status of a started attempt up to date: suspension,
// counts and phase, a gang restart when a Job failed, cleanup once
// finished.
func (r *Reconciler) follow(ctx context.Context, tj *v1alpha1.TrainingJob, p *plan, worker, ps, chief *batchv1.Job) (result, error) {
	// The status write that followed the creation may have been lost (a
	// conflict with a status written from an older copy): the Job exists,
	// so the job was created and the capacity check is behind it.
	markCreated(tj)
	if meta.IsStatusConditionTrue(tj.Status.Conditions, v1alpha1.ConditionRestarting) {
		setCondition(tj, v1alpha1.ConditionRestarting, false, "Restarted", fmt.Sprintf("restarted the whole gang: created the Jobs of attempt %d", p.attempt))
	}
	if (tj.Spec.ParameterServers > 0 && ps == nil) || (p.chief && chief == nil) {
		return result{}, nil
	}
	if res, wait, err := r.syncSuspend(ctx, tj, p, ps, chief, worker); err != nil || wait {
		return res, err
	}
	r.updateStatus(tj, p, worker, ps, chief)
	if !finished(tj) {
		if j := failedJob(worker, ps, chief); j != nil {
			if err := r.attemptFailed(ctx, tj, p, j, worker, ps, chief); err != nil || !finished(tj) {
				return result{requeue: restartPoll}, err
			}
		}
	}
	if finished(tj) {
		r.event(tj, eventType(tj), tj.Status.Reason, tj.Status.Message)
		return r.afterFinish(ctx, tj)
	}
	return result{}, nil
}
