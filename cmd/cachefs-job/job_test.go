package main

import (
	"bytes"
	"context"
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
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/internal/testenv/kube"
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

// testNow is the commands' clock in the tests: twenty years after the
// test binary started, so that every object the tests create is "20y" old
// (duration.HumanDuration prints whole years from 8 years on) and the
// golden files do not depend on how long a test ran.
var testNow = time.Now().AddDate(20, 0, 0)

func init() { clock = func() time.Time { return testNow } }

// golden compares got with testdata/job/NAME, or rewrites it under -update.
// The test's namespace is replaced by <ns>, and values the API server
// picks (uid, resourceVersion, creationTimestamp) by <uid>, <rv>, <time>.
func golden(t *testing.T, name, ns, got string) {
	t.Helper()
	got = stable(got)
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

var serverPicked = []struct {
	re   *regexp.Regexp
	repl string
}{
	{regexp.MustCompile(`("?uid"?: "?)[0-9a-f-]{36}`), "${1}<uid>"},
	{regexp.MustCompile(`("?resourceVersion"?: "?)[0-9]+`), "${1}<rv>"},
	{regexp.MustCompile(`("?creationTimestamp"?: "?)[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z`), "${1}<time>"},
}

// stable replaces what the API server picks in -o json and yaml output.
func stable(s string) string {
	for _, r := range serverPicked {
		s = r.re.ReplaceAllString(s, r.repl)
	}
	return s
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
		{"submit", "x", "-n", ns, "--image", "i", "--shm-size", "500m"},
		{"submit", "x", "-n", ns, "--image", "i", "--dataset", "d=/data/d:/d", "--cache-size", "500m"},
		{"submit", "x", "-n", ns, "--image", "i", "--dataset", "d=/data/d:/d", "--cache-size", "-1"},
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
		{"list", "-n", ns, "-o", "table"},
		{"get", "resnet", "-n", ns, "-o", "jsonpath={.spec}"},
		{"delete", "resnet", "-n", ns, "-o", "yaml"},
		{"suspend", "resnet", "-n", ns, "-o", "Name"},
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
		{"list", "-n", ns, "-o", "wide"},
		{"list", "-A", "-o", "wide"},
		{"list", "-n", ns, "-o", "name"},
		{"get", "resnet", "-n", ns},
		{"get", "bert", "-n", ns},
		{"get", "bert", "-n", ns, "-o", "wide"},
		{"get", "bert", "-n", ns, "-o", "name"},
		{"top"},
	} {
		out, stderr, err := job(args...)
		if err != nil {
			t.Fatalf("cachefs job %v: %v", args, err)
		}
		b.WriteString("$ cachefs job " + strings.Join(args, " ") + "\n" + out + stderr + "\n")
	}
	golden(t, "views.txt", "", submitted+"\n"+b.String())

	// -o yaml and json: every form golden, and each round-trips: it
	// decodes by its apiVersion and kind into the stored TrainingJob, and
	// an update from it is accepted (as kubectl replace -f or apply -f).
	var objs strings.Builder
	for _, args := range [][]string{
		{"get", "resnet", "-n", ns, "-o", "yaml"},
		{"get", "resnet", "-n", ns, "-o", "json"},
		{"list", "-n", ns, "-o", "yaml"},
		{"list", "-n", ns, "-o", "json"},
	} {
		out, stderr, err := job(args...)
		if err != nil {
			t.Fatalf("cachefs job %v: %v", args, err)
		}
		objs.WriteString("$ cachefs job " + strings.Join(args, " ") + "\n" + out + stderr + "\n")
		decoded, _, err := serializer.NewCodecFactory(jobScheme()).UniversalDeserializer().Decode([]byte(out), nil, nil)
		if err != nil {
			t.Fatalf("cachefs job %v: output does not decode: %v\n%s", args, err, out)
		}
		var got *v1alpha1.TrainingJob
		switch d := decoded.(type) {
		case *v1alpha1.TrainingJob:
			got = d
		case *v1alpha1.TrainingJobList:
			if len(d.Items) != 2 || d.Items[1].Name != "resnet" || d.Items[1].Kind != "TrainingJob" || d.Items[1].APIVersion != v1alpha1.GroupVersion.String() {
				t.Fatalf("cachefs job %v: items %+v", args, d.Items)
			}
			got = &d.Items[1]
		default:
			t.Fatalf("cachefs job %v: decoded a %T", args, decoded)
		}
		stored := &v1alpha1.TrainingJob{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "resnet"}, stored); err != nil {
			t.Fatal(err)
		}
		if !equality.Semantic.DeepEqual(got.Spec, stored.Spec) || !equality.Semantic.DeepEqual(got.Status, stored.Status) || got.UID != stored.UID {
			t.Errorf("cachefs job %v: decoded\n%+v\nstored\n%+v", args, got, stored)
		}
		if len(got.ManagedFields) != 0 {
			t.Errorf("cachefs job %v: managedFields printed", args)
		}
		got.Labels = map[string]string{"round-trip": "yes"}
		if err := c.Update(ctx, got); err != nil {
			t.Errorf("cachefs job %v: update from the output refused: %v", args, err)
		}
	}
	golden(t, "objects.txt", "", objs.String())

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

	// The -o forms of the commands that write.
	var writes strings.Builder
	for _, args := range [][]string{
		{"submit", "as-name", "-n", ns, "--image", "busybox", "-o", "name"},
		{"submit", "as-wide", "-n", ns, "--image", "busybox", "--dataset", "d=/data/d:/d", "-o", "wide"},
		{"submit", "as-yaml", "-n", ns, "--image", "busybox", "-o", "yaml"},
		{"submit", "as-json", "-n", ns, "--image", "busybox", "-o", "json"},
		{"submit", "dry", "-n", ns, "--image", "busybox", "--dry-run", "-o", "json"},
		{"submit", "dry", "-n", ns, "--image", "busybox", "--dry-run", "-o", "name"},
		{"submit", "dry", "-n", ns, "--image", "busybox", "--dry-run", "-o", "wide"},
		{"suspend", "as-name", "-n", ns, "-o", "name"},
		{"suspend", "as-wide", "as-yaml", "-n", ns, "-o", "yaml"},
		{"resume", "as-name", "-n", ns, "-o", "wide"},
		{"resume", "as-wide", "-n", ns, "-o", "json"},
		{"delete", "as-name", "as-wide", "-n", ns, "-o", "name"},
		{"delete", "as-yaml", "as-json", "-n", ns},
	} {
		out, stderr, err := job(args...)
		if err != nil {
			t.Fatalf("cachefs job %v: %v", args, err)
		}
		writes.WriteString("$ cachefs job " + strings.Join(args, " ") + "\n" + out + stderr + "\n")
	}
	golden(t, "writes.txt", "", writes.String())

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
func startJobKube(t *testing.T, namespaces ...string) (*kube.Server, client.Client) {
	t.Helper()
	if testing.Short() {
		t.Skip("kube-apiserver test skipped in -short mode")
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	kube := kube.Start(t, filepath.Join(root, "deploy", "crds", "jobs.epochfs.io_trainingjobs.yaml"))
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
