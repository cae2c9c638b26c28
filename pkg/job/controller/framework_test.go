package controller

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	clusterenv "github.com/epochfs/epochfs/internal/testenv/cluster"
	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
)

// render plans tj and returns the pod template of its replica.
func render(t *testing.T, tj *v1alpha1.TrainingJob, replica string) corev1.PodTemplateSpec {
	t.Helper()
	p, err := newPlan(tj)
	if err != nil {
		t.Fatal(err)
	}
	return p.job(replica, Schedulers{Volcano: "volcano", SchedulerPlugins: "sp"}).Spec.Template
}

func testJob(name string, spec v1alpha1.TrainingJobSpec) *v1alpha1.TrainingJob {
	if spec.Image == "" {
		spec.Image = "x"
	}
	return &v1alpha1.TrainingJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml"}, Spec: spec}
}

// trainer returns the trainer container of a pod template.
func trainer(t *testing.T, tmpl corev1.PodTemplateSpec) *corev1.Container {
	t.Helper()
	for i, c := range tmpl.Spec.Containers {
		if c.Name == v1alpha1.ContainerName {
			return &tmpl.Spec.Containers[i]
		}
	}
	t.Fatalf("no %s container in %v", v1alpha1.ContainerName, tmpl.Spec.Containers)
	return nil
}

// shmOf returns the size of the memory-backed /dev/shm of a pod template,
// nil when it has none.
func shmOf(t *testing.T, tmpl corev1.PodTemplateSpec) *resource.Quantity {
	t.Helper()
	var mount *corev1.VolumeMount
	c := trainer(t, tmpl)
	for i, m := range c.VolumeMounts {
		if m.MountPath == "/dev/shm" {
			mount = &c.VolumeMounts[i]
		}
	}
	if mount == nil {
		return nil
	}
	for _, v := range tmpl.Spec.Volumes {
		if v.Name == mount.Name {
			if v.EmptyDir == nil || v.EmptyDir.Medium != corev1.StorageMediumMemory || v.EmptyDir.SizeLimit == nil {
				t.Fatalf("/dev/shm is volume %+v, want a memory-backed emptyDir with a sizeLimit", v)
			}
			if mount.ReadOnly {
				t.Errorf("/dev/shm mounted read-only")
			}
			return v.EmptyDir.SizeLimit
		}
	}
	t.Fatalf("/dev/shm mounts volume %q, which the pod does not have", mount.Name)
	return nil
}

func TestShmSize(t *testing.T) {
	for _, tc := range []struct {
		shm  *resource.Quantity
		want string // "" for no /dev/shm volume
	}{
		{nil, "2Gi"},
		{ptr.To(resource.MustParse("16Gi")), "16Gi"},
		{ptr.To(resource.MustParse("0")), ""},
	} {
		tj := testJob("j", v1alpha1.TrainingJobSpec{Workers: 2, Mode: v1alpha1.ModeTensorFlow, ParameterServers: 1, ShmSize: tc.shm})
		for _, replica := range []string{v1alpha1.ReplicaWorker, v1alpha1.ReplicaPS} {
			got := shmOf(t, render(t, tj, replica))
			switch {
			case tc.want == "" && got != nil:
				t.Errorf("shmSize %v: %s /dev/shm %v, want none", tc.shm, replica, got)
			case tc.want != "" && (got == nil || got.Cmp(resource.MustParse(tc.want)) != 0):
				t.Errorf("shmSize %v: %s /dev/shm %v, want %s", tc.shm, replica, got, tc.want)
			}
		}
	}
	// What the API server's rules refuse, the controller refuses too.
	for shm, want := range map[string]string{"-1": "shmSize -1 is negative", "500m": "shmSize 500m is not a whole number of bytes"} {
		_, err := newPlan(testJob("j", v1alpha1.TrainingJobSpec{Workers: 1, ShmSize: ptr.To(resource.MustParse(shm))}))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("shmSize %s: %v, want %q", shm, err, want)
		}
	}
}

// podEnv is the environment the kubelet gives the trainer container of the
// pod with completion index i of a Job with template tmpl: values from the
// completion-index annotation resolved, and $(VAR) expanded from the
// variables defined before, as the kubelet does ($$ is a literal $, an
// undefined $(VAR) stays as it is). A later definition of a name replaces
// the earlier one.
func podEnv(t *testing.T, tmpl corev1.PodTemplateSpec, i int) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, v := range trainer(t, tmpl).Env {
		val := v.Value
		if v.ValueFrom != nil {
			if fr := v.ValueFrom.FieldRef; fr == nil || fr.FieldPath != "metadata.annotations['"+completionIndexAnnotation+"']" {
				t.Fatalf("env %s from %+v: only the completion index is known here", v.Name, v.ValueFrom)
			}
			val = strconv.Itoa(i)
		}
		env[v.Name] = expand(val, env)
	}
	return env
}

func expand(s string, env map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
			continue
		case '(':
			if end := strings.IndexByte(s[i:], ')'); end > 0 {
				name := s[i+2 : i+end]
				if v, ok := env[name]; ok {
					b.WriteString(v)
				} else {
					b.WriteString(s[i : i+end+1])
				}
				i += end
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// hostOf is the name other pods reach pod i of a Job by: its hostname
// (JOB-i, set by the Job controller for Indexed Jobs) in the template's
// subdomain (the headless Service), relative to the namespace.
func hostOf(job string, tmpl corev1.PodTemplateSpec, i int) string {
	return fmt.Sprintf("%s-%d.%s", job, i, tmpl.Spec.Subdomain)
}

// torchrunArgs are the rendezvous arguments torchrun takes from PET_*
// variables when they are not on its command line (torch.distributed.run:
// every flag's default is env PET_<FLAG>), parsed and checked by its rules.
type torchrunArgs struct {
	minNodes, maxNodes, nproc, nodeRank int
	masterAddr                          string
	masterPort                          int
}

func parseTorchrun(env map[string]string) (torchrunArgs, error) {
	a := torchrunArgs{nproc: 1, masterAddr: "127.0.0.1", masterPort: 29500}
	nn, ok := env["PET_NNODES"]
	if !ok {
		nn = "1:1"
	}
	// parse_min_max_nnodes: "N" or "MIN:MAX".
	lo, hi, colon := strings.Cut(nn, ":")
	if !colon {
		hi = lo
	}
	var err error
	if a.minNodes, err = strconv.Atoi(lo); err != nil {
		return a, fmt.Errorf("PET_NNODES %q: %v", nn, err)
	}
	if a.maxNodes, err = strconv.Atoi(hi); err != nil {
		return a, fmt.Errorf("PET_NNODES %q: %v", nn, err)
	}
	if v, ok := env["PET_NPROC_PER_NODE"]; ok {
		// "auto", "cpu", "gpu" are torchrun's too, but then WORLD_SIZE
		// cannot be known here: the controller always writes a number.
		if a.nproc, err = strconv.Atoi(v); err != nil || a.nproc < 1 {
			return a, fmt.Errorf("PET_NPROC_PER_NODE %q is not a positive number", v)
		}
	}
	if v, ok := env["PET_NODE_RANK"]; ok {
		if a.nodeRank, err = strconv.Atoi(v); err != nil {
			return a, fmt.Errorf("PET_NODE_RANK %q: %v", v, err)
		}
	}
	if v, ok := env["PET_MASTER_ADDR"]; ok {
		a.masterAddr = v
	}
	if v, ok := env["PET_MASTER_PORT"]; ok {
		if a.masterPort, err = strconv.Atoi(v); err != nil {
			return a, fmt.Errorf("PET_MASTER_PORT %q: %v", v, err)
		}
	}
	// The static rendezvous (torchrun's default backend without
	// --rdzv-endpoint, which then is master_addr:master_port) needs a
	// fixed number of nodes and a node rank below it.
	if _, ok := env["PET_RDZV_ENDPOINT"]; ok {
		return a, fmt.Errorf("PET_RDZV_ENDPOINT set: not the static rendezvous")
	}
	if a.minNodes != a.maxNodes || a.minNodes < 1 {
		return a, fmt.Errorf("static rendezvous needs a fixed nnodes, got %s", nn)
	}
	if a.nodeRank < 0 || a.nodeRank >= a.maxNodes {
		return a, fmt.Errorf("node_rank %d outside 0..%d", a.nodeRank, a.maxNodes-1)
	}
	return a, nil
}

// TestTorchEnv renders PyTorch jobs and checks every worker's environment
// as torchrun (PET_*, static rendezvous) and torch.distributed's env://
// (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE) would read it, with the
// training operator's meaning of WORLD_SIZE (pods × nprocPerNode).
func TestTorchEnv(t *testing.T) {
	for _, tc := range []struct {
		name        string
		workers     int32
		gpus        int32
		nproc       *int32
		port        int32
		wantNproc   int
		wantPort    int
		wantUnbuffd string
		env         []corev1.EnvVar
	}{
		{name: "cpu", workers: 2, wantNproc: 1, wantPort: 29500},
		{name: "gpus", workers: 3, gpus: 8, wantNproc: 8, wantPort: 29500},
		{name: "nproc", workers: 4, gpus: 8, nproc: ptr.To[int32](2), port: 23456, wantNproc: 2, wantPort: 23456},
		{name: "one", workers: 1, wantNproc: 1, wantPort: 29500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tj := testJob("resnet", v1alpha1.TrainingJobSpec{Workers: tc.workers, Mode: v1alpha1.ModePyTorch, Port: tc.port,
				NprocPerNode: tc.nproc, Resources: v1alpha1.WorkerResources{GPUs: tc.gpus}})
			p, err := newPlan(tj)
			if err != nil {
				t.Fatal(err)
			}
			job := p.job(v1alpha1.ReplicaWorker, Schedulers{})
			tmpl := job.Spec.Template
			ranks := map[int]bool{}
			var master string
			for i := range int(tc.workers) {
				env := podEnv(t, tmpl, i)
				a, err := parseTorchrun(env)
				if err != nil {
					t.Fatalf("worker %d: torchrun would refuse its environment: %v", i, err)
				}
				if a.maxNodes != int(tc.workers) || a.nproc != tc.wantNproc || a.masterPort != tc.wantPort {
					t.Errorf("worker %d: torchrun nnodes %d nproc %d port %d, want %d, %d, %d", i, a.maxNodes, a.nproc, a.masterPort, tc.workers, tc.wantNproc, tc.wantPort)
				}
				ranks[a.nodeRank] = true
				addr := fmt.Sprintf("%s:%d", a.masterAddr, a.masterPort)
				if master == "" {
					master = addr
				} else if addr != master {
					t.Errorf("worker %d: master %s, worker 0 says %s", i, addr, master)
				}
				if a.nodeRank == 0 && a.masterAddr != hostOf(job.Name, tmpl, i) {
					t.Errorf("master address %s is not node rank 0's pod %s", a.masterAddr, hostOf(job.Name, tmpl, i))
				}
				// env:// (init_process_group without torchrun).
				rank, err1 := strconv.Atoi(env["RANK"])
				world, err2 := strconv.Atoi(env["WORLD_SIZE"])
				port, err3 := strconv.Atoi(env["MASTER_PORT"])
				if err := errors.Join(err1, err2, err3); err != nil {
					t.Fatalf("worker %d: env:// variables: %v", i, err)
				}
				if env["MASTER_ADDR"] != a.masterAddr || port != a.masterPort || rank != a.nodeRank {
					t.Errorf("worker %d: MASTER_ADDR %s MASTER_PORT %d RANK %d disagree with torchrun's %+v", i, env["MASTER_ADDR"], port, rank, a)
				}
				if world != a.maxNodes*a.nproc {
					t.Errorf("worker %d: WORLD_SIZE %d, want nnodes × nproc_per_node = %d", i, world, a.maxNodes*a.nproc)
				}
				// Process ranks torchrun gives this pod's processes
				// (node_rank × nproc + local_rank) lie inside the world.
				if last := a.nodeRank*a.nproc + a.nproc - 1; last >= world {
					t.Errorf("worker %d: process rank %d outside WORLD_SIZE %d", i, last, world)
				}
				if env["PYTHONUNBUFFERED"] != "1" {
					t.Errorf("worker %d: PYTHONUNBUFFERED %q, want 1", i, env["PYTHONUNBUFFERED"])
				}
			}
			if len(ranks) != int(tc.workers) {
				t.Errorf("node ranks %v: want each of 0..%d once", ranks, tc.workers-1)
			}
		})
	}
	// spec.env comes last: it can turn buffering back on or move the port.
	tj := testJob("j", v1alpha1.TrainingJobSpec{Workers: 1, Mode: v1alpha1.ModePyTorch,
		Env: []corev1.EnvVar{{Name: "PYTHONUNBUFFERED", Value: ""}, {Name: "PET_NPROC_PER_NODE", Value: "4"}}})
	env := podEnv(t, render(t, tj, v1alpha1.ReplicaWorker), 0)
	if env["PYTHONUNBUFFERED"] != "" || env["PET_NPROC_PER_NODE"] != "4" {
		t.Errorf("spec.env does not override: PYTHONUNBUFFERED %q PET_NPROC_PER_NODE %q", env["PYTHONUNBUFFERED"], env["PET_NPROC_PER_NODE"])
	}
	// nprocPerNode 0 (the CRD refuses it first) and outside pytorch.
	for _, spec := range []v1alpha1.TrainingJobSpec{
		{Workers: 1, Mode: v1alpha1.ModePyTorch, NprocPerNode: ptr.To[int32](0)},
		{Workers: 1, Mode: v1alpha1.ModeMPI, NprocPerNode: ptr.To[int32](2)},
	} {
		if _, err := newPlan(testJob("j", spec)); err == nil || !strings.Contains(err.Error(), "nprocPerNode") {
			t.Errorf("mode %s nprocPerNode %d: %v, want a refusal naming nprocPerNode", spec.Mode, *spec.NprocPerNode, err)
		}
	}
}

// TestTensorFlowEnv parses every pod's TF_CONFIG as TensorFlow does and
// checks that the cluster is the same everywhere, lists each pod at its own
// address under its own task, and that each task is taken by one pod.
func TestTensorFlowEnv(t *testing.T) {
	for _, ps := range []int32{0, 2} {
		for _, chief := range []bool{false, true} {
			spec := v1alpha1.TrainingJobSpec{Workers: 3, Mode: v1alpha1.ModeTensorFlow, ParameterServers: ps}
			if chief {
				spec.TensorFlow = &v1alpha1.TensorFlowSpec{Chief: true}
			}
			t.Run(fmt.Sprintf("ps=%d,chief=%v", ps, chief), func(t *testing.T) {
				checkTFConfig(t, testJob("wide", spec), 3, ps)
			})
		}
	}
}

// TestTensorFlowChief: with tensorflow.chief the chief is one pod of its
// own Job, shaped as a worker (template, requests), counted in the gang,
// and no successPolicy is set on the workers' Job (the chief decides).
func TestTensorFlowChief(t *testing.T) {
	tj := testJob("est", v1alpha1.TrainingJobSpec{Workers: 2, Mode: v1alpha1.ModeTensorFlow, ParameterServers: 1,
		TensorFlow: &v1alpha1.TensorFlowSpec{Chief: true}, Resources: v1alpha1.WorkerResources{GPUs: 2},
		Worker: &v1alpha1.ReplicaSpec{Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"role": "trainer"}}}}})
	p, err := newPlan(tj)
	if err != nil {
		t.Fatal(err)
	}
	chief := p.job(v1alpha1.ReplicaChief, Schedulers{Volcano: "volcano"})
	if chief.Name != "est-chief" || *chief.Spec.Completions != 1 || *chief.Spec.Parallelism != 1 || chief.Spec.SuccessPolicy != nil {
		t.Errorf("chief Job %s: completions %d, parallelism %d, successPolicy %v", chief.Name, *chief.Spec.Completions, *chief.Spec.Parallelism, chief.Spec.SuccessPolicy)
	}
	if chief.Labels[v1alpha1.LabelReplica] != v1alpha1.ReplicaChief || chief.Spec.Template.Labels[v1alpha1.LabelReplica] != v1alpha1.ReplicaChief ||
		chief.Spec.Template.Labels["role"] != "trainer" {
		t.Errorf("chief labels %v, pod labels %v", chief.Labels, chief.Spec.Template.Labels)
	}
	if g := trainer(t, chief.Spec.Template).Resources.Limits[v1alpha1.ResourceGPU]; g.Value() != 2 {
		t.Errorf("chief GPUs %v, want a worker's 2", g)
	}
	if w := p.job(v1alpha1.ReplicaWorker, Schedulers{}); w.Spec.SuccessPolicy != nil || *w.Spec.Completions != 2 {
		t.Errorf("workers' Job: successPolicy %v, completions %d", w.Spec.SuccessPolicy, *w.Spec.Completions)
	}
	if p.minMember != 4 || len(p.gangPods()) != 4 {
		t.Errorf("gang: minMember %d, pods %d; want 4 (2 workers, 1 ps, the chief)", p.minMember, len(p.gangPods()))
	}
	if _, err := newPlan(testJob("x", v1alpha1.TrainingJobSpec{Workers: 2, Mode: v1alpha1.ModePyTorch, TensorFlow: &v1alpha1.TensorFlowSpec{Chief: true}})); err == nil {
		t.Error("tensorflow.chief in mode pytorch: accepted")
	}
}

// checkTFConfig reads the TF_CONFIG of every pod of tj (workers workers,
// ps parameter servers) as TensorFlow does.
func checkTFConfig(t *testing.T, tj *v1alpha1.TrainingJob, workers, ps int32) {
	t.Helper()
	{
		p, err := newPlan(tj)
		if err != nil {
			t.Fatal(err)
		}
		var cluster map[string][]string
		tasks := map[string]bool{}
		for _, replica := range []string{v1alpha1.ReplicaWorker, v1alpha1.ReplicaPS, v1alpha1.ReplicaChief} {
			job := p.job(replica, Schedulers{})
			n := int(*job.Spec.Completions)
			if (replica == v1alpha1.ReplicaPS && ps == 0) || (replica == v1alpha1.ReplicaChief && !p.chief) {
				continue
			}
			for i := range n {
				env := podEnv(t, job.Spec.Template, i)
				var c clusterenv.TFConfig
				dec := json.NewDecoder(strings.NewReader(env["TF_CONFIG"]))
				dec.DisallowUnknownFields()
				if err := dec.Decode(&c); err != nil {
					t.Fatalf("%s %d: TF_CONFIG %q: %v", replica, i, env["TF_CONFIG"], err)
				}
				if cluster == nil {
					cluster = c.Cluster
				} else if !reflect.DeepEqual(cluster, c.Cluster) {
					t.Errorf("%s %d: cluster %v, others have %v", replica, i, c.Cluster, cluster)
				}
				if c.Task.Index == nil {
					t.Fatalf("%s %d: task without index: %s", replica, i, env["TF_CONFIG"])
				}
				addrs, ok := c.Cluster[c.Task.Type]
				if !ok || *c.Task.Index < 0 || *c.Task.Index >= len(addrs) {
					t.Fatalf("%s %d: task %s/%d not in cluster %v", replica, i, c.Task.Type, *c.Task.Index, c.Cluster)
				}
				if want := fmt.Sprintf("%s:%d", hostOf(job.Name, job.Spec.Template, i), defaultTFPort); addrs[*c.Task.Index] != want {
					t.Errorf("%s %d: its own address %s, want %s", replica, i, addrs[*c.Task.Index], want)
				}
				key := fmt.Sprintf("%s/%d", c.Task.Type, *c.Task.Index)
				if tasks[key] {
					t.Errorf("task %s taken twice", key)
				}
				tasks[key] = true
				if c.Environment != "cloud" {
					t.Errorf("environment %q, want cloud (as tf-operator)", c.Environment)
				}
			}
		}
		// Without tensorflow.chief no chief (TensorFlow's
		// MultiWorkerMirroredStrategy then takes worker 0 as chief), with it
		// exactly one; ps only when there are parameter servers; no other
		// task types.
		chiefs := 0
		if p.chief {
			chiefs = 1
			if !tasks["chief/0"] {
				t.Errorf("no pod is task chief/0: %v", tasks)
			}
		}
		if len(cluster["chief"]) != chiefs || len(cluster["worker"]) != int(workers) || len(cluster["ps"]) != int(ps) {
			t.Errorf("cluster %v: want %d workers, %d ps, %d chief", cluster, workers, ps, chiefs)
		}
		for typ := range cluster {
			if typ != "chief" && typ != "worker" && typ != "ps" {
				t.Errorf("cluster has task type %q", typ)
			}
		}
		if len(tasks) != int(workers+ps)+chiefs {
			t.Errorf("tasks %v", tasks)
		}
	}
}

// mcaParams reads the MCA parameters of one framework from the environment
// as Open MPI's and PRRTE's MCA base do: variables PREFIX + FRAMEWORK_NAME.
func mcaParams(env map[string]string, prefix, framework string) map[string]string {
	out := map[string]string{}
	for k, v := range env {
		if name, ok := strings.CutPrefix(k, prefix+framework+"_"); ok {
			out[name] = v
		}
	}
	return out
}

// TestMPIEnv reads the hostfile as Open MPI does (one host per line,
// slots=N) and checks it names every worker's address with its GPUs as
// slots, and that the OMPI_* variables point at it.
func TestMPIEnv(t *testing.T) {
	tj := testJob("ar", v1alpha1.TrainingJobSpec{Workers: 3, Mode: v1alpha1.ModeMPI, Resources: v1alpha1.WorkerResources{GPUs: 4}})
	p, err := newPlan(tj)
	if err != nil {
		t.Fatal(err)
	}
	job := p.job(v1alpha1.ReplicaWorker, Schedulers{})
	cm := p.hostfile()
	var mountDir string
	for _, m := range job.Spec.Template.Spec.Containers[0].VolumeMounts {
		for _, v := range job.Spec.Template.Spec.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil && v.ConfigMap.Name == cm.Name {
				mountDir = m.MountPath
			}
		}
	}
	total := 0
	for i, line := range strings.Split(strings.TrimSpace(cm.Data["hostfile"]), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 || !strings.HasPrefix(f[1], "slots=") {
			t.Fatalf("hostfile line %q", line)
		}
		n, err := strconv.Atoi(strings.TrimPrefix(f[1], "slots="))
		if err != nil || n != 4 {
			t.Errorf("hostfile line %q: want slots=4", line)
		}
		total += n
		if f[0] != hostOf(job.Name, job.Spec.Template, i) {
			t.Errorf("hostfile host %d %s, want %s", i, f[0], hostOf(job.Name, job.Spec.Template, i))
		}
	}
	if total != 12 {
		t.Errorf("hostfile slots %d, want 12", total)
	}
	for i := range 3 {
		env := podEnv(t, job.Spec.Template, i)
		if mountDir == "" || env["OMPI_MCA_orte_default_hostfile"] != mountDir+"/hostfile" {
			t.Errorf("OMPI_MCA_orte_default_hostfile %q, hostfile mounted at %q", env["OMPI_MCA_orte_default_hostfile"], mountDir)
		}
		if env["OMPI_MCA_orte_set_default_slots"] != "4" || env["OMPI_MCA_orte_keep_fqdn_hostnames"] != "true" ||
			env["RANK"] != strconv.Itoa(i) || env["WORLD_SIZE"] != "3" || env["PYTHONUNBUFFERED"] != "1" {
			t.Errorf("worker %d env %v", i, env)
		}
		// Open MPI 5 (PRRTE): each launch setting Open MPI 4 reads as
		// orte_NAME (OMPI_MCA_orte_NAME), PRRTE reads as prte_NAME from
		// PRTE_MCA_prte_NAME, with the same value; nothing else is set.
		prte := mcaParams(env, "PRTE_MCA_", "prte")
		if orte := mcaParams(env, "OMPI_MCA_", "orte"); len(orte) != 3 || !reflect.DeepEqual(prte, orte) {
			t.Errorf("worker %d: PRRTE's parameters %v, Open MPI 4's %v", i, prte, orte)
		}
		if prte["default_hostfile"] != mountDir+"/hostfile" || prte["set_default_slots"] != "4" || prte["keep_fqdn_hostnames"] != "true" {
			t.Errorf("worker %d: PRRTE's parameters %v", i, prte)
		}
	}
}
