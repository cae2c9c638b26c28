package e2e

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/epochfs/epochfs/internal/testenv/kube"
	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
)

// TestTrainingJobDocTorchrun runs the torchrun example of docs/JOB.md
// (torch-ddp) on the real cluster, taken from the doc by name. Only what
// cannot run here changes: the image (busybox: no Python or PyTorch), the
// command (print /dev/shm's size and the environment) and the resources
// (a little CPU, and memory for the shmSize plus 64Mi).
// Each pod's environment is then read as torchrun's static rendezvous
// (--rdzv-backend=static, what a bare `torchrun` does with PET_* set) reads
// it: every PET_ variable an integer or address torchrun accepts, the same
// nnodes, nproc, master address and port in every pod, node ranks 0..n-1
// each once, the master address worker 0's own name in the job's domain,
// WORLD_SIZE pods × processes and RANK the node rank (the training
// operator's meaning), unbuffered Python, and /dev/shm of the example's
// shmSize.
func TestTrainingJobDocTorchrun(t *testing.T) {
	requireE2E(t)
	tj := &v1alpha1.TrainingJob{}
	if err := yaml.UnmarshalStrict(kube.DocExample(t, "docs/JOB.md", "TrainingJob", "torch-ddp"), tj); err != nil {
		t.Fatalf("docs/JOB.md example torch-ddp: %v", err)
	}
	if tj.Spec.Mode != v1alpha1.ModePyTorch || tj.Spec.NprocPerNode == nil || tj.Spec.ShmSize == nil ||
		len(tj.Spec.Command) == 0 || tj.Spec.Command[0] != "torchrun" {
		t.Fatalf("the example is no longer a bare torchrun with nprocPerNode and shmSize: %+v", tj.Spec)
	}
	workers, nproc := int(tj.Spec.Workers), int(*tj.Spec.NprocPerNode)
	shmKiB := tj.Spec.ShmSize.Value() / 1024
	e := installJobController(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	name := tj.Name
	tj.Namespace = jobNamespace
	tj.Spec.Image, tj.Spec.ImagePullPolicy = e.readerImage, corev1.PullNever
	tj.Spec.Command = []string{"sh", "-c", `df -k /dev/shm | tail -n 1; env`}
	tj.Spec.Args = nil
	// The kubelet sizes a memory-backed emptyDir at the smaller of its
	// sizeLimit and the pod's memory limit: leave room for the shmSize.
	mem := tj.Spec.ShmSize.DeepCopy()
	mem.Add(*ptrQuantity("64Mi"))
	tj.Spec.Resources = v1alpha1.WorkerResources{CPU: ptrQuantity("50m"), Memory: &mem}
	if err := e.tj.Create(ctx, tj); err != nil {
		t.Fatalf("create the example: %v", err)
	}
	e.waitPhase(ctx, t, name, v1alpha1.PhaseSucceeded)

	atoi := func(w int, k, v string) int {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			t.Errorf("worker %d: %s=%q is not what torchrun parses (a non-negative integer)", w, k, v)
		}
		return n
	}
	ranks := map[int]bool{}
	var master string
	for i := range workers {
		out := e.mustJob(t, "logs", name, "--worker", strconv.Itoa(i))
		first, rest, _ := strings.Cut(out, "\n")
		if f := strings.Fields(first); len(f) != 6 || f[5] != "/dev/shm" || f[1] != strconv.FormatInt(shmKiB, 10) {
			t.Errorf("worker %d: /dev/shm %q, want %d 1K-blocks (the example's shmSize %s)", i, first, shmKiB, tj.Spec.ShmSize)
		}
		env := map[string]string{}
		for _, line := range strings.Split(rest, "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				env[k] = v
			}
		}
		if n := atoi(i, "PET_NNODES", env["PET_NNODES"]); n != workers {
			t.Errorf("worker %d: PET_NNODES %d, want %d pods", i, n, workers)
		}
		if n := atoi(i, "PET_NPROC_PER_NODE", env["PET_NPROC_PER_NODE"]); n != nproc {
			t.Errorf("worker %d: PET_NPROC_PER_NODE %d, want nprocPerNode %d", i, n, nproc)
		}
		rank := atoi(i, "PET_NODE_RANK", env["PET_NODE_RANK"])
		if rank >= workers || ranks[rank] {
			t.Errorf("worker %d: PET_NODE_RANK %d out of 0..%d or taken twice", i, rank, workers-1)
		}
		ranks[rank] = true
		if port := atoi(i, "PET_MASTER_PORT", env["PET_MASTER_PORT"]); port < 1 || port > 65535 || env["MASTER_PORT"] != env["PET_MASTER_PORT"] {
			t.Errorf("worker %d: PET_MASTER_PORT %q, MASTER_PORT %q", i, env["PET_MASTER_PORT"], env["MASTER_PORT"])
		}
		addr := env["PET_MASTER_ADDR"] + ":" + env["PET_MASTER_PORT"]
		if master == "" {
			master = addr
		} else if addr != master {
			t.Errorf("worker %d: master %s, another pod's is %s", i, addr, master)
		}
		if env["MASTER_ADDR"] != env["PET_MASTER_ADDR"] {
			t.Errorf("worker %d: MASTER_ADDR %q, PET_MASTER_ADDR %q", i, env["MASTER_ADDR"], env["PET_MASTER_ADDR"])
		}
		// Rank 0's own name in the headless Service's domain: the rendezvous
		// store listens there.
		if rank == 0 && env["PET_MASTER_ADDR"] != env["HOSTNAME"]+"."+name {
			t.Errorf("node rank 0: PET_MASTER_ADDR %q, want its own name %s.%s", env["PET_MASTER_ADDR"], env["HOSTNAME"], name)
		}
		if ws := atoi(i, "WORLD_SIZE", env["WORLD_SIZE"]); ws != workers*nproc {
			t.Errorf("worker %d: WORLD_SIZE %d, want %d pods × %d processes", i, ws, workers, nproc)
		}
		if env["RANK"] != env["PET_NODE_RANK"] || env["PYTHONUNBUFFERED"] != "1" {
			t.Errorf("worker %d: RANK %q (want the node rank %q), PYTHONUNBUFFERED %q", i, env["RANK"], env["PET_NODE_RANK"], env["PYTHONUNBUFFERED"])
		}
	}
	if len(ranks) != workers {
		t.Errorf("node ranks %v, want 0..%d", ranks, workers-1)
	}
}
