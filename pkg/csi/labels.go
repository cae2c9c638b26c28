package csi

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/epochfs/epochfs/pkg/cache"
	"github.com/epochfs/epochfs/pkg/cachelabel"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// nodeLabeler records which datasets this node's caches hold, for the job
// controller's cache-aware placement: one Lease per node in the driver's
// namespace (pkg/cachelabel: cachelabel.LeaseName, held by the node), with
// annotations `cache.epochfs.io/<dataset-id>` = the cached percent of the
// dataset, rewritten and renewed at every sync (the health loop). It
// expires by itself when the node plugin stops renewing it; no Node object
// is written. The percent needs the dataset's size, which
// comes from its manifest; a dataset without one is not recorded.
// Datasets no longer mounted here drop out at the next sync.
//
// All fields are immutable.
type nodeLabeler struct {
	client    kubernetes.Interface
	node      string
	namespace string
	duration  time.Duration // of the Lease: it expires unless renewed within
}

// datasetSizes remembers each dataset's size, as its mount reported it.
type datasetSizes struct {
	mu    sync.Mutex
	sizes map[string]int64 // dataset key → bytes (-1: no manifest)
}

// KubeClient builds a client from kubeconfig, or the in-cluster config
// when it is empty (the node plugin's and the provisioner's).
func KubeClient(kubeconfig string) (kubernetes.Interface, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("csi: kube config: %w", err)
	}
	return kubernetes.NewForConfig(cfg)
}

// datasetBytes returns the dataset's size as its mount reports it over
// the control socket (mountapi.RemoteDataset): the total bytes of the
// manifest the mount loaded, or -1 when it serves without one or does not
// answer. Remembered per dataset once the mount has answered.
//
// The node plugin never opens the dataset nor reads its manifest, which is
// the tenant's: the mount process loads it within its own limit
// (--manifest-max-memory) and refuses a corrupt or oversized one, and a
// mount that refuses its manifest does not run, so its dataset has no size
// (asked again at the next sync).
func (n *nodeState) datasetBytes(ctx context.Context, ds *datasetMount) int64 {
	l := &n.sizes
	l.mu.Lock()
	size, ok := l.sizes[ds.Key]
	l.mu.Unlock()
	if ok {
		return size
	}
	ctx, cancel := context.WithTimeout(ctx, mountScrapeTimeout)
	defer cancel()
	info, err := mountapi.RemoteDataset(ctx, ds.CacheDir)
	if err != nil {
		n.cfg.log.Warn("node labels: the dataset's mount did not tell its size", "key", ds.Key, "err", err)
		return -1 // not remembered: asked again next time
	}
	size = -1
	if info.Manifest {
		size = info.Bytes
	}
	l.mu.Lock()
	l.sizes[ds.Key] = size
	l.mu.Unlock()
	return size
}

// sync sets this node's cache locations to what its dataset mounts hold.
func (l *nodeLabeler) sync(ctx context.Context, n *nodeState) error {
	n.mu.Lock()
	datasets := make([]*datasetMount, 0, len(n.datasets))
	for _, ds := range n.datasets {
		datasets = append(datasets, ds.identity())
	}
	n.mu.Unlock()

	pcts := map[string]int{}
	for _, ds := range datasets {
		key, err := cachelabel.Key(ds.Params.Source)
		if err != nil {
			continue
		}
		size := n.datasetBytes(ctx, ds)
		if size < 0 {
			continue // no manifest: the percent is unknown
		}
		info, err := cache.ReadInfo(ds.CacheDir)
		if err != nil {
			continue
		}
		pct := 100
		if size > 0 {
			pct = int(info.UsedBytes * 100 / size)
		}
		// Two volumes of one dataset with other cache sizes: the larger wins.
		if old, ok := pcts[key]; !ok || old < pct {
			pcts[key] = pct
		}
	}
	want := map[string]string{}
	for k, p := range pcts {
		want[k] = cachelabel.FormatPercent(p)
	}

	return l.publish(ctx, want, n)
}

// publish writes want (annotation key → percent) as this node's location
// Lease and renews it.
func (l *nodeLabeler) publish(ctx context.Context, want map[string]string, n *nodeState) error {
	if l.namespace == "" {
		return errors.New("csi: node labels: no namespace for the location Lease (--namespace, default $POD_NAMESPACE)")
	}
	leases := l.client.CoordinationV1().Leases(l.namespace)
	name := cachelabel.LeaseName(l.node)
	now := metav1.NewMicroTime(time.Now())
	spec := coordinationv1.LeaseSpec{HolderIdentity: ptr.To(l.node),
		LeaseDurationSeconds: ptr.To(int32(l.duration / time.Second)), RenewTime: &now}
	lease, err := leases.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		spec.AcquireTime = &now
		lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: l.namespace,
			Labels: map[string]string{cachelabel.NodeLabel: cachelabel.NodeLabelValue(l.node)}, Annotations: want}, Spec: spec}
		_, err = leases.Create(ctx, lease, metav1.CreateOptions{})
	case err == nil:
		changed := !maps.Equal(lease.Annotations, want)
		spec.AcquireTime = lease.Spec.AcquireTime
		lease.Labels = map[string]string{cachelabel.NodeLabel: cachelabel.NodeLabelValue(l.node)}
		lease.Annotations, lease.Spec = want, spec
		_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
		if err == nil && changed {
			n.cfg.log.Info("node cache locations updated", "node", l.node, "lease", l.namespace+"/"+name, "datasets", want)
		}
	}
	if err != nil {
		return fmt.Errorf("csi: node labels: lease %s/%s: %w", l.namespace, name, err)
	}
	return nil
}

// SyncNodeLabels updates this node's cache labels now (the health loop
// does it every interval). It is a no-op unless Config.NodeLabels is set.
func (d *Driver) SyncNodeLabels(ctx context.Context) error {
	if d.node == nil || d.node.cfg.labeler == nil {
		return nil
	}
	return d.node.cfg.labeler.sync(ctx, d.node)
}
