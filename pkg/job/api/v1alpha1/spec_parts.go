package v1alpha1

// The parts of a TrainingJobSpec: replica templates, resources, datasets,
// gang, cleanup and TensorBoard settings.

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// TensorFlowSpec holds the settings of mode tensorflow.
type TensorFlowSpec struct {
	// Chief adds a chief replica, as tf-operator's Chief: one more pod, of
	// the Job NAME-chief (host NAME-chief-0.NAME), shaped as a worker (its
	// template, resources and datasets), listed in TF_CONFIG as
	// cluster.chief with task {type: chief, index: 0}. The job then
	// succeeds when the chief succeeds (successPolicy is refused), and the
	// workers and parameter servers still running are stopped as the
	// cleanPodPolicy says. Without it there is no chief: TensorFlow's
	// MultiWorkerMirroredStrategy takes worker 0 as its chief.
	// ParameterServerStrategy needs it (the chief is its coordinator).
	// +optional
	Chief bool `json:"chief,omitempty"`
}

// ReplicaSpec customises the pods of one replica type.
type ReplicaSpec struct {
	// Template is a pod template (as a Job's, JobSet's or the training
	// operator's) that the controller merges with what it renders: the
	// container named "trainer" (added when absent) gets the spec's image,
	// command, args, pull policy and resources where set, the rendezvous
	// environment before its own env and spec.env after it, and the dataset
	// and /dev/shm mounts; the pod gets the dataset, /dev/shm and hostfile
	// volumes, the spec's labels, annotations, node selector, tolerations,
	// service account, pull secrets and priority, the controller's
	// labels, gang markers and cache affinity (added to the template's),
	// restartPolicy Never and the Service's subdomain. Everything else
	// (init and extra containers, writable volumes for checkpoints,
	// security contexts, …) is the template's. The controller refuses
	// (phase Failed, reason InvalidSpec, naming the field) a volume named
	// as one of its own (dataset-*, dshm, mpi-hostfile), a writable mount
	// of a dataset volume or claim, a mount over a dataset's mountPath or
	// /dev/shm in the trainer, and a restartPolicy other than Never. The
	// API server stores the template without checking it (its schema is
	// open, so the CRD stays small); the Job the controller creates is
	// checked in full.
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Type=object
	// +optional
	Template corev1.PodTemplateSpec `json:"template,omitempty"`
}

// WorkerResources are the requests of one worker. GPUs and Extra are set as
// both requests and limits (extended resources need equal values).
type WorkerResources struct {
	// CPU request, e.g. "4" or "500m".
	// +optional
	CPU *resource.Quantity `json:"cpu,omitempty"`
	// Memory request (also the limit), e.g. "16Gi".
	// +optional
	Memory *resource.Quantity `json:"memory,omitempty"`
	// GPUs is the number of nvidia.com/gpu per worker.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=64
	// +optional
	GPUs int32 `json:"gpus,omitempty"`
	// Extra device resources passed through as-is, e.g.
	// {"rdma/hca_shared_devices_a": "1"}.
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.contains('/'))",message="extra resources are extended resources with a domain, e.g. rdma/hca_shared_devices_a: set cpu, memory and gpus in their own fields"
	// +optional
	Extra map[corev1.ResourceName]resource.Quantity `json:"extra,omitempty"`
}

// Dataset is one read-only EpochFS volume of a job: either a source URL (the
// controller creates a static PersistentVolume for the cachefs.epochfs.io
// CSI driver and a ReadOnlyMany claim bound to it) or an existing claim.
//
// +kubebuilder:validation:XValidation:rule="(has(self.source) && size(self.source) > 0) != (has(self.existingClaim) && size(self.existingClaim) > 0)",message="set exactly one of source (a dataset URL such as s3://bucket/prefix) and existingClaim (a PersistentVolumeClaim name)"
// +kubebuilder:validation:XValidation:rule="!has(self.existingClaim) || size(self.existingClaim) == 0 || !has(self.cacheSize)",message="cacheSize is set by the existing claim's volume: remove cacheSize or use source"
// +kubebuilder:validation:XValidation:rule="!has(self.secretName) || size(self.secretName) == 0 || (has(self.source) && size(self.source) > 0)",message="secretName is for a source: an existing claim's volume brings its own credentials (its PV's nodeStageSecretRef)"
type Dataset struct {
	// Name of the dataset within the job: a DNS label.
	// +kubebuilder:validation:MaxLength=40
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="dataset name must be lower-case letters, digits and '-' (a DNS label), e.g. imagenet"
	Name string `json:"name"`
	// Source is the dataset URL: /abs/path, s3://bucket/prefix?endpoint=…,
	// cephfs://…, nfs://…, mirror:URL,URL (see the CSI driver's `source`).
	// +kubebuilder:validation:MaxLength=4096
	// +optional
	Source string `json:"source,omitempty"`
	// ExistingClaim is a PersistentVolumeClaim of the job's namespace to
	// mount instead of creating one.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	ExistingClaim string `json:"existingClaim,omitempty"`
	// SecretName is a Secret of the job's namespace with the source's
	// credentials (keys AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
	// optionally AWS_SESSION_TOKEN for s3://; userID and userKey for
	// cephfs://; nfs:// has none), passed to the CSI driver as the
	// PersistentVolume's nodeStageSecretRef: the kubelet reads it when it
	// stages the volume, the controller never does. Without it the node
	// reads the source with its own identity, where its admin allows that.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')",message="secretName must be a Secret name (lower-case letters, digits, '-' and '.'), e.g. imagenet-s3"
	// +optional
	SecretName string `json:"secretName,omitempty"`
	// MountPath is where the dataset appears in every worker.
	// +kubebuilder:validation:XValidation:rule="self.startsWith('/') && !self.contains(':')",message="mountPath must be an absolute path without ':', e.g. /data/imagenet"
	// +kubebuilder:validation:MaxLength=1024
	MountPath string `json:"mountPath"`
	// CacheSize is the node cache capacity for this dataset (the CSI
	// driver's `cacheSize`), in EpochFS's one size grammar (pkg/units,
	// docs/DESIGN.md "Sizes"): a Kubernetes quantity such as 50Gi, 500G or
	// 1.5Ti, the GiB/GB spellings such as 50GiB or 500GB, or bytes. The
	// milli suffix (500m) is refused. The driver's default when empty.
	// The API server checks the grammar (the rules below mirror
	// units.ParseSize); the controller also refuses a size over 8Ei or
	// under one byte (InvalidSpec naming the dataset).
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[[:space:]]*[0-9.]+[[:space:]]*m[[:space:]]*$')",message="cacheSize: m is milli in Kubernetes quantities (500m is half a byte), not a byte unit: write 500M (megabytes) or 500Mi (mebibytes)"
	// +kubebuilder:validation:XValidation:rule="!self.trim().startsWith('-')",message="cacheSize must be positive: a size such as 50Gi, 500G, 1.5Ti or 50GiB"
	// +kubebuilder:validation:XValidation:rule="size(self) == 0 || self.trim().startsWith('-') || self.matches('^[[:space:]]*[0-9.]+[[:space:]]*m[[:space:]]*$') || self.matches('^[[:space:]]*([0-9]+[.]?[0-9]*|[.][0-9]+)[[:space:]]*([KkGgTtPpEe]|M|[Bb]|[KkMmGgTtPpEe][Ii]|[KkMmGgTtPpEe][Ii]?[Bb])?[[:space:]]*$')",message="cacheSize must be a size such as 50Gi, 500G, 1.5Ti or 50GiB: a number and an optional unit (K, M, G, T, P, E: powers of 1000; Ki, Mi, Gi, Ti, Pi, Ei: powers of 1024; KB, KiB, MB, MiB, GB, GiB, ... spelled out; none: bytes)"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[[:space:]]*(0+[.]?0*|[.]0+)[[:space:]]*[A-Za-z]*[[:space:]]*$')",message="cacheSize must be greater than zero: a size such as 50Gi, or leave it out for the CSI driver's default"
	// +optional
	CacheSize string `json:"cacheSize,omitempty"`
	// Prefetch asks for the node cache to be warmed before training. It is
	// recorded on the volume (annotation jobs.epochfs.io/prefetch) for the
	// node plugin.
	// +optional
	Prefetch bool `json:"prefetch,omitempty"`
	// ReadaheadFiles is the CSI driver's `readaheadFiles`: when a worker's
	// open of a small file misses, the node fetches the next N files of its
	// directory into the cache in the background. Unset (the default): the
	// node adapts N to the backend's measured latency (on for a far object
	// store, off for a local one); a number pins it; 0 turns it off.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=256
	// +optional
	ReadaheadFiles *int32 `json:"readaheadFiles,omitempty"`
}

// Gang configures all-or-nothing scheduling through a PodGroup.
type Gang struct {
	// Enabled turns gang scheduling on or off; when unset it is on for jobs
	// of more than one pod.
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
	// Scheduler that implements the gang: volcano (default) or
	// scheduler-plugins.
	// +kubebuilder:default=volcano
	// +optional
	Scheduler GangScheduler `json:"scheduler,omitempty"`
	// Queue is the Volcano queue.
	// +optional
	Queue string `json:"queue,omitempty"`
	// MinAvailable is how many pods must be placeable together (default:
	// all of them).
	// +kubebuilder:validation:Minimum=1
	// +optional
	MinAvailable *int32 `json:"minAvailable,omitempty"`
}

// Cleanup says what happens to a finished job.
type Cleanup struct {
	// TTLSecondsAfterFinished deletes the TrainingJob (and through owner
	// references everything it created) this long after it finished;
	// never when unset.
	// +kubebuilder:validation:Minimum=0
	// +optional
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`
	// CleanPodPolicy says which pods are deleted as soon as the job
	// finishes: All, Running (default: pending and running pods, such as
	// parameter servers) or None.
	// +kubebuilder:default=Running
	// +optional
	CleanPodPolicy CleanPodPolicy `json:"cleanPodPolicy,omitempty"`
}

// Tensorboard says where the workers write TensorBoard event files.
type Tensorboard struct {
	// LogDir is a path inside the workers (for example on a shared volume).
	// +kubebuilder:validation:XValidation:rule="self.startsWith('/') || self.contains('://')",message="tensorboard.logDir must be an absolute path or a URL such as s3://bucket/logs"
	LogDir string `json:"logDir"`
}
