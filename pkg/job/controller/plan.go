package controller

// This file turns a TrainingJob into a plan: it validates what the CRD's
// schema cannot, applies the defaults and derives the names and resource
// requests the rendering (render.go, render_job.go) and the capacity check
// (capacity.go) use. Nothing here builds Kubernetes objects.

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
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

// Default rendezvous ports (spec.port unset).
const (
	defaultTorchPort = 29500
	defaultTFPort    = 2222
)

// DefaultMaxRestarts is how many times the gang is restarted when
// spec.maxRestarts is unset (the CRD defaults it too): the tolerance of the
// old default backoffLimit (3 failed pods), spent on restarts of the whole
// gang, which a distributed job can survive, instead of on replacements of
// single pods, which it cannot.
const DefaultMaxRestarts = 3

// DefaultShmSize is the size of /dev/shm when spec.shmSize is unset (Arena's
// default too): enough for PyTorch DataLoader workers passing batches of
// images; the container runtime's own is often 64Mi.
var DefaultShmSize = resource.MustParse("2Gi")

// plan is a validated, defaulted TrainingJob and everything derived from it.
type plan struct {
	tj        *v1alpha1.TrainingJob
	mode      v1alpha1.Mode
	port      int32
	gang      bool
	scheduler v1alpha1.GangScheduler
	minMember int32
	backoff   int32
	// maxRestarts is spec.maxRestarts (default DefaultMaxRestarts).
	maxRestarts int32
	// success is spec.successPolicy with the mode's default.
	success v1alpha1.SuccessPolicy
	// attempt is the attempt of the gang the Jobs are rendered for
	// (status.restarts).
	attempt    int32
	workerReqs corev1.ResourceList // requests of one worker
	psReqs     corev1.ResourceList // requests of one parameter server
	datasets   []datasetPlan
	// shm is the sizeLimit of the memory-backed /dev/shm, nil for none.
	shm *resource.Quantity
	// nproc is torchrun's processes per worker pod (mode pytorch).
	nproc int32
	// chief: a TensorFlow chief replica (tensorflow.chief), one pod of
	// the Job chiefJobName shaped as a worker, which decides success.
	chief bool
	// locations: dataset ID → the nodes caching it (cache-aware
	// placement, locations.go); set by create, nil otherwise.
	locations map[string][]cachelabel.Location
}

// datasetPlan is one dataset of a plan: a source dataset (id, pvName and
// attrs set) gets a PersistentVolume and claim of its own; an existing
// claim is only mounted.
type datasetPlan struct {
	spec      v1alpha1.Dataset
	id        string // cachelabel.DatasetID, "" for an existing claim
	claimName string
	pvName    string
	// attrs are the CSI volumeAttributes of the dataset's
	// PersistentVolume, nil for an existing claim. volattr.Parse, the CSI
	// driver's own check, has accepted them.
	attrs map[string]string
}

// Check runs the controller's own checks of a TrainingJob, those its CRD
// cannot make (pod templates, dataset URLs, cache sizes): the error is the
// message the job would fail with (reason InvalidSpec). Clients run it
// before submitting.
func Check(tj *v1alpha1.TrainingJob) error {
	_, err := newPlan(tj)
	return err
}

// newPlan validates what the CRD's schema cannot (source URLs, cache sizes)
// and applies defaults. Errors are sentences a user can act on.
func newPlan(tj *v1alpha1.TrainingJob) (*plan, error) {
	s := &tj.Spec
	p := &plan{tj: tj, mode: s.Mode, port: s.Port, maxRestarts: DefaultMaxRestarts, attempt: tj.Status.Restarts}
	if p.mode == "" {
		p.mode = v1alpha1.ModeStandalone
	}
	switch p.mode {
	case v1alpha1.ModeStandalone, v1alpha1.ModePyTorch, v1alpha1.ModeTensorFlow, v1alpha1.ModeMPI:
	default:
		return nil, fmt.Errorf("mode %q is unknown: use standalone, pytorch, tensorflow or mpi", p.mode)
	}
	if strings.TrimSpace(s.Image) == "" {
		return nil, fmt.Errorf("image is empty: set the container image of the workers")
	}
	if s.Workers < 1 {
		return nil, fmt.Errorf("workers is %d: set at least 1", s.Workers)
	}
	if s.ParameterServers > 0 && p.mode != v1alpha1.ModeTensorFlow {
		return nil, fmt.Errorf("parameterServers is only for mode tensorflow")
	}
	if p.port == 0 {
		p.port = defaultTorchPort
		if p.mode == v1alpha1.ModeTensorFlow {
			p.port = defaultTFPort
		}
	}
	if s.BackoffLimit != nil {
		p.backoff = *s.BackoffLimit
	}
	if s.MaxRestarts != nil {
		if *s.MaxRestarts < 0 {
			return nil, fmt.Errorf("maxRestarts is %d: set at least 0", *s.MaxRestarts)
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
			return nil, fmt.Errorf("successPolicy AllWorkers cannot hold in mode mpi: ranks other than 0 serve mpirun and never exit; set Worker0")
		}
	default:
		return nil, fmt.Errorf("successPolicy %q is unknown: use AllWorkers or Worker0", p.success)
	}
	p.nproc = max(s.Resources.GPUs, 1)
	if s.NprocPerNode != nil {
		if *s.NprocPerNode < 1 {
			return nil, fmt.Errorf("nprocPerNode is %d: set at least 1 (torchrun's processes per worker pod, e.g. its GPUs)", *s.NprocPerNode)
		}
		if p.mode != v1alpha1.ModePyTorch {
			return nil, fmt.Errorf("nprocPerNode is only for mode pytorch")
		}
		p.nproc = *s.NprocPerNode
	}
	if tf := s.TensorFlow; tf != nil {
		if p.mode != v1alpha1.ModeTensorFlow {
			return nil, fmt.Errorf("tensorflow is only for mode tensorflow")
		}
		if tf.Chief && s.SuccessPolicy != "" {
			return nil, fmt.Errorf("successPolicy is for the workers: with tensorflow.chief the job succeeds when the chief does; remove successPolicy")
		}
		p.chief = tf.Chief
	}
	if err := checkPodMeta(s); err != nil {
		return nil, err
	}
	switch q := s.ShmSize; {
	case q == nil:
		p.shm = ptr.To(DefaultShmSize.DeepCopy())
	case q.Sign() < 0:
		return nil, fmt.Errorf("shmSize %s is negative: set a size such as 2Gi, or 0 for the container runtime's own /dev/shm", q)
	case q.Sign() > 0:
		if _, ok := q.AsInt64(); !ok || q.MilliValue()%1000 != 0 {
			return nil, fmt.Errorf("shmSize %s is not a whole number of bytes: set a size such as 2Gi or 512Mi", q)
		}
		p.shm = ptr.To(q.DeepCopy())
	}
	total := s.Workers + s.ParameterServers + p.chiefPods()
	p.gang = total > 1
	p.scheduler = v1alpha1.GangVolcano
	p.minMember = total
	if g := s.Gang; g != nil {
		if g.Enabled != nil {
			p.gang = *g.Enabled
		}
		if g.Scheduler != "" {
			p.scheduler = g.Scheduler
		}
		if g.MinAvailable != nil {
			if *g.MinAvailable > total {
				return nil, fmt.Errorf("gang.minAvailable %d is more than the job's %d pods", *g.MinAvailable, total)
			}
			p.minMember = *g.MinAvailable
		}
	}

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
			return nil, fmt.Errorf("resources.extra %q: an extra resource needs a domain, e.g. rdma/hca_shared_devices_a", name)
		}
		p.workerReqs[name] = q.DeepCopy()
	}

	// The trainer's requests in a pod template count where the spec sets
	// none (resources is per worker; parameter servers take cpu and memory).
	for _, rt := range []struct {
		rs   *v1alpha1.ReplicaSpec
		reqs corev1.ResourceList
	}{{s.Worker, p.workerReqs}, {s.PS, p.psReqs}} {
		if rt.rs == nil {
			continue
		}
		for _, c := range rt.rs.Template.Spec.Containers {
			if c.Name != v1alpha1.ContainerName {
				continue
			}
			for k, v := range c.Resources.Requests {
				if _, ok := rt.reqs[k]; !ok {
					rt.reqs[k] = v.DeepCopy()
				}
			}
			// A limit without a request is also the request (Kubernetes'
			// defaulting).
			for k, v := range c.Resources.Limits {
				if _, ok := c.Resources.Requests[k]; !ok {
					if _, ok := rt.reqs[k]; !ok {
						rt.reqs[k] = v.DeepCopy()
					}
				}
			}
		}
	}

	seen := map[string]bool{}
	for _, d := range s.Datasets {
		if seen[d.Name] {
			return nil, fmt.Errorf("dataset %q is listed twice", d.Name)
		}
		seen[d.Name] = true
		dp := datasetPlan{spec: d, claimName: d.ExistingClaim}
		switch {
		case d.Source != "" && d.ExistingClaim != "":
			return nil, fmt.Errorf("dataset %q: set source or existingClaim, not both", d.Name)
		case d.Source != "":
			id, err := cachelabel.DatasetID(d.Source)
			if err != nil {
				return nil, fmt.Errorf("dataset %q: %s: fix the URL (forms: /abs/path, s3://bucket/prefix?endpoint=URL&region=R, cephfs://mon/path, nfs://host/export, mirror:URL,URL)",
					d.Name, strings.TrimPrefix(err.Error(), "backend: "))
			}
			dp.id = id
			dp.claimName = tj.Name + "-" + d.Name
			dp.pvName = pvName(tj, d.Name)
			if d.CacheSize != "" {
				if _, err := units.ParseSize(d.CacheSize); err != nil {
					return nil, fmt.Errorf("dataset %q: cacheSize %q: %v: use a size such as 50Gi, 50GiB or 500GB", d.Name, d.CacheSize, err)
				}
			}
			dp.attrs = volumeAttributes(d)
			if _, err := volattr.Parse(dp.attrs, 0); err != nil {
				return nil, fmt.Errorf("dataset %q: the CSI driver would refuse its volume: %v", d.Name, err)
			}
		case d.ExistingClaim == "":
			return nil, fmt.Errorf("dataset %q: set source (a dataset URL) or existingClaim (a PersistentVolumeClaim)", d.Name)
		}
		if !strings.HasPrefix(d.MountPath, "/") {
			return nil, fmt.Errorf("dataset %q: mountPath %q must be absolute", d.Name, d.MountPath)
		}
		p.datasets = append(p.datasets, dp)
	}
	if s.PS != nil && s.ParameterServers == 0 {
		return nil, fmt.Errorf("ps.template is set but parameterServers is 0: remove it or add parameter servers")
	}
	for _, rt := range []struct {
		field string
		rs    *v1alpha1.ReplicaSpec
	}{{"worker", s.Worker}, {"ps", s.PS}} {
		if rt.rs != nil {
			if err := p.checkTemplate(rt.field+".template", &rt.rs.Template); err != nil {
				return nil, err
			}
		}
	}
	return p, nil
}

// checkTemplate refuses what a pod template cannot do to the pods the
// controller renders: use its volume names, mount a dataset writable,
// hide a dataset or /dev/shm in the trainer, restart pods in place.
func (p *plan) checkTemplate(field string, t *corev1.PodTemplateSpec) error {
	own := map[string]string{shmVolume: "/dev/shm", mpiVolume: "the MPI hostfile"}
	claims := map[string]string{} // dataset claim -> dataset
	for _, d := range p.datasets {
		own["dataset-"+d.spec.Name] = "dataset " + d.spec.Name
		claims[d.claimName] = d.spec.Name
	}
	if rp := t.Spec.RestartPolicy; rp != "" && rp != corev1.RestartPolicyNever {
		return fmt.Errorf("%s.spec.restartPolicy %s: the controller's Jobs restart failed pods (backoffLimit): leave it empty or Never", field, rp)
	}
	datasetVolumes := map[string]string{} // template volume -> dataset
	seen := map[string]bool{}
	for i, v := range t.Spec.Volumes {
		f := fmt.Sprintf("%s.spec.volumes[%d]", field, i)
		if what, ok := own[v.Name]; ok {
			return fmt.Errorf("%s.name %q is the controller's volume (%s): rename it", f, v.Name, what)
		}
		if seen[v.Name] {
			return fmt.Errorf("%s.name %q is listed twice", f, v.Name)
		}
		seen[v.Name] = true
		if pvc := v.PersistentVolumeClaim; pvc != nil {
			if d, ok := claims[pvc.ClaimName]; ok {
				if !pvc.ReadOnly {
					return fmt.Errorf("%s mounts the claim %s of dataset %q writable: datasets are read-only; set readOnly: true or leave the mount to the controller", f, pvc.ClaimName, d)
				}
				datasetVolumes[v.Name] = d
			}
		}
	}
	for _, cs := range []struct {
		kind string
		list []corev1.Container
	}{{"initContainers", t.Spec.InitContainers}, {"containers", t.Spec.Containers}} {
		for i, c := range cs.list {
			for j, m := range c.VolumeMounts {
				f := fmt.Sprintf("%s.spec.%s[%d].volumeMounts[%d]", field, cs.kind, i, j)
				if what, ok := own[m.Name]; ok && !seen[m.Name] {
					if strings.HasPrefix(m.Name, "dataset-") && !m.ReadOnly {
						return fmt.Errorf("%s mounts %s writable: datasets are read-only; set readOnly: true", f, what)
					}
					if m.Name == shmVolume && p.shm == nil {
						return fmt.Errorf("%s mounts %s, which shmSize 0 turns off", f, m.Name)
					}
					if m.Name == mpiVolume && p.mode != v1alpha1.ModeMPI {
						return fmt.Errorf("%s mounts %s, which only mode mpi has", f, m.Name)
					}
				}
				if d, ok := datasetVolumes[m.Name]; ok && !m.ReadOnly {
					return fmt.Errorf("%s mounts dataset %q writable: datasets are read-only; set readOnly: true", f, d)
				}
				if c.Name != v1alpha1.ContainerName {
					continue
				}
				for _, d := range p.datasets {
					if path.Clean(m.MountPath) == path.Clean(d.spec.MountPath) {
						return fmt.Errorf("%s.mountPath %s is where dataset %q is mounted: use another path", f, m.MountPath, d.spec.Name)
					}
				}
				if p.shm != nil && path.Clean(m.MountPath) == "/dev/shm" {
					return fmt.Errorf("%s.mountPath /dev/shm is the controller's (shmSize): set shmSize instead, or shmSize: 0 to mount your own", f)
				}
			}
		}
	}
	return nil
}

// checkPodMeta checks the pods' labels and annotations as the API server
// will check the Jobs' pod template, so that a bad one is refused as
// InvalidSpec rather than failing every creation of the Job.
func checkPodMeta(s *v1alpha1.TrainingJobSpec) error {
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

func sortedKeys(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}

// volumeAttributes are the CSI volumeAttributes of a source dataset's
// PersistentVolume (docs/CSI.md).
func volumeAttributes(d v1alpha1.Dataset) map[string]string {
	attrs := map[string]string{volattr.Source: d.Source}
	if d.CacheSize != "" {
		attrs[volattr.CacheSize] = d.CacheSize
	}
	if d.ReadaheadFiles != nil {
		attrs[volattr.ReadaheadFiles] = strconv.Itoa(int(*d.ReadaheadFiles))
	}
	if d.Prefetch {
		attrs[volattr.Prefetch] = "true" // the CSI node plugin fills the cache once the dataset is staged
	}
	return attrs
}

// pvName is a cluster-unique PersistentVolume name for a job's dataset:
// "epochfs-" and the first 20 hex digits (80 bits) of a SHA-256 over the
// job's namespace, name and UID and the dataset's name, each field
// length-prefixed so that no two tuples hash the same input (namespace
// "team", job "a-x" and namespace "team-a", job "x" used to share a name).
// The UID makes the name of a resubmitted job's volume new, and one nobody
// can claim before the job exists. It is a valid DNS subdomain (and label).
func pvName(tj *v1alpha1.TrainingJob, dataset string) string {
	h := sha256.New()
	for _, f := range []string{tj.Namespace, tj.Name, string(tj.UID), dataset} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(f)))
		h.Write(n[:])
		h.Write([]byte(f))
	}
	return "epochfs-" + hex.EncodeToString(h.Sum(nil))[:20]
}

// serviceName is the headless Service that gives workers stable names:
// <job>-<index>.<service>.
func (p *plan) serviceName() string   { return p.tj.Name }
func (p *plan) workerJobName() string { return p.tj.Name }
func (p *plan) psJobName() string     { return p.tj.Name + "-ps" }
func (p *plan) chiefJobName() string  { return p.tj.Name + "-chief" }
func (p *plan) podGroupName() string  { return p.tj.Name }
func (p *plan) hostfileName() string  { return p.tj.Name + "-mpi" }

// chiefPods is 1 with a TensorFlow chief, else 0.
func (p *plan) chiefPods() int32 {
	if p.chief {
		return 1
	}
	return 0
}

func (p *plan) host(job string, i int32) string {
	return job + "-" + strconv.Itoa(int(i)) + "." + p.serviceName()
}

// gangPods is the list of pod requests that must fit together: parameter
// servers first, then workers (and the chief, shaped as one), minMember in
// all (every pod without gang).
func (p *plan) gangPods() []corev1.ResourceList {
	n := p.tj.Spec.Workers + p.tj.Spec.ParameterServers + p.chiefPods()
	if p.gang {
		n = p.minMember
	}
	var out []corev1.ResourceList
	for i := range n {
		if i < p.tj.Spec.ParameterServers {
			out = append(out, p.psReqs)
		} else {
			out = append(out, p.workerReqs)
		}
	}
	return out
}
