package controller

// This file renders a plan into the objects every TrainingJob gets besides
// its Jobs: the headless Service, the MPI hostfile ConfigMap, the dataset
// PersistentVolumes and their claims, and the PodGroup, with the labels and
// owner reference they all carry. The Jobs and their pod template are in
// render_job.go. Rendering does not validate: newPlan (plan.go) has.

import (
	"fmt"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
	"github.com/epochfs/epochfs/pkg/volattr"
)

// PodGroup kinds of the two gang schedulers.
var (
	VolcanoPodGroup      = schema.GroupVersionKind{Group: "scheduling.volcano.sh", Version: "v1beta1", Kind: "PodGroup"}
	SchedPluginsPodGroup = schema.GroupVersionKind{Group: "scheduling.x-k8s.io", Version: "v1alpha1", Kind: "PodGroup"}
)

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
	var b strings.Builder
	for i := range p.tj.Spec.Workers {
		fmt.Fprintf(&b, "%s slots=%d\n", p.host(p.workerJobName(), i), p.slots())
	}
	return &corev1.ConfigMap{ObjectMeta: p.meta(p.hostfileName(), ""), Data: map[string]string{"hostfile": b.String()}}
}

// slots is the MPI slots of a worker: its GPUs, at least 1.
func (p *plan) slots() int32 { return max(p.tj.Spec.Resources.GPUs, 1) }

// volumes returns the PersistentVolume and claim of every source dataset.
func (p *plan) volumes() ([]*corev1.PersistentVolume, []*corev1.PersistentVolumeClaim) {
	var pvs []*corev1.PersistentVolume
	var pvcs []*corev1.PersistentVolumeClaim
	for _, d := range p.datasets {
		if d.id == "" {
			continue
		}
		capacity := resource.MustParse("1Gi") // nominal: a dataset volume is read-only
		ann := map[string]string{v1alpha1.AnnotationDatasetID: d.id}
		if d.spec.Prefetch {
			ann[v1alpha1.AnnotationPrefetch] = "true"
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
					VolumeAttributes: maps.Clone(d.attrs),
				}},
			},
		}
		// The node charges the volume to the job's namespace (its
		// per-namespace limits); the job's author never chooses it.
		pv.Spec.CSI.VolumeAttributes[volattr.ClaimNamespace] = p.tj.Namespace
		// The names the node plugin's epochfs_volume_info shows.
		pv.Spec.CSI.VolumeAttributes[volattr.ClaimName] = d.claimName
		pv.Spec.CSI.VolumeAttributes[volattr.PVName] = d.pvName
		if d.spec.SecretName != "" {
			// Only ever a Secret of the job's own namespace.
			pv.Spec.CSI.NodeStageSecretRef = &corev1.SecretReference{Name: d.spec.SecretName, Namespace: p.tj.Namespace}
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
