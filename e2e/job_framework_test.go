package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
)

// TestTrainingJobSuspendedTorchEnv submits a 2-worker PyTorch-mode job
// suspended, with --shm-size, on the real cluster: for 15 s (several
// reconciles, a real Job controller) no pod exists; `cachefs job resume`
// starts it, and each worker prints the size of its /dev/shm (df, as the
// container sees it: the tmpfs the kubelet mounted) and its environment,
// which must be torchrun's static rendezvous for 2 nodes with this pod's
// node rank and worker 0 as master, and unbuffered Python. A worker pod
// template (--worker-template) adds a writable emptyDir for checkpoints,
// which each worker writes and reads back, and a label.
func TestTrainingJobSuspendedTorchEnv(t *testing.T) {
	requireE2E(t)
	e := installJobController(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const name, workers = "torch", 2
	// A worker template with a writable emptyDir for checkpoints.
	tmpl := filepath.Join(t.TempDir(), "worker.yaml")
	if err := os.WriteFile(tmpl, []byte(`
metadata:
  labels:
    app: torch-e2e
spec:
  containers:
  - name: trainer
    volumeMounts:
    - name: checkpoints
      mountPath: /ckpt
  volumes:
  - name: checkpoints
    emptyDir:
      sizeLimit: 16Mi
`), 0o644); err != nil {
		t.Fatal(err)
	}
	e.mustJob(t, "submit", name, "--image", e.readerImage, "--image-pull-policy", "Never",
		"--workers", strconv.Itoa(workers), "--mode", "pytorch", "--cpu", "100m", "--memory", "256Mi",
		"--shm-size", "128Mi", "--suspend", "--worker-template", tmpl,
		"--", "sh", "-c", `df -k /dev/shm | tail -n 1; echo "step 1" > /ckpt/last && echo "checkpoint $(cat /ckpt/last)"; env`)
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		pods, err := e.c.Client.CoreV1().Pods(jobNamespace).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelJobName + "=" + name})
		if err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) > 0 {
			t.Fatalf("suspended job has pod %s", pods.Items[0].Name)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if tj := e.trainingJob(ctx, t, name); tj.Status.Phase != v1alpha1.PhasePending || tj.Status.Reason != "Suspended" {
		t.Errorf("suspended job: %s/%s: %s", tj.Status.Phase, tj.Status.Reason, tj.Status.Message)
	}
	j, err := e.c.Client.BatchV1().Jobs(jobNamespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil || j.Spec.Suspend == nil || !*j.Spec.Suspend {
		t.Fatalf("Job %s: %v, suspend %v", name, err, j.Spec.Suspend)
	}
	if out := e.mustJob(t, "resume", name); !strings.Contains(out, name+" resumed") {
		t.Errorf("resume printed %q", out)
	}
	e.waitPhase(ctx, t, name, v1alpha1.PhaseSucceeded)
	pods, err := e.c.Client.CoreV1().Pods(jobNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=torch-e2e," + v1alpha1.LabelJobName + "=" + name})
	if err != nil || len(pods.Items) != workers {
		t.Errorf("pods with the template's label: %v, %d, want %d", err, len(pods.Items), workers)
	}

	for i := range workers {
		out := e.mustJob(t, "logs", name, "--worker", strconv.Itoa(i))
		first, rest, _ := strings.Cut(out, "\n")
		ckpt, rest, _ := strings.Cut(rest, "\n")
		if ckpt != "checkpoint step 1" {
			t.Errorf("worker %d: %q, want the checkpoint written to and read from the template's writable volume", i, ckpt)
		}
		// busybox df -k: Filesystem 1K-blocks Used Available Use% Mounted-on.
		f := strings.Fields(first)
		if len(f) != 6 || f[5] != "/dev/shm" || f[1] != strconv.Itoa(128*1024) {
			t.Errorf("worker %d: /dev/shm %q, want 131072 1K-blocks (128Mi)", i, first)
		}
		env := map[string]string{}
		for _, line := range strings.Split(rest, "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				env[k] = v
			}
		}
		rank := strconv.Itoa(i)
		for k, want := range map[string]string{
			"PET_NNODES": "2", "PET_NPROC_PER_NODE": "1", "PET_NODE_RANK": rank, "PET_MASTER_ADDR": name + "-0." + name,
			"PET_MASTER_PORT": "29500", "MASTER_ADDR": name + "-0." + name, "MASTER_PORT": "29500",
			"WORLD_SIZE": "2", "RANK": rank, "PYTHONUNBUFFERED": "1",
		} {
			if env[k] != want {
				t.Errorf("worker %d: %s=%q, want %q", i, k, env[k], want)
			}
		}
		// The pod's own hostname is its node rank's name in the Service's
		// domain, so PET_MASTER_ADDR is worker 0's own name.
		if host := env["HOSTNAME"]; host != name+"-"+rank {
			t.Errorf("worker %d: HOSTNAME %q, want %s-%s", i, host, name, rank)
		}
	}
}
