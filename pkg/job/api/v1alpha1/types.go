package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Mode says how the workers of a job find each other.
// +kubebuilder:validation:Enum=standalone;pytorch;tensorflow;mpi
type Mode string

// Modes.
const (
	// ModeStandalone runs independent workers with no rendezvous environment.
	ModeStandalone Mode = "standalone"
	// ModePyTorch sets MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK
	// (torch.distributed's env:// rendezvous) and torchrun's PET_NNODES,
	// PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR and
	// PET_MASTER_PORT; worker 0 is the master.
	ModePyTorch Mode = "pytorch"
	// ModeTensorFlow sets TF_CONFIG (workers, and parameter servers when
	// parameterServers > 0).
	ModeTensorFlow Mode = "tensorflow"
	// ModeMPI mounts a hostfile listing every worker at /etc/mpi/hostfile
	// (OMPI_MCA_orte_default_hostfile) and sets RANK; worker 0 launches.
	ModeMPI Mode = "mpi"
)

// GangScheduler is the scheduler that places a job's pods all at once.
// +kubebuilder:validation:Enum=volcano;scheduler-plugins
type GangScheduler string

// Gang schedulers.
const (
	// GangVolcano is Volcano (PodGroup scheduling.volcano.sh/v1beta1).
	GangVolcano GangScheduler = "volcano"
	// GangSchedulerPlugins is the coscheduling plugin of
	// kubernetes-sigs/scheduler-plugins (PodGroup scheduling.x-k8s.io/v1alpha1).
	GangSchedulerPlugins GangScheduler = "scheduler-plugins"
)

// SuccessPolicy says which workers must succeed for the job to succeed.
// +kubebuilder:validation:Enum=AllWorkers;Worker0
type SuccessPolicy string

// Success policies.
const (
	// SuccessAllWorkers: every worker pod succeeded.
	SuccessAllWorkers SuccessPolicy = "AllWorkers"
	// SuccessWorker0: worker 0 succeeded; the others are stopped.
	SuccessWorker0 SuccessPolicy = "Worker0"
)

// CleanPodPolicy says which pods are deleted when a job finishes.
// +kubebuilder:validation:Enum=All;Running;None
type CleanPodPolicy string

// Clean pod policies.
const (
	// CleanPodAll deletes every pod of the job (logs go with them).
	CleanPodAll CleanPodPolicy = "All"
	// CleanPodRunning deletes the pods still pending or running (e.g.
	// parameter servers) and keeps finished ones for their logs.
	CleanPodRunning CleanPodPolicy = "Running"
	// CleanPodNone keeps every pod.
	CleanPodNone CleanPodPolicy = "None"
)

// TrainingJobSpec is what a researcher submits.
//
// +kubebuilder:validation:XValidation:rule="!has(self.parameterServers) || self.parameterServers == 0 || self.mode == 'tensorflow'",message="parameterServers is only for mode tensorflow: remove it or set mode: tensorflow"
// +kubebuilder:validation:XValidation:rule="!has(self.ps) || (has(self.parameterServers) && self.parameterServers > 0)",message="ps is the template of the parameter servers: remove it or set parameterServers (mode tensorflow)"
// +kubebuilder:validation:XValidation:rule="!has(self.nprocPerNode) || self.mode == 'pytorch'",message="nprocPerNode is only for mode pytorch (torchrun's processes per pod): remove it or set mode: pytorch"
// +kubebuilder:validation:XValidation:rule="!has(self.gang) || !has(self.gang.minAvailable) || self.gang.minAvailable <= self.workers + (has(self.parameterServers) ? self.parameterServers : 0)",message="gang.minAvailable is larger than workers + parameterServers: lower it or add workers"
// +kubebuilder:validation:XValidation:rule="!has(self.gang) || !has(self.gang.queue) || size(self.gang.queue) == 0 || !has(self.gang.scheduler) || self.gang.scheduler == 'volcano'",message="gang.queue is a Volcano queue: remove it or set gang.scheduler: volcano"
// +kubebuilder:validation:XValidation:rule="!has(self.successPolicy) || self.successPolicy != 'AllWorkers' || !has(self.mode) || self.mode != 'mpi'",message="successPolicy AllWorkers cannot hold in mode mpi: ranks other than 0 serve mpirun and never exit; remove successPolicy or set Worker0"
// +kubebuilder:validation:XValidation:rule="!has(self.tensorflow) || self.mode == 'tensorflow'",message="tensorflow is only for mode tensorflow: remove it or set mode: tensorflow"
// +kubebuilder:validation:XValidation:rule="!has(self.tensorflow) || !has(self.tensorflow.chief) || !self.tensorflow.chief || !has(self.successPolicy)",message="successPolicy is for the workers: with tensorflow.chief the job succeeds when the chief does (as tf-operator); remove successPolicy"
//
// Only cleanup and suspend can be edited once a job is submitted:
// everything else is rendered into objects created once (a Job's pod
// template is immutable), so the API server refuses the edit instead of the
// controller ignoring it.
// +kubebuilder:validation:XValidation:rule="(has(self.imagePullPolicy) ? self.imagePullPolicy : \"\") == (has(oldSelf.imagePullPolicy) ? oldSelf.imagePullPolicy : \"\")",message="imagePullPolicy cannot be changed after submission: delete the TrainingJob and submit it again (only cleanup and suspend can be edited)"
// +kubebuilder:validation:XValidation:rule="(has(self.command) ? self.command : []) == (has(oldSelf.command) ? oldSelf.command : [])",message="command cannot be changed after submission: delete the TrainingJob and submit it again (only cleanup and suspend can be edited)"
// +kubebuilder:validation:XValidation:rule="(has(self.args) ? self.args : []) == (has(oldSelf.args) ? oldSelf.args : [])",message="args cannot be changed after submission: delete the TrainingJob and submit it again (only cleanup and suspend can be edited)"
// +kubebuilder:validation:XValidation:rule="(has(self.env) ? self.env : []) == (has(oldSelf.env) ? oldSelf.env : [])",message="env cannot be changed after submission: delete the TrainingJob and submit it again (only cleanup and suspend can be edited)"
// +kubebuilder:validation:XValidation:rule="(has(self.parameterServers) ? self.parameterServers : 0) == (has(oldSelf.parameterServers) ? oldSelf.parameterServers : 0)",message="parameterServers cannot be changed after submission: delete the TrainingJob and submit it again (only cleanup and suspend can be edited)"
// +kubebuilder:validation:XValidation:rule="(has(self.port) ? self.port : 0) == (has(oldSelf.port) ? oldSelf.port : 0)",message="port cannot be changed after submission: delete the TrainingJob and submit it again (only cleanup and suspend can be edited)"
// +kubebuilder:validation:XValidation:rule="(has(self.datasets) ? self.datasets : []) == (has(oldSelf.datasets) ? oldSelf.datasets : [])",message="datasets cannot be changed after submission: delete the TrainingJob and submit it again (only cleanup and suspend can be edited)"
// +kubebuilder:validation:XValidation:rule="(has(self.nodeSelector) ? self.nodeSelector : {}) == (has(oldSelf.nodeSelector) ? oldSelf.nodeSelector : {})",message="nodeSelector cannot be changed after submission: delete the TrainingJob and submit it again (only cleanup and suspend can be edited)"
// +kubebuilder:validation:XValidation:rule="(has(self.tolerations) ? self.tolerations : []) == (has(oldSelf.tolerations) ? oldSelf.tolerations : [])",message="tolerations cannot be changed after submission: delete the TrainingJob and submit it again (only cleanup and suspend can be edited)"
// +kubebuilder:validation:XValidation:rule="(has(self.priorityClassName) ? self.priorityClassName : \"\") == (has(oldSelf.priorityClassName) ? oldSelf.priorityClassName : \"\")",message="priorityClassName cannot be changed after submission: delete the TrainingJob and submit it again (only cleanup and suspend can be edited)"
// +kubebuilder:validation:XValidation:rule="has(self.gang) == has(oldSelf.gang)",message="gang cannot be changed after submission: delete the TrainingJob and submit it again (only cleanup and suspend can be edited)"
// +kubebuilder:validation:XValidation:rule="has(self.shmSize) == has(oldSelf.shmSize)",message="shmSize cannot be changed after submission: delete the TrainingJob and submit it again (only cleanup and suspend can be edited)"
// +kubebuilder:validation:XValidation:rule="has(self.nprocPerNode) == has(oldSelf.nprocPerNode)",message="nprocPerNode cannot be changed after submission: delete the TrainingJob and submit it again (only cleanup and suspend can be edited)"
// +kubebuilder:validation:XValidation:rule="(has(self.queueName) ? self.queueName : \"\") == (has(oldSelf.queueName) ? oldSelf.queueName : \"\")",message="queueName cannot be changed after submission: delete the TrainingJob and submit it again (only cleanup and suspend can be edited)"
// +kubebuilder:validation:XValidation:rule="(has(self.serviceAccountName) ? self.serviceAccountName : \"\") == (has(oldSelf.serviceAccountName) ? oldSelf.serviceAccountName : \"\")",message="serviceAccountName cannot be changed after submission: delete the TrainingJob and submit it again (only cleanup and suspend can be edited)"
// +kubebuilder:validation:XValidation:rule="(has(self.imagePullSecrets) ? self.imagePullSecrets : []) == (has(oldSelf.imagePullSecrets) ? oldSelf.imagePullSecrets : [])",message="imagePullSecrets cannot be changed after submission: delete the TrainingJob and submit it again (only cleanup and suspend can be edited)"
// +kubebuilder:validation:XValidation:rule="(has(self.podLabels) ? self.podLabels : {}) == (has(oldSelf.podLabels) ? oldSelf.podLabels : {})",message="podLabels cannot be changed after submission: delete the TrainingJob and submit it again (only cleanup and suspend can be edited)"
// +kubebuilder:validation:XValidation:rule="(has(self.podAnnotations) ? self.podAnnotations : {}) == (has(oldSelf.podAnnotations) ? oldSelf.podAnnotations : {})",message="podAnnotations cannot be changed after submission: delete the TrainingJob and submit it again (only cleanup and suspend can be edited)"
// +kubebuilder:validation:XValidation:rule="has(self.backoffLimit) == has(oldSelf.backoffLimit)",message="backoffLimit cannot be changed after submission: delete the TrainingJob and submit it again (only cleanup and suspend can be edited)"
// +kubebuilder:validation:XValidation:rule="has(self.maxRestarts) == has(oldSelf.maxRestarts)",message="maxRestarts cannot be changed after submission: delete the TrainingJob and submit it again (only cleanup and suspend can be edited)"
// +kubebuilder:validation:XValidation:rule="(has(self.successPolicy) ? self.successPolicy : \"\") == (has(oldSelf.successPolicy) ? oldSelf.successPolicy : \"\")",message="successPolicy cannot be changed after submission: delete the TrainingJob and submit it again (only cleanup and suspend can be edited)"
// +kubebuilder:validation:XValidation:rule="has(self.worker) == has(oldSelf.worker)",message="worker cannot be changed after submission: delete the TrainingJob and submit it again (only cleanup and suspend can be edited)"
// +kubebuilder:validation:XValidation:rule="has(self.ps) == has(oldSelf.ps)",message="ps cannot be changed after submission: delete the TrainingJob and submit it again (only cleanup and suspend can be edited)"
// +kubebuilder:validation:XValidation:rule="(has(self.tensorflow) && has(self.tensorflow.chief) ? self.tensorflow.chief : false) == (has(oldSelf.tensorflow) && has(oldSelf.tensorflow.chief) ? oldSelf.tensorflow.chief : false)",message="tensorflow cannot be changed after submission: delete the TrainingJob and submit it again (only cleanup and suspend can be edited)"
// +kubebuilder:validation:XValidation:rule="has(self.tensorboard) == has(oldSelf.tensorboard)",message="tensorboard cannot be changed after submission: delete the TrainingJob and submit it again (only cleanup and suspend can be edited)"
// +kubebuilder:validation:XValidation:rule="has(self.resources) == has(oldSelf.resources) || (has(self.resources) ? (!has(self.resources.cpu) && !has(self.resources.memory) && (!has(self.resources.gpus) || self.resources.gpus == 0) && (!has(self.resources.extra) || size(self.resources.extra) == 0)) : (!has(oldSelf.resources.cpu) && !has(oldSelf.resources.memory) && (!has(oldSelf.resources.gpus) || oldSelf.resources.gpus == 0) && (!has(oldSelf.resources.extra) || size(oldSelf.resources.extra) == 0)))",message="resources cannot be changed after submission: delete the TrainingJob and submit it again (only cleanup and suspend can be edited)"
type TrainingJobSpec struct {
	// Image is the container image of every worker.
	// +kubebuilder:validation:XValidation:rule="size(self.trim()) > 0",message="image is empty: set the container image of the workers, e.g. image: pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime"
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="image cannot be changed after submission: delete the TrainingJob and submit it again (only cleanup and suspend can be edited)"
	Image string `json:"image"`

	// ImagePullPolicy of the workers; Kubernetes' default when empty.
	// +kubebuilder:validation:Enum=Always;IfNotPresent;Never
	// +optional
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`

	// Command overrides the image's entrypoint.
	// +optional
	Command []string `json:"command,omitempty"`

	// Args are the arguments of Command (or of the image's entrypoint).
	// +optional
	Args []string `json:"args,omitempty"`

	// Env is added to every worker's environment (after the mode's own
	// variables, so it can override them).
	// +optional
	// +listType=map
	// +listMapKey=name
	Env []corev1.EnvVar `json:"env,omitempty"`

	// Workers is the number of worker pods (one per completion index).
	// +kubebuilder:validation:XValidation:rule="self >= 1",message="workers must be at least 1"
	// +kubebuilder:validation:XValidation:rule="self <= 10000",message="workers must be at most 10000"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="workers cannot be changed after submission: delete the TrainingJob and submit it again (only cleanup and suspend can be edited)"
	Workers int32 `json:"workers"`

	// Mode is how workers find each other: standalone (default), pytorch,
	// tensorflow or mpi.
	// +kubebuilder:default=standalone
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="mode cannot be changed after submission: delete the TrainingJob and submit it again (only cleanup and suspend can be edited)"
	Mode Mode `json:"mode,omitempty"`

	// ParameterServers is the number of TensorFlow parameter-server pods
	// (mode tensorflow only). They run until the workers finish.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	// +optional
	ParameterServers int32 `json:"parameterServers,omitempty"`

	// Port is the rendezvous port: MASTER_PORT for pytorch (default 29500),
	// the TF_CONFIG port for tensorflow (default 2222).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	Port int32 `json:"port,omitempty"`

	// NprocPerNode is how many processes torchrun starts in each worker pod
	// (mode pytorch): PET_NPROC_PER_NODE, and WORLD_SIZE = workers ×
	// nprocPerNode as the Kubeflow training operator counts it. Default:
	// resources.gpus when set, else 1.
	// +kubebuilder:validation:XValidation:rule="self >= 1",message="nprocPerNode must be at least 1: the processes torchrun starts in each worker pod, e.g. its GPUs"
	// +kubebuilder:validation:XValidation:rule="self <= 1024",message="nprocPerNode must be at most 1024"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="nprocPerNode cannot be changed after submission: delete the TrainingJob and submit it again (only cleanup and suspend can be edited)"
	// +optional
	NprocPerNode *int32 `json:"nprocPerNode,omitempty"`

	// Resources each worker requests.
	// +optional
	// +kubebuilder:validation:XValidation:rule="has(self.cpu) == has(oldSelf.cpu) && (!has(self.cpu) || self.cpu == oldSelf.cpu) && has(self.memory) == has(oldSelf.memory) && (!has(self.memory) || self.memory == oldSelf.memory) && (has(self.gpus) ? self.gpus : 0) == (has(oldSelf.gpus) ? oldSelf.gpus : 0) && (has(self.extra) ? self.extra : {}) == (has(oldSelf.extra) ? oldSelf.extra : {})",message="resources cannot be changed after submission: delete the TrainingJob and submit it again (only cleanup and suspend can be edited)"
	Resources WorkerResources `json:"resources,omitempty"`

	// Datasets mounted read-only into every worker through EpochFS.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	Datasets []Dataset `json:"datasets,omitempty"`

	// Gang scheduling: all workers start together or none does. Enabled by
	// default when the job has more than one pod.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="gang cannot be changed after submission: delete the TrainingJob and submit it again (only cleanup and suspend can be edited)"
	Gang *Gang `json:"gang,omitempty"`

	// NodeSelector restricts the workers (and parameter servers) to nodes
	// with these labels, e.g. {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}.
	// The capacity pre-check counts only those nodes.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// Tolerations let the workers onto tainted nodes. A toleration of each
	// extended resource the workers request (e.g. nvidia.com/gpu, effect
	// NoSchedule) is added as Kubernetes' ExtendedResourceToleration
	// admission plugin would. The capacity pre-check skips nodes with a
	// NoSchedule or NoExecute taint the workers do not tolerate.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// PriorityClassName of the workers (and of the PodGroup).
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`

	// Suspend holds the job: while true no pod runs. A job submitted
	// suspended gets its objects with its Jobs suspended (and skips the
	// capacity check until resumed); setting it on a running job suspends
	// its Jobs, whose controller deletes their pods; setting it back to
	// false runs the capacity check and resumes them. The one field besides
	// cleanup that can be edited. Kueue and cluster admins use it.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// QueueName is the Kueue LocalQueue of the job: the label
	// kueue.x-k8s.io/queue-name on its Jobs, which Kueue then suspends
	// until it admits them. (gang.queue is Volcano's.)
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self == '' || self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')",message="queueName must be a LocalQueue name (lower-case letters, digits, '-' and '.', at most 63), e.g. team-a"
	// +optional
	QueueName string `json:"queueName,omitempty"`

	// ServiceAccountName the pods run as (default: the namespace's
	// default ServiceAccount).
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == '' || self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')",message="serviceAccountName must be a ServiceAccount name (lower-case letters, digits, '-' and '.'), e.g. trainer"
	// +optional
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// ImagePullSecrets are Secrets of the job's namespace the kubelet uses
	// to pull the image.
	// +kubebuilder:validation:MaxItems=16
	// +optional
	// +listType=atomic
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`

	// PodLabels are added to every pod's labels. Keys under
	// jobs.epochfs.io/ are the controller's and refused.
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.startsWith('jobs.epochfs.io/'))",message="podLabels: keys under jobs.epochfs.io/ are set by the controller: use another prefix"
	// +optional
	PodLabels map[string]string `json:"podLabels,omitempty"`

	// PodAnnotations are added to every pod's annotations. Keys under
	// jobs.epochfs.io/ are the controller's and refused.
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.startsWith('jobs.epochfs.io/'))",message="podAnnotations: keys under jobs.epochfs.io/ are set by the controller: use another prefix"
	// +optional
	PodAnnotations map[string]string `json:"podAnnotations,omitempty"`

	// Worker customises the worker pods with a pod template, merged with
	// what the controller renders (see ReplicaSpec).
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="worker cannot be changed after submission: delete the TrainingJob and submit it again (only cleanup and suspend can be edited)"
	Worker *ReplicaSpec `json:"worker,omitempty"`

	// PS customises the parameter-server pods (mode tensorflow) likewise.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="ps cannot be changed after submission: delete the TrainingJob and submit it again (only cleanup and suspend can be edited)"
	PS *ReplicaSpec `json:"ps,omitempty"`

	// BackoffLimit is how many failed pods one attempt's Jobs replace
	// alone (each Job's backoffLimit) before the attempt fails and the
	// whole gang restarts (maxRestarts). Default 0: any failed pod fails the
	// attempt, because a replaced pod cannot rejoin the rendezvous of the
	// others (pytorch, tensorflow, mpi). Set it only for standalone workers
	// that do not talk to each other. Jobs submitted before maxRestarts
	// existed carry the old default, 3.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="backoffLimit cannot be changed after submission: delete the TrainingJob and submit it again (only cleanup and suspend can be edited)"
	BackoffLimit *int32 `json:"backoffLimit,omitempty"`

	// MaxRestarts is how many times the whole gang is restarted after an
	// attempt fails (a pod fails beyond backoffLimit, or the parameter
	// servers' Job fails): the controller deletes every pod of the attempt
	// (workers and parameter servers), waits until they are gone, and
	// creates the next attempt's Jobs (label jobs.epochfs.io/attempt, env
	// EPOCHFS_ATTEMPT), which rendezvous anew. Once maxRestarts restarts
	// are spent, the next failure fails the TrainingJob with the failing
	// pod's reason. Default 3; 0 fails the job on its first failure. As
	// JobSet's failurePolicy.maxRestarts.
	// +kubebuilder:validation:XValidation:rule="self >= 0",message="maxRestarts must be at least 0: the number of times the whole gang is restarted after a failure (0: fail the job on the first failure)"
	// +kubebuilder:validation:XValidation:rule="self <= 100",message="maxRestarts must be at most 100"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="maxRestarts cannot be changed after submission: delete the TrainingJob and submit it again (only cleanup and suspend can be edited)"
	// +kubebuilder:default=3
	// +optional
	MaxRestarts *int32 `json:"maxRestarts,omitempty"`

	// SuccessPolicy says when the job has succeeded: AllWorkers (every
	// worker pod succeeded; the default, except for mode mpi) or Worker0
	// (worker 0 succeeded: the Job controller then stops the others; the
	// default and the only choice for mode mpi, whose other ranks serve
	// mpirun and never exit by themselves). Parameter servers never count.
	// +optional
	SuccessPolicy SuccessPolicy `json:"successPolicy,omitempty"`

	// Cleanup of a finished job. The one part of the spec that can be
	// edited after submission; the controller applies the current value
	// when the job finishes and after.
	// +optional
	Cleanup Cleanup `json:"cleanup,omitempty"`

	// ShmSize is the size of /dev/shm in every pod: a memory-backed
	// emptyDir (tmpfs) with this sizeLimit, mounted at /dev/shm. PyTorch
	// DataLoader workers pass batches through it; the container runtime's
	// own /dev/shm is often 64Mi. Default 2Gi (as Arena); 0 mounts none,
	// leaving the runtime's. Its pages count against the pod's memory
	// limit, like any tmpfs.
	// +kubebuilder:validation:XValidation:rule="!quantity(string(self)).isLessThan(quantity('0'))",message="shmSize must not be negative: set a size such as 2Gi, or 0 for the container runtime's own /dev/shm"
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).isInteger()",message="shmSize must be a whole number of bytes, such as 2Gi or 512Mi, not a fraction"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="shmSize cannot be changed after submission: delete the TrainingJob and submit it again (only cleanup and suspend can be edited)"
	// +optional
	ShmSize *resource.Quantity `json:"shmSize,omitempty"`

	// TensorFlow holds the settings of mode tensorflow.
	// +optional
	TensorFlow *TensorFlowSpec `json:"tensorflow,omitempty"`

	// Tensorboard, when set, tells where the workers write event files;
	// exported to them as TENSORBOARD_LOG_DIR.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="tensorboard cannot be changed after submission: delete the TrainingJob and submit it again (only cleanup and suspend can be edited)"
	Tensorboard *Tensorboard `json:"tensorboard,omitempty"`
}

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

// Phase is the coarse state of a TrainingJob.
type Phase string

// Phases.
const (
	PhasePending   Phase = "Pending"
	PhaseRunning   Phase = "Running"
	PhaseSucceeded Phase = "Succeeded"
	PhaseFailed    Phase = "Failed"
)

// Condition types.
const (
	// ConditionValid is False when the spec has an error CEL cannot see
	// (e.g. a malformed dataset URL); the message says what to change.
	ConditionValid = "Valid"
	// ConditionInsufficientResources is True while the cluster cannot fit
	// the gang; the message names what is short. No pods are created.
	ConditionInsufficientResources = "InsufficientResources"
	// ConditionCreated is True once the Job and its companions exist.
	ConditionCreated = "Created"
	// ConditionRunning is True while enough workers are ready.
	ConditionRunning = "Running"
	// ConditionSucceeded and ConditionFailed are True once finished.
	ConditionSucceeded = "Succeeded"
	ConditionFailed    = "Failed"
	// ConditionSuspended is True while the job's Jobs are suspended (by
	// spec.suspend, or by a queue such as Kueue).
	ConditionSuspended = "Suspended"
	// ConditionRestarting is True from an attempt's failure until the next
	// attempt's Jobs exist (the old pods are being deleted).
	ConditionRestarting = "Restarting"
)

// AttemptFailure is why an attempt of the gang failed.
type AttemptFailure struct {
	// Attempt that failed (0 is the first).
	Attempt int32 `json:"attempt"`
	// Replica type of the failing pod: worker or ps; empty when no failed
	// pod was found (the Job's own reason then).
	// +optional
	Replica string `json:"replica,omitempty"`
	// Index of the failing pod (its completion index, the worker's rank).
	// +optional
	Index *int32 `json:"index,omitempty"`
	// Pod is the name of the failing pod (deleted when the gang restarts).
	// +optional
	Pod string `json:"pod,omitempty"`
	// Reason is the pod's (Evicted, DeadlineExceeded, …), else its
	// container's (Error, OOMKilled, …), else the Job's
	// (BackoffLimitExceeded, DeadlineExceeded, …).
	Reason string `json:"reason"`
	// Message says what failed: the container's exit code and the tail of
	// its log (terminationMessagePolicy FallbackToLogsOnError), or the
	// pod's or Job's message.
	// +optional
	Message string `json:"message,omitempty"`
	// Time the attempt was seen to fail.
	// +optional
	Time *metav1.Time `json:"time,omitempty"`
}

// ReplicaStatus counts the pods of one replica type.
type ReplicaStatus struct {
	// Active pods (pending or running).
	Active int32 `json:"active"`
	// Ready pods.
	Ready int32 `json:"ready"`
	// Succeeded pods.
	Succeeded int32 `json:"succeeded"`
	// Failed pods of the current attempt (each counts against
	// backoffLimit).
	Failed int32 `json:"failed"`
}

// TrainingJobStatus is written by the controller.
type TrainingJobStatus struct {
	// Phase: Pending, Running, Succeeded or Failed.
	// +optional
	Phase Phase `json:"phase,omitempty"`
	// Reason is a CamelCase word for the phase (e.g. InsufficientResources,
	// BackoffLimitExceeded).
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message is a sentence a user can act on.
	// +optional
	Message string `json:"message,omitempty"`
	// Conditions (Valid, InsufficientResources, Created, Running,
	// Suspended, Restarting, Succeeded, Failed).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Workers counts the worker pods.
	// +optional
	Workers ReplicaStatus `json:"workers,omitempty"`
	// ParameterServers counts the TensorFlow parameter-server pods.
	// +optional
	ParameterServers *ReplicaStatus `json:"parameterServers,omitempty"`
	// Chief counts the TensorFlow chief's pods (tensorflow.chief).
	// +optional
	Chief *ReplicaStatus `json:"chief,omitempty"`
	// StartTime is when the workers' Job started.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// CompletionTime is when the job succeeded or failed.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// Restarts is how many times the whole gang has been restarted, which
	// is also the number of the attempt now running (0 is the first).
	// +optional
	Restarts int32 `json:"restarts"`
	// LastFailure is why the latest failed attempt failed; it stays after
	// the gang restarted (whose pods, and logs, are then gone).
	// +optional
	LastFailure *AttemptFailure `json:"lastFailure,omitempty"`
	// ObservedGeneration is the generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// The CRD carries helm.sh/resource-policy=keep (the metadata marker below):
// `helm uninstall` of the chart leaves it, and so every TrainingJob, in
// place. kubectl and kustomize ignore the annotation.

// TrainingJob is a distributed training job whose workers read EpochFS
// datasets. The controller turns it into a headless Service, an Indexed
// batch/v1 Job, a PodGroup for gang scheduling and a read-only volume per
// dataset, all owned by it.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:metadata:annotations="helm.sh/resource-policy=keep"
// +kubebuilder:resource:shortName=tj;tjob,categories=epochfs
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="Workers",type=integer,JSONPath=`.spec.workers`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.workers.ready`
// +kubebuilder:printcolumn:name="Restarts",type=integer,JSONPath=`.status.restarts`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type TrainingJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   TrainingJobSpec   `json:"spec,omitempty"`
	Status TrainingJobStatus `json:"status,omitempty"`
}

// TrainingJobList is a list of TrainingJobs.
//
// +kubebuilder:object:root=true
type TrainingJobList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TrainingJob `json:"items"`
}
