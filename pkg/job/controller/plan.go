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

// DefaultShmSize is the size of /dev/shm when spec.shmSize is unset (Arena's
// default too): enough for PyTorch DataLoader workers passing batches of
// images; the container runtime's own is often 64Mi.
var DefaultShmSize = resource.MustParse("2Gi")

// plan is a validated, defaulted TrainingJob and everything derived from it.
type plan struct {
	tj         *v1alpha1.TrainingJob
	mode       v1alpha1.Mode
	port       int32
	gang       bool
	scheduler  v1alpha1.GangScheduler
	minMember  int32
	backoff    int32
	workerReqs corev1.ResourceList // requests of one worker
	psReqs     corev1.ResourceList // requests of one parameter server
	datasets   []datasetPlan
	// shm is the sizeLimit of the memory-backed /dev/shm, nil for none.
	shm *resource.Quantity
	// nproc is torchrun's processes per worker pod (mode pytorch).
	nproc int32
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

// newPlan validates what the CRD's schema cannot (source URLs, cache sizes)
// and applies defaults. Errors are sentences a user can act on.
func newPlan(tj *v1alpha1.TrainingJob) (*plan, error) {
	s := &tj.Spec
	p := &plan{tj: tj, mode: s.Mode, port: s.Port, backoff: 3}
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
	total := s.Workers + s.ParameterServers
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
	return p, nil
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
	if d.ReadaheadFiles > 0 {
		attrs[volattr.ReadaheadFiles] = strconv.Itoa(int(d.ReadaheadFiles))
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
func (p *plan) podGroupName() string  { return p.tj.Name }
func (p *plan) hostfileName() string  { return p.tj.Name + "-mpi" }

func (p *plan) host(job string, i int32) string {
	return job + "-" + strconv.Itoa(int(i)) + "." + p.serviceName()
}

// gangPods is the list of pod requests that must fit together: parameter
// servers first, then workers, minMember in all (every pod without gang).
func (p *plan) gangPods() []corev1.ResourceList {
	n := p.tj.Spec.Workers + p.tj.Spec.ParameterServers
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
