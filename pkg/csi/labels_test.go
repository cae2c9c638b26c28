package csi_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/testenv/kube"
	"github.com/epochfs/epochfs/pkg/cachelabel"
	"github.com/epochfs/epochfs/pkg/csi"
	"github.com/epochfs/epochfs/pkg/peer"
	"github.com/epochfs/epochfs/pkg/peer/kubepeer"
)

// TestNodeCacheLabels: the node plugin records, against a real
// kube-apiserver, the cached percent of each staged dataset that has a
// manifest in its location Lease in the driver's namespace (held by the
// node, renewed at each sync), drops a dataset's entry when it is
// unstaged, and never reads or writes a Node (the driver runs as a user
// whose only rights are on Leases of its namespace, as the chart's Role
// grants: it used to patch its Node's labels, and failed here).
func TestNodeCacheLabels(t *testing.T) {
	const ns = "epochfs-system"
	kube, admin := startKubeWithNamespaces(t, ns)
	// A stale entry of a dataset not mounted here, from an earlier run.
	stale := cachelabel.Prefix + "0123456789abcdef"
	if _, err := admin.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
		Name: cachelabel.LeaseName("test-node"), Annotations: map[string]string{stale: "50"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("test-node")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubeconfig := leaseOnlyKubeconfig(t, kube, admin, ns)
	td := startDriver(t, func(c *csi.Config) { c.NodeLabels, c.Kubeconfig, c.Namespace = true, kubeconfig, ns })

	data, files := dataset(t)
	m := indexDataset(t, data)
	if err := os.MkdirAll(filepath.Join(data, ".epochfs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := m.WriteFile(filepath.Join(data, ".epochfs", "manifest")); err != nil {
		t.Fatal(err)
	}

	staging := filepath.Join(td.workDir(t), "staging")
	vctx := map[string]string{"source": data, "cacheSize": "1GiB"}
	stage(t, td, "vol-l", staging, vctx)
	half := files[:len(files)/2]
	checkFiles(t, view(t, td, "vol-l", staging), half)
	var halfBytes int64
	for _, f := range half {
		halfBytes += f.Size
	}
	if err := td.driver.SyncNodeLabels(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := node(td).NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: "vol-l", VolumePath: staging})
	if err != nil {
		t.Fatal(err)
	}
	if u := st.GetUsage()[0]; u.Total != datagen.TotalSize(files) || u.Used != halfBytes || u.Available != u.Total-halfBytes {
		t.Errorf("stats: total %d used %d available %d; want the dataset's size %d, %d cached", u.Total, u.Used, u.Available, datagen.TotalSize(files), halfBytes)
	}
	key, _ := cachelabel.Key(data)
	lease := locationLease(t, admin, ns)
	labels := lease.Annotations
	wantPct := cachelabel.FormatPercent(int(halfBytes * 100 / datagen.TotalSize(files)))
	if labels[key] != wantPct {
		t.Errorf("annotation %s = %q, want %q (half the bytes read); annotations %v", key, labels[key], wantPct, labels)
	}
	if _, ok := labels[stale]; ok {
		t.Error("a stale cache entry of a dataset not mounted here was kept")
	}
	if ptr.Deref(lease.Spec.HolderIdentity, "") != "test-node" || lease.Spec.RenewTime == nil || ptr.Deref(lease.Spec.LeaseDurationSeconds, 0) < 30 ||
		lease.Labels[cachelabel.NodeLabel] != cachelabel.NodeLabelValue("test-node") {
		t.Errorf("lease %+v %+v", lease.ObjectMeta, lease.Spec)
	}
	if locs := cachelabel.Locations([]coordinationv1.Lease{*lease}, time.Now()); len(locs[key[len(cachelabel.Prefix):]]) != 1 {
		t.Errorf("the job controller's reading: %v", locs)
	}
	renewed := lease.Spec.RenewTime.Time

	unstage(t, td, "vol-l", staging)
	time.Sleep(10 * time.Millisecond)
	if err := td.driver.SyncNodeLabels(ctx); err != nil {
		t.Fatal(err)
	}
	lease = locationLease(t, admin, ns)
	if v, ok := lease.Annotations[key]; ok {
		t.Errorf("annotation %s=%s kept after the last unstage", key, v)
	}
	if !lease.Spec.RenewTime.After(renewed) {
		t.Error("the lease was not renewed")
	}
}

func locationLease(t *testing.T, client kubernetes.Interface, ns string) *coordinationv1.Lease {
	t.Helper()
	l, err := client.CoordinationV1().Leases(ns).Get(ctx, cachelabel.LeaseName("test-node"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// leaseOnlyKubeconfig writes a kubeconfig for a ServiceAccount that may
// only get, list, watch, create, update and delete Leases in ns (the
// chart's Role for the node plugin), no Nodes.
func leaseOnlyKubeconfig(t *testing.T, kube *kube.Server, admin kubernetes.Interface, ns string) string {
	t.Helper()
	if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "epochfs-node"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "epochfs-node-leases"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"},
			Verbs: []string{"get", "list", "watch", "create", "update", "delete"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "epochfs-node-leases"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "epochfs-node-leases"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "epochfs-node", Namespace: ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kc, err := clientcmd.LoadFromFile(kube.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range kc.AuthInfos {
		a.Impersonate = "system:serviceaccount:" + ns + ":epochfs-node"
	}
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPeerLeasesAtStart: a node plugin with cluster scope on, run as a
// ServiceAccount that may only use Leases of its namespace (no Node
// access), starts against a real kube-apiserver, and its start deletes its
// own peer Lease of a group it no longer mounts (left by a withdraw that
// failed, or a plugin killed mid-unstage) while another node's Lease of
// that group stays. Nothing used to remove a stale entry, and the plugin
// needed list/watch on Nodes to start at all.
func TestPeerLeasesAtStart(t *testing.T) {
	const ns = "epochfs-system"
	kube, admin := startKubeWithNamespaces(t, ns)
	for _, node := range []string{"test-node", "node-b"} {
		d, err := kubepeer.Start(ctx, admin, kubepeer.Options{Namespace: ns, Node: node})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Advertise(ctx, "g-stale", peer.Peer{ID: node, Addr: "127.0.0.1:7400"}); err != nil {
			t.Fatal(err)
		}
	}
	kubeconfig := leaseOnlyKubeconfig(t, kube, admin, ns)
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("0123456789abcdef0123456789abcdef"), 0o600); err != nil {
		t.Fatal(err)
	}
	startDriver(t, func(c *csi.Config) {
		c.Kubeconfig, c.Namespace = kubeconfig, ns
		c.PeerListen, c.PeerTokenFile, c.PeerPortRange = "127.0.0.1", token, "7400-7401"
		c.HealthInterval = time.Hour // only the start can have removed it
	})
	if _, err := admin.CoordinationV1().Leases(ns).Get(ctx, kubepeer.LeaseName("g-stale", "test-node"), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("this node's stale peer Lease after start: %v (want not found)", err)
	}
	if _, err := admin.CoordinationV1().Leases(ns).Get(ctx, kubepeer.LeaseName("g-stale", "node-b"), metav1.GetOptions{}); err != nil {
		t.Errorf("another node's peer Lease: %v", err)
	}
}

// startKubeWithNamespaces starts a real kube-apiserver and returns it with
// an admin client, the given namespaces created.
func startKubeWithNamespaces(t *testing.T, namespaces ...string) (*kube.Server, *kubernetes.Clientset) {
	t.Helper()
	kube := kube.Start(t)
	admin, err := kubernetes.NewForConfig(kube.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range namespaces {
		if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return kube, admin
}
