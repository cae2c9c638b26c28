package controller

// This file renders a plan's Indexed Jobs (workers, and parameter servers
// for TensorFlow) and their pod template: the training container, its
// rendezvous environment, dataset volumes, gang scheduler markers,
// tolerations and the cache-aware node affinity.

import (
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
)

// Pod markers of other projects.
const (
	// Volcano and scheduler-plugins pod markers.
	volcanoGroupAnnotation = "scheduling.k8s.io/group-name"
	volcanoQueueAnnotation = "volcano.sh/queue-name"
	schedPluginsGroupLabel = "scheduling.x-k8s.io/pod-group"
	// completionIndexAnnotation is set by the Job controller on the pods
	// of an Indexed Job.
	completionIndexAnnotation = "batch.kubernetes.io/job-completion-index"
)

// mpiHostfileDir is where an MPI job's hostfile ConfigMap is mounted.
const mpiHostfileDir = "/etc/mpi"

// Volumes the controller adds to every pod (besides dataset-NAME).
const (
	// shmVolume is the memory-backed emptyDir mounted at /dev/shm.
	shmVolume = "dshm"
	// mpiVolume is the MPI hostfile ConfigMap.
	mpiVolume = "mpi-hostfile"
)

// template returns a copy of the spec's pod template of a replica type
// (empty when it has none).
func (p *plan) template(replica string) *corev1.PodTemplateSpec {
	rs := p.tj.Spec.Worker
	if replica == v1alpha1.ReplicaPS {
		rs = p.tj.Spec.PS
	}
	if rs == nil {
		return &corev1.PodTemplateSpec{}
	}
	return rs.Template.DeepCopy()
}

// Schedulers names the scheduler of each gang implementation.
type Schedulers struct {
	// Volcano is the schedulerName of Volcano's scheduler ("volcano").
	Volcano string
	// SchedulerPlugins is the schedulerName of the scheduler-plugins
	// scheduler ("scheduler-plugins-scheduler").
	SchedulerPlugins string
}

// job returns the Indexed Job of one replica type.
func (p *plan) job(replica string, sched Schedulers) *batchv1.Job {
	s := &p.tj.Spec
	name, n, reqs := p.workerJobName(), s.Workers, p.workerReqs
	switch replica {
	case v1alpha1.ReplicaPS:
		name, n, reqs = p.psJobName(), s.ParameterServers, p.psReqs
	case v1alpha1.ReplicaChief:
		// One pod shaped as a worker (its template and requests).
		name, n = p.chiefJobName(), 1
	}
	tmpl := p.template(replica)
	pod := p.podSpec(replica, tmpl, reqs)
	tmplMeta := p.podMeta(replica, tmpl, sched, &pod)
	// A failed pod beyond backoff fails the Job, and so the attempt: the
	// controller then restarts the whole gang (maxRestarts).
	backoff := p.backoff
	if replica == v1alpha1.ReplicaPS {
		backoff = 0 // the workers cannot go on without every parameter server
	}
	job := &batchv1.Job{
		ObjectMeta: p.meta(name, replica),
		Spec: batchv1.JobSpec{
			CompletionMode: ptr.To(batchv1.IndexedCompletion),
			Completions:    ptr.To(n),
			Parallelism:    ptr.To(n),
			BackoffLimit:   ptr.To(backoff),
			Template:       corev1.PodTemplateSpec{ObjectMeta: tmplMeta, Spec: pod},
		},
	}
	job.Labels[v1alpha1.LabelAttempt] = strconv.Itoa(int(p.attempt))
	if s.QueueName != "" {
		// Kueue's batch/Job integration: its webhook suspends the Job on
		// creation and it resumes it once the queue admits it.
		job.Labels[v1alpha1.LabelKueueQueue] = s.QueueName
	}
	if s.Suspend {
		job.Spec.Suspend = ptr.To(true)
		job.Annotations = map[string]string{v1alpha1.AnnotationSuspended: "true"}
	}
	if p.success == v1alpha1.SuccessWorker0 && replica == v1alpha1.ReplicaWorker {
		// The job has succeeded when worker 0 has, and the Job controller
		// then ends the others (successPolicy, beta and on by default since
		// Kubernetes 1.31). The default for mpi: mpirun runs on rank 0 and
		// the other ranks only serve it (sshd).
		job.Spec.SuccessPolicy = &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{{SucceededIndexes: ptr.To("0")}}}
	}
	return job
}

// podSpec is the pod of a replica: the template's, with the trainer
// container (trainer), the spec's pod fields, the placement (affinity,
// nodeSelector, tolerations) and the controller's volumes.
func (p *plan) podSpec(replica string, tmpl *corev1.PodTemplateSpec, reqs corev1.ResourceList) corev1.PodSpec {
	s := &p.tj.Spec
	// The trainer container: the template's (when it has one) filled with
	// the spec's fields.
	ci := slices.IndexFunc(tmpl.Spec.Containers, func(c corev1.Container) bool { return c.Name == v1alpha1.ContainerName })
	c := corev1.Container{Name: v1alpha1.ContainerName}
	if ci >= 0 {
		c = tmpl.Spec.Containers[ci]
	}
	p.trainer(&c, replica, reqs)
	pod := tmpl.Spec
	if pod.HostNetwork {
		// In the node's network a declared container port is a host port
		// (the API server defaults hostPort to it), which would keep a
		// second worker of the job off the node: the rendezvous port is
		// then only in the Service and the environment.
		c.Ports = slices.DeleteFunc(c.Ports, func(cp corev1.ContainerPort) bool { return cp.Name == "rendezvous" })
	}
	pod.RestartPolicy = corev1.RestartPolicyNever
	pod.Subdomain = p.serviceName()
	if s.PriorityClassName != "" {
		pod.PriorityClassName = s.PriorityClassName
	}
	if s.ServiceAccountName != "" {
		pod.ServiceAccountName = s.ServiceAccountName
	}
	pod.ImagePullSecrets = slices.Concat(pod.ImagePullSecrets, s.ImagePullSecrets)
	pod.Affinity = p.affinity(pod.Affinity)
	if len(pod.NodeSelector) == 0 {
		pod.NodeSelector = s.NodeSelector
	} else {
		maps.Copy(pod.NodeSelector, s.NodeSelector)
	}
	pod.Tolerations = tolerations(slices.Concat(pod.Tolerations, s.Tolerations), reqs)
	p.mountVolumes(&pod, &c)
	if ci >= 0 {
		pod.Containers[ci] = c
	} else {
		pod.Containers = append([]corev1.Container{c}, pod.Containers...)
	}
	return pod
}

// trainer fills the trainer container c with the spec's image, command,
// environment, the rendezvous port and the requests reqs.
func (p *plan) trainer(c *corev1.Container, replica string, reqs corev1.ResourceList) {
	s := &p.tj.Spec
	c.Image = s.Image
	if s.ImagePullPolicy != "" {
		c.ImagePullPolicy = s.ImagePullPolicy
	}
	if len(s.Command) > 0 {
		c.Command = s.Command
	}
	if len(s.Args) > 0 {
		c.Args = s.Args
	}
	c.Env = slices.Concat(p.env(replica), c.Env, s.Env)
	if c.TerminationMessagePolicy == "" {
		// A failed trainer's last log lines become its termination
		// message, which the controller keeps in status.lastFailure: the
		// pod and its log go when the gang restarts.
		c.TerminationMessagePolicy = corev1.TerminationMessageFallbackToLogsOnError
	}
	c.Ports = append([]corev1.ContainerPort{{Name: "rendezvous", ContainerPort: p.port, Protocol: corev1.ProtocolTCP}},
		slices.DeleteFunc(c.Ports, func(cp corev1.ContainerPort) bool { return cp.Name == "rendezvous" || cp.ContainerPort == p.port })...)
	// reqs hold the template's requests too (newPlan); a limit the template
	// sets stays, others equal the request (CPU: a request only, no
	// throttling).
	limits := maps.Clone(c.Resources.Limits)
	if limits == nil {
		limits = corev1.ResourceList{}
	}
	for k, v := range reqs {
		if _, ok := limits[k]; !ok && k != corev1.ResourceCPU {
			limits[k] = v.DeepCopy()
		}
	}
	c.Resources = corev1.ResourceRequirements{Requests: reqs.DeepCopy(), Limits: limits, Claims: c.Resources.Claims}
	if len(c.Resources.Requests) == 0 && len(c.Resources.Limits) == 0 && len(c.Resources.Claims) == 0 {
		c.Resources = corev1.ResourceRequirements{}
	}
}

// mountVolumes adds the controller's volumes to pod and mounts them in the
// trainer c: each dataset read-only, /dev/shm, the MPI hostfile.
func (p *plan) mountVolumes(pod *corev1.PodSpec, c *corev1.Container) {
	for _, d := range p.datasets {
		vol := "dataset-" + d.spec.Name
		pod.Volumes = append(pod.Volumes, corev1.Volume{Name: vol, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: d.claimName, ReadOnly: true},
		}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: vol, MountPath: d.spec.MountPath, ReadOnly: true})
	}
	if p.shm != nil {
		pod.Volumes = append(pod.Volumes, corev1.Volume{Name: shmVolume, VolumeSource: corev1.VolumeSource{
			EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(p.shm.DeepCopy())},
		}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: shmVolume, MountPath: "/dev/shm"})
	}
	if p.mode == v1alpha1.ModeMPI {
		pod.Volumes = append(pod.Volumes, corev1.Volume{Name: mpiVolume, VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: p.hostfileName()}},
		}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: mpiVolume, MountPath: mpiHostfileDir, ReadOnly: true})
	}
}

// podMeta is the pods' metadata: the template's labels and annotations,
// then the spec's, then the controller's, which win; with a gang, the
// scheduler's markers (and pod's schedulerName).
func (p *plan) podMeta(replica string, tmpl *corev1.PodTemplateSpec, sched Schedulers, pod *corev1.PodSpec) metav1.ObjectMeta {
	s := &p.tj.Spec
	m := metav1.ObjectMeta{Labels: tmpl.Labels, Annotations: tmpl.Annotations}
	if m.Labels == nil {
		m.Labels = map[string]string{}
	}
	maps.Copy(m.Labels, s.PodLabels)
	maps.Copy(m.Labels, p.labels(replica))
	m.Labels[v1alpha1.LabelAttempt] = strconv.Itoa(int(p.attempt))
	if len(s.PodAnnotations) > 0 {
		if m.Annotations == nil {
			m.Annotations = map[string]string{}
		}
		maps.Copy(m.Annotations, s.PodAnnotations)
	}
	if !p.gang {
		return m
	}
	switch p.scheduler {
	case v1alpha1.GangSchedulerPlugins:
		pod.SchedulerName = sched.SchedulerPlugins
		m.Labels[schedPluginsGroupLabel] = p.podGroupName()
	default:
		pod.SchedulerName = sched.Volcano
		if m.Annotations == nil {
			m.Annotations = map[string]string{}
		}
		m.Annotations[volcanoGroupAnnotation] = p.podGroupName()
		if g := s.Gang; g != nil && g.Queue != "" {
			m.Annotations[volcanoQueueAnnotation] = g.Queue
		}
	}
	return m
}

// tolerations returns the spec's tolerations plus, for each extended
// resource in reqs that none of them tolerates, {key: resource, operator:
// Exists, effect: NoSchedule}: what the ExtendedResourceToleration admission
// plugin adds, so that GPU nodes tainted nvidia.com/gpu:NoSchedule (a common
// way to keep other pods off them) take the workers whether or not the
// cluster runs that plugin, and the capacity check sees the same thing.
func tolerations(spec []corev1.Toleration, reqs corev1.ResourceList) []corev1.Toleration {
	out := append([]corev1.Toleration(nil), spec...)
	for _, name := range sortedNames(reqs) {
		if !isExtendedResource(name) {
			continue
		}
		taint := corev1.Taint{Key: string(name), Effect: corev1.TaintEffectNoSchedule}
		if tolerates(out, &taint) {
			continue
		}
		out = append(out, corev1.Toleration{Key: string(name), Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// isExtendedResource: a resource with a domain outside kubernetes.io, as
// the ExtendedResourceToleration plugin counts them.
func isExtendedResource(name corev1.ResourceName) bool {
	domain, _, ok := strings.Cut(string(name), "/")
	return ok && domain != "kubernetes.io" && !strings.HasSuffix(domain, ".kubernetes.io")
}

// env returns the rendezvous environment of a replica type. $(VAR)
// references are expanded by the kubelet from variables defined earlier.
func (p *plan) env(replica string) []corev1.EnvVar {
	s := &p.tj.Spec
	index := corev1.EnvVar{Name: "EPOCHFS_REPLICA_INDEX", ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['" + completionIndexAnnotation + "']"},
	}}
	env := []corev1.EnvVar{
		index,
		{Name: "EPOCHFS_JOB_NAME", Value: p.tj.Name},
		{Name: "EPOCHFS_REPLICA_TYPE", Value: replica},
		{Name: "EPOCHFS_WORKERS", Value: strconv.Itoa(int(s.Workers))},
		// The gang's attempt (status.restarts): a script can tell a
		// restart, e.g. to resume from its last checkpoint.
		{Name: "EPOCHFS_ATTEMPT", Value: strconv.Itoa(int(p.attempt))},
	}
	// Python's output reaches the log as it is printed, not in 4 KiB
	// blocks (spec.env can set it back).
	env = append(env, corev1.EnvVar{Name: "PYTHONUNBUFFERED", Value: "1"})
	port := strconv.Itoa(int(p.port))
	idx := "$(EPOCHFS_REPLICA_INDEX)"
	switch p.mode {
	case v1alpha1.ModePyTorch:
		// As the Kubeflow training operator sets them: WORLD_SIZE counts
		// processes (pods × nprocPerNode), RANK is the pod's (node) rank;
		// torchrun reads PET_* as the defaults of its flags and exports
		// each process's own RANK, LOCAL_RANK and WORLD_SIZE.
		master := p.host(p.workerJobName(), 0)
		env = append(env,
			corev1.EnvVar{Name: "MASTER_ADDR", Value: master},
			corev1.EnvVar{Name: "MASTER_PORT", Value: port},
			corev1.EnvVar{Name: "WORLD_SIZE", Value: strconv.Itoa(int(s.Workers) * int(p.nproc))},
			corev1.EnvVar{Name: "RANK", Value: idx},
			corev1.EnvVar{Name: "PET_NNODES", Value: strconv.Itoa(int(s.Workers))},
			corev1.EnvVar{Name: "PET_NPROC_PER_NODE", Value: strconv.Itoa(int(p.nproc))},
			corev1.EnvVar{Name: "PET_NODE_RANK", Value: idx},
			corev1.EnvVar{Name: "PET_MASTER_ADDR", Value: master},
			corev1.EnvVar{Name: "PET_MASTER_PORT", Value: port},
		)
	case v1alpha1.ModeTensorFlow:
		env = append(env, p.tfConfig(replica, port, idx))
	case v1alpha1.ModeMPI:
		// As the MPI operator sets them for Open MPI 4: the hostfile, the
		// slots of a host it does not list, and host names kept whole.
		// Open MPI 5 launches through PRRTE, which reads the same three
		// settings as its own prte_* parameters (PRTE_MCA_ in the
		// environment) and none of the orte_* ones.
		hostfile, slots := mpiHostfileDir+"/hostfile", strconv.Itoa(int(p.slots()))
		env = append(env,
			corev1.EnvVar{Name: "OMPI_MCA_orte_default_hostfile", Value: hostfile},
			corev1.EnvVar{Name: "OMPI_MCA_orte_keep_fqdn_hostnames", Value: "true"},
			corev1.EnvVar{Name: "OMPI_MCA_orte_set_default_slots", Value: slots},
			corev1.EnvVar{Name: "PRTE_MCA_prte_default_hostfile", Value: hostfile},
			corev1.EnvVar{Name: "PRTE_MCA_prte_keep_fqdn_hostnames", Value: "true"},
			corev1.EnvVar{Name: "PRTE_MCA_prte_set_default_slots", Value: slots},
			corev1.EnvVar{Name: "WORLD_SIZE", Value: strconv.Itoa(int(s.Workers))},
			corev1.EnvVar{Name: "RANK", Value: idx},
		)
	}
	if s.Tensorboard != nil {
		env = append(env, corev1.EnvVar{Name: "TENSORBOARD_LOG_DIR", Value: s.Tensorboard.LogDir})
	}
	for _, d := range p.datasets {
		env = append(env, corev1.EnvVar{
			Name:  "EPOCHFS_DATASET_" + strings.ToUpper(strings.ReplaceAll(d.spec.Name, "-", "_")),
			Value: d.spec.MountPath,
		})
	}
	return env
}

// cacheTiers grade the preference for a node by the percent of a dataset
// its cache holds: a node with more than 98 % gets all four weights.
var cacheTiers = []struct {
	above  int
	weight int32
}{{0, 10}, {49, 20}, {89, 30}, {98, 40}}

// affinity prefers nodes whose EpochFS cache already holds the job's
// datasets (p.locations, from the node plugins' location Leases:
// locations.go). A template's affinity is kept, with these preferences
// added.
func (p *plan) affinity(tmpl *corev1.Affinity) *corev1.Affinity {
	var terms []corev1.PreferredSchedulingTerm
	for _, d := range p.datasets {
		if d.id == "" {
			continue
		}
		terms = append(terms, cacheTerms(p.locations[d.id])...)
	}
	if len(terms) == 0 {
		return tmpl
	}
	if tmpl == nil {
		tmpl = &corev1.Affinity{}
	}
	if tmpl.NodeAffinity == nil {
		tmpl.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := tmpl.NodeAffinity
	na.PreferredDuringSchedulingIgnoredDuringExecution = append(na.PreferredDuringSchedulingIgnoredDuringExecution, terms...)
	return tmpl
}

// tfConfig is TF_CONFIG as tf-operator wrote it: lower-case replica types,
// every pod's host:port per type, this pod's task, environment "cloud".
// The chief (tensorflow.chief) is a replica of its own, task index 0;
// without one TensorFlow makes worker 0 the chief.
func (p *plan) tfConfig(replica, port, idx string) corev1.EnvVar {
	s := &p.tj.Spec
	cluster := map[string][]string{}
	if p.chief {
		cluster[v1alpha1.ReplicaChief] = []string{p.host(p.chiefJobName(), 0) + ":" + port}
	}
	for i := range s.Workers {
		cluster[v1alpha1.ReplicaWorker] = append(cluster[v1alpha1.ReplicaWorker], p.host(p.workerJobName(), i)+":"+port)
	}
	for i := range s.ParameterServers {
		cluster[v1alpha1.ReplicaPS] = append(cluster[v1alpha1.ReplicaPS], p.host(p.psJobName(), i)+":"+port)
	}
	cj, _ := json.Marshal(cluster) // map of string slices: cannot fail
	return corev1.EnvVar{Name: "TF_CONFIG",
		Value: `{"cluster":` + string(cj) + `,"task":{"type":"` + replica + `","index":` + idx + `},"environment":"cloud"}`}
}
