package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/internal/testenv/cluster"
	"github.com/epochfs/epochfs/internal/testenv/s3"
	"github.com/epochfs/epochfs/pkg/cachelabel"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
	"github.com/epochfs/epochfs/pkg/peer"
	"github.com/epochfs/epochfs/pkg/peer/kubepeer"
)

// TestClusterScopeVolumeOnKubelet: the cluster-wide cache's discovery
// through the Kubernetes API on a real kubelet (peer Leases). The chart is installed with node.clusterCache on; its node
// plugin may not touch any Node (no `nodes patch`: checked with a
// SubjectAccessReview) and writes Leases in the driver's namespace only.
// A PV with cacheScope: cluster is staged by a holder pod; the node plugin
// advertises the dataset's group as a peer Lease. A second peer — a real
// `cachefs mount` on the host, as another node's mount would be — joins by
// the only means a node has: a peer Lease of the group, renewed as its node
// plugin would. The node plugin must see it through its watch and rewrite
// the dataset's peers file; a reader pod then reads the dataset twice byte
// for byte, the files the other peer owns come from it (its served counter
// and the node's peer hits); when the other peer stops renewing, its Lease
// expires and the node plugin drops it; when the dataset is deleted, its
// Lease disappears.
func TestClusterScopeVolumeOnKubelet(t *testing.T) {
	requireE2E(t)
	const token = "e2e-peer-token-0123456789abcdef"
	prepare := func(c *cluster.Cluster) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cs := c.Client.CoreV1()
		if _, err := cs.Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: chartNamespace}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "peer-token", Namespace: chartNamespace},
			StringData: map[string]string{"token": token}}
		if _, err := cs.Secrets(chartNamespace).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mi := s3.StartMinIO(t)
	in := installChartPrepared(t, prepare, append(minioRules(mi, "shared"), "--set", "node.clusterCache.enabled=true",
		"--set", "node.clusterCache.tokenSecretName=peer-token")...)
	mi.MakeBucket(t, "shared")
	files := datagen.Spec{Files: 120, Classes: 4, MedianSize: 20_000, MinSize: 500, MaxSize: 150_000, Seed: 15}.Plan()
	mi.PutFiles(t, "shared", "imagenet/", files)
	total := datagen.TotalSize(files)
	source := s3Source(mi, "shared", "imagenet")

	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	const ns = "tenant-cluster"
	in.createNamespace(ctx, t, ns)
	secret := in.createS3Secret(ctx, t, ns, "s3", mi)
	v := in.createPV(ctx, t, ns, "imagenet", map[string]string{"source": source, "cacheSize": "64Mi", "cacheScope": "cluster"}, secret)

	// A holder pod stages the volume: the node plugin starts the mount in
	// cluster scope and advertises the group on its Node.
	in.readerPod(ctx, t, v, "holder", "sleep", "3600")
	in.waitPod(ctx, t, ns, "holder", corev1.PodRunning)
	checkNodeRBAC(ctx, t, in)
	group, value := waitPeerLease(ctx, t, in, cluster.NodeName)
	if strings.Contains(group+value, token) {
		t.Fatal("the peer Lease carries the peer token")
	}
	nodePeers, err := peer.ParsePeersFile(value)
	if err != nil || len(nodePeers) != 1 {
		t.Fatalf("the node's peer Lease of %s holds %q, not one peer: %v", group, value, err)
	}
	fmt.Printf("cluster scope: the node plugin advertises %s = %s (Lease %s/%s)\n", group, value, chartNamespace, kubepeer.LeaseName(group, cluster.NodeName))

	// The second peer: a cachefs mount on the host, same source, same token,
	// same peer group (the node plugin's, from its Lease: peer servers
	// serve their own group only).
	cachefs := testenv.GoBuild(t, "./cmd/cachefs")
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	peerPort, metricsPort := testenv.FreePort(t), testenv.FreePort(t)
	const otherID = "e2e-other-node"
	otherAddr := "127.0.0.1:" + strconv.Itoa(peerPort)
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	other := exec.Command(cachefs, mountapi.CommandOptions{Source: source, Mountpoint: mnt, CacheDir: filepath.Join(dir, "cache"), CacheSize: 64 << 20,
		CacheScope: mountapi.ScopeCluster, PeerID: otherID, PeerListen: otherAddr, PeerTokenFile: tokenFile,
		PeerGroup: group, Peers: peer.FormatPeers(append(nodePeers, peer.Peer{ID: otherID, Addr: otherAddr})),
		MetricsAddr: "127.0.0.1:" + strconv.Itoa(metricsPort)}.Args()...)
	other.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+mi.AccessKey, "AWS_SECRET_ACCESS_KEY="+mi.SecretKey)
	otherLog := filepath.Join(dir, "other.log")
	lf, err := os.Create(otherLog)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	other.Stdout, other.Stderr = lf, lf
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- other.Wait() }()
	t.Cleanup(func() {
		_ = other.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = other.Process.Kill()
			<-exited
		}
		_ = syscall.Unmount(mnt, syscall.MNT_DETACH)
	})
	if err := testenv.WaitMounted(mnt, 30*time.Second, exited); err != nil {
		b, _ := os.ReadFile(otherLog)
		t.Fatalf("the host peer's mount: %v\n%s", err, b)
	}

	// It joins through the API: a peer Lease of the group, as its node
	// plugin would write and renew it.
	stopLease := standInPeer(ctx, t, in, group, otherID, otherID+"="+otherAddr)
	peersFile := waitPeersFile(ctx, t, in, func(ps []peer.Peer) bool { return len(ps) == 2 })
	fmt.Printf("cluster scope: the node plugin's peers file %s lists both peers\n", filepath.Base(peersFile))
	// The mount polls its peers file (every second) and then records its
	// new owner share: wait for that before reading.
	for {
		share, ok := sumSamples(in.scrapeNode(t), "cachefs_peer_owned_ratio")
		if ok && share < 0.9 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the node's mount never took the second peer in (owned share %v, ok %v)", share, ok)
		}
		time.Sleep(300 * time.Millisecond)
	}

	start := time.Now()
	in.readerPod(ctx, t, v, "reader", "sh", "-c", "read-dataset /data 2 && sleep 3600")
	in.waitLogLine(ctx, t, ns, "reader", "done")
	fmt.Printf("cluster scope: 2 passes over %d files (%d bytes) in %.1fs\n", len(files), total, time.Since(start).Seconds())
	checkPasses(t, passSums(t, in.podLog(ctx, t, ns, "reader")), files, 2)

	body := in.scrapeNode(t)
	hits, _ := sumSamples(body, "cachefs_peer_hits_total")
	received, _ := sumSamples(body, "cachefs_peer_received_bytes_total")
	share, okShare := sumSamples(body, "cachefs_peer_owned_ratio")
	_, resp := testenv.Scrape(t, "http://127.0.0.1:"+strconv.Itoa(metricsPort)+"/metrics")
	served, _ := sumSamples(resp, "cachefs_peer_served_total")
	refused, _ := sumSamples(resp, "cachefs_peer_refused_total")
	fmt.Printf("cluster scope: node peer hits %v (%v bytes received), owned share %.2f; host peer served %v, refused %v\n",
		hits, received, share, served, refused)
	if hits == 0 || served == 0 {
		b, _ := os.ReadFile(otherLog)
		t.Errorf("no file came from the other peer (node peer hits %v, host peer served %v); host peer log:\n%s", hits, served, tail(string(b), 3000))
	}
	if !okShare || share <= 0.1 || share >= 0.9 {
		t.Errorf("the node's owned share %v (ok %v), want about a half with two peers", share, okShare)
	}
	if refused != 0 {
		t.Errorf("the host peer refused %v requests of the node's mount", refused)
	}

	// The other peer stops renewing: its Lease expires by itself (it is
	// still there) and the node plugin drops it from the peers file.
	stopLease()
	waitPeersFile(ctx, t, in, func(ps []peer.Peer) bool { return len(ps) == 1 && ps[0].ID == nodePeers[0].ID })
	fmt.Println("cluster scope: the expired peer Lease left the peers file")

	// The node's cache-location Lease (for the job controller's
	// placement) is there, held by the node.
	if l, err := in.c.Client.CoordinationV1().Leases(chartNamespace).Get(ctx, cachelabel.LeaseName(cluster.NodeName), metav1.GetOptions{}); err != nil ||
		l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != cluster.NodeName {
		t.Errorf("the node's cache-location Lease: %v", err)
	}

	in.deletePod(ctx, t, ns, "reader")
	in.deletePod(ctx, t, ns, "holder")
	in.deleteVolume(ctx, t, v)
	in.waitNoMounts(t, 2*time.Minute)
	// The last unstage deletes the node's Lease of the dataset's group.
	name := kubepeer.LeaseName(group, cluster.NodeName)
	for {
		_, err := in.c.Client.CoordinationV1().Leases(chartNamespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("Lease %s/%s still there after the dataset was deleted: %v", chartNamespace, name, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	fmt.Println("cluster scope: the deleted dataset's peer Lease is gone")
}

// checkNodeRBAC: the node plugin's ServiceAccount may not get, patch or
// update Nodes, and may write Leases in the driver's
// namespace only.
func checkNodeRBAC(ctx context.Context, t *testing.T, in *install) {
	t.Helper()
	user := "system:serviceaccount:" + chartNamespace + ":epochfs-node"
	for _, c := range []struct {
		attr authorizationv1.ResourceAttributes
		want bool
	}{
		{authorizationv1.ResourceAttributes{Verb: "patch", Resource: "nodes", Name: cluster.NodeName}, false},
		{authorizationv1.ResourceAttributes{Verb: "update", Resource: "nodes", Name: cluster.NodeName}, false},
		{authorizationv1.ResourceAttributes{Verb: "get", Resource: "nodes", Name: cluster.NodeName}, false},
		{authorizationv1.ResourceAttributes{Verb: "create", Group: "coordination.k8s.io", Resource: "leases", Namespace: chartNamespace}, true},
		{authorizationv1.ResourceAttributes{Verb: "delete", Group: "coordination.k8s.io", Resource: "leases", Namespace: chartNamespace}, true},
		{authorizationv1.ResourceAttributes{Verb: "create", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-node-lease"}, false},
		// ListingRefused events on the pods of any namespace (ClusterRole epochfs-node-events), nothing else.
		{authorizationv1.ResourceAttributes{Verb: "create", Resource: "events", Namespace: "default"}, true},
		{authorizationv1.ResourceAttributes{Verb: "patch", Group: "events.k8s.io", Resource: "events", Namespace: "default"}, true},
		{authorizationv1.ResourceAttributes{Verb: "list", Resource: "events", Namespace: "default"}, false},
		{authorizationv1.ResourceAttributes{Verb: "get", Resource: "pods", Namespace: "default"}, false},
	} {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + chartNamespace}, ResourceAttributes: &c.attr}}
		got, err := in.c.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Allowed != c.want {
			t.Errorf("the node plugin may %s %s in %q: %v, want %v", c.attr.Verb, c.attr.Resource, c.attr.Namespace, got.Status.Allowed, c.want)
		}
	}
}

// waitPeerLease waits for a peer Lease of node in the driver's namespace
// and returns its group and peer value.
func waitPeerLease(ctx context.Context, t *testing.T, in *install, node string) (group, value string) {
	t.Helper()
	sel := kubepeer.NodeLabel + "=" + kubepeer.NodeLabelValue(node)
	for {
		list, err := in.c.Client.CoordinationV1().Leases(chartNamespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err == nil {
			for _, l := range list.Items {
				if g := l.Labels[kubepeer.GroupLabel]; g != "" && l.Annotations[kubepeer.PeerAnnotation] != "" {
					return g, l.Annotations[kubepeer.PeerAnnotation]
				}
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("node %s never got a peer Lease in %s: %v", node, chartNamespace, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// waitPeersFile waits until the one peers file under the node plugin's
// state dir satisfies ok, and returns its path.
func waitPeersFile(ctx context.Context, t *testing.T, in *install, ok func([]peer.Peer) bool) string {
	t.Helper()
	var last string
	for {
		matches, _ := filepath.Glob(filepath.Join(in.stateDir, "node", "peers", "*.peers"))
		if len(matches) == 1 {
			b, err := os.ReadFile(matches[0])
			if err == nil {
				last = string(b)
				if ps, err := peer.ParsePeersFile(last); err == nil && ok(ps) {
					return matches[0]
				}
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("peers files %v; the last read: %q", matches, last)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// standInPeer writes the peer Lease of node in group, as that node's plugin
// would (10 s duration, renewed every 3 s); stop ends the renewals, and the
// Lease then expires by itself.
func standInPeer(ctx context.Context, t *testing.T, in *install, group, node, value string) (stop func()) {
	t.Helper()
	leases := in.c.Client.CoordinationV1().Leases(chartNamespace)
	name := kubepeer.LeaseName(group, node)
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: chartNamespace,
			Labels:      map[string]string{kubepeer.GroupLabel: group, kubepeer.NodeLabel: kubepeer.NodeLabelValue(node)},
			Annotations: map[string]string{kubepeer.PeerAnnotation: value}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &node, LeaseDurationSeconds: ptrInt32(10), RenewTime: &metav1.MicroTime{Time: time.Now()}},
	}
	if _, err := leases.Create(ctx, lease, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = leases.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-lctx.Done():
				return
			case <-time.After(3 * time.Second):
			}
			_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
				l, err := leases.Get(lctx, name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
				_, err = leases.Update(lctx, l, metav1.UpdateOptions{})
				return err
			})
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

func ptrInt32(v int32) *int32 { return &v }
