package csi

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/cache"
	"github.com/epochfs/epochfs/pkg/cachelabel"
	"github.com/epochfs/epochfs/pkg/manifest"
	"github.com/epochfs/epochfs/pkg/mount"
	"github.com/epochfs/epochfs/pkg/source"
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

// datasetSizes remembers each dataset's size from its manifest.
type datasetSizes struct {
	mu    sync.Mutex
	sizes map[string]int64 // dataset key → bytes (-1: no manifest)
}

// kubeClient builds a client from kubeconfig, or the in-cluster config.
func kubeClient(kubeconfig string) (kubernetes.Interface, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("csi: node labels: kube config: %w", err)
	}
	return kubernetes.NewForConfig(cfg)
}

// datasetBytes returns the dataset's size from its manifest, found as the
// mount finds it (the manifest parameter, else SOURCE/.epochfs/manifest),
// or -1 when it has none. Remembered per dataset, and so is a manifest that
// is refused (corrupt, or larger than a mount loads): neither is read again
// at every sync.
//
// The node plugin runs within a small memory limit and the manifest is the
// tenant's: it never loads nor decompresses it. manifest.ReadInfo streams
// the file through a 1 MiB buffer to check its checksum and returns what the
// header says (the total bytes, the entry count), refusing a header that
// announces more than the mounts load (manifest.DefaultMaxMemory).
func (n *nodeState) datasetBytes(ctx context.Context, ds *datasetMount) int64 {
	l := &n.sizes
	l.mu.Lock()
	size, ok := l.sizes[ds.Key]
	l.mu.Unlock()
	if ok {
		return size
	}
	size = -1
	src, err := source.Parse(ds.Params.Source)
	if err != nil {
		return size
	}
	opts := backend.Options{Logger: n.cfg.log, Egress: n.cfg.egress}
	if env, err := n.readSecrets(ds.Key); err == nil && len(env) > 0 {
		// The same parser as the mount process's --credentials-fd.
		if c, err := mount.ReadCredentials(strings.NewReader(strings.Join(env, "\n"))); err == nil {
			opts.Credentials = c
		}
	}
	b, err := backend.Open(ctx, src, opts)
	if err != nil {
		n.cfg.log.Warn("node labels: cannot open the dataset to find its manifest", "key", ds.Key, "err", err)
		return size // not remembered: retried next time
	}
	defer b.Close()
	info, _, err := manifest.ReadInfo(ctx, b, ds.Params.Manifest, opts, 0)
	switch {
	case errors.Is(err, manifest.ErrTooLarge) || errors.Is(err, manifest.ErrCorrupt) || errors.Is(err, manifest.ErrUnsupported):
		// Remembered: the mount refuses it too; it is not fetched again
		// on every sync.
		n.cfg.log.Warn("node labels: the dataset's manifest is refused; no size for it", "key", ds.Key, "err", err)
	case err != nil:
		n.cfg.log.Warn("node labels: cannot read the dataset's manifest", "key", ds.Key, "err", err)
		return size
	case info != nil:
		size = info.TotalBytes
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
