package controller

// This file turns a TrainingJob into a plan: it validates what the CRD's
// schema cannot, one spec section at a time (plan_sections.go,
// plan_template.go), applies the defaults and derives the names and
// resource requests the rendering (render.go, render_job.go) and the
// capacity check (capacity.go) use. Nothing here builds Kubernetes objects.

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"maps"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/epochfs/epochfs/pkg/cachelabel"
	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
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
// and applies defaults, one spec section at a time in a fixed order, so the
// first error is always the same one. Errors are sentences a user can act
// on.
func newPlan(tj *v1alpha1.TrainingJob) (*plan, error) {
	p := &plan{tj: tj, attempt: tj.Status.Restarts}
	for _, section := range planSections {
		if err := section(p, &tj.Spec); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// planSections are the per-section validators of newPlan, in order: a
// later one may read what an earlier one set (the mode, the chief, the
// datasets).
var planSections = []func(*plan, *v1alpha1.TrainingJobSpec) error{
	(*plan).planReplicas,
	(*plan).planRestarts,
	(*plan).planProcesses,
	(*plan).planPodMeta,
	(*plan).planShm,
	(*plan).planGang,
	(*plan).planResources,
	(*plan).planDatasets,
	(*plan).planTemplates,
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
