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
// plan.go validates a TrainingJob into a plan; render.go and
// render_job.go turn a plan into objects; restart.go restarts the whole
// gang when an attempt fails (spec.maxRestarts).
package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
	"github.com/epochfs/epochfs/pkg/source"
	"github.com/epochfs/epochfs/pkg/sourcepolicy"
	"github.com/epochfs/epochfs/pkg/volattr"
)

// Config configures the controller. The zero value of every field but
// Client, APIReader and Scheme means its default.
type Config struct {
	// Client reads (from the manager's cache) and writes.
	Client client.Client
	// APIReader reads directly from the API server: Nodes and Pods for the
	// capacity check, so the manager need not cache every pod.
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
// +kubebuilder:rbac:groups="",resources=pods,verbs=list;delete
// +kubebuilder:rbac:groups="",resources=nodes,verbs=list
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

func (r *Reconciler) reconcile(ctx context.Context, tj *v1alpha1.TrainingJob) (result, error) {
	// The finalizer first: Update replaces tj, status included.
	if needsVolumes(tj) && controllerutil.AddFinalizer(tj, v1alpha1.FinalizerVolumes) {
		if err := r.cfg.Client.Update(ctx, tj); err != nil {
			return result{}, fmt.Errorf("add finalizer: %w", err)
		}
	}
	if tj.Status.Phase == "" {
		tj.Status.Phase = v1alpha1.PhasePending
	}
	if finished(tj) {
		return r.afterFinish(ctx, tj)
	}
	p, err := newPlan(tj)
	if err != nil {
		setCondition(tj, v1alpha1.ConditionValid, false, "InvalidSpec", err.Error())
		setPhase(tj, v1alpha1.PhaseFailed, "InvalidSpec", err.Error()+"; the job was not started: fix it and submit again")
		tj.Status.CompletionTime = ptrTime(r.cfg.Now())
		r.event(tj, corev1.EventTypeWarning, "InvalidSpec", err.Error())
		return result{}, nil
	}
	setCondition(tj, v1alpha1.ConditionValid, true, "Valid", "the spec is valid")

	worker, err := r.getJob(ctx, tj, p.workerJobName())
	if err != nil {
		return result{}, err
	}
	if worker != nil && !metav1.IsControlledBy(worker, tj) {
		msg := fmt.Sprintf("a Job named %s exists and is not owned by this TrainingJob: delete it or rename the TrainingJob", worker.Name)
		setPhase(tj, v1alpha1.PhasePending, "NameConflict", msg)
		return result{requeue: r.cfg.CapacityRetry}, nil
	}
	var ps *batchv1.Job
	if tj.Spec.ParameterServers > 0 {
		if ps, err = r.getJob(ctx, tj, p.psJobName()); err != nil {
			return result{}, err
		}
	}
	var chief *batchv1.Job
	if p.chief {
		if chief, err = r.getJob(ctx, tj, p.chiefJobName()); err != nil {
			return result{}, err
		}
	}
	// The gang's attempt: status.restarts, or an existing Job's if newer.
	// Anything of an older attempt goes before the new one starts.
	adoptAttempt(tj, p, worker, ps, chief)
	if stale, err := r.clearOldAttempts(ctx, tj, p, worker, ps, chief); err != nil || stale {
		return result{requeue: restartPoll}, err
	}
	if worker != nil && (!worker.DeletionTimestamp.IsZero() || attemptOf(worker) < p.attempt) {
		worker = nil // deleted by clearOldAttempts
	}
	if ps != nil && (!ps.DeletionTimestamp.IsZero() || attemptOf(ps) < p.attempt) {
		ps = nil
	}
	if chief != nil && (!chief.DeletionTimestamp.IsZero() || attemptOf(chief) < p.attempt) {
		chief = nil
	}
	restart := p.attempt > 0 || meta.IsStatusConditionTrue(tj.Status.Conditions, v1alpha1.ConditionRestarting)
	if worker == nil {
		// Sources are checked before anything is created, not on every
		// pass (nor when the gang restarts): a policy tightened later does
		// not fail running jobs (the node refuses their new mounts).
		if !restart {
			if err := r.checkSources(p); err != nil {
				msg := err.Error()
				setCondition(tj, v1alpha1.ConditionValid, false, ReasonSourceNotAllowed, msg)
				setPhase(tj, v1alpha1.PhaseFailed, ReasonSourceNotAllowed, msg+"; the job was not started: use a source the cluster's policy allows and submit again")
				tj.Status.CompletionTime = ptrTime(r.cfg.Now())
				r.event(tj, corev1.EventTypeWarning, ReasonSourceNotAllowed, msg)
				return result{}, nil
			}
			if err := r.checkSecretAccess(ctx, p); err != nil {
				var refused *refusedError
				if !errors.As(err, &refused) {
					return result{}, fmt.Errorf("check secret access: %w", err)
				}
				msg := err.Error()
				setCondition(tj, v1alpha1.ConditionValid, false, ReasonSecretNotAllowed, msg)
				setPhase(tj, v1alpha1.PhaseFailed, ReasonSecretNotAllowed, msg+"; the job was not started")
				tj.Status.CompletionTime = ptrTime(r.cfg.Now())
				r.event(tj, corev1.EventTypeWarning, ReasonSecretNotAllowed, msg)
				return result{}, nil
			}
		}
		// A suspended job runs nothing, so it needs no room yet: the
		// check runs when it is resumed.
		if !tj.Spec.Suspend {
			if res, wait, err := r.checkCapacity(ctx, tj, p); err != nil || wait {
				return res, err
			}
		}
		if err := r.create(ctx, tj, p); errors.Is(err, errWait) {
			return result{requeue: r.cfg.CapacityRetry}, nil
		} else if err != nil {
			return result{}, err
		}
		markCreated(tj)
		what := "created Job " + p.workerJobName()
		if restart {
			what = fmt.Sprintf("restarted the whole gang: created the Jobs of attempt %d", p.attempt)
			setCondition(tj, v1alpha1.ConditionRestarting, false, "Restarted", what)
		}
		if tj.Spec.Suspend {
			msg := suspendedMessage(tj)
			setCondition(tj, v1alpha1.ConditionSuspended, true, "Suspended", msg)
			setPhase(tj, v1alpha1.PhasePending, "Suspended", msg)
			r.event(tj, corev1.EventTypeNormal, "Suspended", what+" suspended")
			return result{}, nil
		}
		setPhase(tj, v1alpha1.PhasePending, "Created", fmt.Sprintf("waiting for %d workers to be scheduled", tj.Spec.Workers))
		if restart {
			r.event(tj, corev1.EventTypeNormal, "Restarted", what)
		} else {
			r.event(tj, corev1.EventTypeNormal, "Created", what)
		}
		return result{}, nil
	}
	// The status write that followed the creation may have been lost (a
	// conflict with a status written from an older copy): the Job exists,
	// so the job was created and the capacity check is behind it.
	markCreated(tj)
	if meta.IsStatusConditionTrue(tj.Status.Conditions, v1alpha1.ConditionRestarting) {
		setCondition(tj, v1alpha1.ConditionRestarting, false, "Restarted", fmt.Sprintf("restarted the whole gang: created the Jobs of attempt %d", p.attempt))
	}
	if (tj.Spec.ParameterServers > 0 && ps == nil) || (p.chief && chief == nil) {
		return result{}, nil
	}
	if res, wait, err := r.syncSuspend(ctx, tj, p, ps, chief, worker); err != nil || wait {
		return res, err
	}
	r.updateStatus(tj, p, worker, ps, chief)
	if !finished(tj) {
		if j := failedJob(worker, ps, chief); j != nil {
			if err := r.attemptFailed(ctx, tj, p, j, worker, ps, chief); err != nil || !finished(tj) {
				return result{requeue: restartPoll}, err
			}
		}
	}
	if finished(tj) {
		r.event(tj, eventType(tj), tj.Status.Reason, tj.Status.Message)
		return r.afterFinish(ctx, tj)
	}
	return result{}, nil
}

// syncSuspend makes the unfinished Jobs (parameter servers first) follow
// spec.suspend: it suspends them, marking each with AnnotationSuspended,
// and resumes only Jobs so marked, after the capacity check (wait: the job
// waits with its status set). A Job suspended by someone else (Kueue, which
// resumes it on admission) is left alone.
func (r *Reconciler) syncSuspend(ctx context.Context, tj *v1alpha1.TrainingJob, p *plan, jobs ...*batchv1.Job) (res result, wait bool, err error) {
	var resume []*batchv1.Job
	for _, j := range jobs {
		if j == nil || jobCondition(j, batchv1.JobComplete) != nil || jobCondition(j, batchv1.JobFailed) != nil {
			continue
		}
		suspended := ptr.Deref(j.Spec.Suspend, false)
		switch {
		case tj.Spec.Suspend && !suspended:
			j.Spec.Suspend = ptr.To(true)
			metav1.SetMetaDataAnnotation(&j.ObjectMeta, v1alpha1.AnnotationSuspended, "true")
			if err := r.cfg.Client.Update(ctx, j); err != nil {
				return result{}, false, fmt.Errorf("suspend Job %s: %w", j.Name, err)
			}
			r.event(tj, corev1.EventTypeNormal, "Suspended", "suspended Job "+j.Name+": its pods are deleted")
		case !tj.Spec.Suspend && suspended && j.Annotations[v1alpha1.AnnotationSuspended] == "true":
			resume = append(resume, j)
		}
	}
	if len(resume) == 0 {
		return result{}, false, nil
	}
	if res, wait, err := r.checkCapacity(ctx, tj, p); err != nil || wait {
		return res, true, err
	}
	for _, j := range resume {
		j.Spec.Suspend = ptr.To(false)
		delete(j.Annotations, v1alpha1.AnnotationSuspended)
		if err := r.cfg.Client.Update(ctx, j); err != nil {
			return result{}, false, fmt.Errorf("resume Job %s: %w", j.Name, err)
		}
		r.event(tj, corev1.EventTypeNormal, "Resumed", "resumed Job "+j.Name)
	}
	return result{}, false, nil
}

// suspendedMessage says who holds a job whose Jobs are suspended.
func suspendedMessage(tj *v1alpha1.TrainingJob) string {
	switch {
	case tj.Spec.Suspend:
		return fmt.Sprintf("suspended (spec.suspend): no pods run; resume with `cachefs job resume %s` (spec.suspend: false)", tj.Name)
	case tj.Spec.QueueName != "":
		return fmt.Sprintf("waiting for Kueue to admit the job from queue %s: its Jobs are suspended until then", tj.Spec.QueueName)
	default:
		return "its Jobs are suspended by another controller: no pods run until it resumes them"
	}
}

// ReasonSourceNotAllowed is the reason of a job refused by the source
// policy (condition Valid False, phase Failed).
const ReasonSourceNotAllowed = "SourceNotAllowed"

// checkSources applies the source policy to every source dataset: to
// every attribute of its volume that names something to read (the source,
// and a manifest should the volume carry one), as the CSI node will
// (sourcepolicy.CheckVolumeLexically). The controller sees no credentials
// (they are the node's or the volume's secrets), so network places are
// checked as if they had some: only the network rules apply here; the node
// enforces the credential rule. A TrainingJob's author is a tenant: an nfs
// source may not read as uid/gid 0 unless a rule pins it (the node cannot
// tell the controller's volumes from the admin's, so this check is the one
// that counts for them).
func (r *Reconciler) checkSources(p *plan) error {
	for _, d := range p.datasets {
		if d.id == "" {
			continue
		}
		src, err := source.Parse(d.spec.Source)
		if err != nil { // newPlan has parsed it
			return fmt.Errorf("dataset %q: %w", d.spec.Name, err)
		}
		err = r.sources.CheckVolumeLexically(sourcepolicy.Volume{
			Source:      src,
			Manifest:    d.attrs[volattr.Manifest],
			Credentials: func(source.Source) bool { return true },
			Tenant:      true,
		})
		if err != nil {
			return fmt.Errorf("dataset %q: %w", d.spec.Name, err)
		}
	}
	return nil
}

// markCreated records that the job's objects exist: condition Created,
// and a capacity shortfall seen before is resolved.
func markCreated(tj *v1alpha1.TrainingJob) {
	setCondition(tj, v1alpha1.ConditionCreated, true, "Created", "the Job, Service, PodGroup and volumes exist")
	if meta.IsStatusConditionTrue(tj.Status.Conditions, v1alpha1.ConditionInsufficientResources) {
		setCondition(tj, v1alpha1.ConditionInsufficientResources, false, "Fits", "the cluster has room for the job")
	}
}

// checkCapacity runs the pre-check before anything is created. wait means
// the job must wait (status set, requeue in res).
func (r *Reconciler) checkCapacity(ctx context.Context, tj *v1alpha1.TrainingJob, p *plan) (res result, wait bool, err error) {
	if r.cfg.SkipCapacityCheck {
		return result{}, false, nil
	}
	var nodes corev1.NodeList
	if err := r.cfg.APIReader.List(ctx, &nodes); err != nil {
		return result{}, false, fmt.Errorf("list nodes: %w", err)
	}
	var pods corev1.PodList
	if err := r.cfg.APIReader.List(ctx, &pods); err != nil {
		return result{}, false, fmt.Errorf("list pods: %w", err)
	}
	gang := p.gangPods()
	what := fmt.Sprintf("%d pods", len(gang))
	if tj.Spec.ParameterServers == 0 && !p.chief {
		what = fmt.Sprintf("%d workers", len(gang))
	}
	if len(gang) == 1 {
		what = "1 worker"
	}
	if per := formatList(p.workerReqs); per != "" {
		what += " (each " + per + ")"
	}
	reserved, err := r.reservations(ctx, tj, pods.Items)
	if err != nil {
		return result{}, false, err
	}
	workers := p.job(v1alpha1.ReplicaWorker, r.cfg.Schedulers).Spec.Template.Spec
	req := capacityRequest{what: what, pods: p.capacityPods(r.cfg.Schedulers, 0, 0), spec: &workers}
	short := capacityShortfall(nodes.Items, pods.Items, req, reserved)
	if short == "" {
		if meta.FindStatusCondition(tj.Status.Conditions, v1alpha1.ConditionInsufficientResources) != nil {
			setCondition(tj, v1alpha1.ConditionInsufficientResources, false, "Fits", "the cluster has room for the job")
		}
		return result{}, false, nil
	}
	msg := short + fmt.Sprintf("; no pods are created, the job waits and checks again every %v", r.cfg.CapacityRetry)
	if c := meta.FindStatusCondition(tj.Status.Conditions, v1alpha1.ConditionInsufficientResources); c == nil || c.Status != metav1.ConditionTrue || c.Message != msg {
		r.event(tj, corev1.EventTypeWarning, v1alpha1.ConditionInsufficientResources, short)
	}
	setCondition(tj, v1alpha1.ConditionInsufficientResources, true, v1alpha1.ConditionInsufficientResources, msg)
	setPhase(tj, v1alpha1.PhasePending, v1alpha1.ConditionInsufficientResources, msg)
	return result{requeue: r.cfg.CapacityRetry}, true, nil
}

// reservations are the other TrainingJobs that passed the check (their
// Jobs exist: condition Created) and have not finished, with the requests
// of their gang pods that are not yet placed: not created, or created and
// not bound to a node. Bound pods are counted on their nodes; succeeded
// ones need nothing more.
func (r *Reconciler) reservations(ctx context.Context, self *v1alpha1.TrainingJob, pods []corev1.Pod) ([]reservation, error) {
	var tjs v1alpha1.TrainingJobList
	if err := r.cfg.APIReader.List(ctx, &tjs); err != nil {
		return nil, fmt.Errorf("list TrainingJobs: %w", err)
	}
	type key struct{ ns, name, replica string }
	placed := map[key]int32{}
	for i := range pods {
		pod := &pods[i]
		name, ok := pod.Labels[v1alpha1.LabelJobName]
		if !ok {
			continue
		}
		if (pod.Spec.NodeName != "" && pod.Status.Phase != corev1.PodFailed) || pod.Status.Phase == corev1.PodSucceeded {
			placed[key{pod.Namespace, name, pod.Labels[v1alpha1.LabelReplica]}]++
		}
	}
	var out []reservation
	for i := range tjs.Items {
		tj := &tjs.Items[i]
		if tj.UID == self.UID || finished(tj) || !tj.DeletionTimestamp.IsZero() || tj.Spec.Suspend ||
			!meta.IsStatusConditionTrue(tj.Status.Conditions, v1alpha1.ConditionCreated) {
			continue
		}
		p, err := newPlan(tj)
		if err != nil {
			continue
		}
		// The chief is shaped as a worker and counted with them.
		want := p.capacityPods(r.cfg.Schedulers, placed[key{tj.Namespace, tj.Name, v1alpha1.ReplicaPS}],
			placed[key{tj.Namespace, tj.Name, v1alpha1.ReplicaWorker}]+placed[key{tj.Namespace, tj.Name, v1alpha1.ReplicaChief}])
		if len(want) > 0 {
			out = append(out, reservation{job: tj.Namespace + "/" + tj.Name, pods: want})
		}
	}
	return out, nil
}

// create makes every object of the job, the Jobs last (they start pods):
// each dataset's claim and volume, hostfile, Service, PodGroup, parameter
// servers, workers. An object that exists already is left alone if this
// job owns it.
func (r *Reconciler) create(ctx context.Context, tj *v1alpha1.TrainingJob, p *plan) error {
	// Per dataset: a volume of its name that is not this job's stops
	// everything before a claim naming it exists; then the claim; then the
	// volume, pre-bound to that claim (name and UID), so that no other
	// claim, not even a later one of the same name, can bind it.
	p.locations = r.cacheLocations(ctx)
	pvs, pvcs := p.volumes()
	for i, pvc := range pvcs {
		if _, err := r.checkVolume(ctx, tj, pvs[i]); err != nil {
			return err
		}
		if err := r.createOwned(ctx, tj, pvc); err != nil {
			return err
		}
		pvs[i].Spec.ClaimRef.UID = pvc.UID
		if err := r.createVolume(ctx, tj, pvs[i]); err != nil {
			return err
		}
	}
	var objs []client.Object
	if p.mode == v1alpha1.ModeMPI {
		objs = append(objs, p.hostfile())
	}
	objs = append(objs, p.service())
	if p.gang {
		objs = append(objs, p.podGroup())
	}
	if tj.Spec.ParameterServers > 0 {
		objs = append(objs, p.job(v1alpha1.ReplicaPS, r.cfg.Schedulers))
	}
	if p.chief {
		objs = append(objs, p.job(v1alpha1.ReplicaChief, r.cfg.Schedulers))
	}
	objs = append(objs, p.job(v1alpha1.ReplicaWorker, r.cfg.Schedulers))
	for _, o := range objs {
		if err := r.createOwned(ctx, tj, o); err != nil {
			return err
		}
	}
	return nil
}

// createOwned creates o, or accepts the object of that name if this job
// controls it. Either way o carries the UID of the object in the cluster.
func (r *Reconciler) createOwned(ctx context.Context, tj *v1alpha1.TrainingJob, o client.Object) error {
	err := r.cfg.Client.Create(ctx, o)
	if err == nil {
		return nil
	}
	kind := o.GetObjectKind().GroupVersionKind().Kind
	if kind == "" {
		if gvk, gerr := r.cfg.Client.GroupVersionKindFor(o); gerr == nil {
			kind = gvk.Kind
		}
	}
	if meta.IsNoMatchError(err) {
		gvk := o.GetObjectKind().GroupVersionKind()
		msg := fmt.Sprintf("gang scheduling needs the %s CRD (%s) in the cluster: install %s, or set gang.enabled: false",
			gvk.Kind, gvk.GroupVersion(), p2name(gvk.Group))
		setPhase(tj, v1alpha1.PhasePending, "GangSchedulerMissing", msg)
		r.event(tj, corev1.EventTypeWarning, "GangSchedulerMissing", msg)
		return errWait
	}
	if !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create %s %s: %w", kind, o.GetName(), err)
	}
	existing := &unstructured.Unstructured{}
	gvk, gerr := r.cfg.Client.GroupVersionKindFor(o)
	if gerr != nil {
		return gerr
	}
	existing.SetGroupVersionKind(gvk)
	if err := r.cfg.Client.Get(ctx, client.ObjectKeyFromObject(o), existing); err != nil {
		return err
	}
	if !metav1.IsControlledBy(existing, tj) {
		msg := fmt.Sprintf("a %s named %s exists and is not owned by this TrainingJob: delete it or rename the TrainingJob", gvk.Kind, o.GetName())
		setPhase(tj, v1alpha1.PhasePending, "NameConflict", msg)
		return errWait
	}
	if _, ok := o.(*batchv1.Job); ok && attemptOf(existing) != attemptOf(o) {
		// Still the Job of another attempt (a cache behind the deletion).
		return fmt.Errorf("create Job %s of attempt %d: the Job of attempt %d is still there", o.GetName(), attemptOf(o), attemptOf(existing))
	}
	o.SetUID(existing.GetUID())
	return nil
}

// ReasonVolumeConflict is the reason of a job waiting because a
// PersistentVolume of the name it would create belongs to someone else.
const ReasonVolumeConflict = "VolumeConflict"

// createVolume creates a dataset's PersistentVolume. A volume of that name
// that exists already is used only if it is this job's (see checkVolume).
func (r *Reconciler) createVolume(ctx context.Context, tj *v1alpha1.TrainingJob, pv *corev1.PersistentVolume) error {
	err := r.cfg.Client.Create(ctx, pv)
	if err == nil {
		return nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create PersistentVolume %s: %w", pv.Name, err)
	}
	found, err := r.checkVolume(ctx, tj, pv)
	if err == nil && !found {
		err = fmt.Errorf("create PersistentVolume %s: it exists, then did not: trying again", pv.Name)
	}
	return err
}

// checkVolume looks for the PersistentVolume named as pv. One that exists
// is this job's only when its owner labels name this TrainingJob and it is
// pre-bound to the job's claim (to its UID, once pv has one); otherwise the
// job waits with reason VolumeConflict (errWait) and the volume is left
// alone. PersistentVolumes are read with APIReader: the manager does not
// cache them (the controller may not watch them).
func (r *Reconciler) checkVolume(ctx context.Context, tj *v1alpha1.TrainingJob, pv *corev1.PersistentVolume) (found bool, err error) {
	existing := &corev1.PersistentVolume{}
	if err := r.cfg.APIReader.Get(ctx, client.ObjectKeyFromObject(pv), existing); apierrors.IsNotFound(err) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("get PersistentVolume %s: %w", pv.Name, err)
	}
	why := volumeConflict(tj, pv, existing)
	if why == "" {
		return true, nil
	}
	msg := fmt.Sprintf("the PersistentVolume %s this job would create for claim %s exists and %s; it is not used and the job waits: delete that PersistentVolume, or delete and resubmit the TrainingJob (its volumes are then named anew)",
		pv.Name, pv.Spec.ClaimRef.Name, why)
	if tj.Status.Reason != ReasonVolumeConflict || tj.Status.Message != msg {
		r.event(tj, corev1.EventTypeWarning, ReasonVolumeConflict, msg)
	}
	setCondition(tj, v1alpha1.ConditionCreated, false, ReasonVolumeConflict, msg)
	setPhase(tj, v1alpha1.PhasePending, ReasonVolumeConflict, msg)
	return true, errWait
}

// volumeConflict says why existing, found where want was to be created, is
// not this job's volume ("" when it is).
func volumeConflict(tj *v1alpha1.TrainingJob, want, existing *corev1.PersistentVolume) string {
	uid, ns := existing.Labels[v1alpha1.LabelOwnerUID], existing.Labels[v1alpha1.LabelOwnerNamespace]
	if uid != string(tj.UID) || ns != tj.Namespace {
		if uid == "" && ns == "" {
			return "is not owned by a TrainingJob"
		}
		return fmt.Sprintf("is owned by another TrainingJob (namespace %q, uid %q)", ns, uid)
	}
	ref, w := existing.Spec.ClaimRef, want.Spec.ClaimRef
	if ref == nil || ref.Namespace != w.Namespace || ref.Name != w.Name {
		return "is not pre-bound to this job's claim"
	}
	if ref.UID != "" && w.UID != "" && ref.UID != w.UID {
		return fmt.Sprintf("is pre-bound to an earlier claim %s (uid %s), not to the current one", ref.Name, ref.UID)
	}
	return ""
}

func p2name(group string) string {
	if group == VolcanoPodGroup.Group {
		return "Volcano"
	}
	return "scheduler-plugins"
}

// finalize deletes the job's PersistentVolumes (cluster-scoped, so not
// reached by owner references) and removes the finalizer.
func (r *Reconciler) finalize(ctx context.Context, tj *v1alpha1.TrainingJob) error {
	if !controllerutil.ContainsFinalizer(tj, v1alpha1.FinalizerVolumes) {
		return nil
	}
	var pvs corev1.PersistentVolumeList
	if err := r.cfg.APIReader.List(ctx, &pvs, client.MatchingLabels{v1alpha1.LabelOwnerUID: string(tj.UID)}); err != nil {
		return fmt.Errorf("list PersistentVolumes: %w", err)
	}
	for i := range pvs.Items {
		if err := r.cfg.Client.Delete(ctx, &pvs.Items[i]); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete PersistentVolume %s: %w", pvs.Items[i].Name, err)
		}
	}
	controllerutil.RemoveFinalizer(tj, v1alpha1.FinalizerVolumes)
	return client.IgnoreNotFound(r.cfg.Client.Update(ctx, tj))
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
