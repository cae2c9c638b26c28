package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/epochfs/epochfs/pkg/cachelabel"
	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
)

const imagenet = "s3://datasets/imagenet/train?endpoint=http://minio.storage:9000&region=us-east-1"

func envMap(c corev1.Container) map[string]string {
	m := map[string]string{}
	for _, e := range c.Env {
		m[e.Name] = e.Value
	}
	return m
}

func checkOwned(t *testing.T, tj *v1alpha1.TrainingJob, o metav1.Object) {
	t.Helper()
	ref := metav1.GetControllerOf(o)
	if ref == nil || ref.UID != tj.UID || ref.Kind != "TrainingJob" || !ptr.Deref(ref.BlockOwnerDeletion, false) {
		t.Errorf("%s: controller reference %+v, want TrainingJob %s (uid %s) with blockOwnerDeletion", o.GetName(), ref, tj.Name, tj.UID)
	}
}

// TestPyTorchLifecycle follows a 2-worker PyTorch job with GPUs and two
// datasets through every phase, playing the Job controller and kubelet.
func TestPyTorchLifecycle(t *testing.T) {
	e := startEnv(t, "volcano")
	ctx := context.Background()
	ns := e.namespace(t)
	key, _ := cachelabel.Key(imagenet)
	e.node(t, "gpu-a", res("cpu", "32", "memory", "256Gi", "nvidia.com/gpu", "4"), nil)
	e.cacheLocation(t, "gpu-a", map[string]string{key: "100"})
	e.node(t, "gpu-b", res("cpu", "32", "memory", "256Gi", "nvidia.com/gpu", "4"), nil)

	tj := &v1alpha1.TrainingJob{
		ObjectMeta: metav1.ObjectMeta{Name: "resnet", Namespace: ns},
		Spec: v1alpha1.TrainingJobSpec{
			Image: "pytorch/pytorch:2.4.0", Command: []string{"torchrun"}, Args: []string{"train.py"},
			Env:     []corev1.EnvVar{{Name: "EPOCHS", Value: "90"}},
			Workers: 2, Mode: v1alpha1.ModePyTorch,
			Resources: v1alpha1.WorkerResources{CPU: ptr.To(resource.MustParse("8")), Memory: ptr.To(resource.MustParse("64Gi")), GPUs: 4,
				Extra: map[corev1.ResourceName]resource.Quantity{"rdma/hca": resource.MustParse("1")}},
			Datasets: []v1alpha1.Dataset{
				{Name: "imagenet", Source: imagenet, MountPath: "/data/imagenet", CacheSize: "500Gi", Prefetch: true, ReadaheadFiles: ptr32(8), SecretName: "imagenet-s3"},
				{Name: "labels", ExistingClaim: "shared-labels", MountPath: "/data/labels"},
			},
			Gang:              &v1alpha1.Gang{Queue: "research"},
			PriorityClassName: "high",
			BackoffLimit:      ptr.To[int32](2),
			Tensorboard:       &v1alpha1.Tensorboard{LogDir: "/logs/resnet"},
		},
	}
	// The Secret goes into the volume only as its author may read it,
	// vouched for by the admission policy (secretaccess.go).
	tj.Annotations = map[string]string{v1alpha1.AnnotationAuthor: "admin"}
	installTemplatePolicy(t, e.kube)
	allowSecret(t, e, ns, "admin", "imagenet-s3")
	// rdma/hca is not on the nodes: the capacity check waits for it.
	if err := e.c.Create(ctx, tj); err != nil {
		t.Fatal(err)
	}
	got := e.waitPhase(t, ns, "resnet", v1alpha1.PhasePending, v1alpha1.ConditionInsufficientResources)
	if !strings.Contains(got.Status.Message, "rdma/hca: need 2, but no eligible node has any") {
		t.Errorf("message %q does not name rdma/hca", got.Status.Message)
	}
	// Add the RDMA devices to the nodes (as a device plugin would).
	for _, n := range []string{"gpu-a", "gpu-b"} {
		node := &corev1.Node{}
		if err := e.get(t, "", n, node); err != nil {
			t.Fatal(err)
		}
		node.Status.Allocatable["rdma/hca"] = resource.MustParse("1")
		if err := e.c.Status().Update(ctx, node); err != nil {
			t.Fatal(err)
		}
	}
	e.waitJob(t, ns, "resnet")
	// The status is written after the Job is created: wait for it.
	eventually(t, "condition Created", func() error {
		got = e.waitPhase(t, ns, "resnet", v1alpha1.PhasePending, "")
		if !meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionCreated) {
			return fmt.Errorf("conditions %+v", got.Status.Conditions)
		}
		return nil
	})
	if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionCreated); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Created condition %+v", c)
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionInsufficientResources); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("InsufficientResources condition %+v, want False", c)
	}
	if !slices.Contains(got.Finalizers, v1alpha1.FinalizerVolumes) {
		t.Errorf("finalizers %v, want %s", got.Finalizers, v1alpha1.FinalizerVolumes)
	}

	// The Job.
	job := e.waitJob(t, ns, "resnet")
	checkOwned(t, got, job)
	s := job.Spec
	if *s.CompletionMode != batchv1.IndexedCompletion || *s.Completions != 2 || *s.Parallelism != 2 || *s.BackoffLimit != 2 {
		t.Errorf("job spec: mode %v completions %d parallelism %d backoff %d", *s.CompletionMode, *s.Completions, *s.Parallelism, *s.BackoffLimit)
	}
	pod := s.Template.Spec
	if pod.SchedulerName != "volcano" || s.Template.Annotations["scheduling.k8s.io/group-name"] != "resnet" ||
		s.Template.Annotations["volcano.sh/queue-name"] != "research" {
		t.Errorf("gang markers: scheduler %q annotations %v", pod.SchedulerName, s.Template.Annotations)
	}
	if pod.Subdomain != "resnet" || pod.RestartPolicy != corev1.RestartPolicyNever || pod.PriorityClassName != "high" {
		t.Errorf("pod: subdomain %q restart %q priority %q", pod.Subdomain, pod.RestartPolicy, pod.PriorityClassName)
	}
	// Extended resources are tolerated as ExtendedResourceToleration would.
	wantTol := []corev1.Toleration{
		{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: "rdma/hca", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	}
	if !reflect.DeepEqual(pod.Tolerations, wantTol) || pod.NodeSelector != nil {
		t.Errorf("tolerations %+v, want %+v; nodeSelector %v", pod.Tolerations, wantTol, pod.NodeSelector)
	}
	c := pod.Containers[0]
	env := envMap(c)
	for k, v := range map[string]string{
		// WORLD_SIZE counts processes: 2 pods × 4 (nprocPerNode defaults to the GPUs).
		"MASTER_ADDR": "resnet-0.resnet", "MASTER_PORT": "29500", "WORLD_SIZE": "8", "RANK": "$(EPOCHFS_REPLICA_INDEX)",
		"PET_NNODES": "2", "PET_NPROC_PER_NODE": "4", "PET_NODE_RANK": "$(EPOCHFS_REPLICA_INDEX)", "PET_MASTER_ADDR": "resnet-0.resnet",
		"PET_MASTER_PORT": "29500", "PYTHONUNBUFFERED": "1",
		"EPOCHS": "90", "TENSORBOARD_LOG_DIR": "/logs/resnet", "EPOCHFS_DATASET_IMAGENET": "/data/imagenet",
	} {
		if env[k] != v {
			t.Errorf("env %s = %q, want %q", k, env[k], v)
		}
	}
	if fp := c.Env[0].ValueFrom.FieldRef.FieldPath; c.Env[0].Name != "EPOCHFS_REPLICA_INDEX" || fp != "metadata.annotations['batch.kubernetes.io/job-completion-index']" {
		t.Errorf("first env %s from %q", c.Env[0].Name, fp)
	}
	if g := c.Resources.Limits[v1alpha1.ResourceGPU]; g.Value() != 4 {
		t.Errorf("gpu limit %v", g)
	}
	if _, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
		t.Errorf("cpu limit set: %v", c.Resources.Limits)
	}
	// The datasets, then /dev/shm (2Gi, the default).
	if len(pod.Volumes) != 3 || pod.Volumes[0].PersistentVolumeClaim.ClaimName != "resnet-imagenet" ||
		pod.Volumes[1].PersistentVolumeClaim.ClaimName != "shared-labels" || !pod.Volumes[0].PersistentVolumeClaim.ReadOnly {
		t.Errorf("volumes %+v", pod.Volumes)
	}
	if len(c.VolumeMounts) != 3 || c.VolumeMounts[0].MountPath != "/data/imagenet" || !c.VolumeMounts[0].ReadOnly {
		t.Errorf("mounts %+v", c.VolumeMounts)
	}
	if shm := pod.Volumes[2].EmptyDir; shm == nil || shm.Medium != corev1.StorageMediumMemory || shm.SizeLimit.Cmp(resource.MustParse("2Gi")) != 0 ||
		c.VolumeMounts[2].MountPath != "/dev/shm" || c.VolumeMounts[2].Name != pod.Volumes[2].Name {
		t.Errorf("/dev/shm: volume %+v mount %+v, want a 2Gi memory emptyDir", pod.Volumes[2], c.VolumeMounts[2])
	}
	// Cache-aware placement: graded preference for the node whose
	// location Lease says it holds imagenet.
	terms := pod.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution
	if len(terms) != 4 {
		t.Errorf("affinity %+v", terms)
	}
	for _, term := range terms {
		if f := term.Preference.MatchFields; len(f) != 1 || f[0].Key != "metadata.name" || f[0].Operator != corev1.NodeSelectorOpIn ||
			!slices.Equal(f[0].Values, []string{"gpu-a"}) {
			t.Errorf("preference %+v, want metadata.name in [gpu-a]", term.Preference)
		}
	}
	weight := int32(0)
	for _, term := range terms {
		weight += term.Weight
	}
	if weight != 100 {
		t.Errorf("a fully cached node weighs %d, want 100", weight)
	}

	// Service, PodGroup, volumes.
	svc := &corev1.Service{}
	if err := e.get(t, ns, "resnet", svc); err != nil {
		t.Fatal(err)
	}
	checkOwned(t, got, svc)
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || svc.Spec.Selector[v1alpha1.LabelJobName] != "resnet" || !svc.Spec.PublishNotReadyAddresses {
		t.Errorf("service %+v", svc.Spec)
	}
	pg, err := getUnstructured(e, t, "scheduling.volcano.sh/v1beta1", "PodGroup", ns, "resnet")
	if err != nil {
		t.Fatal(err)
	}
	checkOwned(t, got, pg)
	spec := pg.Object["spec"].(map[string]any)
	minRes := spec["minResources"].(map[string]any)
	if spec["minMember"] != int64(2) || spec["queue"] != "research" || spec["priorityClassName"] != "high" ||
		minRes["nvidia.com/gpu"] != "8" || minRes["cpu"] != "16" || minRes["memory"] != "128Gi" {
		t.Errorf("podgroup spec %v", spec)
	}
	pvc := &corev1.PersistentVolumeClaim{}
	if err := e.get(t, ns, "resnet-imagenet", pvc); err != nil {
		t.Fatal(err)
	}
	checkOwned(t, got, pvc)
	volName := pvName(got, "imagenet")
	if pvc.Spec.VolumeName != volName || pvc.Spec.AccessModes[0] != corev1.ReadOnlyMany || *pvc.Spec.StorageClassName != "" {
		t.Errorf("pvc %+v", pvc.Spec)
	}
	pv := &corev1.PersistentVolume{}
	if err := e.get(t, "", volName, pv); err != nil {
		t.Fatal(err)
	}
	csi := pv.Spec.CSI
	if csi.Driver != "cachefs.epochfs.io" || !csi.ReadOnly || csi.VolumeAttributes["source"] != imagenet ||
		csi.VolumeAttributes["cacheSize"] != "500Gi" || csi.VolumeAttributes["readaheadFiles"] != "8" || len(csi.VolumeAttributes) != 7 || csi.VolumeAttributes["csi.storage.k8s.io/pvc/namespace"] != ns ||
		csi.VolumeAttributes["csi.storage.k8s.io/pvc/name"] != "resnet-imagenet" || csi.VolumeAttributes["csi.storage.k8s.io/pv/name"] != volName ||
		pv.Spec.ClaimRef.Name != "resnet-imagenet" || pv.Spec.ClaimRef.Namespace != ns || pv.Spec.ClaimRef.UID != pvc.UID ||
		pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimRetain ||
		pv.Annotations[v1alpha1.AnnotationPrefetch] != "true" || pv.Spec.CSI.VolumeAttributes["prefetch"] != "true" || pv.Labels[v1alpha1.LabelOwnerUID] != string(got.UID) {
		t.Errorf("pv %+v %+v", pv.ObjectMeta, pv.Spec)
	}
	if ref := csi.NodeStageSecretRef; ref == nil || ref.Name != "imagenet-s3" || ref.Namespace != ns {
		t.Errorf("pv nodeStageSecretRef %+v, want imagenet-s3 of namespace %s (the dataset's secretName)", ref, ns)
	}

	// Pods start: active but not ready is still Pending.
	start := metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
	e.setJobStatus(t, ns, "resnet", func(st *batchv1.JobStatus) {
		st.StartTime, st.Active, st.Ready = &start, 2, ptr.To[int32](1)
	})
	eventually(t, "counts", func() error {
		got = e.waitPhase(t, ns, "resnet", v1alpha1.PhasePending, "Scheduling")
		if got.Status.Workers.Active != 2 || got.Status.Workers.Ready != 1 || !got.Status.StartTime.Equal(&start) {
			return fmt.Errorf("status %+v", got.Status)
		}
		return nil
	})
	e.setJobStatus(t, ns, "resnet", func(st *batchv1.JobStatus) { st.Ready = ptr.To[int32](2) })
	got = e.waitPhase(t, ns, "resnet", v1alpha1.PhaseRunning, "Running")
	if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionRunning); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Running condition %+v", c)
	}
	// One worker finished: still Running.
	e.setJobStatus(t, ns, "resnet", func(st *batchv1.JobStatus) {
		st.Active, st.Ready, st.Succeeded = 1, ptr.To[int32](1), 1
	})
	eventually(t, "counts", func() error {
		got = e.waitPhase(t, ns, "resnet", v1alpha1.PhaseRunning, "")
		if got.Status.Workers.Succeeded != 1 {
			return fmt.Errorf("workers %+v", got.Status.Workers)
		}
		return nil
	})

	// Pods as the Job controller would have made them: one still running
	// (a straggler), one succeeded.
	for i, phase := range []corev1.PodPhase{corev1.PodRunning, corev1.PodSucceeded} {
		e.pod(t, ns, fmt.Sprintf("resnet-%d-x", i), "resnet", phase)
	}
	done := metav1.NewTime(time.Now().Truncate(time.Second))
	e.setJobStatus(t, ns, "resnet", func(st *batchv1.JobStatus) {
		st.Active, st.Ready, st.Succeeded, st.CompletionTime = 0, ptr.To[int32](0), 2, &done
		st.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: done},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: done},
		}
	})
	got = e.waitPhase(t, ns, "resnet", v1alpha1.PhaseSucceeded, "Succeeded")
	if !got.Status.CompletionTime.Equal(&done) || got.Status.Workers.Succeeded != 2 {
		t.Errorf("status %+v", got.Status)
	}
	// cleanPodPolicy Running (the default): the straggler goes, the
	// finished pod stays for its logs.
	eventually(t, "straggler deleted", func() error { return isGone(e.get(t, ns, "resnet-0-x", &corev1.Pod{})) })
	if err := e.get(t, ns, "resnet-1-x", &corev1.Pod{}); err != nil {
		t.Errorf("succeeded pod: %v", err)
	}

	// Deleting the TrainingJob removes its PersistentVolume (cluster-scoped,
	// outside owner references) through the finalizer.
	if err := e.c.Delete(ctx, got); err != nil {
		t.Fatal(err)
	}
	eventually(t, "pv deleted", func() error { return pvDeleted(e, t, volName) })
	eventually(t, "TrainingJob deleted", func() error { return isGone(e.get(t, ns, "resnet", &v1alpha1.TrainingJob{})) })
}

// TestTensorFlowParameterServers: TF_CONFIG, the PS Job, a scheduler-plugins
// PodGroup, the restart limit, and cleanup of running parameter servers.
func TestTensorFlowParameterServers(t *testing.T) {
	e := startEnv(t, "scheduler-plugins")
	ctx := context.Background()
	ns := e.namespace(t)
	e.node(t, "cpu-a", res("cpu", "16", "memory", "64Gi"), nil)
	tj := &v1alpha1.TrainingJob{
		ObjectMeta: metav1.ObjectMeta{Name: "wide", Namespace: ns},
		Spec: v1alpha1.TrainingJobSpec{
			Image: "tensorflow/tensorflow:2.17.0", Workers: 3, ParameterServers: 2, Mode: v1alpha1.ModeTensorFlow,
			Resources:    v1alpha1.WorkerResources{CPU: ptr.To(resource.MustParse("2"))},
			Gang:         &v1alpha1.Gang{Scheduler: v1alpha1.GangSchedulerPlugins, MinAvailable: ptr.To[int32](4)},
			BackoffLimit: ptr.To[int32](1),
			MaxRestarts:  ptr.To[int32](0),
		},
	}
	if err := e.c.Create(ctx, tj); err != nil {
		t.Fatal(err)
	}
	worker, ps := e.waitJob(t, ns, "wide"), e.waitJob(t, ns, "wide-ps")
	wantCluster := `{"ps":["wide-ps-0.wide:2222","wide-ps-1.wide:2222"],"worker":["wide-0.wide:2222","wide-1.wide:2222","wide-2.wide:2222"]}`
	for _, tc := range []struct {
		job     *batchv1.Job
		typ     string
		n       int32
		backoff int32
	}{{worker, "worker", 3, 1}, {ps, "ps", 2, 0}} {
		tmpl := tc.job.Spec.Template
		got := envMap(tmpl.Spec.Containers[0])["TF_CONFIG"]
		want := `{"cluster":` + wantCluster + `,"task":{"type":"` + tc.typ + `","index":$(EPOCHFS_REPLICA_INDEX)},"environment":"cloud"}`
		if got != want {
			t.Errorf("%s TF_CONFIG\n got %s\nwant %s", tc.typ, got, want)
		}
		// After the kubelet expands the index it is valid JSON.
		var parsed map[string]any
		if err := json.Unmarshal([]byte(strings.ReplaceAll(got, "$(EPOCHFS_REPLICA_INDEX)", "1")), &parsed); err != nil {
			t.Errorf("TF_CONFIG is not JSON: %v", err)
		}
		if *tc.job.Spec.Completions != tc.n || *tc.job.Spec.BackoffLimit != tc.backoff || tmpl.Labels[v1alpha1.LabelReplica] != tc.typ {
			t.Errorf("%s job: completions %d backoff %d labels %v", tc.typ, *tc.job.Spec.Completions, *tc.job.Spec.BackoffLimit, tmpl.Labels)
		}
		if tmpl.Spec.SchedulerName != "scheduler-plugins-scheduler" || tmpl.Labels["scheduling.x-k8s.io/pod-group"] != "wide" {
			t.Errorf("%s gang markers: %q %v", tc.typ, tmpl.Spec.SchedulerName, tmpl.Labels)
		}
	}
	pg, err := getUnstructured(e, t, "scheduling.x-k8s.io/v1alpha1", "PodGroup", ns, "wide")
	if err != nil {
		t.Fatal(err)
	}
	// minAvailable 4 = 2 parameter servers + 2 workers, 2 CPUs each.
	if spec := pg.Object["spec"].(map[string]any); spec["minMember"] != int64(4) || spec["minResources"].(map[string]any)["cpu"] != "8" {
		t.Errorf("podgroup spec %v", spec)
	}

	e.setJobStatus(t, ns, "wide-ps", func(st *batchv1.JobStatus) { st.Active, st.Ready = 2, ptr.To[int32](2) })
	e.setJobStatus(t, ns, "wide", func(st *batchv1.JobStatus) { st.Active, st.Ready = 3, ptr.To[int32](2) })
	got := e.waitPhase(t, ns, "wide", v1alpha1.PhaseRunning, "Running")
	if got.Status.ParameterServers == nil || got.Status.ParameterServers.Ready != 2 {
		t.Errorf("ps status %+v", got.Status.ParameterServers)
	}
	// A worker fails twice: more than backoffLimit 1.
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	e.setJobStatus(t, ns, "wide", func(st *batchv1.JobStatus) {
		st.Active, st.Ready, st.Failed = 0, ptr.To[int32](0), 2
		st.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit", LastTransitionTime: now},
			{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit", LastTransitionTime: now},
		}
	})
	got = e.waitPhase(t, ns, "wide", v1alpha1.PhaseFailed, "BackoffLimitExceeded")
	want := "attempt 0: 2 worker pods failed, more than backoffLimit 1 allows (BackoffLimitExceeded); the job failed with no restart left (maxRestarts 0): see `cachefs job logs wide`"
	if !strings.Contains(got.Status.Message, want) || !got.Status.CompletionTime.Equal(&now) {
		t.Errorf("status %q at %v, want %q", got.Status.Message, got.Status.CompletionTime, want)
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionFailed); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Failed condition %+v", c)
	}
	// The parameter servers, still running, are stopped by suspending their Job.
	eventually(t, "ps job suspended", func() error {
		j := &batchv1.Job{}
		if err := e.get(t, ns, "wide-ps", j); err != nil {
			return err
		}
		if !ptr.Deref(j.Spec.Suspend, false) {
			return fmt.Errorf("not suspended")
		}
		return nil
	})
}

// TestMPIHostfile: the hostfile ConfigMap and its mount.
func TestMPIHostfile(t *testing.T) {
	e := startEnv(t, "volcano")
	ns := e.namespace(t)
	e.node(t, "gpu-a", res("cpu", "32", "nvidia.com/gpu", "8"), nil)
	tj := &v1alpha1.TrainingJob{
		ObjectMeta: metav1.ObjectMeta{Name: "hvd", Namespace: ns},
		Spec: v1alpha1.TrainingJobSpec{Image: "horovod/horovod:0.28.1", Workers: 2, Mode: v1alpha1.ModeMPI,
			Resources: v1alpha1.WorkerResources{GPUs: 4}, Gang: &v1alpha1.Gang{Enabled: ptr.To(false)}},
	}
	if err := e.c.Create(context.Background(), tj); err != nil {
		t.Fatal(err)
	}
	job := e.waitJob(t, ns, "hvd")
	cm := &corev1.ConfigMap{}
	if err := e.get(t, ns, "hvd-mpi", cm); err != nil {
		t.Fatal(err)
	}
	if want := "hvd-0.hvd slots=4\nhvd-1.hvd slots=4\n"; cm.Data["hostfile"] != want {
		t.Errorf("hostfile %q, want %q", cm.Data["hostfile"], want)
	}
	c := job.Spec.Template.Spec.Containers[0]
	if env := envMap(c); env["OMPI_MCA_orte_default_hostfile"] != "/etc/mpi/hostfile" || env["RANK"] != "$(EPOCHFS_REPLICA_INDEX)" {
		t.Errorf("env %v", env)
	}
	if len(c.VolumeMounts) != 2 || c.VolumeMounts[0].MountPath != "/dev/shm" || c.VolumeMounts[1].MountPath != "/etc/mpi" {
		t.Errorf("mounts %+v", c.VolumeMounts)
	}
	// Rank 0 runs mpirun; its success is the job's (kept by the API server,
	// which drops the field when the JobSuccessPolicy feature is off).
	if sp := job.Spec.SuccessPolicy; sp == nil || len(sp.Rules) != 1 || sp.Rules[0].SucceededIndexes == nil ||
		*sp.Rules[0].SucceededIndexes != "0" || sp.Rules[0].SucceededCount != nil {
		t.Errorf("successPolicy %+v, want one rule succeededIndexes \"0\"", sp)
	}
	// Gang disabled: default scheduler, no PodGroup.
	if s := job.Spec.Template.Spec.SchedulerName; s != "default-scheduler" {
		t.Errorf("scheduler %q with gang disabled", s)
	}
	if _, err := getUnstructured(e, t, "scheduling.volcano.sh/v1beta1", "PodGroup", ns, "hvd"); isGone(err) != nil {
		t.Errorf("podgroup with gang disabled: %v", err)
	}
}

// TestCapacity: GPUs on a cluster without them, too few GPUs, fragmented
// GPUs, pods already using them, GPUs held for admitted jobs whose pods do
// not exist yet; then room appears and the job starts.
func TestCapacity(t *testing.T) {
	e := startEnv(t, "volcano")
	ctx := context.Background()
	ns := e.namespace(t)
	e.node(t, "cpu-only", res("cpu", "64", "memory", "256Gi"), nil)
	submit := func(name string, workers, gpus int32) {
		tj := &v1alpha1.TrainingJob{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: v1alpha1.TrainingJobSpec{Image: "x", Workers: workers, Mode: v1alpha1.ModePyTorch,
				Resources: v1alpha1.WorkerResources{GPUs: gpus, CPU: ptr.To(resource.MustParse("1"))}},
		}
		if err := e.c.Create(ctx, tj); err != nil {
			t.Fatal(err)
		}
	}
	expectWaiting := func(name, want string) {
		t.Helper()
		got := e.waitPhase(t, ns, name, v1alpha1.PhasePending, v1alpha1.ConditionInsufficientResources)
		c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionInsufficientResources)
		if c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, want) {
			t.Errorf("%s: condition %+v, want message containing %q", name, c, want)
		}
		if err := e.get(t, ns, name, &batchv1.Job{}); isGone(err) != nil {
			t.Errorf("%s: a Job exists while waiting for capacity: %v", name, err)
		}
	}
	submit("nogpu", 2, 1)
	expectWaiting("nogpu", "cannot fit 2 workers (each cpu=1, nvidia.com/gpu=1): nvidia.com/gpu: need 2, but no eligible node has any (no GPU nodes, or the NVIDIA device plugin is not running): remove gpus or add GPU nodes")
	if err := e.c.Delete(ctx, &v1alpha1.TrainingJob{ObjectMeta: metav1.ObjectMeta{Name: "nogpu", Namespace: ns}}); err != nil {
		t.Fatal(err)
	}

	// Pods of someone else already hold 2 GPUs on gpu-a.
	busy := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "busy", Namespace: ns},
		Spec: corev1.PodSpec{NodeName: "gpu-a", Containers: []corev1.Container{{Name: "c", Image: "x",
			Resources: corev1.ResourceRequirements{Requests: res("nvidia.com/gpu", "2"), Limits: res("nvidia.com/gpu", "2")}}}},
	}
	if err := e.c.Create(ctx, busy); err != nil {
		t.Fatal(err)
	}
	e.node(t, "gpu-a", res("cpu", "32", "nvidia.com/gpu", "4"), nil)
	e.node(t, "gpu-b", res("cpu", "32", "nvidia.com/gpu", "4"), nil)
	submit("big", 4, 2) // 8 GPUs wanted, 6 free
	expectWaiting("big", "nvidia.com/gpu: need 8, 6 free of 8 allocatable on 3 eligible nodes")
	submit("frag", 2, 3) // 6 GPUs wanted, 6 free, but as 2 + 4: only one pod fits
	expectWaiting("frag", "the free resources are spread over the nodes so that only 1 of the 2 pods fit (per pod: cpu=1, nvidia.com/gpu=3)")
	// 2 x 1 GPU fits: it starts, and holds 2 GPUs while it has no pods.
	submit("small", 2, 1)
	e.waitJob(t, ns, "small")

	// The busy pod finishes: "frag" fits next to the 2 GPUs held for
	// "small" (as 3+1 on each node); "big" does not any more.
	busy.Status.Phase = corev1.PodSucceeded
	if err := e.c.Status().Update(ctx, busy); err != nil {
		t.Fatal(err)
	}
	e.waitJob(t, ns, "frag")
	expectWaitingNow := func(name, want string) {
		t.Helper()
		eventually(t, name+" waits with "+want, func() error {
			got := &v1alpha1.TrainingJob{}
			if err := e.get(t, ns, name, got); err != nil {
				return err
			}
			if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionInsufficientResources); c == nil || !strings.Contains(c.Message, want) {
				return fmt.Errorf("condition %+v", c)
			}
			return nil
		})
		expectWaiting(name, want)
	}
	expectWaitingNow("big", "nvidia.com/gpu: need 8, 0 free of 8 allocatable on 3 eligible nodes (8 of it held for admitted jobs whose pods are not placed yet: "+ns+"/frag, "+ns+"/small)")

	// frag's pods are bound: they count on their nodes, not twice.
	for i, node := range []string{"gpu-a", "gpu-b"} {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("frag-%d-x", i), Namespace: ns,
				Labels: map[string]string{v1alpha1.LabelJobName: "frag", v1alpha1.LabelReplica: v1alpha1.ReplicaWorker}},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "x",
				Resources: corev1.ResourceRequirements{Requests: res("nvidia.com/gpu", "3"), Limits: res("nvidia.com/gpu", "3")}}}},
		}
		if err := e.c.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
	}
	expectWaitingNow("big", "nvidia.com/gpu: need 8, 0 free of 8 allocatable on 3 eligible nodes (2 of it held for admitted jobs whose pods are not placed yet: "+ns+"/small)")

	// Both are deleted: "big" starts.
	for _, name := range []string{"frag", "small"} {
		if err := e.c.Delete(ctx, &v1alpha1.TrainingJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 {
		// Grace period 0: there is no kubelet to confirm the pod stopped.
		if err := e.c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("frag-%d-x", i), Namespace: ns}}, client.GracePeriodSeconds(0)); err != nil {
			t.Fatal(err)
		}
	}
	e.waitJob(t, ns, "big")
}

// TestCapacityNodes: the pre-check counts only the nodes the workers may
// use: not cordoned, Ready, matching the nodeSelector, and without a
// NoSchedule/NoExecute taint they do not tolerate (GPU workers tolerate
// the nvidia.com/gpu taint on their own); PreferNoSchedule taints count.
func TestCapacityNodes(t *testing.T) {
	e := startEnv(t, "volcano")
	ctx := context.Background()
	ns := e.namespace(t)
	gpus8 := res("cpu", "32", "nvidia.com/gpu", "8")
	e.node(t, "a-cordoned", gpus8, nil)
	e.node(t, "b-notready", gpus8, nil)
	e.node(t, "c-tainted", gpus8, nil)
	e.node(t, "d-h100", res("cpu", "32", "nvidia.com/gpu", "4"), map[string]string{"pool": "h100"})
	e.node(t, "e-a100", gpus8, map[string]string{"pool": "a100"})
	edit := func(name string, mutate func(*corev1.Node), status bool) {
		t.Helper()
		eventually(t, "edit node "+name, func() error {
			n := &corev1.Node{}
			if err := e.get(t, "", name, n); err != nil {
				return err
			}
			mutate(n)
			if status {
				return e.c.Status().Update(ctx, n)
			}
			return e.c.Update(ctx, n)
		})
	}
	edit("a-cordoned", func(n *corev1.Node) { n.Spec.Unschedulable = true }, false)
	edit("b-notready", func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionFalse }, true)
	edit("c-tainted", func(n *corev1.Node) {
		n.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "infra", Effect: corev1.TaintEffectNoExecute}}
	}, false)
	edit("d-h100", func(n *corev1.Node) {
		n.Spec.Taints = []corev1.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}}
	}, false)
	edit("e-a100", func(n *corev1.Node) {
		n.Spec.Taints = []corev1.Taint{{Key: "spot", Value: "true", Effect: corev1.TaintEffectPreferNoSchedule}}
	}, false)

	submit := func(name string, workers, gpus int32, mutate func(*v1alpha1.TrainingJobSpec)) {
		t.Helper()
		tj := &v1alpha1.TrainingJob{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec:       v1alpha1.TrainingJobSpec{Image: "x", Workers: workers, Resources: v1alpha1.WorkerResources{GPUs: gpus}},
		}
		if mutate != nil {
			mutate(&tj.Spec)
		}
		if err := e.c.Create(ctx, tj); err != nil {
			t.Fatal(err)
		}
	}
	expectWaiting := func(name, want string) {
		t.Helper()
		eventually(t, name+" waits with the right message", func() error {
			got := &v1alpha1.TrainingJob{}
			if err := e.get(t, ns, name, got); err != nil {
				return err
			}
			c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionInsufficientResources)
			if got.Status.Phase != v1alpha1.PhasePending || c == nil || c.Status != metav1.ConditionTrue || c.Message != want {
				return fmt.Errorf("phase %s, condition %+v\nwant message %q", got.Status.Phase, c, want)
			}
			return nil
		})
		if err := e.get(t, ns, name, &batchv1.Job{}); isGone(err) != nil {
			t.Errorf("%s: a Job exists while waiting for capacity: %v", name, err)
		}
	}
	h100 := func(s *v1alpha1.TrainingJobSpec) { s.NodeSelector = map[string]string{"pool": "h100"} }
	const retry = "; no pods are created, the job waits and checks again every 300ms"

	// 1 worker x 4 GPUs on the h100 pool: its only node is tainted
	// nvidia.com/gpu, which GPU workers tolerate.
	submit("h100", 1, 4, h100)
	j := e.waitJob(t, ns, "h100")
	pod := j.Spec.Template.Spec
	if pod.NodeSelector["pool"] != "h100" || len(pod.Tolerations) != 1 || pod.Tolerations[0] != (corev1.Toleration{
		Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}) {
		t.Errorf("h100 pod template: nodeSelector %v, tolerations %+v", pod.NodeSelector, pod.Tolerations)
	}
	// A second one does not fit: the pool's GPUs are held for h100.
	submit("h100-wide", 2, 4, h100)
	expectWaiting("h100-wide", "cannot fit 2 workers (each nvidia.com/gpu=4): nvidia.com/gpu: need 8, 0 free of 4 allocatable on 1 eligible nodes "+
		"(4 of it held for admitted jobs whose pods are not placed yet: "+ns+"/h100); nodes not counted: a-cordoned (cordoned), b-notready (not Ready), "+
		"c-tainted (no label pool=h100 of the nodeSelector), e-a100 (no label pool=h100 of the nodeSelector)"+retry)

	// 2 x 8 GPUs: without a toleration only e-a100 takes one.
	submit("notol", 2, 8, func(s *v1alpha1.TrainingJobSpec) { s.Gang = &v1alpha1.Gang{Enabled: ptr.To(false)} })
	expectWaiting("notol", "cannot fit 2 workers (each nvidia.com/gpu=8): nvidia.com/gpu: need 16, 8 free of 12 allocatable on 2 eligible nodes "+
		"(4 of it held for admitted jobs whose pods are not placed yet: "+ns+"/h100); nodes not counted: a-cordoned (cordoned), b-notready (not Ready), "+
		"c-tainted (taint dedicated=infra:NoExecute not tolerated)"+retry)
	// With it, c-tainted and e-a100 take one each.
	submit("infra", 2, 8, func(s *v1alpha1.TrainingJobSpec) {
		s.Gang = &v1alpha1.Gang{Enabled: ptr.To(false)}
		s.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "infra"}}
	})
	j = e.waitJob(t, ns, "infra")
	if got := j.Spec.Template.Spec.Tolerations; len(got) != 2 || got[0].Key != "dedicated" || got[1].Key != "nvidia.com/gpu" {
		t.Errorf("infra tolerations: %+v", got)
	}

	// No node at all for a selector nothing matches.
	submit("nowhere", 1, 0, func(s *v1alpha1.TrainingJobSpec) {
		s.NodeSelector = map[string]string{"pool": "tpu"}
		s.Resources.CPU = ptr.To(resource.MustParse("1"))
	})
	expectWaiting("nowhere", "no node is Ready, schedulable and open to the pods (nodeSelector, tolerations), so 1 worker (each cpu=1) cannot start; "+
		"nodes not counted: a-cordoned (cordoned), b-notready (not Ready), c-tainted (no label pool=tpu of the nodeSelector), "+
		"d-h100 (no label pool=tpu of the nodeSelector), e-a100 (no label pool=tpu of the nodeSelector)"+retry)

	// Parameter servers have no GPU toleration: on a pool of tainted GPU
	// nodes the workers fit and the parameter servers do not.
	e.node(t, "f-tf", res("cpu", "8", "nvidia.com/gpu", "4"), map[string]string{"pool": "tf"})
	edit("f-tf", func(n *corev1.Node) {
		n.Spec.Taints = []corev1.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}}
	}, false)
	submit("tf", 1, 1, func(s *v1alpha1.TrainingJobSpec) {
		s.Mode, s.ParameterServers = v1alpha1.ModeTensorFlow, 1
		s.NodeSelector = map[string]string{"pool": "tf"}
		s.Resources.CPU = ptr.To(resource.MustParse("1"))
	})
	expectWaiting("tf", "cannot fit 2 pods (each cpu=1, nvidia.com/gpu=1): no node takes its parameter-server pods: a-cordoned (cordoned), "+
		"b-notready (not Ready), c-tainted (no label pool=tf of the nodeSelector), d-h100 (no label pool=tf of the nodeSelector), "+
		"e-a100 (no label pool=tf of the nodeSelector), f-tf (taint nvidia.com/gpu=present:NoSchedule not tolerated)"+retry)
}

// TestInvalidSource: what CEL cannot check, the controller does: the job
// fails with a message naming the bad part, and nothing is created.
func TestInvalidSource(t *testing.T) {
	e := startEnv(t)
	ns := e.namespace(t)
	for _, tc := range []struct {
		name string
		ds   v1alpha1.Dataset
		want string
	}{
		{"bad-bucket", v1alpha1.Dataset{Name: "d", Source: "s3:///prefix", MountPath: "/d"}, `dataset "d": source "s3:///prefix": `},
		{"bad-scheme", v1alpha1.Dataset{Name: "d", Source: "ftp://host/x", MountPath: "/d"}, `dataset "d": source "ftp://host/x": `},
		{"size-too-large", v1alpha1.Dataset{Name: "d", Source: "/data/x", MountPath: "/d", CacheSize: "100Ei"}, `dataset "d": cacheSize "100Ei"`}, // the API server checks the grammar; the range is the controller's
	} {
		t.Run(tc.name, func(t *testing.T) {
			tj := &v1alpha1.TrainingJob{
				ObjectMeta: metav1.ObjectMeta{Name: tc.name, Namespace: ns},
				Spec:       v1alpha1.TrainingJobSpec{Image: "x", Workers: 1, Datasets: []v1alpha1.Dataset{tc.ds}},
			}
			if err := e.c.Create(context.Background(), tj); err != nil {
				t.Fatal(err)
			}
			got := e.waitPhase(t, ns, tc.name, v1alpha1.PhaseFailed, "InvalidSpec")
			if !strings.Contains(got.Status.Message, tc.want) || !strings.Contains(got.Status.Message, "fix it and submit again") {
				t.Errorf("message %q, want it to contain %q", got.Status.Message, tc.want)
			}
			if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionValid); c == nil || c.Status != metav1.ConditionFalse {
				t.Errorf("Valid condition %+v", c)
			}
			if err := e.get(t, ns, tc.name, &batchv1.Job{}); isGone(err) != nil {
				t.Errorf("job created for an invalid spec: %v", err)
			}
			t.Logf("%s", got.Status.Message)
		})
	}
}

// TestRejectedByAPIServer: the CRD's schema and CEL rules refuse bad
// TrainingJobs with messages that say what to change.
func TestRejectedByAPIServer(t *testing.T) {
	e := startEnv(t)
	ns := e.namespace(t)
	valid := func() *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "jobs.epochfs.io/v1alpha1", "kind": "TrainingJob",
			"metadata": map[string]any{"name": "j", "namespace": ns},
			"spec": map[string]any{"image": "x", "workers": int64(2), "mode": "pytorch",
				"datasets": []any{map[string]any{"name": "imagenet", "source": "/data/imagenet", "mountPath": "/data"}}},
		}}
	}
	for _, tc := range []struct {
		name   string
		mutate func(spec map[string]any)
		want   string
	}{
		{"missing image", func(s map[string]any) { delete(s, "image") }, `spec.image: Required value`},
		{"empty image", func(s map[string]any) { s["image"] = " " }, `image is empty: set the container image of the workers`},
		{"zero workers", func(s map[string]any) { s["workers"] = int64(0) }, `workers must be at least 1`},
		{"unknown mode", func(s map[string]any) { s["mode"] = "horovod" }, `spec.mode: Unsupported value: "horovod": supported values: "standalone", "pytorch", "tensorflow", "mpi"`},
		{"ps without tensorflow", func(s map[string]any) { s["parameterServers"] = int64(1) }, `parameterServers is only for mode tensorflow`},
		{"source and claim", func(s map[string]any) {
			s["datasets"].([]any)[0].(map[string]any)["existingClaim"] = "c"
		}, `set exactly one of source (a dataset URL such as s3://bucket/prefix) and existingClaim`},
		{"neither source nor claim", func(s map[string]any) {
			delete(s["datasets"].([]any)[0].(map[string]any), "source")
		}, `set exactly one of source`},
		{"secretName with a claim", func(s map[string]any) {
			d := s["datasets"].([]any)[0].(map[string]any)
			delete(d, "source")
			d["existingClaim"], d["secretName"] = "c", "s3"
		}, `secretName is for a source`},
		{"bad secretName", func(s map[string]any) {
			s["datasets"].([]any)[0].(map[string]any)["secretName"] = "S3_keys"
		}, `secretName must be a Secret name`},
		{"relative mountPath", func(s map[string]any) {
			s["datasets"].([]any)[0].(map[string]any)["mountPath"] = "data"
		}, `mountPath must be an absolute path without ':'`},
		{"bad dataset name", func(s map[string]any) {
			s["datasets"].([]any)[0].(map[string]any)["name"] = "ImageNet_1k"
		}, `dataset name must be lower-case letters, digits and '-'`},
		{"duplicate dataset", func(s map[string]any) {
			d := s["datasets"].([]any)
			s["datasets"] = append(d, d[0])
		}, `Duplicate value: map[string]interface {}{"name":"imagenet"}`},
		{"readaheadFiles too big", func(s map[string]any) {
			s["datasets"].([]any)[0].(map[string]any)["readaheadFiles"] = int64(1000)
		}, `readaheadFiles in body should be less than or equal to 256`},
		{"minAvailable too big", func(s map[string]any) { s["gang"] = map[string]any{"minAvailable": int64(3)} }, `gang.minAvailable is larger than workers + parameterServers`},
		{"queue without volcano", func(s map[string]any) {
			s["gang"] = map[string]any{"scheduler": "scheduler-plugins", "queue": "q"}
		}, `gang.queue is a Volcano queue`},
		{"unknown scheduler", func(s map[string]any) { s["gang"] = map[string]any{"scheduler": "kueue"} }, `spec.gang.scheduler: Unsupported value: "kueue"`},
		{"negative gpus", func(s map[string]any) { s["resources"] = map[string]any{"gpus": int64(-1)} }, `spec.resources.gpus: Invalid value: -1: spec.resources.gpus in body should be greater than or equal to 0`},
		{"extra without domain", func(s map[string]any) {
			s["resources"] = map[string]any{"extra": map[string]any{"gpu": "1"}}
		}, `extra resources are extended resources with a domain`},
		{"bad cleanPodPolicy", func(s map[string]any) { s["cleanup"] = map[string]any{"cleanPodPolicy": "Some"} }, `Unsupported value: "Some"`},
		{"negative shmSize", func(s map[string]any) { s["shmSize"] = "-1" }, `shmSize must not be negative: set a size such as 2Gi, or 0 for the container runtime's own /dev/shm`},
		{"negative integer shmSize", func(s map[string]any) { s["shmSize"] = int64(-1) }, `shmSize must not be negative`},
		{"fractional shmSize", func(s map[string]any) { s["shmSize"] = "500m" }, `shmSize must be a whole number of bytes`},
		{"bad shmSize", func(s map[string]any) { s["shmSize"] = "2GiB" }, `spec.shmSize`},
		{"bad queueName", func(s map[string]any) { s["queueName"] = "Team_A" }, `queueName must be a LocalQueue name`},
		{"bad serviceAccountName", func(s map[string]any) { s["serviceAccountName"] = "Trainer" }, `serviceAccountName must be a ServiceAccount name`},
		{"controller's pod annotation", func(s map[string]any) { s["podAnnotations"] = map[string]any{"jobs.epochfs.io/x": "y"} }, `podAnnotations: keys under jobs.epochfs.io/ are set by the controller`},
		{"ps template without parameter servers", func(s map[string]any) { s["ps"] = map[string]any{"template": map[string]any{}} }, `ps is the template of the parameter servers`},
		{"zero nprocPerNode", func(s map[string]any) { s["nprocPerNode"] = int64(0) }, `nprocPerNode must be at least 1`},
		{"nprocPerNode without pytorch", func(s map[string]any) { s["mode"], s["nprocPerNode"] = "mpi", int64(2) }, `nprocPerNode is only for mode pytorch`},
		{"negative maxRestarts", func(s map[string]any) { s["maxRestarts"] = int64(-1) }, `spec.maxRestarts: Invalid value: "integer": maxRestarts must be at least 0`},
		{"too many maxRestarts", func(s map[string]any) { s["maxRestarts"] = int64(101) }, `maxRestarts must be at most 100`},
		{"negative backoffLimit", func(s map[string]any) { s["backoffLimit"] = int64(-1) }, `spec.backoffLimit in body should be greater than or equal to 0`},
		{"unknown successPolicy", func(s map[string]any) { s["successPolicy"] = "Any" }, `spec.successPolicy: Unsupported value: "Any": supported values: "AllWorkers", "Worker0"`},
		{"AllWorkers in mode mpi", func(s map[string]any) { s["mode"], s["successPolicy"] = "mpi", "AllWorkers" }, `successPolicy AllWorkers cannot hold in mode mpi`},
		{"chief without tensorflow", func(s map[string]any) { s["tensorflow"] = map[string]any{"chief": true} }, `tensorflow is only for mode tensorflow: remove it or set mode: tensorflow`},
		{"chief with successPolicy", func(s map[string]any) {
			s["mode"], s["tensorflow"], s["successPolicy"] = "tensorflow", map[string]any{"chief": true}, "Worker0"
		}, `successPolicy is for the workers: with tensorflow.chief the job succeeds when the chief does`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := valid()
			tc.mutate(u.Object["spec"].(map[string]any))
			err := e.c.Create(context.Background(), u)
			if err == nil {
				t.Fatalf("accepted")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error\n %v\nwant it to contain\n %s", err, tc.want)
			}
		})
	}
	// The valid one is accepted, and its spec cannot change afterwards.
	u := valid()
	if err := e.c.Create(context.Background(), u); err != nil {
		t.Fatalf("valid job refused: %v", err)
	}
	checkEdits(t, e, ns, "j")
}

// checkEdits edits job name (pytorch, 2 workers, one dataset with a
// source, no resources, env, gang or cleanup) with JSON merge patches, as
// kubectl edit/patch would: every field but cleanup is refused with a
// message saying so; cleanup, no-op edits (absent to empty) and metadata
// are accepted; and the controller's own updates (its finalizer) pass.
func checkEdits(t *testing.T, e *env, ns, name string) {
	t.Helper()
	ctx := context.Background()
	eventually(t, "the controller adds its finalizer (its own Update passes the rules)", func() error {
		tj := &v1alpha1.TrainingJob{}
		if err := e.get(t, ns, name, tj); err != nil {
			return err
		}
		if !slices.Contains(tj.Finalizers, v1alpha1.FinalizerVolumes) {
			return fmt.Errorf("finalizers %v", tj.Finalizers)
		}
		return nil
	})
	patch := func(spec string) error {
		tj := &v1alpha1.TrainingJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
		return e.c.Patch(ctx, tj, client.RawPatch(types.MergePatchType, []byte(`{"spec":`+spec+`}`)))
	}
	const imm = " cannot be changed after submission: delete the TrainingJob and submit it again (only cleanup and suspend can be edited)"
	for _, tc := range []struct{ field, spec string }{
		{"image", `{"image":"y"}`},
		{"workers", `{"workers":3}`},
		{"mode", `{"mode":"mpi"}`},
		{"datasets", `{"datasets":[{"name":"imagenet","source":"/data/imagenet","mountPath":"/data"},{"name":"labels","existingClaim":"l","mountPath":"/labels"}]}`},
		{"datasets", `{"datasets":null}`},
		{"resources", `{"resources":{"gpus":4}}`},
		{"env", `{"env":[{"name":"EPOCHS","value":"1"}]}`},
		{"command", `{"command":["python"]}`},
		{"gang", `{"gang":{"enabled":false}}`},
		{"backoffLimit", `{"backoffLimit":5}`},
		{"maxRestarts", `{"maxRestarts":5}`},
		{"successPolicy", `{"successPolicy":"Worker0"}`},
		{"nodeSelector", `{"nodeSelector":{"pool":"h100"}}`},
		{"tolerations", `{"tolerations":[{"key":"k","operator":"Exists"}]}`},
		{"priorityClassName", `{"priorityClassName":"high"}`},
		{"tensorboard", `{"tensorboard":{"logDir":"/logs"}}`},
		{"tensorflow", `{"tensorflow":{"chief":true}}`},
		{"port", `{"port":1234}`},
		{"shmSize", `{"shmSize":"8Gi"}`},
		{"nprocPerNode", `{"nprocPerNode":4}`},
		{"queueName", `{"queueName":"team-b"}`},
		{"serviceAccountName", `{"serviceAccountName":"sa"}`},
		{"imagePullSecrets", `{"imagePullSecrets":[{"name":"r"}]}`},
		{"podLabels", `{"podLabels":{"team":"x"}}`},
		{"podAnnotations", `{"podAnnotations":{"a":"b"}}`},
		{"worker", `{"worker":{"template":{"spec":{"containers":[{"name":"trainer"}]}}}}`},
	} {
		err := patch(tc.spec)
		if err == nil {
			t.Errorf("edit %s accepted", tc.spec)
			continue
		}
		if want := tc.field + imm; !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("edit %s:\n %v\nwant it to contain\n %s", tc.spec, err, want)
		}
	}
	for _, spec := range []string{
		`{"cleanup":{"ttlSecondsAfterFinished":3600,"cleanPodPolicy":"All"}}`,
		`{"resources":{},"env":[],"nodeSelector":{}}`,
		`{"resources":{"gpus":0}}`,
		`{"image":"x","workers":2}`,
		`{"priorityClassName":""}`,
		`{"suspend":true}`,
		`{"suspend":false}`,
		`{"podLabels":{},"imagePullSecrets":[],"queueName":""}`,
	} {
		if err := patch(spec); err != nil {
			t.Errorf("edit %s refused: %v", spec, err)
		}
	}
	// resources exist now ({"gpus":0}): a change inside is refused too.
	if err := patch(`{"resources":{"gpus":2,"cpu":"1"}}`); err == nil || !strings.Contains(err.Error(), "resources"+imm) {
		t.Errorf("edit of resources.gpus: %v", err)
	}
	tj := &v1alpha1.TrainingJob{}
	if err := e.get(t, ns, name, tj); err != nil {
		t.Fatal(err)
	}
	if c := tj.Spec.Cleanup; c.TTLSecondsAfterFinished == nil || *c.TTLSecondsAfterFinished != 3600 || c.CleanPodPolicy != v1alpha1.CleanPodAll {
		t.Errorf("cleanup after the edit: %+v", c)
	}
	// A typed client's update (the whole object, as the controller sends it)
	// passes too.
	tj.Labels = map[string]string{"edited": "yes"}
	if err := e.c.Update(ctx, tj); err != nil {
		t.Errorf("update of metadata refused: %v", err)
	}
}

// TestTTLAndCleanPodPolicyAll: a finished job with ttlSecondsAfterFinished
// is deleted after the TTL, its pods first (cleanPodPolicy All).
func TestTTLAndCleanPodPolicyAll(t *testing.T) {
	e := startEnv(t)
	ctx := context.Background()
	ns := e.namespace(t)
	short := e.succeededJob(t, ns, "short", []v1alpha1.Dataset{{Name: "d", Source: "/data/d", MountPath: "/d"}},
		v1alpha1.Cleanup{TTLSecondsAfterFinished: ptr.To[int32](3600), CleanPodPolicy: v1alpha1.CleanPodAll})
	eventually(t, "succeeded pod deleted (cleanPodPolicy All)", func() error { return isGone(e.get(t, ns, "short-0-x", &corev1.Pod{})) })
	if err := e.get(t, ns, "short", &v1alpha1.TrainingJob{}); err != nil {
		t.Fatalf("deleted before its TTL: %v", err)
	}
	// An hour later (the clock moves; a touch makes the controller look).
	later := time.Now().Add(time.Hour + time.Second)
	e.now.Store(&later)
	eventually(t, "touch", func() error {
		cur := &v1alpha1.TrainingJob{}
		if err := e.get(t, ns, "short", cur); err != nil {
			return client.IgnoreNotFound(err)
		}
		if cur.Annotations == nil {
			cur.Annotations = map[string]string{}
		}
		cur.Annotations["touch"] = "1"
		return e.c.Update(ctx, cur)
	})
	eventually(t, "TrainingJob deleted after its TTL", func() error { return isGone(e.get(t, ns, "short", &v1alpha1.TrainingJob{})) })
	eventually(t, "its pv deleted", func() error {
		return pvDeleted(e, t, pvName(short, "d"))
	})
}

// TestEditCleanup: cleanup is the one part of the spec that may change
// after submission, and the controller applies the new value: a finished
// job's pods go when cleanPodPolicy becomes All, and the job itself when
// a TTL is set that has passed.
func TestEditCleanup(t *testing.T) {
	e := startEnv(t)
	ctx := context.Background()
	ns := e.namespace(t)
	e.succeededJob(t, ns, "keep", nil, v1alpha1.Cleanup{CleanPodPolicy: v1alpha1.CleanPodNone})
	patch := func(spec string) {
		t.Helper()
		err := e.c.Patch(ctx, &v1alpha1.TrainingJob{ObjectMeta: metav1.ObjectMeta{Name: "keep", Namespace: ns}},
			client.RawPatch(types.MergePatchType, []byte(`{"spec":`+spec+`}`)))
		if err != nil {
			t.Fatalf("patch %s: %v", spec, err)
		}
	}
	// cleanPodPolicy None: the pod stays (give the controller a moment).
	time.Sleep(500 * time.Millisecond)
	if err := e.get(t, ns, "keep-0-x", &corev1.Pod{}); err != nil {
		t.Fatalf("pod deleted with cleanPodPolicy None: %v", err)
	}
	patch(`{"cleanup":{"cleanPodPolicy":"All","ttlSecondsAfterFinished":3600}}`)
	eventually(t, "pod deleted once cleanPodPolicy is All", func() error { return isGone(e.get(t, ns, "keep-0-x", &corev1.Pod{})) })
	if err := e.get(t, ns, "keep", &v1alpha1.TrainingJob{}); err != nil {
		t.Fatalf("deleted before its TTL: %v", err)
	}
	patch(`{"cleanup":{"ttlSecondsAfterFinished":0}}`)
	eventually(t, "TrainingJob deleted once its TTL is 0", func() error { return isGone(e.get(t, ns, "keep", &v1alpha1.TrainingJob{})) })
}

// TestGangSchedulerMissing: without the PodGroup CRD the job waits with a
// message saying what to install, and starts once it is there.
func TestGangSchedulerMissing(t *testing.T) {
	e := startEnv(t)
	ns := e.namespace(t)
	tj := &v1alpha1.TrainingJob{
		ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: ns},
		Spec:       v1alpha1.TrainingJobSpec{Image: "x", Workers: 2},
	}
	if err := e.c.Create(context.Background(), tj); err != nil {
		t.Fatal(err)
	}
	got := e.waitPhase(t, ns, "g", v1alpha1.PhasePending, "GangSchedulerMissing")
	if want := "gang scheduling needs the PodGroup CRD (scheduling.volcano.sh/v1beta1) in the cluster: install Volcano, or set gang.enabled: false"; got.Status.Message != want {
		t.Errorf("message %q, want %q", got.Status.Message, want)
	}
	if err := e.get(t, ns, "g", &batchv1.Job{}); isGone(err) != nil {
		t.Errorf("job created without its PodGroup: %v", err)
	}
	e.kube.InstallCRDs(t, crdPaths(t, "volcano")[1])
	e.waitJob(t, ns, "g")
}

// pvDeleted reports whether a PersistentVolume is gone or being deleted:
// its kubernetes.io/pv-protection finalizer is removed by
// kube-controller-manager, which does not run here.
func pvDeleted(e *env, t *testing.T, name string) error {
	pv := &corev1.PersistentVolume{}
	if err := e.get(t, "", name, pv); err != nil {
		return isGone(err)
	}
	if pv.DeletionTimestamp.IsZero() {
		return fmt.Errorf("PersistentVolume %s not deleted", name)
	}
	return nil
}

// TestLostStatusWriteRepaired: the status write that follows the creation
// of a job's objects can be lost (a conflict with a status written from an
// older copy of the TrainingJob). The next reconcile sees the Job and must
// still record Created and clear an old InsufficientResources, or the job
// stays "waiting for resources" although its pods exist. The reconciler is
// called directly, so the lost write happens at a known point.
func TestLostStatusWriteRepaired(t *testing.T) {
	e := directEnv(t)
	c := e.c
	r, err := New(Config{Client: c, APIReader: c, Scheme: c.Scheme(), CapacityRetry: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ns := e.namespace(t)
	tj := &v1alpha1.TrainingJob{
		ObjectMeta: metav1.ObjectMeta{Name: "lost", Namespace: ns},
		Spec: v1alpha1.TrainingJobSpec{
			Image: "trainer:1", Workers: 2, Mode: v1alpha1.ModePyTorch,
			Resources: v1alpha1.WorkerResources{GPUs: 1},
			Gang:      &v1alpha1.Gang{Enabled: ptr.To(false)},
		},
	}
	if err := c.Create(ctx, tj); err != nil {
		t.Fatal(err)
	}
	reconcile := func() *v1alpha1.TrainingJob { return e.reconcile(t, r, tj) }
	// No GPUs anywhere: the job waits.
	waiting := reconcile()
	if !meta.IsStatusConditionTrue(waiting.Status.Conditions, v1alpha1.ConditionInsufficientResources) {
		t.Fatalf("conditions %+v, want InsufficientResources", waiting.Status.Conditions)
	}
	// GPUs arrive: the objects are created and the status says so.
	e.node(t, "gpu-a", res("cpu", "8", "memory", "32Gi", "nvidia.com/gpu", "2"), nil)
	created := reconcile()
	if !meta.IsStatusConditionTrue(created.Status.Conditions, v1alpha1.ConditionCreated) {
		t.Fatalf("conditions %+v, want Created", created.Status.Conditions)
	}
	// Lose that status write: put the waiting status back.
	created.Status = waiting.Status
	if err := c.Status().Update(ctx, created); err != nil {
		t.Fatal(err)
	}
	got := reconcile()
	if !meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionCreated) {
		t.Errorf("after the lost write: conditions %+v, want Created", got.Status.Conditions)
	}
	if meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionInsufficientResources) {
		t.Errorf("after the lost write: InsufficientResources still true: %+v", got.Status.Conditions)
	}
	if got.Status.Reason != "Scheduling" {
		t.Errorf("after the lost write: reason %q message %q, want Scheduling", got.Status.Reason, got.Status.Message)
	}
}
