package controller

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
)

// setSuspend patches spec.suspend as `cachefs job suspend/resume` and
// `kubectl patch` do.
func (e *env) setSuspend(t *testing.T, ns, name string, on bool) {
	t.Helper()
	tj := &v1alpha1.TrainingJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	if err := e.c.Patch(context.Background(), tj, client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"suspend":%t}}`, on))); err != nil {
		t.Fatalf("patch suspend %t: %v", on, err)
	}
}

// waitSuspended waits until every Job named is (or is not) suspended.
func (e *env) waitSuspended(t *testing.T, ns string, want bool, names ...string) {
	t.Helper()
	for _, name := range names {
		eventually(t, fmt.Sprintf("Job %s suspend %t", name, want), func() error {
			j := &batchv1.Job{}
			if err := e.get(t, ns, name, j); err != nil {
				return err
			}
			if got := ptr.Deref(j.Spec.Suspend, false); got != want {
				return fmt.Errorf("suspend %t", got)
			}
			if _, marked := j.Annotations[v1alpha1.AnnotationSuspended]; marked != want {
				return fmt.Errorf("annotation %s present %t", v1alpha1.AnnotationSuspended, marked)
			}
			return nil
		})
	}
}

// TestSuspendResume: a job submitted suspended gets its Jobs suspended
// (so the Job controller creates no pods) without waiting for capacity;
// resuming waits for capacity, then resumes them; suspending again suspends
// them. Queue, priority, service account, pull secrets, labels and
// annotations reach the Jobs and pods.
func TestSuspendResume(t *testing.T) {
	e := startEnv(t)
	ctx := context.Background()
	ns := e.namespace(t)
	tj := &v1alpha1.TrainingJob{
		ObjectMeta: metav1.ObjectMeta{Name: "held", Namespace: ns},
		Spec: v1alpha1.TrainingJobSpec{
			Image: "x", Workers: 2, ParameterServers: 1, Mode: v1alpha1.ModeTensorFlow,
			Resources: v1alpha1.WorkerResources{CPU: ptr.To(resource.MustParse("2"))},
			Suspend:   true, QueueName: "team-a", PriorityClassName: "high", ServiceAccountName: "trainer",
			ImagePullSecrets: []corev1.LocalObjectReference{{Name: "registry"}},
			PodLabels:        map[string]string{"team": "vision", v1alpha1.LabelReplica: "x"},
			PodAnnotations:   map[string]string{"example.com/owner": "ana"},
			Gang:             &v1alpha1.Gang{Enabled: ptr.To(false)},
		},
	}
	// jobs.epochfs.io/ keys are refused by the API server.
	if err := e.c.Create(ctx, tj.DeepCopy()); err == nil {
		t.Fatal("a pod label under jobs.epochfs.io/ was accepted")
	} else if want := "podLabels: keys under jobs.epochfs.io/ are set by the controller"; !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want %q", err, want)
	}
	tj.Spec.PodLabels = map[string]string{"team": "vision"}
	// No node: a job that is not suspended would wait for capacity.
	if err := e.c.Create(ctx, tj); err != nil {
		t.Fatal(err)
	}
	got := e.waitPhase(t, ns, "held", v1alpha1.PhasePending, "Suspended")
	if !meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionSuspended) {
		t.Errorf("conditions %+v, want Suspended True", got.Status.Conditions)
	}
	e.waitSuspended(t, ns, true, "held", "held-ps")
	for _, name := range []string{"held", "held-ps"} {
		j := e.waitJob(t, ns, name)
		pod := j.Spec.Template
		if j.Labels[v1alpha1.LabelKueueQueue] != "team-a" {
			t.Errorf("Job %s labels %v, want %s=team-a", name, j.Labels, v1alpha1.LabelKueueQueue)
		}
		if pod.Spec.ServiceAccountName != "trainer" || pod.Spec.PriorityClassName != "high" ||
			!reflect.DeepEqual(pod.Spec.ImagePullSecrets, []corev1.LocalObjectReference{{Name: "registry"}}) {
			t.Errorf("Job %s pod: serviceAccount %q priority %q pull secrets %v", name, pod.Spec.ServiceAccountName, pod.Spec.PriorityClassName, pod.Spec.ImagePullSecrets)
		}
		if pod.Labels["team"] != "vision" || pod.Labels[v1alpha1.LabelJobName] != "held" || pod.Annotations["example.com/owner"] != "ana" {
			t.Errorf("Job %s pod labels %v annotations %v", name, pod.Labels, pod.Annotations)
		}
	}
	// Resumed with no room: the Jobs stay suspended, the job waits.
	e.setSuspend(t, ns, "held", false)
	e.waitPhase(t, ns, "held", v1alpha1.PhasePending, v1alpha1.ConditionInsufficientResources)
	time.Sleep(time.Second) // several capacity retries
	e.waitSuspended(t, ns, true, "held", "held-ps")
	// Room appears: both Jobs are resumed.
	e.node(t, "n1", res("cpu", "8", "memory", "32Gi"), nil)
	e.waitSuspended(t, ns, false, "held", "held-ps")
	got = e.waitPhase(t, ns, "held", v1alpha1.PhasePending, "Scheduling")
	if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionSuspended); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("Suspended condition %+v, want False", c)
	}
	// Running, then suspended again: the Jobs are suspended (their
	// controller deletes the pods) and the job is Pending.
	e.setJobStatus(t, ns, "held", func(st *batchv1.JobStatus) { st.Active, st.Ready = 2, ptr.To[int32](2) })
	e.setJobStatus(t, ns, "held-ps", func(st *batchv1.JobStatus) { st.Active, st.Ready = 1, ptr.To[int32](1) })
	e.waitPhase(t, ns, "held", v1alpha1.PhaseRunning, "Running")
	e.setSuspend(t, ns, "held", true)
	e.waitSuspended(t, ns, true, "held", "held-ps")
	e.waitPhase(t, ns, "held", v1alpha1.PhasePending, "Suspended")
	e.setSuspend(t, ns, "held", false)
	e.waitSuspended(t, ns, false, "held", "held-ps")
}

// TestKueueSuspendedJob: a Job suspended by someone else (Kueue, until it
// admits the workload) shows as Suspended and is not resumed by the
// controller; once resumed by Kueue the job proceeds.
func TestKueueSuspendedJob(t *testing.T) {
	e := startEnv(t)
	ctx := context.Background()
	ns := e.namespace(t)
	tj := &v1alpha1.TrainingJob{
		ObjectMeta: metav1.ObjectMeta{Name: "queued", Namespace: ns},
		Spec:       v1alpha1.TrainingJobSpec{Image: "x", Workers: 1, QueueName: "team-a"},
	}
	if err := e.c.Create(ctx, tj); err != nil {
		t.Fatal(err)
	}
	// Play Kueue's webhook: the Job is suspended without the controller's mark.
	eventually(t, "suspend the Job as Kueue", func() error {
		j := &batchv1.Job{}
		if err := e.get(t, ns, "queued", j); err != nil {
			return err
		}
		j.Spec.Suspend = ptr.To(true)
		return e.c.Update(ctx, j)
	})
	got := e.waitPhase(t, ns, "queued", v1alpha1.PhasePending, "Suspended")
	if want := "waiting for Kueue to admit the job from queue team-a"; !strings.Contains(got.Status.Message, want) {
		t.Errorf("message %q, want %q", got.Status.Message, want)
	}
	time.Sleep(time.Second)
	j := e.waitJob(t, ns, "queued")
	if !ptr.Deref(j.Spec.Suspend, false) {
		t.Fatal("the controller resumed a Job Kueue suspended")
	}
	// Kueue admits it.
	j.Spec.Suspend = ptr.To(false)
	if err := e.c.Update(ctx, j); err != nil {
		t.Fatal(err)
	}
	e.waitPhase(t, ns, "queued", v1alpha1.PhasePending, "Scheduling")
}
