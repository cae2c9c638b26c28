package csi

import (
	"maps"
	"math"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/epochfs/epochfs/pkg/units"
	"github.com/epochfs/epochfs/pkg/volattr"
)

// Per-namespace limits: no one namespace may hold
// more than its share of a node's dataset mounts and cache bytes.
//
// The namespace of a volume is what the kubelet or a trusted writer of
// PersistentVolumes says, never what a pod author writes:
//
//   - An inline volume: the pod's namespace, podNamespaceKey in the
//     NodePublish volume context. The CSIDriver has podInfoOnMount: true
//     (chart and kustomize), so the kubelet writes that key over any value
//     the pod's volumeAttributes carry. An inline volume without it (a
//     CSIDriver without podInfoOnMount) is charged to unknownInlineNamespace,
//     which is limited like any namespace.
//   - A PersistentVolume (NodeStage): pvcNamespaceKey in its
//     volumeAttributes. CreateVolume copies it from the external-
//     provisioner's --extra-create-metadata parameters into the volume
//     context (the chart runs the provisioner with that flag), and the job
//     controller writes the TrainingJob's namespace there. Only the admin,
//     the provisioner and the controller write PersistentVolumes. A PV
//     without it (an admin's static PV) has the namespace "", which no
//     per-namespace limit applies to: the node's budget and mount cap do.
//
// A dataset mount is shared by every volume with equal parameters and
// credentials. It counts whole (its cacheSize, one mount) toward each
// namespace that has a volume using it: a namespace can never ride on
// another's mount to escape its own limits, and one leaving never moves a
// charge onto the namespaces that stay.
const (
	podNamespaceKey        = volattr.PodNamespace
	pvcNamespaceKey        = volattr.ClaimNamespace
	unknownInlineNamespace = "<inline volume without pod namespace>"
)

// Defaults of the per-namespace and inline limits.
const (
	DefaultMaxNamespaceMounts = 16
	DefaultMaxInlineCacheSize = 64 << 30
	defaultNamespacePercent   = 50
	maxNamespaceFlag          = "--max-namespace-cache-bytes"
	maxNamespaceMountsFlag    = "--max-namespace-mounts"
)

// DefaultMaxNamespaceCacheBytes is half the node's cache root budget.
var DefaultMaxNamespaceCacheBytes = CacheBudget{Percent: defaultNamespacePercent}

// volumeNamespace returns the namespace a volume is charged to (see above).
func volumeNamespace(vctx map[string]string, inline bool) string {
	if inline {
		if ns := vctx[podNamespaceKey]; ns != "" {
			return ns
		}
		return unknownInlineNamespace
	}
	return vctx[pvcNamespaceKey]
}

// nsHold is one dataset mount's charge: its cacheSize and the volumes that
// use it, each with its namespace.
type nsHold struct {
	size  int64
	users map[string]string // volume id -> namespace
}

// nsUsage is what namespace ns holds: dataset mounts and their cacheSize.
// Called with b.mu held.
func (b *budget) nsUsage(ns string) (mounts int, bytes int64) {
	for _, h := range b.holds {
		if slices.Contains(slices.Collect(maps.Values(h.users)), ns) {
			mounts++
			bytes += h.size
		}
	}
	return mounts, bytes
}

// nsLimit is the most cache bytes one namespace may hold: a size, or a
// percentage of the node's cache root budget.
func (b *budget) nsLimit() (int64, error) {
	if b.nsBytes.Bytes > 0 {
		return b.nsBytes.Bytes, nil
	}
	pct := b.nsBytes.Percent
	if pct == 0 {
		pct = defaultNamespacePercent
	}
	limit, err := b.bytes()
	if err != nil {
		return 0, err
	}
	if limit > math.MaxInt64/100 {
		return limit / 100 * int64(pct), nil
	}
	return limit * int64(pct) / 100, nil
}

// charge records that volume id of namespace ns uses the dataset mount key
// (cacheSize size), refusing with ResourceExhausted, naming the limit, when
// ns would then hold more mounts or bytes than one namespace may. It
// reports whether it recorded anything (false: id was charged already).
// The namespace "" is not limited.
func (b *budget) charge(ns, key, id string, size int64) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	h := b.holds[key]
	if h != nil {
		if _, ok := h.users[id]; ok {
			return false, nil
		}
	}
	if ns != "" && (h == nil || !slices.Contains(slices.Collect(maps.Values(h.users)), ns)) {
		mounts, bytes := b.nsUsage(ns)
		if b.nsMounts > 0 && mounts+1 > b.nsMounts {
			return false, status.Errorf(codes.ResourceExhausted, "namespace %q already holds %d dataset mounts on this node, the most one namespace may hold (%s %d): unstage one of its volumes first",
				ns, mounts, maxNamespaceMountsFlag, b.nsMounts)
		}
		limit, err := b.nsLimit()
		if err != nil {
			return false, status.Error(codes.Internal, err.Error())
		}
		if bytes+size > limit {
			return false, status.Errorf(codes.ResourceExhausted, "a %s cache does not fit in namespace %q's share of this node's cache, %s (%s %s): its %d dataset mounts hold %s",
				units.FormatSize(size), ns, units.FormatSize(limit), maxNamespaceFlag, b.nsBytes, mounts, units.FormatSize(bytes))
		}
	}
	b.recordCharge(ns, key, id, size)
	return true, nil
}

// adoptCharge records a charge re-adopted after a restart, unchecked.
func (b *budget) adoptCharge(ns, key, id string, size int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.recordCharge(ns, key, id, size)
}

func (b *budget) recordCharge(ns, key, id string, size int64) {
	if b.holds == nil {
		b.holds = map[string]*nsHold{}
	}
	h := b.holds[key]
	if h == nil {
		h = &nsHold{size: size, users: map[string]string{}}
		b.holds[key] = h
	}
	h.users[id] = ns
}

// discharge drops volume id's charge on the dataset mount key.
func (b *budget) discharge(key, id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if h := b.holds[key]; h != nil {
		delete(h.users, id)
		if len(h.users) == 0 {
			delete(b.holds, key)
		}
	}
}
