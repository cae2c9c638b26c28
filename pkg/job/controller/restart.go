package controller

// This file is the gang-wide failure policy: when an attempt of a
// TrainingJob fails (its workers' or parameter servers' Job has the Failed
// condition), the whole gang restarts, up to spec.maxRestarts times, then
// the TrainingJob fails with the failing pod's reason.
//
// A restart is crash-safe because the status is written before anything
// is deleted: the failing pass records status.restarts = attempt+1 and
// status.lastFailure (the Reconcile's status write); later passes see Jobs
// whose label jobs.epochfs.io/attempt is older than status.restarts,
// delete them and their pods, wait until no pod of an older attempt is
// left, and only then create the new attempt's Jobs (the usual creation
// path). Jobs are deleted with background propagation and their pods by the
// controller itself: foreground propagation would leave the Job for the
// garbage collector to finish, and the wait is on the pods either way.
// Nothing of this lives in memory: a restarted controller derives the
// attempt from status.restarts and the Jobs' labels (the larger wins, in
// case a status write was lost).

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
)

// restartPoll is how often a restarting job looks again for the pods of
// its old attempt (pods are not watched).
const restartPoll = time.Second

// ReasonRestarting is the status reason of a job between an attempt's
// failure and the creation of the next attempt's Jobs.
const ReasonRestarting = "Restarting"

// maxFailureText bounds the part of a failure message that comes from the
// pod (its termination message: the tail of the trainer's log).
const maxFailureText = 300

// attemptOf is the attempt of a Job or pod (label LabelAttempt; 0 when
// absent or not a number, as on objects made before the label existed).
func attemptOf(o metav1.Object) int32 {
	n, err := strconv.ParseInt(o.GetLabels()[v1alpha1.LabelAttempt], 10, 32)
	if err != nil || n < 0 {
		return 0
	}
	return int32(n)
}

// getJob returns the Job name of tj's namespace, nil when there is none.
func (r *Reconciler) getJob(ctx context.Context, tj *v1alpha1.TrainingJob, name string) (*batchv1.Job, error) {
	j := &batchv1.Job{}
	err := r.cfg.Client.Get(ctx, client.ObjectKey{Namespace: tj.Namespace, Name: name}, j)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return j, nil
}

// adoptAttempt raises status.restarts (and the plan's attempt) to the
// attempt of an existing Job of this job: the status write that recorded
// it was lost.
func adoptAttempt(tj *v1alpha1.TrainingJob, p *plan, jobs ...*batchv1.Job) {
	for _, j := range jobs {
		if j != nil && metav1.IsControlledBy(j, tj) && attemptOf(j) > tj.Status.Restarts {
			tj.Status.Restarts = attemptOf(j)
			p.attempt = tj.Status.Restarts
		}
	}
}

// clearOldAttempts deletes the Jobs of attempts older than p.attempt and,
// while the job is restarting, their pods. stale reports that something of
// an older attempt (or a Job being deleted) is still there: the new
// attempt must wait.
func (r *Reconciler) clearOldAttempts(ctx context.Context, tj *v1alpha1.TrainingJob, p *plan, jobs ...*batchv1.Job) (stale bool, err error) {
	for _, j := range jobs {
		if j == nil || !metav1.IsControlledBy(j, tj) {
			continue
		}
		if !j.DeletionTimestamp.IsZero() {
			stale = true
			continue
		}
		if attemptOf(j) >= p.attempt {
			continue
		}
		stale = true
		err := r.cfg.Client.Delete(ctx, j, client.PropagationPolicy(metav1.DeletePropagationBackground),
			client.Preconditions{UID: &j.UID})
		if client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
			return true, fmt.Errorf("delete Job %s of attempt %d: %w", j.Name, attemptOf(j), err)
		}
	}
	if !stale && !meta.IsStatusConditionTrue(tj.Status.Conditions, v1alpha1.ConditionRestarting) {
		return false, nil
	}
	// The pods of the old attempt: gone before any pod of the new one is
	// created, so that no stale rank can join the new rendezvous.
	var pods corev1.PodList
	if err := r.cfg.APIReader.List(ctx, &pods, client.InNamespace(tj.Namespace), client.MatchingLabels{v1alpha1.LabelJobName: tj.Name}); err != nil {
		return true, fmt.Errorf("list pods: %w", err)
	}
	names := []string{p.workerJobName(), p.psJobName()}
	if p.chief {
		names = append(names, p.chiefJobName())
	}
	left := 0
	for i := range pods.Items {
		pod := &pods.Items[i]
		// Only pods of this job's Jobs (a pod anyone labels with the job's
		// name is not the controller's to delete or wait for).
		ref := metav1.GetControllerOf(pod)
		if ref == nil || ref.Kind != "Job" || !strings.HasPrefix(ref.APIVersion, batchv1.GroupName+"/") || !slices.Contains(names, ref.Name) ||
			attemptOf(pod) >= p.attempt {
			continue
		}
		left++
		if !pod.DeletionTimestamp.IsZero() {
			continue
		}
		if err := r.cfg.Client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
			return true, fmt.Errorf("delete pod %s of attempt %d: %w", pod.Name, attemptOf(pod), err)
		}
	}
	if left > 0 {
		msg := fmt.Sprintf("restarting the whole gang: waiting for %d pods of attempt %d to be deleted before attempt %d starts", left, p.attempt-1, p.attempt)
		setCondition(tj, v1alpha1.ConditionRestarting, true, "DeletingPods", msg)
		setPhase(tj, v1alpha1.PhasePending, ReasonRestarting, msg)
	}
	return stale || left > 0, nil
}

// failedJob returns the first of jobs with the Failed condition.
func failedJob(jobs ...*batchv1.Job) *batchv1.Job {
	for _, j := range jobs {
		if j != nil && jobCondition(j, batchv1.JobFailed) != nil {
			return j
		}
	}
	return nil
}

// attemptFailed handles a failed attempt (failed is its failed Job):
// another attempt when restarts are left (status first; the next passes
// clear the old attempt and create the new one), else the TrainingJob
// fails with the failing pod's reason.
func (r *Reconciler) attemptFailed(ctx context.Context, tj *v1alpha1.TrainingJob, p *plan, failed *batchv1.Job, jobs ...*batchv1.Job) error {
	f, err := r.attemptFailure(ctx, tj, p, failed, jobs...)
	if err != nil {
		return err
	}
	st := &tj.Status
	st.LastFailure = f
	if p.attempt < p.maxRestarts {
		st.Restarts = p.attempt + 1
		msg := fmt.Sprintf("%s; restarting the whole gang as attempt %d of %d (maxRestarts %d)", f.Message, st.Restarts, p.maxRestarts+1, p.maxRestarts)
		setCondition(tj, v1alpha1.ConditionRestarting, true, "AttemptFailed", msg)
		if meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionRunning) != nil {
			setCondition(tj, v1alpha1.ConditionRunning, false, ReasonRestarting, msg)
		}
		setPhase(tj, v1alpha1.PhasePending, ReasonRestarting, msg)
		r.event(tj, corev1.EventTypeWarning, ReasonRestarting, msg)
		return nil
	}
	c := jobCondition(failed, batchv1.JobFailed)
	st.CompletionTime = c.LastTransitionTime.DeepCopy()
	if st.CompletionTime.IsZero() {
		st.CompletionTime = ptrTime(r.cfg.Now())
	}
	restarts := "with no restart left"
	if p.maxRestarts > 0 {
		restarts = "after " + restartCount(p.attempt) + " of the whole gang"
	}
	msg := fmt.Sprintf("%s; the job failed %s (maxRestarts %d): see `cachefs job logs %s` and `cachefs job get %s`",
		f.Message, restarts, p.maxRestarts, tj.Name, tj.Name)
	setCondition(tj, v1alpha1.ConditionRunning, false, "Finished", msg)
	if meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionRestarting) != nil {
		setCondition(tj, v1alpha1.ConditionRestarting, false, "Finished", "the job failed")
	}
	setCondition(tj, v1alpha1.ConditionFailed, true, f.Reason, msg)
	setPhase(tj, v1alpha1.PhaseFailed, f.Reason, msg)
	return nil
}

// attemptFailure finds why the attempt failed: the first failed pod of its
// Jobs (by the time its container finished), else the failed Job's
// condition.
func (r *Reconciler) attemptFailure(ctx context.Context, tj *v1alpha1.TrainingJob, p *plan, failed *batchv1.Job, jobs ...*batchv1.Job) (*v1alpha1.AttemptFailure, error) {
	f := &v1alpha1.AttemptFailure{Attempt: p.attempt, Time: ptrTime(r.cfg.Now())}
	uids := map[types.UID]bool{}
	for _, j := range jobs {
		if j != nil {
			uids[j.UID] = true
		}
	}
	var pods corev1.PodList
	if err := r.cfg.APIReader.List(ctx, &pods, client.InNamespace(tj.Namespace), client.MatchingLabels{v1alpha1.LabelJobName: tj.Name}); err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	var first *corev1.Pod
	var firstAt time.Time
	for i := range pods.Items {
		pod := &pods.Items[i]
		ref := metav1.GetControllerOf(pod)
		if ref == nil || !uids[ref.UID] || pod.Status.Phase != corev1.PodFailed {
			continue
		}
		at := failedAt(pod)
		if first == nil || at.Before(firstAt) || (at.Equal(firstAt) && pod.Name < first.Name) {
			first, firstAt = pod, at
		}
	}
	if first != nil {
		f.Replica, f.Pod = first.Labels[v1alpha1.LabelReplica], first.Name
		if n, err := strconv.ParseInt(first.Annotations[completionIndexAnnotation], 10, 32); err == nil && n >= 0 {
			f.Index = ptrInt32(int32(n))
		}
		f.Reason, f.Message = podFailure(first, f)
		return f, nil
	}
	what, one := "workers'", "worker"
	switch failed.Labels[v1alpha1.LabelReplica] {
	case v1alpha1.ReplicaPS:
		what, one = "parameter servers'", "parameter-server"
	case v1alpha1.ReplicaChief:
		what, one = "chief's", "chief"
	}
	c := jobCondition(failed, batchv1.JobFailed)
	f.Reason = c.Reason
	if f.Reason == "" {
		f.Reason = "Failed"
	}
	f.Message = fmt.Sprintf("attempt %d: the %s Job failed (%s: %s)", p.attempt, what, f.Reason, clean(c.Message))
	if c.Reason == batchv1.JobReasonBackoffLimitExceeded {
		f.Message = fmt.Sprintf("attempt %d: %d %s pods failed, more than backoffLimit %d allows (%s)",
			p.attempt, failed.Status.Failed, one, ptr.Deref(failed.Spec.BackoffLimit, 0), f.Reason)
	}
	return f, nil
}

// failedAt is when a failed pod's first container terminated with an
// error (its creation time when none says).
func failedAt(pod *corev1.Pod) time.Time {
	var at time.Time
	for _, cs := range slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses) {
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 && !t.FinishedAt.IsZero() && (at.IsZero() || t.FinishedAt.Before(&metav1.Time{Time: at})) {
			at = t.FinishedAt.Time
		}
	}
	if at.IsZero() {
		at = pod.CreationTimestamp.Time
	}
	return at
}

// podFailure says why a failed pod failed: the pod's own reason (evicted,
// deadline), else its first container that exited with an error (the
// trainer first), with the tail of its log.
func podFailure(pod *corev1.Pod, f *v1alpha1.AttemptFailure) (reason, msg string) {
	who := orDash(f.Replica)
	if f.Index != nil {
		who += " " + strconv.Itoa(int(*f.Index))
	}
	who = fmt.Sprintf("attempt %d: %s (pod %s)", f.Attempt, who, pod.Name)
	if pod.Status.Reason != "" {
		return pod.Status.Reason, fmt.Sprintf("%s failed: %s: %s", who, pod.Status.Reason, clean(pod.Status.Message))
	}
	statuses := slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses)
	slices.SortStableFunc(statuses, func(a, b corev1.ContainerStatus) int {
		return boolInt(a.Name != v1alpha1.ContainerName) - boolInt(b.Name != v1alpha1.ContainerName)
	})
	for _, cs := range statuses {
		t := cs.State.Terminated
		if t == nil || t.ExitCode == 0 {
			continue
		}
		reason = t.Reason
		if reason == "" {
			reason = "Error"
		}
		msg = fmt.Sprintf("%s failed: container %s exited with code %d (%s)", who, cs.Name, t.ExitCode, reason)
		if tail := clean(t.Message); tail != "" {
			msg += "; its log ends: " + tail
		}
		return reason, msg
	}
	return "PodFailed", who + " failed"
}

// clean makes text a pod controls fit for a status message: control
// characters become spaces, runs of space one, and only the last
// maxFailureText characters are kept (the end of a log says most).
func clean(s string) string {
	s = strings.Join(strings.Fields(strings.Map(func(r rune) rune {
		if !unicode.IsPrint(r) {
			return ' '
		}
		return r
	}, s)), " ")
	if r := []rune(s); len(r) > maxFailureText {
		s = "…" + string(r[len(r)-maxFailureText:])
	}
	return s
}

// restartCount is "1 restart", "2 restarts".
func restartCount(n int32) string {
	if n == 1 {
		return "1 restart"
	}
	return strconv.Itoa(int(n)) + " restarts"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func ptrInt32(n int32) *int32 { return &n }
