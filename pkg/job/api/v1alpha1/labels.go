package v1alpha1

import corev1 "k8s.io/api/core/v1"

// Labels, annotations and names the job controller puts on what it creates
// for a TrainingJob. They are part of the API: clients (`cachefs job`) find
// a job's pods, Jobs and PersistentVolumes by them.
const (
	// LabelJobName is on every object and pod of a TrainingJob.
	LabelJobName = "jobs.epochfs.io/name"
	// LabelReplica is ReplicaWorker, ReplicaPS or ReplicaChief on pods and Jobs.
	LabelReplica = "jobs.epochfs.io/replica"
	// LabelAttempt is the attempt of the gang (status.restarts when it was
	// created: "0", "1", …) on Jobs and pods. A Job or pod without it is of
	// attempt 0.
	LabelAttempt = "jobs.epochfs.io/attempt"
	// LabelOwnerUID, LabelOwnerNamespace are on the PersistentVolumes,
	// which are cluster-scoped and so cannot carry an owner reference to a
	// namespaced TrainingJob.
	LabelOwnerUID       = "jobs.epochfs.io/owner-uid"
	LabelOwnerNamespace = "jobs.epochfs.io/owner-namespace"
	// AnnotationPrefetch is on a dataset's PersistentVolume when the
	// dataset asks for prefetch.
	AnnotationPrefetch = "jobs.epochfs.io/prefetch"
	// AnnotationDatasetID is on a dataset's PersistentVolume.
	AnnotationDatasetID = "jobs.epochfs.io/dataset-id"

	// AnnotationAuthor is on a TrainingJob: the user name of whoever
	// submitted it. The ValidatingAdmissionPolicy
	// trainingjob-templates.jobs.epochfs.io (deploy/policies) admits it
	// only equal to the creating request's user, and never changed after;
	// the controller puts a dataset's secretName in a PersistentVolume only
	// when that user may get the Secret (a SubjectAccessReview).
	AnnotationAuthor = "jobs.epochfs.io/author"
	// AnnotationAuthorGroups is on a TrainingJob, optional: groups of its
	// author, comma-separated. The same policy admits only groups the
	// creating request's user has; the SubjectAccessReview claims them
	// (and system:authenticated) for the author.
	AnnotationAuthorGroups = "jobs.epochfs.io/author-groups"

	// AnnotationSuspended is on a Job the controller suspended for
	// spec.suspend; it resumes only those (a Job suspended by Kueue is
	// Kueue's to resume).
	AnnotationSuspended = "jobs.epochfs.io/suspended"
	// LabelKueueQueue is Kueue's queue label, set from spec.queueName.
	LabelKueueQueue = "kueue.x-k8s.io/queue-name"

	// FinalizerVolumes removes a TrainingJob's PersistentVolumes.
	FinalizerVolumes = "jobs.epochfs.io/volumes"

	// ReplicaWorker, ReplicaPS and ReplicaChief are the values of
	// LabelReplica.
	ReplicaWorker = "worker"
	ReplicaPS     = "ps"
	ReplicaChief  = "chief"

	// ContainerName is the name of the training container.
	ContainerName = "trainer"

	// ResourceGPU is the resource name of a GPU.
	ResourceGPU corev1.ResourceName = "nvidia.com/gpu"
)
