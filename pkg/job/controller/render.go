package controller

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/epochfs/epochfs/pkg/cachelabel"
	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
	"github.com/epochfs/epochfs/pkg/units"
	"github.com/epochfs/epochfs/pkg/volattr"
)

// Names of other projects' APIs and defaults of the rendering.
const (
	// Volcano and scheduler-plugins pod markers.
	volcanoGroupAnnotation    = "scheduling.k8s.io/group-name"
	volcanoQueueAnnotation    = "volcano.sh/queue-name"
	schedPluginsGroupLabel    = "scheduling.x-k8s.io/pod-group"
	completionIndexAnnotation = "batch.kubernetes.io/job-completion-index"

	mpiHostfileDir   = "/etc/mpi"
	defaultTorchPort = 29500
	defaultTFPort    = 2222
)

// PodGroup kinds of the two gang schedulers.
var (
	VolcanoPodGroup      = schema.GroupVersionKind{Group: "scheduling.volcano.sh", Version: "v1beta1", Kind: "PodGroup"}
	SchedPluginsPodGroup = schema.GroupVersionKind{Group: "scheduling.x-k8s.io", Version: "v1alpha1", Kind: "PodGroup"}
)

// Schedulers names the scheduler of each gang implementation.
type Schedulers struct {
	// Volcano is the schedulerName of Volcano's scheduler ("volcano").
	Volcano string
	// SchedulerPlugins is the schedulerName of the scheduler-plugins
	// scheduler ("scheduler-plugins-scheduler").
	SchedulerPlugins string
}

// plan is a validated, defaulted TrainingJob and everything derived from it.
type plan struct {
	tj         *v1alpha1.TrainingJob
	mode       v1alpha1.Mode
	port       int32
	gang       bool
	scheduler  v1alpha1.GangScheduler
	minMember  int32
	backoff    int32
	workerReqs corev1.ResourceList // requests of one worker
	psReqs     corev1.ResourceList // requests of one parameter server
	datasets   []datasetPlan
}

type datasetPlan struct {
	spec      v1alpha1.Dataset
	id        string // cachelabel.DatasetID, "" for an existing claim
	claimName string
	pvName    string
}

// newPlan validates what the CRD's schema cannot (source URLs, cache sizes)
// and applies defaults. Errors are sentences a user can act on.
func newPlan(tj *v1alpha1.TrainingJob) (*plan, error) {
	s := &tj.Spec
	p := &plan{tj: tj, mode: s.Mode, port: s.Port, backoff: 3}
	if p.mode == "" {
		p.mode = v1alpha1.ModeStandalone
	}
	switch p.mode {
	case v1alpha1.ModeStandalone, v1alpha1.ModePyTorch, v1alpha1.ModeTensorFlow, v1alpha1.ModeMPI:
	default:
		return nil, fmt.Errorf("mode %q is unknown: use standalone, pytorch, tensorflow or mpi", p.mode)
	}
	if strings.TrimSpace(s.Image) == "" {
		return nil, fmt.Errorf("image is empty: set the container image of the workers")
	}
	if s.Workers < 1 {
		return nil, fmt.Errorf("workers is %d: set at least 1", s.Workers)
	}
	if s.ParameterServers > 0 && p.mode != v1alpha1.ModeTensorFlow {
		return nil, fmt.Errorf("parameterServers is only for mode tensorflow")
	}
	if p.port == 0 {
		p.port = defaultTorchPort
		if p.mode == v1alpha1.ModeTensorFlow {
			p.port = defaultTFPort
		}
	}
	if s.BackoffLimit != nil {
		p.backoff = *s.BackoffLimit
	}
	total := s.Workers + s.ParameterServers
	p.gang = total > 1
	p.scheduler = v1alpha1.GangVolcano
	p.minMember = total
	if g := s.Gang; g != nil {
		if g.Enabled != nil {
			p.gang = *g.Enabled
		}
		if g.Scheduler != "" {
			p.scheduler = g.Scheduler
		}
		if g.MinAvailable != nil {
			if *g.MinAvailable > total {
				return nil, fmt.Errorf("gang.minAvailable %d is more than the job's %d pods", *g.MinAvailable, total)
			}
			p.minMember = *g.MinAvailable
		}
	}

	r := s.Resources
	p.workerReqs, p.psReqs = corev1.ResourceList{}, corev1.ResourceList{}
	if r.CPU != nil {
		p.workerReqs[corev1.ResourceCPU], p.psReqs[corev1.ResourceCPU] = r.CPU.DeepCopy(), r.CPU.DeepCopy()
	}
	if r.Memory != nil {
		p.workerReqs[corev1.ResourceMemory], p.psReqs[corev1.ResourceMemory] = r.Memory.DeepCopy(), r.Memory.DeepCopy()
	}
	if r.GPUs > 0 {
		p.workerReqs[v1alpha1.ResourceGPU] = *resource.NewQuantity(int64(r.GPUs), resource.DecimalSI)
	}
	for name, q := range r.Extra {
		if !strings.Contains(string(name), "/") {
			return nil, fmt.Errorf("resources.extra %q: an extra resource needs a domain, e.g. rdma/hca_shared_devices_a", name)
		}
		p.workerReqs[name] = q.DeepCopy()
	}

	seen := map[string]bool{}
	for _, d := range s.Datasets {
		if seen[d.Name] {
			return nil, fmt.Errorf("dataset %q is listed twice", d.Name)
		}
		seen[d.Name] = true
		dp := datasetPlan{spec: d, claimName: d.ExistingClaim}
		switch {
		case d.Source != "" && d.ExistingClaim != "":
			return nil, fmt.Errorf("dataset %q: set source or existingClaim, not both", d.Name)
		case d.Source != "":
			id, err := cachelabel.DatasetID(d.Source)
			if err != nil {
				return nil, fmt.Errorf("dataset %q: %s: fix the URL (forms: /abs/path, s3://bucket/prefix?endpoint=URL&region=R, cephfs://mon/path, nfs://host/export, mirror:URL,URL)",
					d.Name, strings.TrimPrefix(err.Error(), "backend: "))
			}
			dp.id = id
			dp.claimName = tj.Name + "-" + d.Name
			dp.pvName = pvName(tj, d.Name)
			if d.CacheSize != "" {
				if _, err := units.ParseSize(d.CacheSize); err != nil {
					return nil, fmt.Errorf("dataset %q: cacheSize %q: %v: use a size such as 50Gi, 50GiB or 500GB", d.Name, d.CacheSize, err)
				}
			}
		case d.ExistingClaim == "":
			return nil, fmt.Errorf("dataset %q: set source (a dataset URL) or existingClaim (a PersistentVolumeClaim)", d.Name)
		}
		if !strings.HasPrefix(d.MountPath, "/") {
			return nil, fmt.Errorf("dataset %q: mountPath %q must be absolute", d.Name, d.MountPath)
		}
		p.datasets = append(p.datasets, dp)
	}
	return p, nil
}

// pvName is a cluster-unique PersistentVolume name for a job's dataset.
func pvName(tj *v1alpha1.TrainingJob, dataset string) string {
	n := "epochfs-" + tj.Namespace + "-" + tj.Name + "-" + dataset
	if len(n) <= 253 {
		return n
	}
	sum := sha256.Sum256([]byte(n))
	return n[:200] + "-" + hex.EncodeToString(sum[:8])
}

func (p *plan) labels(replica string) map[string]string {
	l := map[string]string{v1alpha1.LabelJobName: p.tj.Name}
	if replica != "" {
		l[v1alpha1.LabelReplica] = replica
	}
	return l
}

func (p *plan) meta(name, replica string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:            name,
		Namespace:       p.tj.Namespace,
		Labels:          p.labels(replica),
		OwnerReferences: []metav1.OwnerReference{ownerRef(p.tj)},
	}
}

func ownerRef(tj *v1alpha1.TrainingJob) metav1.OwnerReference {
	return *metav1.NewControllerRef(tj, v1alpha1.GroupVersion.WithKind("TrainingJob"))
}

// serviceName is the headless Service that gives workers stable names:
// <job>-<index>.<service>.
func (p *plan) serviceName() string   { return p.tj.Name }
func (p *plan) workerJobName() string { return p.tj.Name }
func (p *plan) psJobName() string     { return p.tj.Name + "-ps" }
func (p *plan) podGroupName() string  { return p.tj.Name }
func (p *plan) hostfileName() string  { return p.tj.Name + "-mpi" }

func (p *plan) host(job string, i int32) string {
	return job + "-" + strconv.Itoa(int(i)) + "." + p.serviceName()
}

func (p *plan) service() *corev1.Service {
	return &corev1.Service{
		ObjectMeta: p.meta(p.serviceName(), ""),
		Spec: corev1.ServiceSpec{
			ClusterIP:                corev1.ClusterIPNone,
			Selector:                 p.labels(""),
			PublishNotReadyAddresses: true,
			Ports:                    []corev1.ServicePort{{Name: "rendezvous", Port: p.port, Protocol: corev1.ProtocolTCP}},
		},
	}
}

// hostfile is the MPI ConfigMap: one line per worker.
func (p *plan) hostfile() *corev1.ConfigMap {
	slots := max(p.tj.Spec.Resources.GPUs, 1)
	var b strings.Builder
	for i := range p.tj.Spec.Workers {
		fmt.Fprintf(&b, "%s slots=%d\n", p.host(p.workerJobName(), i), slots)
	}
	return &corev1.ConfigMap{ObjectMeta: p.meta(p.hostfileName(), ""), Data: map[string]string{"hostfile": b.String()}}
}

// volumes returns the PersistentVolume and claim of every source dataset.
func (p *plan) volumes() ([]*corev1.PersistentVolume, []*corev1.PersistentVolumeClaim) {
	var pvs []*corev1.PersistentVolume
	var pvcs []*corev1.PersistentVolumeClaim
	for _, d := range p.datasets {
		if d.id == "" {
			continue
		}
		capacity := resource.MustParse("1Gi") // nominal: a dataset volume is read-only
		attrs := map[string]string{volattr.Source: d.spec.Source}
		if d.spec.CacheSize != "" {
			attrs[volattr.CacheSize] = d.spec.CacheSize
		}
		if d.spec.ReadaheadFiles > 0 {
			attrs[volattr.ReadaheadFiles] = strconv.Itoa(int(d.spec.ReadaheadFiles))
		}
		ann := map[string]string{v1alpha1.AnnotationDatasetID: d.id}
		if d.spec.Prefetch {
			ann[v1alpha1.AnnotationPrefetch] = "true"
			attrs[volattr.Prefetch] = "true" // the CSI node plugin fills the cache once the dataset is staged
		}
		pv := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{
				Name: d.pvName,
				Labels: map[string]string{
					v1alpha1.LabelJobName: p.tj.Name, v1alpha1.LabelOwnerNamespace: p.tj.Namespace, v1alpha1.LabelOwnerUID: string(p.tj.UID),
				},
				Annotations: ann,
			},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: capacity},
				AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadOnlyMany},
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
				StorageClassName:              "",
				ClaimRef: &corev1.ObjectReference{
					APIVersion: "v1", Kind: "PersistentVolumeClaim", Namespace: p.tj.Namespace, Name: d.claimName,
				},
				PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
					Driver:           volattr.DriverName,
					VolumeHandle:     d.pvName,
					ReadOnly:         true,
					VolumeAttributes: attrs,
				}},
			},
		}
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: p.meta(d.claimName, ""),
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadOnlyMany},
				StorageClassName: ptr.To(""),
				VolumeName:       d.pvName,
				Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: capacity}},
			},
		}
		pvs, pvcs = append(pvs, pv), append(pvcs, pvc)
	}
	return pvs, pvcs
}

// podGroup returns the PodGroup of the chosen gang scheduler.
func (p *plan) podGroup() *unstructured.Unstructured {
	minRes := map[string]any{}
	total := corev1.ResourceList{}
	// The gang's minimum: parameter servers first (the workers need them).
	n := p.minMember
	ps := min(n, p.tj.Spec.ParameterServers)
	addTimes(total, p.psReqs, ps)
	addTimes(total, p.workerReqs, n-ps)
	for k, v := range total {
		minRes[string(k)] = v.String()
	}
	spec := map[string]any{"minMember": int64(p.minMember)}
	if len(minRes) > 0 {
		spec["minResources"] = minRes
	}
	gvk := VolcanoPodGroup
	if p.scheduler == v1alpha1.GangSchedulerPlugins {
		gvk = SchedPluginsPodGroup
	} else {
		if q := p.tj.Spec.Gang; q != nil && q.Queue != "" {
			spec["queue"] = q.Queue
		}
		if p.tj.Spec.PriorityClassName != "" {
			spec["priorityClassName"] = p.tj.Spec.PriorityClassName
		}
	}
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(gvk)
	m := p.meta(p.podGroupName(), "")
	u.SetName(m.Name)
	u.SetNamespace(m.Namespace)
	u.SetLabels(m.Labels)
	u.SetOwnerReferences(m.OwnerReferences)
	return u
}

func addTimes(total, per corev1.ResourceList, n int32) {
	for k, v := range per {
		q := total[k]
		for range n {
			q.Add(v)
		}
		total[k] = q
	}
}

// job returns the Indexed Job of one replica type.
func (p *plan) job(replica string, sched Schedulers) *batchv1.Job {
	s := &p.tj.Spec
	name, n, reqs := p.workerJobName(), s.Workers, p.workerReqs
	if replica == v1alpha1.ReplicaPS {
		name, n, reqs = p.psJobName(), s.ParameterServers, p.psReqs
	}
	limits := corev1.ResourceList{}
	for k, v := range reqs {
		if k != corev1.ResourceCPU { // CPU is a request only: no throttling
			limits[k] = v.DeepCopy()
		}
	}
	c := corev1.Container{
		Name:            v1alpha1.ContainerName,
		Image:           s.Image,
		ImagePullPolicy: s.ImagePullPolicy,
		Command:         s.Command,
		Args:            s.Args,
		Env:             append(p.env(replica), s.Env...),
		Ports:           []corev1.ContainerPort{{Name: "rendezvous", ContainerPort: p.port, Protocol: corev1.ProtocolTCP}},
		Resources:       corev1.ResourceRequirements{Requests: reqs.DeepCopy(), Limits: limits},
	}
	if len(c.Resources.Requests) == 0 {
		c.Resources = corev1.ResourceRequirements{}
	}
	pod := corev1.PodSpec{
		RestartPolicy:     corev1.RestartPolicyNever,
		Subdomain:         p.serviceName(),
		PriorityClassName: s.PriorityClassName,
		Affinity:          p.affinity(),
		NodeSelector:      s.NodeSelector,
		Tolerations:       tolerations(s.Tolerations, reqs),
	}
	for _, d := range p.datasets {
		vol := "dataset-" + d.spec.Name
		pod.Volumes = append(pod.Volumes, corev1.Volume{Name: vol, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: d.claimName, ReadOnly: true},
		}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: vol, MountPath: d.spec.MountPath, ReadOnly: true})
	}
	if p.mode == v1alpha1.ModeMPI {
		pod.Volumes = append(pod.Volumes, corev1.Volume{Name: "mpi-hostfile", VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: p.hostfileName()}},
		}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "mpi-hostfile", MountPath: mpiHostfileDir, ReadOnly: true})
	}
	pod.Containers = []corev1.Container{c}

	tmplMeta := metav1.ObjectMeta{Labels: p.labels(replica)}
	if p.gang {
		switch p.scheduler {
		case v1alpha1.GangSchedulerPlugins:
			pod.SchedulerName = sched.SchedulerPlugins
			tmplMeta.Labels[schedPluginsGroupLabel] = p.podGroupName()
		default:
			pod.SchedulerName = sched.Volcano
			tmplMeta.Annotations = map[string]string{volcanoGroupAnnotation: p.podGroupName()}
			if g := s.Gang; g != nil && g.Queue != "" {
				tmplMeta.Annotations[volcanoQueueAnnotation] = g.Queue
			}
		}
	}
	backoff := p.backoff
	if replica == v1alpha1.ReplicaPS {
		backoff = 0 // a lost parameter server fails the job through its workers
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
	if p.mode == v1alpha1.ModeMPI && replica == v1alpha1.ReplicaWorker {
		// mpirun runs on rank 0 and the other ranks only serve it (sshd):
		// the job has succeeded when rank 0 has, and the Job controller then
		// ends the others (successPolicy, beta and on by default since
		// Kubernetes 1.31).
		job.Spec.SuccessPolicy = &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{{SucceededIndexes: ptr.To("0")}}}
	}
	return job
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
	}
	port := strconv.Itoa(int(p.port))
	switch p.mode {
	case v1alpha1.ModePyTorch:
		env = append(env,
			corev1.EnvVar{Name: "MASTER_ADDR", Value: p.host(p.workerJobName(), 0)},
			corev1.EnvVar{Name: "MASTER_PORT", Value: port},
			corev1.EnvVar{Name: "WORLD_SIZE", Value: strconv.Itoa(int(s.Workers))},
			corev1.EnvVar{Name: "RANK", Value: "$(EPOCHFS_REPLICA_INDEX)"},
		)
	case v1alpha1.ModeTensorFlow:
		cluster := map[string][]string{}
		for i := range s.Workers {
			cluster["worker"] = append(cluster["worker"], p.host(p.workerJobName(), i)+":"+port)
		}
		for i := range s.ParameterServers {
			cluster["ps"] = append(cluster["ps"], p.host(p.psJobName(), i)+":"+port)
		}
		cj, _ := json.Marshal(cluster) // map of string slices: cannot fail
		env = append(env, corev1.EnvVar{Name: "TF_CONFIG",
			Value: `{"cluster":` + string(cj) + `,"task":{"type":"` + replica + `","index":$(EPOCHFS_REPLICA_INDEX)}}`})
	case v1alpha1.ModeMPI:
		env = append(env,
			corev1.EnvVar{Name: "OMPI_MCA_orte_default_hostfile", Value: mpiHostfileDir + "/hostfile"},
			corev1.EnvVar{Name: "WORLD_SIZE", Value: strconv.Itoa(int(s.Workers))},
			corev1.EnvVar{Name: "RANK", Value: "$(EPOCHFS_REPLICA_INDEX)"},
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
	above  string
	weight int32
}{{"0", 10}, {"49", 20}, {"89", 30}, {"98", 40}}

// affinity prefers nodes whose EpochFS cache already holds the job's
// datasets (Node labels cache.epochfs.io/<dataset-id> = percent cached).
func (p *plan) affinity() *corev1.Affinity {
	var terms []corev1.PreferredSchedulingTerm
	for _, d := range p.datasets {
		if d.id == "" {
			continue
		}
		for _, t := range cacheTiers {
			terms = append(terms, corev1.PreferredSchedulingTerm{Weight: t.weight, Preference: corev1.NodeSelectorTerm{
				MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: cachelabel.Prefix + d.id, Operator: corev1.NodeSelectorOpGt, Values: []string{t.above},
				}},
			}})
		}
	}
	if len(terms) == 0 {
		return nil
	}
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: terms}}
}

// capacityPods are the gang's pods for the capacity check (as gangPods,
// each with its pod template), less placedPS parameter servers and
// placedWorkers workers that are placed already. Pods without requests
// are left out.
func (p *plan) capacityPods(sched Schedulers, placedPS, placedWorkers int32) []item {
	gang := p.gangPods()
	nPS := min(p.tj.Spec.ParameterServers, int32(len(gang)))
	var out []item
	add := func(replica string, reqs corev1.ResourceList, n int32) {
		if n <= 0 || len(reqs) == 0 {
			return
		}
		spec := p.job(replica, sched).Spec.Template.Spec
		for range n {
			out = append(out, item{reqs: reqs, spec: &spec, replica: replica})
		}
	}
	add(v1alpha1.ReplicaPS, p.psReqs, nPS-placedPS)
	add(v1alpha1.ReplicaWorker, p.workerReqs, int32(len(gang))-nPS-placedWorkers)
	return out
}

// gangPods is the list of pod requests that must fit together: parameter
// servers first, then workers, minMember in all (every pod without gang).
func (p *plan) gangPods() []corev1.ResourceList {
	n := p.tj.Spec.Workers + p.tj.Spec.ParameterServers
	if p.gang {
		n = p.minMember
	}
	var out []corev1.ResourceList
	for i := range n {
		if i < p.tj.Spec.ParameterServers {
			out = append(out, p.psReqs)
		} else {
			out = append(out, p.workerReqs)
		}
	}
	return out
}
