package controller

import (
	"context"
	"strconv"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/epochfs/epochfs/internal/testenv/kube"
	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
)

// docExample returns the TrainingJob example of docs/JOB.md named name,
// decoded strictly (an unknown field fails).
func docExample(t *testing.T, name string) *v1alpha1.TrainingJob {
	t.Helper()
	tj := &v1alpha1.TrainingJob{}
	if err := yaml.UnmarshalStrict(kube.DocExample(t, "docs/JOB.md", "TrainingJob", name), tj); err != nil {
		t.Fatalf("docs/JOB.md example %s: %v", name, err)
	}
	return tj
}

// TestDocExample: the examples of docs/JOB.md (the minimal one of "In
// short" and the full ones) pass a server-side dry run against the CRD, and
// the full example's workers' environment is what a bare `torchrun
// train.py` needs (4 nodes of 8 processes, WORLD_SIZE 32).
func TestDocExample(t *testing.T) {
	tj := docExample(t, "resnet")
	tf := docExample(t, "tf-wide")
	ddp := docExample(t, "torch-ddp")
	minimal := docExample(t, "mnist")
	checkTFConfig(t, tf, 4, 2)
	p, err := newPlan(tj)
	if err != nil {
		t.Fatal(err)
	}
	job := p.job(v1alpha1.ReplicaWorker, Schedulers{})
	if got := job.Spec.Template.Spec.Containers[0].Command; len(got) != 1 || got[0] != "torchrun" {
		t.Errorf("the example runs %v, want a bare torchrun", got)
	}
	for i := range int(tj.Spec.Workers) {
		env := podEnv(t, job.Spec.Template, i)
		a, err := parseTorchrun(env)
		if err != nil {
			t.Fatalf("worker %d: %v", i, err)
		}
		if a.maxNodes != 4 || a.nproc != 8 || a.nodeRank != i || env["WORLD_SIZE"] != strconv.Itoa(32) || a.masterAddr != hostOf(job.Name, job.Spec.Template, 0) {
			t.Errorf("worker %d: torchrun %+v WORLD_SIZE %s", i, a, env["WORLD_SIZE"])
		}
	}
	if q := shmOf(t, job.Spec.Template); q == nil || q.String() != "16Gi" {
		t.Errorf("/dev/shm %v, want the example's 16Gi", q)
	}

	e := startEnv(t)
	tj.Namespace = e.namespace(t)
	for _, ex := range []*v1alpha1.TrainingJob{tj, tf, ddp, minimal} {
		ex.Namespace = tj.Namespace
		if err := e.c.Create(context.Background(), ex, client.DryRunAll); err != nil {
			t.Fatalf("the API server refuses the example %s: %v", ex.Name, err)
		}
	}
}
