// Package v1alpha1 is the TrainingJob API (jobs.epochfs.io/v1alpha1): a
// distributed training job whose workers read EpochFS dataset volumes.
//
// The CRD in deploy/crds is generated from these types by controller-gen
// (`make generate-job-api`); validation that a schema can express lives here
// as OpenAPI markers and CEL rules, so a bad TrainingJob is refused by the
// API server with a message that says what to change, without a webhook.
// What CEL cannot check (a dataset's source URL) the controller checks and
// reports in the TrainingJob's status.
//
// +kubebuilder:object:generate=true
// +groupName=jobs.epochfs.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is jobs.epochfs.io/v1alpha1.
	GroupVersion = schema.GroupVersion{Group: "jobs.epochfs.io", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &TrainingJob{}, &TrainingJobList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
