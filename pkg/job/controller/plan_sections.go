package controller

// The per-section validators of newPlan (plan.go): each checks one part
// of the spec, applies its defaults and fills its fields of the plan.

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/epochfs/epochfs/pkg/cachelabel"
	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
	"github.com/epochfs/epochfs/pkg/units"
	"github.com/epochfs/epochfs/pkg/volattr"
)

// planReplicas: mode, image, workers, parameter servers and the
// rendezvous port.
func (p *plan) planReplicas(s *v1alpha1.TrainingJobSpec) error {
	p.mode, p.port = s.Mode, s.Port
	if p.mode == "" {
		p.mode = v1alpha1.ModeStandalone
	}
	switch p.mode {
	case v1alpha1.ModeStandalone, v1alpha1.ModePyTorch, v1alpha1.ModeTensorFlow, v1alpha1.ModeMPI:
	default:
		return fmt.Errorf("mode %q is unknown: use standalone, pytorch, tensorflow or mpi", p.mode)
	}
	if strings.TrimSpace(s.Image) == "" {
		return fmt.Errorf("image is empty: set the container image of the workers")
	}
	if s.Workers < 1 {
		return fmt.Errorf("workers is %d: set at least 1", s.Workers)
	}
	if s.ParameterServers > 0 && p.mode != v1alpha1.ModeTensorFlow {
		return fmt.Errorf("parameterServers is only for mode tensorflow")
	}
	if p.port == 0 {
		p.port = defaultTorchPort
		if p.mode == v1alpha1.ModeTensorFlow {
			p.port = defaultTFPort
		}
	}
	return nil
}

// planRestarts: backoffLimit, maxRestarts and the success policy with the
// mode's default.
func (p *plan) planRestarts(s *v1alpha1.TrainingJobSpec) error {
	p.maxRestarts = DefaultMaxRestarts
	if s.BackoffLimit != nil {
		p.backoff = *s.BackoffLimit
	}
	if s.MaxRestarts != nil {
		if *s.MaxRestarts < 0 {
			return fmt.Errorf("maxRestarts is %d: set at least 0", *s.MaxRestarts)
		}
		p.maxRestarts = *s.MaxRestarts
	}
	switch p.success = s.SuccessPolicy; p.success {
	case "":
		p.success = v1alpha1.SuccessAllWorkers
		if p.mode == v1alpha1.ModeMPI {
			p.success = v1alpha1.SuccessWorker0
		}
	case v1alpha1.SuccessWorker0:
	case v1alpha1.SuccessAllWorkers:
		if p.mode == v1alpha1.ModeMPI {
			return fmt.Errorf("successPolicy AllWorkers cannot hold in mode mpi: ranks other than 0 serve mpirun and never exit; set Worker0")
		}
	default:
		return fmt.Errorf("successPolicy %q is unknown: use AllWorkers or Worker0", p.success)
	}
	return nil
}

// planProcesses: torchrun's processes per pod (nprocPerNode) and the
// TensorFlow chief.
func (p *plan) planProcesses(s *v1alpha1.TrainingJobSpec) error {
	p.nproc = max(s.Resources.GPUs, 1)
	if s.NprocPerNode != nil {
		if *s.NprocPerNode < 1 {
			return fmt.Errorf("nprocPerNode is %d: set at least 1 (torchrun's processes per worker pod, e.g. its GPUs)", *s.NprocPerNode)
		}
		if p.mode != v1alpha1.ModePyTorch {
			return fmt.Errorf("nprocPerNode is only for mode pytorch")
		}
		p.nproc = *s.NprocPerNode
	}
	if tf := s.TensorFlow; tf != nil {
		if p.mode != v1alpha1.ModeTensorFlow {
			return fmt.Errorf("tensorflow is only for mode tensorflow")
		}
		if tf.Chief && s.SuccessPolicy != "" {
			return fmt.Errorf("successPolicy is for the workers: with tensorflow.chief the job succeeds when the chief does; remove successPolicy")
		}
		p.chief = tf.Chief
	}
	return nil
}

// planPodMeta checks the pods' labels, annotations and image pull secrets
// as the API server will check the Jobs' pod template, so that a bad one
// is refused as InvalidSpec rather than failing every creation of the Job.
func (p *plan) planPodMeta(s *v1alpha1.TrainingJobSpec) error {
	for _, k := range sortedKeys(s.PodLabels) {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return fmt.Errorf("podLabels: key %q: %s", k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(s.PodLabels[k]); len(errs) > 0 {
			return fmt.Errorf("podLabels[%q]: value %q: %s", k, s.PodLabels[k], strings.Join(errs, "; "))
		}
	}
	for _, k := range sortedKeys(s.PodAnnotations) {
		if errs := validation.IsQualifiedName(strings.ToLower(k)); len(errs) > 0 {
			return fmt.Errorf("podAnnotations: key %q: %s", k, strings.Join(errs, "; "))
		}
	}
	for _, m := range []map[string]string{s.PodLabels, s.PodAnnotations} {
		for k := range m {
			if strings.HasPrefix(k, "jobs.epochfs.io/") {
				return fmt.Errorf("pod label or annotation %q: keys under jobs.epochfs.io/ are set by the controller", k)
			}
		}
	}
	for i, sec := range s.ImagePullSecrets {
		if sec.Name == "" {
			return fmt.Errorf("imagePullSecrets[%d]: the name is empty", i)
		}
	}
	return nil
}

// planShm: the size of the memory-backed /dev/shm (nil for none).
func (p *plan) planShm(s *v1alpha1.TrainingJobSpec) error {
	switch q := s.ShmSize; {
	case q == nil:
		p.shm = ptr.To(DefaultShmSize.DeepCopy())
	case q.Sign() < 0:
		return fmt.Errorf("shmSize %s is negative: set a size such as 2Gi, or 0 for the container runtime's own /dev/shm", q)
	case q.Sign() > 0:
		if _, ok := q.AsInt64(); !ok || q.MilliValue()%1000 != 0 {
			return fmt.Errorf("shmSize %s is not a whole number of bytes: set a size such as 2Gi or 512Mi", q)
		}
		p.shm = ptr.To(q.DeepCopy())
	}
	return nil
}

// planGang: gang scheduling (on for more than one pod), its scheduler and
// minMember.
func (p *plan) planGang(s *v1alpha1.TrainingJobSpec) error {
	total := s.Workers + s.ParameterServers + p.chiefPods()
	p.gang = total > 1
	p.scheduler = v1alpha1.GangVolcano
	p.minMember = total
	g := s.Gang
	if g == nil {
		return nil
	}
	if g.Enabled != nil {
		p.gang = *g.Enabled
	}
	if g.Scheduler != "" {
		p.scheduler = g.Scheduler
	}
	if g.MinAvailable != nil {
		if *g.MinAvailable > total {
			return fmt.Errorf("gang.minAvailable %d is more than the job's %d pods", *g.MinAvailable, total)
		}
		p.minMember = *g.MinAvailable
	}
	return nil
}

// planResources: the requests of one worker and of one parameter server,
// from spec.resources and, where it sets none, the trainer's requests in
// the pod templates (parameter servers take only cpu and memory).
func (p *plan) planResources(s *v1alpha1.TrainingJobSpec) error {
	r := s.Resources
	p.workerReqs, p.psReqs = corev1.ResourceList{}, corev1.ResourceList{}
	if r.CPU != nil {
		p.workerReqs[corev1.ResourceCPU], p.psReqs[corev1.ResourceCPU] = r.CPU.DeepCopy(), r.CPU.DeepCopy()
	}
	if r.Memory != nil {
		p.workerReqs[corev1.ResourceMemory], p.psReqs[corev1.ResourceMemory] = r.Memory.DeepCopy(), r.Memory.DeepCopy()
	}
	if r.GPUs > 0 {
		p.workerReqs[v1alpha1.ResourceGPU] = *resource.NewQuantity(int64(r.GPUs), resource.DecimalSI)
	}
	for name, q := range r.Extra {
		if !strings.Contains(string(name), "/") {
			return fmt.Errorf("resources.extra %q: an extra resource needs a domain, e.g. rdma/hca_shared_devices_a", name)
		}
		p.workerReqs[name] = q.DeepCopy()
	}
	addTemplateRequests(p.workerReqs, s.Worker)
	addTemplateRequests(p.psReqs, s.PS)
	return nil
}

// addTemplateRequests adds to reqs the trainer's requests in rs's pod
// template that reqs does not set. A limit without a request is also the
// request (Kubernetes' defaulting).
func addTemplateRequests(reqs corev1.ResourceList, rs *v1alpha1.ReplicaSpec) {
	if rs == nil {
		return
	}
	for _, c := range rs.Template.Spec.Containers {
		if c.Name != v1alpha1.ContainerName {
			continue
		}
		for k, v := range c.Resources.Requests {
			if _, ok := reqs[k]; !ok {
				reqs[k] = v.DeepCopy()
			}
		}
		for k, v := range c.Resources.Limits {
			if _, ok := c.Resources.Requests[k]; !ok {
				if _, ok := reqs[k]; !ok {
					reqs[k] = v.DeepCopy()
				}
			}
		}
	}
}

// planDatasets: each dataset once, a source URL or an existing claim, an
// absolute mountPath; a source dataset's volume as the CSI driver would
// accept it.
func (p *plan) planDatasets(s *v1alpha1.TrainingJobSpec) error {
	seen := map[string]bool{}
	for _, d := range s.Datasets {
		if seen[d.Name] {
			return fmt.Errorf("dataset %q is listed twice", d.Name)
		}
		seen[d.Name] = true
		dp, err := newDatasetPlan(p.tj, d)
		if err != nil {
			return err
		}
		if !strings.HasPrefix(d.MountPath, "/") {
			return fmt.Errorf("dataset %q: mountPath %q must be absolute", d.Name, d.MountPath)
		}
		p.datasets = append(p.datasets, dp)
	}
	return nil
}

// newDatasetPlan plans one dataset of tj: its claim and, for a source,
// its volume's name and attributes.
func newDatasetPlan(tj *v1alpha1.TrainingJob, d v1alpha1.Dataset) (datasetPlan, error) {
	dp := datasetPlan{spec: d, claimName: d.ExistingClaim}
	switch {
	case d.Source != "" && d.ExistingClaim != "":
		return dp, fmt.Errorf("dataset %q: set source or existingClaim, not both", d.Name)
	case d.Source == "" && d.ExistingClaim == "":
		return dp, fmt.Errorf("dataset %q: set source (a dataset URL) or existingClaim (a PersistentVolumeClaim)", d.Name)
	case d.Source == "":
		return dp, nil
	}
	id, err := cachelabel.DatasetID(d.Source)
	if err != nil {
		return dp, fmt.Errorf("dataset %q: %w: fix the URL (forms: /abs/path, s3://bucket/prefix?endpoint=URL&region=R, cephfs://mon/path, nfs://host/export, mirror:URL,URL)",
			d.Name, err)
	}
	dp.id = id
	dp.claimName = tj.Name + "-" + d.Name
	dp.pvName = pvName(tj, d.Name)
	if d.CacheSize != "" {
		if _, err := units.ParseSize(d.CacheSize); err != nil {
			return dp, fmt.Errorf("dataset %q: cacheSize %q: %v: use a size such as 50Gi, 50GiB or 500GB", d.Name, d.CacheSize, err)
		}
	}
	dp.attrs = volumeAttributes(d)
	if _, err := volattr.Parse(dp.attrs, 0); err != nil {
		return dp, fmt.Errorf("dataset %q: the CSI driver would refuse its volume: %v", d.Name, err)
	}
	return dp, nil
}
