package csi

import (
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/epochfs/epochfs/pkg/cachelabel"
	"github.com/epochfs/epochfs/pkg/volattr"
)

// Labels of epochfs_volume_info beside LabelDatasetID and LabelDatasetKey:
// what a user named. Each is a Kubernetes object name (validated, so at
// most 253 bytes) or "".
const (
	LabelNamespace = "namespace" // the pod's namespace (the kubelet's), else the claim's
	LabelPVC       = "pvc"       // the claim (PersistentVolumeClaim) name; "" when the volume context has none
	LabelPV        = "pv"        // the PersistentVolume; "" for inline volumes
	LabelPod       = "pod"       // the pod the volume is published to (podInfoOnMount)
)

// volumeInfoName is the info series joining a dataset mount's series
// (dataset_id, dataset_key) to the claims and pods that use it.
const volumeInfoName = "epochfs_volume_info"

var volumeInfoDesc = prometheus.NewDesc(volumeInfoName,
	"A volume published to a pod on this node: always 1, labelled with the dataset mount it uses (dataset_id, dataset_key) "+
		"and the namespace, claim, PersistentVolume and pod it is published for; one series per published volume and pod.",
	[]string{LabelDatasetID, LabelDatasetKey, LabelNamespace, LabelPVC, LabelPV, LabelPod}, nil)

// volumeClaim is what a NodePublish volume context says of the volume's
// claim and PersistentVolume: the keys the provisioner, the job controller
// or the admin put into its attributes (volattr.ClaimName, ClaimNamespace,
// PVName). Each field is a valid object name or "": the context is the
// pod author's or the admin's, hence hostile.
type volumeClaim struct {
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	PV        string `json:"pv,omitempty"`
}

// createdVolumePrefix starts the ids CreateVolume gives (volumeIDFor),
// which are not their PersistentVolumes' names.
const createdVolumePrefix = "cfs-"

// publishClaim returns the claim of volume id's publish context vctx. The
// PV is the context's volattr.PVName, else the volume id when it can be
// the PV's name: a PV's volumeHandle that the job controller, and admins
// by the convention docs/CSI.md gives, set to the PV's own name — not an
// inline volume's id nor one CreateVolume made (cfs-…).
//
// An inline volume has no claim: its attributes are the pod author's, who
// could name another namespace's claim, so they are not read (the series
// names the pod's namespace only).
func publishClaim(id string, vctx map[string]string, inline bool) volumeClaim {
	if inline {
		return volumeClaim{}
	}
	c := volumeClaim{Namespace: vctx[volattr.ClaimNamespace], Name: vctx[volattr.ClaimName], PV: vctx[volattr.PVName]}
	if len(validation.IsDNS1123Label(c.Namespace)) != 0 {
		c.Namespace = ""
	}
	if len(validation.IsDNS1123Subdomain(c.Name)) != 0 {
		c.Name = ""
	}
	if c.PV == "" && !strings.HasPrefix(id, createdVolumePrefix) {
		c.PV = id
	}
	if len(validation.IsDNS1123Subdomain(c.PV)) != 0 {
		c.PV = ""
	}
	return c
}

// volumeInfo holds the label values of epochfs_volume_info, one entry per
// volume and target path: NodePublishVolume adds one, NodeUnpublishVolume
// (and the unstage or drop of the volume) removes it, so its size is the
// node's published volumes. Its own lock (a leaf: never held while taking
// another) lets a scrape read it without the volume and dataset locks.
type volumeInfo struct {
	mu      sync.Mutex
	entries map[volumeTarget][6]string // label values, in volumeInfoDesc's order
}

type volumeTarget struct{ volume, target string }

// set records the series of volume v published at target for dataset
// mount ds (nil: unknown; the ids are left empty). Called with v's volume
// and dataset locks held.
func (vi *volumeInfo) set(v *nodeVolume, ds *datasetMount, target string) {
	var id, key string
	if ds != nil {
		id, _ = cachelabel.DatasetID(ds.Params.Source)
		key = ds.Key
	}
	pod := v.Pods[target]
	ns := pod.Namespace // the kubelet's; a claim is always in its pod's namespace
	if ns == "" {
		ns = v.Claim.Namespace
	}
	vi.mu.Lock()
	defer vi.mu.Unlock()
	if vi.entries == nil {
		vi.entries = map[volumeTarget][6]string{}
	}
	vi.entries[volumeTarget{v.ID, target}] = [6]string{id, key, ns, v.Claim.Name, v.Claim.PV, pod.Name}
}

// drop removes the series of volume id at target; target "" removes all
// of volume id's.
func (vi *volumeInfo) drop(id, target string) {
	vi.mu.Lock()
	defer vi.mu.Unlock()
	for k := range vi.entries {
		if k.volume == id && (target == "" || k.target == target) {
			delete(vi.entries, k)
		}
	}
}

// Describe and Collect make volumeInfo a prometheus.Collector.
func (vi *volumeInfo) Describe(ch chan<- *prometheus.Desc) { ch <- volumeInfoDesc }

// Collect sends one series per distinct label set: two targets of one
// volume in one pod (a pod that mounts its claim twice) are one series.
func (vi *volumeInfo) Collect(ch chan<- prometheus.Metric) {
	vi.mu.Lock()
	seen := make(map[[6]string]bool, len(vi.entries))
	for _, lv := range vi.entries {
		seen[lv] = true
	}
	vi.mu.Unlock()
	for lv := range seen {
		ch <- prometheus.MustNewConstMetric(volumeInfoDesc, prometheus.GaugeValue, 1, slices.Clone(lv[:])...)
	}
}

// VolumeInfo returns the collector of epochfs_volume_info (nil in
// controller mode). The driver's /metrics registers it.
func (d *Driver) VolumeInfo() prometheus.Collector {
	if d.node == nil {
		return nil
	}
	return &d.node.info
}
