package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
	"github.com/epochfs/epochfs/pkg/sourcepolicy"
)

// jobPod plays the Job controller and the kubelet: it creates pod name of
// Job j (controller reference, the labels of its template, completion
// index) and writes its status.
func (e *env) jobPod(t *testing.T, j *batchv1.Job, name string, index int, st corev1.PodStatus) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	labels := map[string]string{}
	for k, v := range j.Spec.Template.Labels {
		labels[k] = v
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: j.Namespace, Labels: labels,
			Annotations:     map[string]string{completionIndexAnnotation: fmt.Sprint(index)},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(j, batchv1.SchemeGroupVersion.WithKind("Job"))},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "trainer", Image: "x"}}},
	}
	if err := e.c.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	p.Status = st
	if err := e.c.Status().Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// failJob plays the Job controller: Job name failed (a pod beyond its
// backoffLimit) now, to the second.
func (e *env) failJob(t *testing.T, ns, name string, failed int32) metav1.Time {
	t.Helper()
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	e.setJobStatus(t, ns, name, func(st *batchv1.JobStatus) {
		st.Active, st.Ready, st.Failed = 0, ptr.To[int32](0), failed
		st.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonBackoffLimitExceeded, Message: "Job has reached the specified backoff limit", LastTransitionTime: now},
			{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonBackoffLimitExceeded, Message: "Job has reached the specified backoff limit", LastTransitionTime: now},
		}
	})
	return now
}

// waitAttempt waits for Job name of attempt n (another object than old,
// when old is set) and returns it.
func (e *env) waitAttempt(t *testing.T, ns, name string, n int32, old *batchv1.Job) *batchv1.Job {
	t.Helper()
	j := &batchv1.Job{}
	eventually(t, fmt.Sprintf("Job %s of attempt %d", name, n), func() error {
		if err := e.get(t, ns, name, j); err != nil {
			return err
		}
		if old != nil && j.UID == old.UID {
			return fmt.Errorf("still the Job of attempt %s", old.Labels[v1alpha1.LabelAttempt])
		}
		if got := j.Labels[v1alpha1.LabelAttempt]; got != fmt.Sprint(n) {
			return fmt.Errorf("attempt label %q", got)
		}
		return nil
	})
	return j
}

func terminated(exit int32, reason, msg string) corev1.PodStatus {
	return corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{
		Name: "trainer", Image: "x", ImageID: "x",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: exit, Reason: reason, Message: msg,
			StartedAt: metav1.NewTime(time.Now().Add(-time.Minute)), FinishedAt: metav1.NewTime(time.Now().Truncate(time.Second)),
		}},
	}}}
}

// TestGangRestart: a TensorFlow job (2 workers, 1 parameter server,
// maxRestarts 1) whose worker 1 fails restarts as a whole: both Jobs and
// every pod of attempt 0 are deleted (a pod merely labelled with the job's
// name is not), attempt 1's Jobs carry the new attempt in their labels and
// environment, status.restarts and status.lastFailure say what happened.
// The second failure (an OOM-killed worker 0) fails the TrainingJob with
// the pod's reason and keeps attempt 1's Jobs and failed pod.
func TestGangRestart(t *testing.T) {
	e := startEnv(t)
	ctx := context.Background()
	ns := e.namespace(t)
	e.node(t, "cpu-a", res("cpu", "16", "memory", "64Gi"), nil)
	tj := &v1alpha1.TrainingJob{
		ObjectMeta: metav1.ObjectMeta{Name: "gang", Namespace: ns},
		Spec: v1alpha1.TrainingJobSpec{
			Image: "tensorflow/tensorflow:2.17.0", Workers: 2, ParameterServers: 1, Mode: v1alpha1.ModeTensorFlow,
			Gang: &v1alpha1.Gang{Enabled: ptr.To(false)}, MaxRestarts: ptr.To[int32](1),
		},
	}
	if err := e.c.Create(ctx, tj); err != nil {
		t.Fatal(err)
	}
	worker0, ps0 := e.waitAttempt(t, ns, "gang", 0, nil), e.waitAttempt(t, ns, "gang-ps", 0, nil)
	for _, j := range []*batchv1.Job{worker0, ps0} {
		c := j.Spec.Template.Spec.Containers[0]
		if env := envMap(c); env["EPOCHFS_ATTEMPT"] != "0" || j.Spec.Template.Labels[v1alpha1.LabelAttempt] != "0" ||
			*j.Spec.BackoffLimit != 0 || c.TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError {
			t.Errorf("Job %s: EPOCHFS_ATTEMPT %q pod label %q backoffLimit %d terminationMessagePolicy %q",
				j.Name, env["EPOCHFS_ATTEMPT"], j.Spec.Template.Labels[v1alpha1.LabelAttempt], *j.Spec.BackoffLimit, c.TerminationMessagePolicy)
		}
	}
	got := &v1alpha1.TrainingJob{}
	if err := e.get(t, ns, "gang", got); err != nil || got.Spec.MaxRestarts == nil || *got.Spec.MaxRestarts != 1 {
		t.Fatalf("maxRestarts %v: %v", got.Spec.MaxRestarts, err)
	}

	// Attempt 0 runs; worker 1 fails, the others still run.
	e.jobPod(t, ps0, "gang-ps-0-a", 0, corev1.PodStatus{Phase: corev1.PodRunning})
	e.jobPod(t, worker0, "gang-0-a", 0, corev1.PodStatus{Phase: corev1.PodRunning})
	log := "epoch 3\x1b[0m\nTraceback (most recent call last):\n  RuntimeError: NCCL communicator was aborted\n"
	e.jobPod(t, worker0, "gang-1-a", 1, terminated(1, "Error", log))
	// Not a pod of the job's Jobs, though labelled with its name.
	e.pod(t, ns, "gang-decoy", "gang", corev1.PodRunning)
	e.setJobStatus(t, ns, "gang-ps", func(st *batchv1.JobStatus) { st.Active, st.Ready = 1, ptr.To[int32](1) })
	e.failJob(t, ns, "gang", 1)

	worker1, ps1 := e.waitAttempt(t, ns, "gang", 1, worker0), e.waitAttempt(t, ns, "gang-ps", 1, ps0)
	for _, j := range []*batchv1.Job{worker1, ps1} {
		if env := envMap(j.Spec.Template.Spec.Containers[0]); env["EPOCHFS_ATTEMPT"] != "1" || j.Spec.Template.Labels[v1alpha1.LabelAttempt] != "1" {
			t.Errorf("Job %s of attempt 1: EPOCHFS_ATTEMPT %q pod label %q", j.Name, env["EPOCHFS_ATTEMPT"], j.Spec.Template.Labels[v1alpha1.LabelAttempt])
		}
	}
	for _, name := range []string{"gang-ps-0-a", "gang-0-a", "gang-1-a"} {
		if err := isGone(e.get(t, ns, name, &corev1.Pod{})); err != nil {
			t.Errorf("pod %s of attempt 0: %v", name, err)
		}
	}
	if err := e.get(t, ns, "gang-decoy", &corev1.Pod{}); err != nil {
		t.Errorf("the pod that is not the job's: %v", err)
	}
	got = e.waitPhase(t, ns, "gang", v1alpha1.PhasePending, "Scheduling")
	f := got.Status.LastFailure
	if got.Status.Restarts != 1 || f == nil || f.Attempt != 0 || f.Replica != "worker" || f.Index == nil || *f.Index != 1 ||
		f.Pod != "gang-1-a" || f.Reason != "Error" {
		t.Fatalf("status: restarts %d lastFailure %+v", got.Status.Restarts, f)
	}
	for _, want := range []string{"attempt 0: worker 1 (pod gang-1-a) failed: container trainer exited with code 1 (Error)",
		"its log ends: epoch 3 [0m Traceback (most recent call last): RuntimeError: NCCL communicator was aborted"} {
		if !strings.Contains(f.Message, want) {
			t.Errorf("lastFailure message %q does not contain %q", f.Message, want)
		}
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionRestarting); c == nil || c.Status != metav1.ConditionFalse || c.Reason != "Restarted" {
		t.Errorf("Restarting condition %+v, want False/Restarted", c)
	}
	if meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionFailed) != nil {
		t.Errorf("a restarted job has a Failed condition: %+v", got.Status.Conditions)
	}

	// Attempt 1: worker 0 is OOM-killed. No restart is left.
	e.jobPod(t, worker1, "gang-0-b", 0, terminated(137, "OOMKilled", ""))
	e.jobPod(t, worker1, "gang-1-b", 1, corev1.PodStatus{Phase: corev1.PodRunning})
	done := e.failJob(t, ns, "gang", 1)
	got = e.waitPhase(t, ns, "gang", v1alpha1.PhaseFailed, "OOMKilled")
	want := "attempt 1: worker 0 (pod gang-0-b) failed: container trainer exited with code 137 (OOMKilled); the job failed after 1 restart of the whole gang (maxRestarts 1): see `cachefs job logs gang`"
	if !strings.HasPrefix(got.Status.Message, want) || got.Status.Restarts != 1 || !got.Status.CompletionTime.Equal(&done) {
		t.Errorf("status: %q restarts %d completion %v, want %q", got.Status.Message, got.Status.Restarts, got.Status.CompletionTime, want)
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionFailed); c == nil || c.Reason != "OOMKilled" || c.Message != got.Status.Message {
		t.Errorf("Failed condition %+v", c)
	}
	if f := got.Status.LastFailure; f == nil || f.Attempt != 1 || f.Pod != "gang-0-b" || f.Reason != "OOMKilled" {
		t.Errorf("lastFailure %+v", f)
	}
	// The failed attempt is kept for its logs: the Job, the failed pod
	// (cleanPodPolicy Running deletes the running one).
	if j := e.waitAttempt(t, ns, "gang", 1, nil); j.UID != worker1.UID {
		t.Errorf("the last attempt's Job was replaced")
	}
	if err := e.get(t, ns, "gang-0-b", &corev1.Pod{}); err != nil {
		t.Errorf("failed pod of the last attempt: %v", err)
	}
	eventually(t, "running pod of the failed job deleted", func() error { return isGone(e.get(t, ns, "gang-1-b", &corev1.Pod{})) })
}

// TestGangRestartParameterServerFails: a failed parameter-server Job (no
// pod left to say why) restarts both roles too, with the Job's reason.
func TestGangRestartParameterServerFails(t *testing.T) {
	e := startEnv(t)
	ns := e.namespace(t)
	e.node(t, "cpu-a", res("cpu", "16", "memory", "64Gi"), nil)
	tj := &v1alpha1.TrainingJob{
		ObjectMeta: metav1.ObjectMeta{Name: "psfail", Namespace: ns},
		Spec: v1alpha1.TrainingJobSpec{Image: "x", Workers: 1, ParameterServers: 1, Mode: v1alpha1.ModeTensorFlow,
			Gang: &v1alpha1.Gang{Enabled: ptr.To(false)}},
	}
	if err := e.c.Create(context.Background(), tj); err != nil {
		t.Fatal(err)
	}
	worker0, ps0 := e.waitAttempt(t, ns, "psfail", 0, nil), e.waitAttempt(t, ns, "psfail-ps", 0, nil)
	e.failJob(t, ns, "psfail-ps", 1)
	e.waitAttempt(t, ns, "psfail", 1, worker0)
	e.waitAttempt(t, ns, "psfail-ps", 1, ps0)
	got := e.waitPhase(t, ns, "psfail", v1alpha1.PhasePending, "")
	want := "attempt 0: 1 parameter-server pods failed, more than backoffLimit 0 allows (BackoffLimitExceeded)"
	if f := got.Status.LastFailure; got.Status.Restarts != 1 || f == nil || f.Reason != "BackoffLimitExceeded" || f.Message != want || f.Pod != "" {
		t.Errorf("restarts %d lastFailure %+v, want message %q", got.Status.Restarts, f, want)
	}
	// The default maxRestarts.
	if got.Spec.MaxRestarts == nil || *got.Spec.MaxRestarts != DefaultMaxRestarts {
		t.Errorf("maxRestarts %v, want the default %d", got.Spec.MaxRestarts, DefaultMaxRestarts)
	}
}

// TestGangRestartCrashSafe calls the reconciler directly, so that the
// controller "restarts" (a new Reconciler, no memory) at known points of
// a gang restart: after the status recorded the restart and before the
// old Job was deleted, and after a lost status write. The count is never
// bumped twice and never lost.
func TestGangRestartCrashSafe(t *testing.T) {
	e := directEnv(t)
	c := e.c
	newReconciler := func() *Reconciler { return e.reconciler(t, sourcepolicy.Policy{}) }
	ctx := context.Background()
	ns := e.namespace(t)
	tj := &v1alpha1.TrainingJob{
		ObjectMeta: metav1.ObjectMeta{Name: "crash", Namespace: ns},
		Spec: v1alpha1.TrainingJobSpec{Image: "x", Workers: 2, Mode: v1alpha1.ModePyTorch,
			Gang: &v1alpha1.Gang{Enabled: ptr.To(false)}, MaxRestarts: ptr.To[int32](2)},
	}
	if err := c.Create(ctx, tj); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(tj)
	reconcile := func(r *Reconciler) *v1alpha1.TrainingJob { return e.reconcile(t, r, tj) }
	job := func() *batchv1.Job {
		t.Helper()
		j := &batchv1.Job{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "crash"}, j); err != nil {
			t.Fatal(err)
		}
		return j
	}
	reconcile(newReconciler())
	first := job()
	e.failJob(t, ns, "crash", 1)
	// The failing pass records the restart and deletes nothing.
	got := reconcile(newReconciler())
	if got.Status.Restarts != 1 || got.Status.Reason != ReasonRestarting {
		t.Fatalf("after the failure: restarts %d reason %s: %s", got.Status.Restarts, got.Status.Reason, got.Status.Message)
	}
	if j := job(); j.UID != first.UID {
		t.Fatalf("the failed Job was replaced in the pass that recorded the failure")
	}
	// A new controller: the failed Job of attempt 0 is deleted, not
	// counted again.
	got = reconcile(newReconciler())
	if got.Status.Restarts != 1 {
		t.Fatalf("restarts %d after the controller restarted, want 1", got.Status.Restarts)
	}
	if err := isGone(c.Get(ctx, key, &batchv1.Job{})); err != nil {
		t.Fatalf("Job of attempt 0: %v", err)
	}
	got = reconcile(newReconciler())
	second := job()
	if second.Labels[v1alpha1.LabelAttempt] != "1" || got.Status.Restarts != 1 {
		t.Fatalf("after the restart: Job attempt %q, restarts %d", second.Labels[v1alpha1.LabelAttempt], got.Status.Restarts)
	}
	if env := envMap(second.Spec.Template.Spec.Containers[0]); env["EPOCHFS_ATTEMPT"] != "1" {
		t.Errorf("EPOCHFS_ATTEMPT %q", env["EPOCHFS_ATTEMPT"])
	}
	// The status write that recorded the restart is lost (overwritten from
	// an older copy): the Job's label brings the count back; nothing is
	// deleted.
	got.Status.Restarts, got.Status.LastFailure = 0, nil
	if err := c.Status().Update(ctx, got); err != nil {
		t.Fatal(err)
	}
	got = reconcile(newReconciler())
	if got.Status.Restarts != 1 || job().UID != second.UID {
		t.Errorf("after the lost write: restarts %d, Job replaced %t", got.Status.Restarts, job().UID != second.UID)
	}
	// Passes with nothing new change nothing.
	for range 3 {
		got = reconcile(newReconciler())
	}
	if got.Status.Restarts != 1 || job().UID != second.UID {
		t.Errorf("idle passes: restarts %d, Job replaced %t", got.Status.Restarts, job().UID != second.UID)
	}
}

// TestSuccessPolicy renders the workers' Job of each success policy and
// checks, against the API server, the message of a job that succeeded by
// worker 0 alone.
func TestSuccessPolicy(t *testing.T) {
	sched := Schedulers{Volcano: "volcano", SchedulerPlugins: "sp"}
	for _, tc := range []struct {
		name   string
		spec   v1alpha1.TrainingJobSpec
		worker bool // rule succeededIndexes "0"
	}{
		{"standalone default", v1alpha1.TrainingJobSpec{Workers: 2}, false},
		{"pytorch default", v1alpha1.TrainingJobSpec{Workers: 2, Mode: v1alpha1.ModePyTorch}, false},
		{"pytorch AllWorkers", v1alpha1.TrainingJobSpec{Workers: 2, Mode: v1alpha1.ModePyTorch, SuccessPolicy: v1alpha1.SuccessAllWorkers}, false},
		{"pytorch Worker0", v1alpha1.TrainingJobSpec{Workers: 2, Mode: v1alpha1.ModePyTorch, SuccessPolicy: v1alpha1.SuccessWorker0}, true},
		{"tensorflow Worker0", v1alpha1.TrainingJobSpec{Workers: 2, ParameterServers: 1, Mode: v1alpha1.ModeTensorFlow, SuccessPolicy: v1alpha1.SuccessWorker0}, true},
		{"mpi default", v1alpha1.TrainingJobSpec{Workers: 2, Mode: v1alpha1.ModeMPI}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := newPlan(testJob("sp", tc.spec))
			if err != nil {
				t.Fatal(err)
			}
			sp := p.job(v1alpha1.ReplicaWorker, sched).Spec.SuccessPolicy
			isWorker0 := sp != nil && len(sp.Rules) == 1 && ptr.Deref(sp.Rules[0].SucceededIndexes, "") == "0" && sp.Rules[0].SucceededCount == nil
			if isWorker0 != tc.worker || (!tc.worker && sp != nil) {
				t.Errorf("successPolicy %+v, want worker 0's: %t", sp, tc.worker)
			}
			if tc.spec.ParameterServers > 0 {
				if sp := p.job(v1alpha1.ReplicaPS, sched).Spec.SuccessPolicy; sp != nil {
					t.Errorf("parameter servers' successPolicy %+v", sp)
				}
			}
		})
	}
	if _, err := newPlan(testJob("sp", v1alpha1.TrainingJobSpec{Workers: 2, Mode: v1alpha1.ModeMPI, SuccessPolicy: v1alpha1.SuccessAllWorkers})); err == nil ||
		!strings.Contains(err.Error(), "successPolicy AllWorkers cannot hold in mode mpi") {
		t.Errorf("mpi with AllWorkers: %v", err)
	}

	e := startEnv(t)
	ns := e.namespace(t)
	e.node(t, "cpu-a", res("cpu", "16", "memory", "64Gi"), nil)
	tj := &v1alpha1.TrainingJob{
		ObjectMeta: metav1.ObjectMeta{Name: "w0", Namespace: ns},
		Spec: v1alpha1.TrainingJobSpec{Image: "x", Workers: 3, Mode: v1alpha1.ModePyTorch, SuccessPolicy: v1alpha1.SuccessWorker0,
			Gang: &v1alpha1.Gang{Enabled: ptr.To(false)}},
	}
	if err := e.c.Create(context.Background(), tj); err != nil {
		t.Fatal(err)
	}
	if sp := e.waitJob(t, ns, "w0").Spec.SuccessPolicy; sp == nil || ptr.Deref(sp.Rules[0].SucceededIndexes, "") != "0" {
		t.Fatalf("successPolicy %+v kept by the API server", sp)
	}
	e.completeJob(t, ns, "w0", 1)
	got := e.waitPhase(t, ns, "w0", v1alpha1.PhaseSucceeded, "Succeeded")
	if want := "worker 0 succeeded (successPolicy Worker0)"; got.Status.Message != want {
		t.Errorf("message %q, want %q", got.Status.Message, want)
	}
}

// TestPodFailure: what a failed pod's status says, as the failure message
// shows it. The pod's text is hostile: control characters go, and only the
// end of a long log is kept.
func TestPodFailure(t *testing.T) {
	at := func(sec int) metav1.Time { return metav1.NewTime(time.Unix(1700000000+int64(sec), 0)) }
	term := func(name string, exit int32, reason, msg string, sec int) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: exit, Reason: reason, Message: msg, FinishedAt: at(sec)}}}
	}
	long := strings.Repeat("x", 1000) + "THE END"
	for _, tc := range []struct {
		name       string
		st         corev1.PodStatus
		wantReason string
		wantMsg    string
	}{
		{"evicted", corev1.PodStatus{Reason: "Evicted", Message: "The node was low on resource: memory."},
			"Evicted", "attempt 2: worker 3 (pod p) failed: Evicted: The node was low on resource: memory."},
		{"trainer before a sidecar", corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{
			term("sidecar", 2, "Error", "sidecar died", 1), term("trainer", 137, "OOMKilled", "", 5)}},
			"OOMKilled", "attempt 2: worker 3 (pod p) failed: container trainer exited with code 137 (OOMKilled)"},
		{"init container", corev1.PodStatus{InitContainerStatuses: []corev1.ContainerStatus{term("fetch", 1, "", "no such bucket\n", 1)}},
			"Error", "attempt 2: worker 3 (pod p) failed: container fetch exited with code 1 (Error); its log ends: no such bucket"},
		{"control characters", corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{term("trainer", 1, "Error", "a\x1b[31mb\r\n\tc\x00d", 1)}},
			"Error", "attempt 2: worker 3 (pod p) failed: container trainer exited with code 1 (Error); its log ends: a [31mb c d"},
		{"long log", corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{term("trainer", 1, "Error", long, 1)}},
			"Error", "attempt 2: worker 3 (pod p) failed: container trainer exited with code 1 (Error); its log ends: …" + long[len(long)-maxFailureText:]},
		{"exit 0 only", corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{term("trainer", 0, "Completed", "", 1)}},
			"PodFailed", "attempt 2: worker 3 (pod p) failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Status: tc.st}
			pod.Status.Phase = corev1.PodFailed
			f := &v1alpha1.AttemptFailure{Attempt: 2, Replica: "worker", Index: ptr.To[int32](3)}
			reason, msg := podFailure(pod, f)
			if reason != tc.wantReason || msg != tc.wantMsg {
				t.Errorf("got %q, %q\nwant %q, %q", reason, msg, tc.wantReason, tc.wantMsg)
			}
		})
	}
	// The first failure is the cause: the container that ended first.
	early := &corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{term("trainer", 1, "Error", "", 3)}}}
	late := &corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{term("trainer", 143, "Error", "", 9), term("x", 1, "Error", "", 2)}}}
	if a, b := failedAt(early), failedAt(late); !a.After(b) || !b.Equal(at(2).Time) {
		t.Errorf("failedAt: %v, %v; want the earliest error of each pod", a, b)
	}
}

// TestTensorFlowChiefLifecycle: a TensorFlow job with a chief (2 workers, 1
// parameter server) against the API server. The controller creates the
// chief's Job beside the others; a failed chief restarts the whole gang
// (all three Jobs of attempt 1); the chief's success, with the workers and
// parameter servers still running (servers under ParameterServerStrategy),
// is the job's success, and their Jobs are then suspended (cleanPodPolicy
// Running), which stops their pods.
func TestTensorFlowChiefLifecycle(t *testing.T) {
	e := startEnv(t)
	ns := e.namespace(t)
	e.node(t, "cpu-a", res("cpu", "16", "memory", "64Gi"), nil)
	tj := &v1alpha1.TrainingJob{
		ObjectMeta: metav1.ObjectMeta{Name: "est", Namespace: ns},
		Spec: v1alpha1.TrainingJobSpec{Image: "x", Workers: 2, ParameterServers: 1, Mode: v1alpha1.ModeTensorFlow,
			TensorFlow: &v1alpha1.TensorFlowSpec{Chief: true}, Gang: &v1alpha1.Gang{Enabled: ptr.To(false)}},
	}
	if err := e.c.Create(context.Background(), tj); err != nil {
		t.Fatal(err)
	}
	w0, ps0, c0 := e.waitAttempt(t, ns, "est", 0, nil), e.waitAttempt(t, ns, "est-ps", 0, nil), e.waitAttempt(t, ns, "est-chief", 0, nil)
	if *c0.Spec.Completions != 1 || c0.Spec.Template.Labels[v1alpha1.LabelReplica] != v1alpha1.ReplicaChief {
		t.Errorf("chief Job: completions %d, pod labels %v", *c0.Spec.Completions, c0.Spec.Template.Labels)
	}
	e.failJob(t, ns, "est-chief", 1)
	e.waitAttempt(t, ns, "est", 1, w0)
	e.waitAttempt(t, ns, "est-ps", 1, ps0)
	e.waitAttempt(t, ns, "est-chief", 1, c0)
	got := e.waitPhase(t, ns, "est", v1alpha1.PhasePending, "")
	want := "attempt 0: 1 chief pods failed, more than backoffLimit 0 allows (BackoffLimitExceeded)"
	if f := got.Status.LastFailure; got.Status.Restarts != 1 || f == nil || f.Message != want {
		t.Errorf("restarts %d lastFailure %+v, want message %q", got.Status.Restarts, f, want)
	}

	e.setJobStatus(t, ns, "est", func(st *batchv1.JobStatus) { st.Active, st.Ready = 2, ptr.To[int32](2) })
	e.setJobStatus(t, ns, "est-ps", func(st *batchv1.JobStatus) { st.Active, st.Ready = 1, ptr.To[int32](1) })
	e.completeJob(t, ns, "est-chief", 1)
	got = e.waitPhase(t, ns, "est", v1alpha1.PhaseSucceeded, "Succeeded")
	if !strings.HasPrefix(got.Status.Message, "the chief succeeded") || got.Status.Chief == nil || got.Status.Chief.Succeeded != 1 {
		t.Errorf("message %q, chief %+v", got.Status.Message, got.Status.Chief)
	}
	for _, name := range []string{"est", "est-ps"} {
		eventually(t, name+" suspended", func() error {
			j := &batchv1.Job{}
			if err := e.get(t, ns, name, j); err != nil {
				return err
			}
			if !ptr.Deref(j.Spec.Suspend, false) {
				return fmt.Errorf("not suspended")
			}
			return nil
		})
	}
}
