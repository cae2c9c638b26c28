// Package controller is the thin TrainingJob controller: it translates a
// TrainingJob (pkg/job/api/v1alpha1) into a headless Service, an Indexed
// batch/v1 Job (plus one for TensorFlow parameter servers), a PodGroup for
// Volcano or scheduler-plugins, an MPI hostfile ConfigMap and a read-only
// volume per dataset (a static PersistentVolume for the cachefs.epochfs.io
// CSI driver and a ReadOnlyMany claim bound to it), all owned by the
// TrainingJob; watches the Job and reports phase, conditions and counts;
// restarts the whole gang when a pod fails; and cleans up finished jobs.
//
// Kubernetes Jobs run the pods and the gang scheduler places them; this
// package only translates, watches and cleans up. It knows the CSI driver
// only through pkg/volattr (its name, the volume attributes and their
// validation, docs/CSI.md), the node plugins' cache-location Leases only
// through pkg/cachelabel, and the admin's source policy through pkg/sourcepolicy
// (the rules the CSI node enforces; the controller applies them early so
// that a forbidden source is refused before anything is created).
// plan.go validates a TrainingJob into a plan; reconcile.go is one pass
// over a job; render.go and render_job.go turn a plan into objects and
// create.go creates them; capacity.go is the pre-check; restart.go
// restarts the whole gang when an attempt fails (spec.maxRestarts).
package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
	"github.com/epochfs/epochfs/pkg/sourcepolicy"
)

// Config configures the controller. The zero value of every field but
// Client, APIReader and Scheme means its default.
type Config struct {
	// Client reads (from the manager's cache, built with CacheOptions) and
	// writes. The capacity pre-check lists Nodes, bound Pods and
	// TrainingJobs through it, so the manager caches (watches) them.
	Client client.Client
	// APIReader reads directly from the API server what the manager does
	// not cache or must be current: PersistentVolumes, cache-location
	// Leases, a job's own pods before they are deleted, the author policy
	// binding.
	APIReader client.Reader
	// Scheme knows TrainingJob and the core types.
	Scheme *runtime.Scheme
	// Recorder records Events on TrainingJobs; none when nil.
	Recorder events.EventRecorder
	// Schedulers names the gang schedulers (default "volcano" and
	// "scheduler-plugins-scheduler").
	Schedulers Schedulers
	// CapacityRetry is how often a job waiting for capacity is checked
	// again (default 30s).
	CapacityRetry time.Duration
	// SkipCapacityCheck turns the capacity pre-check off.
	SkipCapacityCheck bool
	// SourcePolicy says which dataset sources a TrainingJob may name: the
	// allowed local roots and network rules of the CSI node plugin. The
	// zero Policy refuses every local source and allows any network
	// source. The controller cannot see the nodes' file systems or a
	// volume's credentials: it checks local sources by their cleaned path
	// and network sources against the rules only; the node checks again,
	// resolving symlinks and enforcing credentials.
	SourcePolicy sourcepolicy.Policy
	// CacheLocationNamespace is the CSI driver's namespace, whose
	// location Leases (pkg/cachelabel) say which nodes cache which
	// datasets: the Jobs' pods prefer those nodes. Empty: no cache-aware
	// placement.
	CacheLocationNamespace string
	// Now is the clock (default time.Now); tests replace it.
	Now func() time.Time
	// AuthorPolicyBinding names the ValidatingAdmissionPolicyBinding that
	// vouches for a TrainingJob's author annotation (default
	// DefaultAuthorPolicyBinding); see secretaccess.go.
	AuthorPolicyBinding string
}

// Reconciler reconciles TrainingJobs. Its fields are set by New and
// read-only afterwards; it holds no other state, so Reconcile may run
// concurrently for different jobs.
type Reconciler struct {
	cfg     Config
	sources *sourcepolicy.Checker
}

// New validates cfg, applies defaults and returns a Reconciler.
func New(cfg Config) (*Reconciler, error) {
	if cfg.Client == nil || cfg.APIReader == nil || cfg.Scheme == nil {
		return nil, errors.New("job controller: Client, APIReader and Scheme are required")
	}
	if cfg.Schedulers.Volcano == "" {
		cfg.Schedulers.Volcano = "volcano"
	}
	if cfg.Schedulers.SchedulerPlugins == "" {
		cfg.Schedulers.SchedulerPlugins = "scheduler-plugins-scheduler"
	}
	if cfg.CapacityRetry <= 0 {
		cfg.CapacityRetry = 30 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.AuthorPolicyBinding == "" {
		cfg.AuthorPolicyBinding = DefaultAuthorPolicyBinding
	}
	sources, err := sourcepolicy.New(cfg.SourcePolicy)
	if err != nil {
		return nil, fmt.Errorf("job controller: %w", err)
	}
	return &Reconciler{cfg: cfg, sources: sources}, nil
}

// SetupWithManager registers the controller: it watches TrainingJobs and
// the Jobs, Services, ConfigMaps and claims they own.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.TrainingJob{}).
		Owns(&batchv1.Job{}).
		Owns(&corev1.Service{}).
		Owns(&corev1.ConfigMap{}).
		Owns(&corev1.PersistentVolumeClaim{}).
		Named("trainingjob").
		Complete(r)
}

// +kubebuilder:rbac:groups=jobs.epochfs.io,resources=trainingjobs,verbs=get;list;watch;update;patch;delete
// +kubebuilder:rbac:groups=jobs.epochfs.io,resources=trainingjobs/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=jobs.epochfs.io,resources=trainingjobs/finalizers,verbs=update
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=services;configmaps;persistentvolumeclaims,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=persistentvolumes,verbs=get;list;create;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=list;watch;delete
// +kubebuilder:rbac:groups="",resources=nodes,verbs=list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=scheduling.volcano.sh,resources=podgroups,verbs=get;create
// +kubebuilder:rbac:groups=scheduling.x-k8s.io,resources=podgroups,verbs=get;create

// Reconcile brings one TrainingJob's objects and status up to date.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	tj := &v1alpha1.TrainingJob{}
	if err := r.cfg.Client.Get(ctx, req.NamespacedName, tj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !tj.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.finalize(ctx, tj)
	}
	old := tj.Status.DeepCopy()
	res, err := r.reconcile(ctx, tj)
	tj.Status.ObservedGeneration = tj.Generation
	if !equalStatus(old, &tj.Status) {
		if uerr := r.cfg.Client.Status().Update(ctx, tj); uerr != nil {
			return ctrl.Result{}, errors.Join(err, fmt.Errorf("update status: %w", uerr))
		}
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	if res.deleteNow {
		err := r.cfg.Client.Delete(ctx, tj, client.PropagationPolicy(metav1.DeletePropagationBackground))
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	return ctrl.Result{RequeueAfter: res.requeue}, nil
}

type result struct {
	requeue   time.Duration
	deleteNow bool
}

// markCreated records that the job's objects exist: condition Created,
// and a capacity shortfall seen before is resolved.
func markCreated(tj *v1alpha1.TrainingJob) {
	setCondition(tj, v1alpha1.ConditionCreated, true, "Created", "the Job, Service, PodGroup and volumes exist")
	if meta.IsStatusConditionTrue(tj.Status.Conditions, v1alpha1.ConditionInsufficientResources) {
		setCondition(tj, v1alpha1.ConditionInsufficientResources, false, "Fits", "the cluster has room for the job")
	}
}

func (r *Reconciler) event(tj *v1alpha1.TrainingJob, typ, reason, msg string) {
	if r.cfg.Recorder != nil {
		r.cfg.Recorder.Eventf(tj, nil, typ, reason, "Reconcile", "%s", msg)
	}
}

func eventType(tj *v1alpha1.TrainingJob) string {
	if tj.Status.Phase == v1alpha1.PhaseFailed {
		return corev1.EventTypeWarning
	}
	return corev1.EventTypeNormal
}

// errWait stops creation until a condition the status names is resolved.
var errWait = errors.New("waiting")

// needsVolumes reports whether the job creates PersistentVolumes (and so
// needs the finalizer that deletes them).
func needsVolumes(tj *v1alpha1.TrainingJob) bool {
	for _, d := range tj.Spec.Datasets {
		if d.Source != "" {
			return true
		}
	}
	return false
}

func ptrTime(t time.Time) *metav1.Time {
	mt := metav1.NewTime(t)
	return &mt
}
