package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

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
