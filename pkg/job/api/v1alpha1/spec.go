package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
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
