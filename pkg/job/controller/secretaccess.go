package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
)

// The controller creates PersistentVolumes whose nodeStageSecretRef names a
// Secret of the job's namespace; the kubelet then reads that Secret with the
// node's rights, for a job author who may not be allowed to read it. So a
// Secret goes into a volume only when the job's author may get it: a
// SubjectAccessReview for the user named by the job's
// AnnotationAuthor, which the admission policy AuthorPolicyBinding binds
// admits only equal to the creating request's user name and never changed.
// Without that binding in force the annotation could be forged, so the
// controller then refuses every Secret reference.

// ReasonSecretNotAllowed is the reason of a job refused because its author
// may not read a Secret it names (condition Valid False, phase Failed).
const ReasonSecretNotAllowed = "SecretNotAllowed"

// DefaultAuthorPolicyBinding is the ValidatingAdmissionPolicyBinding that
// vouches for AnnotationAuthor (deploy/policies/trainingjob-templates.yaml).
const DefaultAuthorPolicyBinding = "trainingjob-templates.jobs.epochfs.io"

// authenticatedGroup is the group of every authenticated user, which the
// review claims for the author besides AnnotationAuthorGroups.
const authenticatedGroup = "system:authenticated"

// authorGroups are the groups the review claims for tj's author.
func authorGroups(tj *v1alpha1.TrainingJob) []string {
	groups := []string{authenticatedGroup}
	for _, g := range strings.Split(tj.Annotations[v1alpha1.AnnotationAuthorGroups], ",") {
		if g = strings.TrimSpace(g); g != "" && !slices.Contains(groups, g) {
			groups = append(groups, g)
		}
	}
	return groups
}

// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingadmissionpolicybindings,verbs=get

// checkSecretAccess returns a refusal (errRefused) when a dataset of p names
// a Secret its author may not get, or the author is not known for sure;
// other errors are the API server's (retried).
func (r *Reconciler) checkSecretAccess(ctx context.Context, p *plan) error {
	var secrets []string
	for _, d := range p.datasets {
		if d.id != "" && d.spec.SecretName != "" && !slices.Contains(secrets, d.spec.SecretName) {
			secrets = append(secrets, d.spec.SecretName)
		}
	}
	if len(secrets) == 0 {
		return nil
	}
	tj := p.tj
	author := tj.Annotations[v1alpha1.AnnotationAuthor]
	if author == "" {
		return refusal("the job names Secret %q but has no %s annotation: set it to your user name (`kubectl auth whoami`) so that the controller can check that you may read the Secret", secrets[0], v1alpha1.AnnotationAuthor)
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{}
	err := r.cfg.APIReader.Get(ctx, client.ObjectKey{Name: r.cfg.AuthorPolicyBinding}, binding)
	if apierrors.IsNotFound(err) || (err == nil && !slices.Contains(binding.Spec.ValidationActions, admissionv1.Deny)) {
		return refusal("the job names Secret %q, but the admission policy binding %s that vouches for its %s annotation is not installed (or does not deny): the cluster admin installs deploy/policies/trainingjob-templates.yaml (the chart does on Kubernetes >= 1.30)",
			secrets[0], r.cfg.AuthorPolicyBinding, v1alpha1.AnnotationAuthor)
	} else if err != nil {
		return fmt.Errorf("get ValidatingAdmissionPolicyBinding %s: %w", r.cfg.AuthorPolicyBinding, err)
	}
	for _, name := range secrets {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   author,
			Groups: authorGroups(tj),
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: tj.Namespace, Verb: "get", Resource: "secrets", Name: name,
			},
		}}
		if err := r.cfg.Client.Create(ctx, sar); err != nil {
			return fmt.Errorf("SubjectAccessReview for %s on Secret %s/%s: %w", author, tj.Namespace, name, err)
		}
		if !sar.Status.Allowed {
			return refusal("the job's author %q may not get Secret %q in namespace %q (SubjectAccessReview): the controller puts only Secrets its author may read in a volume", author, name, tj.Namespace)
		}
	}
	return nil
}

// refusedError is a refusal of the job (not a transient error).
type refusedError struct{ msg string }

func (e *refusedError) Error() string { return e.msg }

func refusal(format string, args ...any) error {
	return &refusedError{msg: fmt.Sprintf(format, args...)}
}
