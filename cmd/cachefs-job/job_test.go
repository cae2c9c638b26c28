package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files of the cachefs job tests")

// runJob runs `cachefs ARGS...` in-process and returns stdout, stderr and
// the error line main would print.
func runJob(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	root := newRoot()
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetArgs(args)
	err = root.ExecuteContext(context.Background())
	return out.String(), errb.String(), err
}

var ageRE = regexp.MustCompile(`\b\d+[smhd]\b`)

// golden compares got with testdata/job/NAME, or rewrites it under -update.
// Ages are replaced by <age>, the test's namespace by <ns>.
func golden(t *testing.T, name, ns, got string) {
	t.Helper()
	got = ageRE.ReplaceAllString(got, "<age>")
	if ns != "" {
		got = strings.ReplaceAll(got, ns, "<ns>")
	}
	path := filepath.Join("testdata", "job", name)
	if *updateGolden {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run %s -update to create it)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("%s differs (go test -run %s -update rewrites it)\n--- got\n%s\n--- want\n%s", path, t.Name(), got, want)
	}
}

func TestJobSubmitDryRun(t *testing.T) {
	out, _, err := runJob(t, "job", "submit", "resnet", "-n", "ml", "--image", "pytorch/pytorch:2.4.0", "--image-pull-policy", "IfNotPresent",
		"--workers", "4", "--gpus", "8", "--cpu", "16", "--memory", "128Gi", "--device", "rdma/hca=1", "--mode", "pytorch",
		"--dataset", "imagenet=s3://datasets/imagenet/train?endpoint=http://minio.storage:9000&region=us-east-1:/data/imagenet",
		"--dataset", "labels=claim:shared-labels:/data/labels", "--cache-size", "500Gi", "--prefetch", "--readahead-files", "8", "--dataset-secret", "imagenet-s3",
		"--env", "EPOCHS=90", "--queue", "research", "--backoff-limit", "2", "--max-restarts", "5", "--success-policy", "Worker0", "--ttl", "3600", "--clean-pod-policy", "All",
		"--tensorboard-logdir", "/logs/resnet", "--node-selector", "pool=h100", "--toleration", "dedicated=ml:NoSchedule",
		"--toleration", "spot", "--shm-size", "16Gi", "--nproc-per-node", "8",
		"--suspend", "--queue-name", "team-a", "--service-account", "trainer", "--image-pull-secret", "registry",
		"--label", "team=vision", "--annotation", "example.com/owner=ana", "--priority-class", "high",
		"--worker-template", "testdata/job/checkpoint-template.yaml", "--dry-run",
		"--", "torchrun", "--nproc-per-node=8", "train.py", "--data", "/data/imagenet")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "submit-dry-run.yaml", "", out)
}

// TestJobCLI runs every `cachefs job` command against a real API server
// (no controller: the test writes the statuses the controller and the
// kubelet would).
func TestJobCLI(t *testing.T) {
	const ns = "ml"
	kube, c := startJobKube(t, ns, "other")
	ctx := context.Background()
	kc := "--kubeconfig=" + kube.Kubeconfig
	job := func(args ...string) (string, string, error) {
		return runJob(t, append([]string{"job", kc}, args...)...)
	}

	// Submit two jobs; bad ones are refused with what to change.
	out, _, err := job("submit", "resnet", "-n", ns, "--image", "pytorch/pytorch:2.4.0", "--workers", "2", "--gpus", "4",
		"--mode", "pytorch", "--dataset", "imagenet=/datasets/imagenet:/data/imagenet", "--", "torchrun", "train.py")
	if err != nil {
		t.Fatal(err)
	}
	submitted := out
	if _, _, err := job("submit", "bert", "-n", ns, "--image", "tensorflow/tensorflow:2.17.0", "--workers", "3", "--ps", "1", "--mode", "tensorflow"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := job("submit", "elsewhere", "-n", "other", "--image", "busybox"); err != nil {
		t.Fatal(err)
	}
	var errs strings.Builder
	for _, args := range [][]string{
		{"submit", "x", "-n", ns},
		{"submit", "x", "-n", ns, "--image", "i", "--workers", "0"},
		{"submit", "x", "-n", ns, "--image", "i", "--mode", "horovod"},
		{"submit", "x", "-n", ns, "--image", "i", "--image-pull-policy", "never"},
		{"submit", "x", "-n", ns, "--image", "i", "--dataset", "d=s3:///nobucket:/data"},
		{"submit", "x", "-n", ns, "--image", "i", "--dataset", "d=/data"},
		{"submit", "x", "-n", ns, "--image", "i", "--ps", "2"},
		{"submit", "x", "-n", ns, "--image", "i", "python", "train.py"},
		{"submit", "x", "-n", ns, "--image", "i", "--node-selector", "pool"},
		{"submit", "x", "-n", ns, "--image", "i", "--toleration", "dedicated=ml:NoScheduel"},
		{"submit", "x", "-n", ns, "--image", "i", "--toleration", "=ml"},
		{"submit", "x", "-n", ns, "--image", "i", "--shm-size=-1"},
		{"submit", "x", "-n", ns, "--image", "i", "--shm-size", "0.5"},
		{"submit", "x", "-n", ns, "--image", "i", "--shm-size", "2 GiB"},
		{"submit", "x", "-n", ns, "--image", "i", "--mode", "pytorch", "--nproc-per-node", "0"},
		{"submit", "x", "-n", ns, "--image", "i", "--nproc-per-node", "2"},
		{"submit", "x", "-n", ns, "--image", "i", "--label", "team"},
		{"submit", "x", "-n", ns, "--image", "i", "--label", "jobs.epochfs.io/name=y"},
		{"submit", "x", "-n", ns, "--image", "i", "--queue-name", "Team_A"},
		{"submit", "x", "-n", ns, "--image", "i", "--dataset", "d=/data/d:/d", "--worker-template", "testdata/job/writable-dataset-template.yaml"},
		{"submit", "x", "-n", ns, "--image", "i", "--worker-template", "testdata/job/errors.txt"},
		{"submit", "x", "-n", ns, "--image", "i", "--ps-template", "testdata/job/checkpoint-template.yaml"},
		{"submit", "x", "-n", ns, "--image", "i", "--max-restarts=-1"},
		{"submit", "x", "-n", ns, "--image", "i", "--success-policy", "Any"},
		{"submit", "x", "-n", ns, "--image", "i", "--mode", "mpi", "--success-policy", "AllWorkers"},
		{"submit", "resnet", "-n", ns, "--image", "i"},
		{"get", "nosuch", "-n", ns},
		{"logs", "resnet", "-n", ns},
		{"logs", "resnet", "-n", ns, "--worker", "5"},
		{"list", "-n", ns, "-o", "wide"},
		{"list", "--context", "nosuch"},
	} {
		_, _, err := job(args...)
		errs.WriteString("$ cachefs job " + strings.Join(args, " ") + "\n")
		if err == nil {
			errs.WriteString("(no error)\n")
		} else {
			errs.WriteString("cachefs: " + err.Error() + "\n")
		}
	}
	golden(t, "errors.txt", "", errs.String())

	// Play the controller and the kubelet: statuses, pods, an event, nodes.
	tj := &v1alpha1.TrainingJob{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "resnet"}, tj); err != nil {
		t.Fatal(err)
	}
	start := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	tj.Status = v1alpha1.TrainingJobStatus{
		Phase: v1alpha1.PhaseRunning, Reason: "Running", Message: "2 of 2 workers ready",
		Workers:   v1alpha1.ReplicaStatus{Active: 2, Ready: 2},
		StartTime: &start,
		Conditions: []metav1.Condition{
			{Type: "Valid", Status: metav1.ConditionTrue, Reason: "Valid", Message: "the spec is valid", LastTransitionTime: start},
			{Type: "Running", Status: metav1.ConditionTrue, Reason: "Running", Message: "2 of 2 workers ready", LastTransitionTime: start},
		},
	}
	if err := c.Status().Update(ctx, tj); err != nil {
		t.Fatal(err)
	}
	for _, n := range []struct {
		name string
		gpus string
	}{{"gpu-a", "8"}, {"gpu-b", "8"}, {"cpu-a", "0"}} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name}}
		if err := c.Create(ctx, node); err != nil {
			t.Fatal(err)
		}
		alloc := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64")}
		if n.gpus != "0" {
			alloc[v1alpha1.ResourceGPU] = resource.MustParse(n.gpus)
		}
		node.Status.Allocatable, node.Status.Capacity = alloc, alloc
		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
		if err := c.Status().Update(ctx, node); err != nil {
			t.Fatal(err)
		}
	}
	for i, node := range []string{"gpu-a", "gpu-b"} {
		idx := string(rune('0' + i))
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "resnet-" + idx + "-abcde", Namespace: ns, Labels: map[string]string{
				v1alpha1.LabelJobName: "resnet", v1alpha1.LabelReplica: "worker", batchCompletionIndex: idx,
			}},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: v1alpha1.ContainerName, Image: "pytorch/pytorch:2.4.0",
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{v1alpha1.ResourceGPU: resource.MustParse("4"), corev1.ResourceCPU: resource.MustParse("8")},
					Limits:   corev1.ResourceList{v1alpha1.ResourceGPU: resource.MustParse("4")},
				}}}},
		}
		if err := c.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		pod.Status.Phase = corev1.PodRunning
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: v1alpha1.ContainerName, RestartCount: int32(i)}}
		if err := c.Status().Update(ctx, pod); err != nil {
			t.Fatal(err)
		}
	}
	ev := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: "resnet.created", Namespace: ns},
		EventTime:  metav1.NewMicroTime(time.Now()), ReportingController: "jobs.epochfs.io/job-controller", ReportingInstance: "test",
		Action: "Reconcile", Reason: "Created", Type: corev1.EventTypeNormal, Note: "created Job resnet",
		Regarding: corev1.ObjectReference{APIVersion: "jobs.epochfs.io/v1alpha1", Kind: "TrainingJob", Namespace: ns, Name: "resnet", UID: tj.UID},
	}
	if err := c.Create(ctx, ev); err != nil {
		t.Fatal(err)
	}

	var b strings.Builder
	for _, args := range [][]string{
		{"list", "-n", ns},
		{"list", "-A"},
		{"get", "resnet", "-n", ns},
		{"get", "bert", "-n", ns},
		{"top"},
	} {
		out, stderr, err := job(args...)
		if err != nil {
			t.Fatalf("cachefs job %v: %v", args, err)
		}
		b.WriteString("$ cachefs job " + strings.Join(args, " ") + "\n" + out + stderr + "\n")
	}
	golden(t, "views.txt", "", submitted+"\n"+b.String())

	// -o yaml and json are the stored objects.
	for _, format := range []string{"json", "yaml"} {
		out, _, err := job("get", "resnet", "-n", ns, "-o", format)
		if err != nil || !strings.Contains(out, "kind: TrainingJob") && !strings.Contains(out, `"kind": "TrainingJob"`) {
			t.Errorf("get -o %s: %v\n%s", format, err, out)
		}
	}
	out, _, err = job("list", "-n", ns, "-o", "json")
	var list v1alpha1.TrainingJobList
	if err != nil || json.Unmarshal([]byte(out), &list) != nil || len(list.Items) != 2 || list.Items[0].Kind != "TrainingJob" {
		t.Errorf("list -o json: %v\n%s", err, out)
	}

	// KUBECONFIG and the kubeconfig's namespace work without flags.
	t.Setenv("KUBECONFIG", kube.Kubeconfig)
	out, _, err = runJob(t, "job", "list", "-A")
	if err != nil || !strings.Contains(out, "elsewhere") {
		t.Errorf("list with $KUBECONFIG: %v\n%s", err, out)
	}
	out, stderr, err := runJob(t, "job", "list") // context namespace: default
	if err != nil || out != "" || stderr != "no training jobs in namespace default\n" {
		t.Errorf("list in the context's namespace: %v %q %q", err, out, stderr)
	}

	// Suspend and resume patch spec.suspend (the controller, absent here,
	// suspends and resumes the Jobs).
	for _, tc := range []struct {
		cmd  string
		want bool
	}{{"suspend", true}, {"resume", false}} {
		out, _, err = job(tc.cmd, "bert", "-n", ns)
		if want := "trainingjob.jobs.epochfs.io/bert " + tc.cmd + "d\n"; err != nil || out != want {
			t.Errorf("%s: %v %q, want %q", tc.cmd, err, out, want)
		}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "bert"}, tj); err != nil || tj.Spec.Suspend != tc.want {
			t.Errorf("after %s: %v, spec.suspend %t", tc.cmd, err, tj.Spec.Suspend)
		}
		out, _, err = job("get", "bert", "-n", ns)
		if shown := strings.Contains(out, "true (no pods run; cachefs job resume bert)"); err != nil || shown != tc.want {
			t.Errorf("get after %s: %v, Suspend line shown %t:\n%s", tc.cmd, err, shown, out)
		}
	}
	if _, _, err := job("resume", "nosuch", "-n", ns); err == nil || !strings.Contains(err.Error(), `resume nosuch: trainingjobs.jobs.epochfs.io "nosuch" not found`) {
		t.Errorf("resume of a missing job: %v", err)
	}

	// Delete.
	out, _, err = job("delete", "resnet", "bert", "-n", ns)
	if err != nil || out != "trainingjob.jobs.epochfs.io/resnet deleted\ntrainingjob.jobs.epochfs.io/bert deleted\n" {
		t.Errorf("delete: %v\n%s", err, out)
	}
	if _, _, err := job("delete", "resnet", "-n", ns); err == nil || !strings.Contains(err.Error(), `delete resnet: trainingjobs.jobs.epochfs.io "resnet" not found`) {
		t.Errorf("second delete: %v", err)
	}
}

// startJobKube skips the test in -short mode; else it starts a
// kube-apiserver with the TrainingJob CRD and the namespaces, and returns it
// with a client that knows the job types.
func startJobKube(t *testing.T, namespaces ...string) (*testenv.Kube, client.Client) {
	t.Helper()
	if testing.Short() {
		t.Skip("kube-apiserver test skipped in -short mode")
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	kube := testenv.StartKube(t, filepath.Join(root, "deploy", "crds", "jobs.epochfs.io_trainingjobs.yaml"))
	c, err := client.New(kube.Config, client.Options{Scheme: jobScheme()})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range namespaces {
		if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	return kube, c
}

// TestReadaheadFilesFlag: --readahead-files auto (the default) leaves the
// datasets' readaheadFiles unset, a number sets it (0: off), anything else
// is refused.
func TestReadaheadFilesFlag(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // "nil", a number, or "error"
	}{{"auto", "nil"}, {"0", "0"}, {"8", "8"}, {"256", "256"}, {"257", "error"}, {"-1", "error"}, {"Auto", "error"}, {"", "error"}} {
		got, err := parseReadaheadFilesFlag(tc.in)
		s := "nil"
		switch {
		case err != nil:
			s = "error"
		case got != nil:
			s = fmt.Sprint(*got)
		}
		if s != tc.want {
			t.Errorf("parseReadaheadFilesFlag(%q) = %s (%v), want %s", tc.in, s, err, tc.want)
		}
	}
}
