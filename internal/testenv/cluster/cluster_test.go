package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/epochfs/epochfs/internal/testenv"
)

// TestClusterRunsPod starts the single-node test cluster (Start),
// imports a busybox image and runs an Indexed Job of 2 completions on it:
// the real Job controller makes the pods, the scheduler binds them, the
// kubelet runs them in containerd; their logs are read through the API
// server (which asks the kubelet); deleting the Job lets the garbage
// collector remove the pods.
//
// It is an end-to-end test: it needs root and `make cluster-tools`, takes a
// minute or more, and runs with EPOCHFS_E2E=1 (`make test`, `make e2e`)
// and under CI=true (testenv.RequireE2E), where a missing tool fails it.
func TestClusterRunsPod(t *testing.T) {
	testenv.RequireE2E(t)
	c := Start(t)
	fmt.Printf("cluster up: %.1fs (etcd, kube-apiserver, containerd, kubelet, controllers; Node Ready)\n", c.UpTime.Seconds())

	tarPath := filepath.Join(t.TempDir(), "busybox.tar")
	if err := BusyboxImage(tarPath, "epochfs-test/busybox:1"); err != nil {
		t.Fatal(err)
	}
	if err := c.ImportImage(tarPath); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	jobs := c.Client.BatchV1().Jobs("default")
	two := int32(2)
	indexed := batchv1.IndexedCompletion
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "hello"},
		Spec: batchv1.JobSpec{
			Completions: &two, Parallelism: &two, CompletionMode: &indexed,
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				HostNetwork:   true,
				RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{
					Name: "hello", Image: "docker.io/epochfs-test/busybox:1",
					ImagePullPolicy: corev1.PullNever,
					Command:         []string{"/bin/sh", "-c", "echo hello from index $JOB_COMPLETION_INDEX"},
				}},
			}},
		},
	}
	start := time.Now()
	if _, err := jobs.Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		j, err := jobs.Get(ctx, "hello", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		done := false
		for _, cond := range j.Status.Conditions {
			if cond.Status != corev1.ConditionTrue {
				continue
			}
			if cond.Type == batchv1.JobFailed {
				t.Fatalf("job failed: %s: %s", cond.Reason, cond.Message)
			}
			done = done || cond.Type == batchv1.JobComplete
		}
		if done {
			break
		}
		if ctx.Err() != nil {
			pods, _ := c.Client.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{})
			for _, p := range pods.Items {
				t.Logf("pod %s: %s %+v", p.Name, p.Status.Phase, p.Status.ContainerStatuses)
			}
			t.Fatalf("job not Complete: %+v", j.Status)
		}
		time.Sleep(250 * time.Millisecond)
	}
	fmt.Printf("indexed job of 2 completions: Complete in %.1fs\n", time.Since(start).Seconds())

	sel := metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=hello"}
	pods, err := c.Client.CoreV1().Pods("default").List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 2 {
		t.Fatalf("%d pods, want 2", len(pods.Items))
	}
	var logs []string
	for _, p := range pods.Items {
		out, err := c.Client.CoreV1().Pods("default").GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			t.Fatalf("logs of %s: %v", p.Name, err)
		}
		logs = append(logs, strings.TrimSpace(string(out)))
	}
	all := strings.Join(logs, "\n")
	for _, want := range []string{"hello from index 0", "hello from index 1"} {
		if !strings.Contains(all, want) {
			t.Errorf("logs %q lack %q", all, want)
		}
	}

	bg := metav1.DeletePropagationBackground
	if err := jobs.Delete(ctx, "hello", metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		t.Fatal(err)
	}
	for {
		pods, err := c.Client.CoreV1().Pods("default").List(ctx, sel)
		if err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("%d pods left after the Job's deletion (garbage collector)", len(pods.Items))
		}
		time.Sleep(250 * time.Millisecond)
	}
	fmt.Printf("job deleted, pods garbage-collected; total %.1fs after job create\n", time.Since(start).Seconds())
}
