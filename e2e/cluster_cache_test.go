package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/pkg/peer"
	"github.com/epochfs/epochfs/pkg/peer/kubepeer"
)

// TestClusterScopeVolumeOnKubelet: the cluster-wide cache's discovery
// through the Kubernetes API on a real kubelet (issue 15). The chart is
// installed with node.clusterCache on; a PV with cacheScope: cluster is
// staged by a holder pod; the node plugin advertises the dataset's group
// on its Node. A second peer — a real `cachefs mount` on the host, as
// another node's mount would be — joins by the only means a node has: a
// Node object carrying the group's annotation (this one a stand-in Node,
// tainted, kept alive by a Lease as a kubelet would). The node plugin must
// see it through its watch and rewrite the dataset's peers file; a reader
// pod then reads the dataset twice byte for byte, the files the other peer
// owns come from it (its served counter and the node's peer hits), and
// when the stand-in Node is deleted the node plugin drops it again.
func TestClusterScopeVolumeOnKubelet(t *testing.T) {
	requireE2E(t)
	const token = "e2e-peer-token-0123456789abcdef"
	prepare := func(c *testenv.Cluster) {
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
	mi := testenv.StartMinIO(t)
	in := installChartPrepared(t, prepare, append(minioRules(mi, "shared"), "--set", "node.clusterCache.enabled=true",
		"--set", "node.clusterCache.tokenSecretName=peer-token")...)
	mi.MakeBucket(t, "shared")
	files := datagen.Spec{Files: 120, Classes: 4, MedianSize: 20_000, MinSize: 500, MaxSize: 150_000, Seed: 15}.Plan()
	mi.PutFiles(t, "shared", "imagenet/", files)
	total := datagen.TotalSize(files)
	source := s3Source(mi, "shared", "imagenet")

	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cs := in.c.Client.CoreV1()
	const ns = "tenant-cluster"
	in.createNamespace(ctx, t, ns)
	secret := in.createS3Secret(ctx, t, ns, "s3", mi)
	v := in.createPV(ctx, t, ns, "imagenet", map[string]string{"source": source, "cacheSize": "64Mi", "cacheScope": "cluster"}, secret)

	// A holder pod stages the volume: the node plugin starts the mount in
	// cluster scope and advertises the group on its Node.
	in.readerPod(ctx, t, v, "holder", "sleep", "3600")
	in.waitPod(ctx, t, ns, "holder", corev1.PodRunning)
	key, value := waitPeerAnnotation(ctx, t, in, testenv.ClusterNodeName)
	if strings.Contains(key+value, token) {
		t.Fatal("the Node annotation carries the peer token")
	}
	nodePeers, err := peer.ParsePeersFile(value)
	if err != nil || len(nodePeers) != 1 {
		t.Fatalf("the node's annotation %s=%q is not one peer: %v", key, value, err)
	}
	fmt.Printf("cluster scope: the node plugin advertises %s = %s\n", key, value)

	// The second peer: a cachefs mount on the host, same source, same token,
	// same peer group (the node plugin's, from its annotation: peer servers
	// serve their own group only).
	group := strings.TrimPrefix(key, kubepeer.AnnotationPrefix)
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
	other := exec.Command(cachefs, "mount", source, mnt, "--cache-dir", filepath.Join(dir, "cache"), "--cache-size", "64Mi",
		"--cache-scope", "cluster", "--peer-id", otherID, "--peer-listen", otherAddr, "--peer-token-file", tokenFile,
		"--peer-group", group, "--peers", peer.FormatPeers(append(nodePeers, peer.Peer{ID: otherID, Addr: otherAddr})),
		"--metrics-addr", "127.0.0.1:"+strconv.Itoa(metricsPort))
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

	// It joins through the API: a stand-in Node with the group's annotation.
	stopLease := standInNode(ctx, t, in, otherID, map[string]string{key: otherID + "=" + otherAddr})
	peersFile := waitPeersFile(ctx, t, in, func(ps []peer.Peer) bool { return len(ps) == 2 })
	fmt.Printf("cluster scope: the node plugin's peers file %s lists both peers\n", filepath.Base(peersFile))
	// The mount polls its peers file (every second) and then records its
	// new owner share: wait for that before reading.
	for {
		share, ok := sumSamples(in.scrapeNode(t), "cachefs_peer_owned_share")
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
	share, okShare := sumSamples(body, "cachefs_peer_owned_share")
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

	// The stand-in Node goes: the node plugin drops it from the peers file.
	stopLease()
	if err := cs.Nodes().Delete(ctx, otherID, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPeersFile(ctx, t, in, func(ps []peer.Peer) bool { return len(ps) == 1 && ps[0].ID == nodePeers[0].ID })
	fmt.Println("cluster scope: the deleted Node left the peers file")

	in.deletePod(ctx, t, ns, "reader")
	in.deletePod(ctx, t, ns, "holder")
	in.deleteVolume(ctx, t, v)
	in.waitNoMounts(t, 2*time.Minute)
	// The last unstage withdraws the annotation.
	for {
		n, err := cs.Nodes().Get(ctx, testenv.ClusterNodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := n.Annotations[key]; !ok {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the node still carries %s after the dataset was unstaged", key)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// waitPeerAnnotation waits for a kubepeer annotation on node and returns it.
func waitPeerAnnotation(ctx context.Context, t *testing.T, in *install, node string) (key, value string) {
	t.Helper()
	for {
		n, err := in.c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err == nil {
			for k, v := range n.Annotations {
				if strings.HasPrefix(k, kubepeer.AnnotationPrefix) {
					return k, v
				}
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("node %s never got a %s annotation", node, kubepeer.AnnotationPrefix)
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

// standInNode creates a Node named name with annotations, tainted so that
// nothing is scheduled there, without the kubernetes.io/os label (the
// chart's DaemonSets select it), Ready, and renews its Lease as a kubelet
// would so that the node lifecycle controller leaves it Ready. stop ends
// the renewals.
func standInNode(ctx context.Context, t *testing.T, in *install, name string, annotations map[string]string) (stop func()) {
	t.Helper()
	cs := in.c.Client
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: "epochfs.io/e2e-stand-in", Effect: corev1.TaintEffectNoSchedule}}},
	}
	if _, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	// The node controllers write to a new Node too (taints, annotations):
	// on a conflict, read it again and retry.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		got, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		got.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
			Reason: "E2EStandIn", LastHeartbeatTime: now, LastTransitionTime: now}}
		_, err = cs.CoreV1().Nodes().UpdateStatus(ctx, got, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-node-lease"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &name, LeaseDurationSeconds: ptrInt32(40), RenewTime: &metav1.MicroTime{Time: time.Now()}}}
	if _, err := cs.CoordinationV1().Leases("kube-node-lease").Create(ctx, lease, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-lctx.Done():
				return
			case <-time.After(5 * time.Second):
			}
			l, err := cs.CoordinationV1().Leases("kube-node-lease").Get(lctx, name, metav1.GetOptions{})
			if err != nil {
				continue
			}
			l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
			_, _ = cs.CoordinationV1().Leases("kube-node-lease").Update(lctx, l, metav1.UpdateOptions{})
		}
	}()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}

func ptrInt32(v int32) *int32 { return &v }
