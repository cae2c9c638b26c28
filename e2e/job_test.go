package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/internal/testenv/cluster"
	"github.com/epochfs/epochfs/internal/testenv/kube"
	"github.com/epochfs/epochfs/internal/testenv/s3"
	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
)

// The job tests' namespace.
const jobNamespace = "ml"

// volcanoPodGroups is the PodGroup resource the controller renders by
// default (gang.scheduler volcano).
var volcanoPodGroups = schema.GroupVersionResource{Group: "scheduling.volcano.sh", Version: "v1beta1", Resource: "podgroups"}

// jobEnv is the chart installed with the TrainingJob controller, and the
// real `cachefs job` CLI pointed at the cluster's kubeconfig.
type jobEnv struct {
	*install
	cli string        // cachefs-job, built from ./cmd/cachefs-job
	tj  client.Client // TrainingJobs (and everything else) as cluster admin
	dyn dynamic.Interface
}

// installJobController builds the CLI, installs the chart with
// jobController.enabled (plus extra), waits for the controller Deployment
// to be Available, installs Volcano's PodGroup CRD (the test copy in
// pkg/job/testdata/crds: no gang scheduler runs here, so the PodGroups are
// only objects) and creates namespace ml.
//
// The controller runs in the node's network (no Service proxy here) on
// free ports, and gives gang-scheduled workers schedulerName
// default-scheduler (jobController.volcanoScheduler), so the default
// scheduler places them.
func installJobController(t *testing.T, extra ...string) *jobEnv {
	t.Helper()
	requireE2E(t)
	cli := testenv.GoBuild(t, "./cmd/cachefs-job") // before the cluster: the build needs no lock
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	in := installChart(t, extra...)
	// The API server's port is known once the cluster runs: enable the
	// controller with an upgrade of the same release (the node plugin's
	// values are reused, so its pod is not replaced).
	apiHost, apiPort := apiServerAddress(t, in.c)
	// The chart renders the job controller only with network rules (a test
	// reading MinIO passes them in extra: minioRules) or the admin's
	// explicit "any network source" (tests of no network dataset).
	anySource := "true"
	for _, x := range extra {
		if strings.HasPrefix(x, "node.networkRules") {
			anySource = "false"
		}
	}
	in.helmRun(t, "upgrade", chartRelease, filepath.Join(root, "deploy", "helm", "epochfs"),
		"--namespace", chartNamespace, "--reuse-values",
		"--set", "node.allowAnyNetworkSource="+anySource,
		"--set", "jobController.enabled=true",
		"--set", "jobController.hostNetwork=true",
		"--set", "jobController.metricsPort="+strconv.Itoa(testenv.FreePort(t)),
		"--set", "jobController.healthPort="+strconv.Itoa(testenv.FreePort(t)),
		"--set", "jobController.volcanoScheduler=default-scheduler",
		"--set", "jobController.extraEnv[0].name=KUBERNETES_SERVICE_HOST", "--set-string", "jobController.extraEnv[0].value="+apiHost,
		"--set", "jobController.extraEnv[1].name=KUBERNETES_SERVICE_PORT", "--set-string", "jobController.extraEnv[1].value="+apiPort)
	e := &jobEnv{install: in, cli: cli}
	logf.SetLogger(logr.Discard()) // the controller-runtime client's
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if e.tj, err = client.New(in.c.Config, client.Options{Scheme: scheme}); err != nil {
		t.Fatal(err)
	}
	if e.dyn, err = dynamic.NewForConfig(in.c.Config); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	e.waitControllerAvailable(ctx, t)
	fmt.Printf("job controller Deployment Available %.1fs after helm upgrade\n", time.Since(start).Seconds())
	(&kube.Server{Config: in.c.Config}).InstallCRDs(t, filepath.Join(root, "pkg", "job", "testdata", "crds", "volcano-podgroup.yaml"))
	in.createNamespace(ctx, t, jobNamespace)
	return e
}

// job runs `cachefs job ARGS` (the cachefs-job binary) against the cluster
// in namespace ml and returns its combined output.
func (e *jobEnv) job(t *testing.T, args ...string) (string, error) {
	t.Helper()
	full := append([]string{args[0], "--kubeconfig", e.c.Kubeconfig, "-n", jobNamespace}, args[1:]...)
	out, err := exec.Command(e.cli, full...).CombinedOutput()
	return string(out), err
}

// mustJob is job, failing the test on an error.
func (e *jobEnv) mustJob(t *testing.T, args ...string) string {
	t.Helper()
	out, err := e.job(t, args...)
	if err != nil {
		t.Fatalf("cachefs job %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// waitControllerAvailable waits for Deployment epochfs-job-controller to be
// Available (its pod Ready: /readyz on the node's loopback).
func (e *jobEnv) waitControllerAvailable(ctx context.Context, t *testing.T) {
	t.Helper()
	for {
		d, err := e.c.Client.AppsV1().Deployments(chartNamespace).Get(ctx, "epochfs-job-controller", metav1.GetOptions{})
		if err == nil {
			for _, c := range d.Status.Conditions {
				if c.Type == appsv1.DeploymentAvailable && c.Status == corev1.ConditionTrue {
					return
				}
			}
		}
		if ctx.Err() != nil {
			e.describeController(t)
			t.Fatalf("the job controller Deployment is not Available: %v", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// describeController logs the controller pod (state, logs, events).
func (e *jobEnv) describeController(t *testing.T) {
	t.Helper()
	pods, err := e.c.Client.CoreV1().Pods(chartNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=job-controller"})
	if err != nil {
		t.Logf("job controller pods: %v", err)
		return
	}
	for _, p := range pods.Items {
		e.describe(t, chartNamespace, p.Name)
	}
}

// trainingJob reads TrainingJob ml/name.
func (e *jobEnv) trainingJob(ctx context.Context, t *testing.T, name string) *v1alpha1.TrainingJob {
	t.Helper()
	tj := &v1alpha1.TrainingJob{}
	if err := e.tj.Get(ctx, client.ObjectKey{Namespace: jobNamespace, Name: name}, tj); err != nil {
		t.Fatalf("get TrainingJob %s: %v", name, err)
	}
	return tj
}

// waitPhase waits for TrainingJob ml/name to reach phase, failing early on
// Failed.
func (e *jobEnv) waitPhase(ctx context.Context, t *testing.T, name string, phase v1alpha1.Phase) *v1alpha1.TrainingJob {
	t.Helper()
	return e.waitPhaseFunc(ctx, t, name, phase, func() {})
}

// waitPhaseFunc is waitPhase, calling poll at every look.
func (e *jobEnv) waitPhaseFunc(ctx context.Context, t *testing.T, name string, phase v1alpha1.Phase, poll func()) *v1alpha1.TrainingJob {
	t.Helper()
	for {
		poll()
		tj := e.trainingJob(ctx, t, name)
		if tj.Status.Phase == phase {
			return tj
		}
		if tj.Status.Phase == v1alpha1.PhaseFailed || ctx.Err() != nil {
			out, _ := e.job(t, "get", name)
			t.Logf("cachefs job get %s:\n%s", name, out)
			pods, _ := e.c.Client.CoreV1().Pods(jobNamespace).List(context.Background(), metav1.ListOptions{})
			for _, p := range pods.Items {
				e.describe(t, jobNamespace, p.Name)
			}
			e.describeController(t)
			t.Fatalf("TrainingJob %s is %s (%s: %s), want %s", name, tj.Status.Phase, tj.Status.Reason, tj.Status.Message, phase)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// kubeletLogLines counts the lines of the cluster's kubelet log that
// contain every one of words.
func kubeletLogLines(t *testing.T, c *cluster.Cluster, words ...string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.Dir, "logs", "kubelet.log"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		all := true
		for _, w := range words {
			all = all && strings.Contains(line, w)
		}
		if all {
			n++
		}
	}
	return n
}

// workerLog parses `cachefs job logs` of worker i: the worker's own first
// line ("worker I of N", from its environment), then read-dataset's output.
func workerLog(t *testing.T, out string, i, workers int) []map[string]string {
	t.Helper()
	first, rest, _ := strings.Cut(out, "\n")
	if want := fmt.Sprintf("worker %d of %d", i, workers); first != want {
		t.Fatalf("worker %d's log starts with %q, want %q:\n%s", i, first, want, tail(out, 2000))
	}
	return passSums(t, rest)
}

// TestTrainingJobEndToEnd submits a 2-worker TrainingJob with the real
// `cachefs job` CLI to a real cluster with the chart and the job
// controller installed: the dataset is a private MinIO bucket (a `source`,
// so the controller makes the PV and PVC) whose keys are in a Secret the
// dataset names (`--dataset-secret`, the PV's nodeStageSecretRef; the node
// has no credentials of its own), the default scheduler places the workers, each reads every file
// and prints sha256s. It checks the PodGroup object, `cachefs job get`
// (Succeeded), `cachefs job logs` of both workers (every sum), then
// `cachefs job delete`: the garbage collector and the controller's
// finalizer remove the Job, pods, Service, PodGroup, PVC and PV, and the
// kubelet unstages the dataset (no mount process or FUSE mount is left).
func TestTrainingJobEndToEnd(t *testing.T) {
	requireE2E(t)
	mi := s3.StartMinIO(t)
	mi.MakeBucket(t, "training")
	files := datagen.Spec{Files: 40, Classes: 3, MedianSize: 20_000, MinSize: 500, MaxSize: 200_000, Seed: 17}.Plan()
	mi.PutFiles(t, "training", "imagenet/", files)
	e := installJobController(t, minioRules(mi, "training")...)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cs := e.c.Client
	// The bucket's keys, as a user gives them: a Secret of the job's
	// namespace named by the dataset (the node has no credentials of its
	// own: node.allowNodeCredentials is false).
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "imagenet-s3", Namespace: jobNamespace},
		StringData: map[string]string{"AWS_ACCESS_KEY_ID": mi.AccessKey, "AWS_SECRET_ACCESS_KEY": mi.SecretKey}}
	if _, err := cs.CoreV1().Secrets(jobNamespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	const name, workers = "resnet", 2
	source := "s3://training/imagenet?endpoint=" + mi.Endpoint + "&region=us-east-1"
	start := time.Now()
	out := e.mustJob(t, "submit", name, "--image", e.readerImage, "--image-pull-policy", "Never",
		"--workers", strconv.Itoa(workers), "--cpu", "100m", "--memory", "64Mi",
		"--dataset", "imagenet="+source+":/data", "--dataset-secret", secret.Name, "--cache-size", "64Mi",
		"--", "sh", "-c", `echo "worker $EPOCHFS_REPLICA_INDEX of $EPOCHFS_WORKERS"; exec read-dataset /data 1`)
	if !strings.Contains(out, "trainingjob.jobs.epochfs.io/"+name+" submitted to namespace "+jobNamespace) {
		t.Errorf("submit printed %q", out)
	}
	sawMounts := 0
	tj := e.waitPhaseFunc(ctx, t, name, v1alpha1.PhaseSucceeded, func() {
		sawMounts = max(sawMounts, len(mountProcesses(t, e.stateDir)))
	})
	if sawMounts > 1 {
		t.Errorf("%d mount processes for one dataset on one node, want 1", sawMounts)
	}
	fmt.Printf("TrainingJob %s: %d workers over %d files (%d bytes) Succeeded %.1fs after submit\n",
		name, workers, len(files), datagen.TotalSize(files), time.Since(start).Seconds())
	if tj.Status.Workers.Succeeded != workers {
		t.Errorf("status.workers %+v, want %d succeeded", tj.Status.Workers, workers)
	}

	// The PodGroup exists as an object (nothing enforces it here), and the
	// workers point at it while the default scheduler placed them.
	pg, err := e.dyn.Resource(volcanoPodGroups).Namespace(jobNamespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("PodGroup: %v", err)
	}
	if mm, _, _ := unstructured.NestedInt64(pg.Object, "spec", "minMember"); mm != workers {
		t.Errorf("PodGroup minMember %d, want %d", mm, workers)
	}
	pods, err := cs.CoreV1().Pods(jobNamespace).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelJobName + "=" + name})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != workers {
		t.Fatalf("%d pods, want %d", len(pods.Items), workers)
	}
	for _, p := range pods.Items {
		if p.Spec.SchedulerName != corev1.DefaultSchedulerName || p.Annotations["scheduling.k8s.io/group-name"] != name ||
			p.Spec.NodeName != cluster.NodeName || p.Status.Phase != corev1.PodSucceeded {
			t.Errorf("pod %s: scheduler %q, group %q, node %q, phase %s", p.Name, p.Spec.SchedulerName,
				p.Annotations["scheduling.k8s.io/group-name"], p.Spec.NodeName, p.Status.Phase)
		}
	}

	// The CLI: get, then each worker's own log lines.
	get := e.mustJob(t, "get", name)
	if !regexp.MustCompile(`(?m)^Status:\s+Succeeded$`).MatchString(get) {
		t.Errorf("cachefs job get %s does not show Succeeded:\n%s", name, get)
	}
	for i := 0; i < workers; i++ {
		log := e.mustJob(t, "logs", name, "--worker", strconv.Itoa(i))
		checkPasses(t, workerLog(t, log, i, workers), files, 1)
	}

	// What the controller made for the dataset, and the node's mount.
	pvs, err := cs.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelOwnerUID + "=" + string(tj.UID)})
	if err != nil {
		t.Fatal(err)
	}
	pvcs, err := cs.CoreV1().PersistentVolumeClaims(jobNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pvs.Items) != 1 || len(pvcs.Items) != 1 || pvcs.Items[0].Spec.VolumeName != pvs.Items[0].Name {
		t.Fatalf("%d PVs of the job and %d PVCs in %s, want one PVC bound to one PV", len(pvs.Items), len(pvcs.Items), jobNamespace)
	}
	pvName := pvs.Items[0].Name
	if ref := pvs.Items[0].Spec.CSI.NodeStageSecretRef; ref == nil || ref.Name != secret.Name || ref.Namespace != jobNamespace {
		t.Errorf("PV %s nodeStageSecretRef %+v, want %s/%s", pvName, ref, jobNamespace, secret.Name)
	}
	// The kubelet staged the controller's PV once for both workers (and,
	// as the workers finished, unstaged it: the kubelet tears down the
	// volumes of terminated pods, so the mount may already be gone).
	if n := kubeletLogLines(t, e.c, "MountVolume.MountDevice succeeded", pvName); n != 1 {
		t.Errorf("the kubelet staged %s %d times, want once", pvName, n)
	}
	fmt.Printf("dataset PV %s staged once by the kubelet; %d mount processes seen while the workers ran\n", pvName, sawMounts)

	// Delete with the CLI; the garbage collector and the controller clean up.
	out = e.mustJob(t, "delete", name)
	if want := "trainingjob.jobs.epochfs.io/" + name + " deleted"; !strings.Contains(out, want) {
		t.Errorf("delete printed %q, want %q", out, want)
	}
	deleted := time.Now()
	left := func() []string {
		var left []string
		add := func(what string, err error) {
			if err == nil {
				left = append(left, what)
			} else if !apierrors.IsNotFound(err) {
				left = append(left, what+": "+err.Error())
			}
		}
		add("TrainingJob", e.tj.Get(ctx, client.ObjectKey{Namespace: jobNamespace, Name: name}, &v1alpha1.TrainingJob{}))
		_, err := cs.BatchV1().Jobs(jobNamespace).Get(ctx, name, metav1.GetOptions{})
		add("Job", err)
		_, err = cs.CoreV1().Services(jobNamespace).Get(ctx, name, metav1.GetOptions{})
		add("Service", err)
		_, err = e.dyn.Resource(volcanoPodGroups).Namespace(jobNamespace).Get(ctx, name, metav1.GetOptions{})
		add("PodGroup", err)
		_, err = cs.CoreV1().PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{})
		add("PV "+pvName, err)
		if l, err := cs.CoreV1().Pods(jobNamespace).List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) > 0 {
			left = append(left, fmt.Sprintf("pods (%v)", err))
		}
		if l, err := cs.CoreV1().PersistentVolumeClaims(jobNamespace).List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) > 0 {
			left = append(left, fmt.Sprintf("PVCs (%v)", err))
		}
		if p := allMountProcesses(t, e.stateDir); len(p) > 0 {
			left = append(left, fmt.Sprintf("mount processes %v", p))
		}
		if m := append(fuseMountsUnder(t, e.stateDir), fuseMountsUnder(t, e.c.KubeletDir)...); len(m) > 0 {
			left = append(left, fmt.Sprintf("FUSE mounts %v", m))
		}
		return left
	}
	for {
		l := left()
		if len(l) == 0 {
			break
		}
		if time.Since(deleted) > 2*time.Minute {
			e.describeController(t)
			b, _ := os.ReadFile(filepath.Join(e.c.Dir, "logs", "kubelet.log"))
			t.Fatalf("2 min after cachefs job delete, left: %s; kubelet log tail:\n%s", strings.Join(l, ", "), tail(string(b), 3000))
		}
		time.Sleep(500 * time.Millisecond)
	}
	if n := kubeletLogLines(t, e.c, "UnmountDevice succeeded", pvName); n != 1 {
		t.Errorf("the kubelet unstaged %s %d times, want once", pvName, n)
	}
	fmt.Printf("cachefs job delete: TrainingJob, Job, pods, Service, PodGroup, PVC, PV, mount process and mounts gone in %.1fs\n", time.Since(deleted).Seconds())
}

// TestTrainingJobCapacityHeld submits a job whose workers each ask for
// more CPU than the node's allocatable: the controller's capacity check,
// reading the real Node, holds it (Pending, InsufficientResources, a
// message naming the shortfall, a Warning event) and no Job or pod is ever
// created, through more than one --capacity-retry (30 s).
func TestTrainingJobCapacityHeld(t *testing.T) {
	e := installJobController(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs := e.c.Client
	node, err := cs.CoreV1().Nodes().Get(ctx, cluster.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	alloc := node.Status.Allocatable[corev1.ResourceCPU]
	perWorker := resource.MustParse(strconv.FormatInt(alloc.Value()+1, 10))
	need := perWorker.DeepCopy()
	need.Add(perWorker)

	const name = "too-big"
	e.mustJob(t, "submit", name, "--image", e.readerImage, "--image-pull-policy", "Never", "--workers", "2",
		"--cpu", perWorker.String(), "--", "sh", "-c", "echo should never run")
	held := time.Now()
	tj := e.waitPhase(ctx, t, name, v1alpha1.PhasePending)
	for tj.Status.Reason != "InsufficientResources" && time.Since(held) < time.Minute {
		time.Sleep(300 * time.Millisecond)
		tj = e.trainingJob(ctx, t, name)
	}
	want := fmt.Sprintf("cpu: need %s, ", need.String())
	wantAlloc := fmt.Sprintf(" free of %s allocatable on 1 eligible nodes", alloc.String())
	if tj.Status.Reason != "InsufficientResources" || !strings.Contains(tj.Status.Message, want) || !strings.Contains(tj.Status.Message, wantAlloc) {
		t.Fatalf("status %s/%s: %q, want InsufficientResources naming %q and %q", tj.Status.Phase, tj.Status.Reason, tj.Status.Message, want, wantAlloc)
	}
	if c := meta.FindStatusCondition(tj.Status.Conditions, v1alpha1.ConditionInsufficientResources); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("condition InsufficientResources %+v, want True", c)
	}
	fmt.Printf("held %.1fs after submit: %s\n", time.Since(held).Seconds(), tj.Status.Message)
	get := e.mustJob(t, "get", name)
	if !regexp.MustCompile(`(?m)^Status:\s+Pending$`).MatchString(get) || !strings.Contains(get, want) {
		t.Errorf("cachefs job get %s does not show the job Pending with the shortfall:\n%s", name, get)
	}

	// Nothing may be created while it waits, across a capacity retry.
	for time.Since(held) < 40*time.Second {
		pods, err := cs.CoreV1().Pods(jobNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		jobs, err := cs.BatchV1().Jobs(jobNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) > 0 || len(jobs.Items) > 0 {
			t.Fatalf("a held job made %d pods and %d Jobs", len(pods.Items), len(jobs.Items))
		}
		time.Sleep(time.Second)
	}
	if tj = e.trainingJob(ctx, t, name); tj.Status.Reason != "InsufficientResources" {
		t.Errorf("after 40 s the job is %s/%s: %s", tj.Status.Phase, tj.Status.Reason, tj.Status.Message)
	}
	events, err := cs.EventsV1().Events(jobNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	warned := false
	for _, ev := range events.Items {
		warned = warned || (ev.Regarding.Name == name && ev.Type == corev1.EventTypeWarning && ev.Reason == "InsufficientResources")
	}
	if !warned {
		t.Error("no Warning event InsufficientResources about the job")
	}
	e.mustJob(t, "delete", name)
}
