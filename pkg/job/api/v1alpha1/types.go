package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

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
