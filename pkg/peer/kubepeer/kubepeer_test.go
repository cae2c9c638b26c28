package kubepeer

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/epochfs/epochfs/internal/testenv/kube"
	"github.com/epochfs/epochfs/pkg/peer"
)

const ns = "epochfs-system"

func startKube(t *testing.T) (kubernetes.Interface, context.Context) {
	t.Helper()
	kube := kube.Start(t)
	client, err := kubernetes.NewForConfig(kube.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return client, ctx
}

// TestDirectory, against a real kube-apiserver: two node plugins (two
// Directories with different node names) advertise a group as Leases in
// the driver's namespace and see each other with stable ids; another group
// stays apart; a node that withdraws disappears; no Node is read or
// written (there is none).
func TestDirectory(t *testing.T) {
	client, ctx := startKube(t)
	a, err := Start(ctx, client, Options{Namespace: ns, Node: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Start(ctx, client, Options{Namespace: ns, Node: "node-b"})
	if err != nil {
		t.Fatal(err)
	}
	changes := make(chan struct{}, 100)
	a.OnChange(func() { changes <- struct{}{} })

	pa := peer.Peer{ID: "node-a", Addr: "10.0.0.1:7400"}
	pb := peer.Peer{ID: "node-b", Addr: "10.0.0.2:7401", Capacity: 10 << 30} // a capacity travels with the address
	if err := a.Advertise(ctx, "g-1", pa); err != nil {
		t.Fatal(err)
	}
	if err := b.Advertise(ctx, "g-1", pb); err != nil {
		t.Fatal(err)
	}
	if err := b.Advertise(ctx, "g-2", peer.Peer{ID: "node-b", Addr: "10.0.0.2:7402"}); err != nil {
		t.Fatal(err)
	}
	both := []peer.Peer{pa, pb}
	waitPeers(t, a.Group("g-1"), both)
	waitPeers(t, b.Group("g-1"), both)
	waitPeers(t, a.Group("g-2"), []peer.Peer{{ID: "node-b", Addr: "10.0.0.2:7402"}})
	select {
	case <-changes:
	default:
		t.Error("OnChange not called")
	}

	// The Lease says who holds it and is labelled for a group's listing.
	l, err := client.CoordinationV1().Leases(ns).Get(ctx, LeaseName("g-1", "node-b"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *l.Spec.HolderIdentity != "node-b" || l.Labels[GroupLabel] != "g-1" || l.Labels[NodeLabel] != "node-b" ||
		*l.Spec.LeaseDurationSeconds != int32(DefaultLeaseDuration/time.Second) || l.Spec.RenewTime == nil {
		t.Errorf("lease %+v %+v", l.ObjectMeta, l.Spec)
	}
	// Advertising again renews it.
	first := l.Spec.RenewTime.Time
	time.Sleep(10 * time.Millisecond)
	if err := b.Advertise(ctx, "g-1", pb); err != nil {
		t.Fatal(err)
	}
	if l, err = client.CoordinationV1().Leases(ns).Get(ctx, LeaseName("g-1", "node-b"), metav1.GetOptions{}); err != nil || !l.Spec.RenewTime.After(first) {
		t.Errorf("not renewed: %v, %v", err, l.Spec.RenewTime)
	}

	// b leaves g-1: a sees only itself; g-2 is untouched.
	if err := b.Withdraw(ctx, "g-1"); err != nil {
		t.Fatal(err)
	}
	waitPeers(t, a.Group("g-1"), []peer.Peer{pa})
	waitPeers(t, a.Group("g-2"), []peer.Peer{{ID: "node-b", Addr: "10.0.0.2:7402"}})
	if err := b.Withdraw(ctx, "g-1"); err != nil {
		t.Errorf("a second withdraw: %v", err)
	}

	if err := a.Advertise(ctx, "G_bad", pa); err == nil {
		t.Error("an invalid group was advertised")
	}
}

// TestDirectoryExpiry: a Lease nobody renews drops out of its group by
// itself (the node died: no Node condition is needed), though the object
// is still there; renewed, it is back.
func TestDirectoryExpiry(t *testing.T) {
	client, ctx := startKube(t)
	a, err := Start(ctx, client, Options{Namespace: ns, Node: "node-a", LeaseDuration: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Start(ctx, client, Options{Namespace: ns, Node: "node-b", LeaseDuration: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	pb := peer.Peer{ID: "node-b", Addr: "10.0.0.2:7401"}
	if err := b.Advertise(ctx, "g-1", pb); err != nil {
		t.Fatal(err)
	}
	waitPeers(t, a.Group("g-1"), []peer.Peer{pb})
	waitPeers(t, a.Group("g-1"), nil) // about 2 s later, with no event
	if _, err := client.CoordinationV1().Leases(ns).Get(ctx, LeaseName("g-1", "node-b"), metav1.GetOptions{}); err != nil {
		t.Fatalf("the expired Lease itself: %v", err)
	}
	if err := b.Advertise(ctx, "g-1", pb); err != nil {
		t.Fatal(err)
	}
	waitPeers(t, a.Group("g-1"), []peer.Peer{pb})
}

// TestDirectoryRetain: a node's Leases of groups it no longer serves (a
// Withdraw that failed, a plugin killed mid-unstage) are deleted by
// Retain; its kept groups and other nodes' Leases are not.
func TestDirectoryRetain(t *testing.T) {
	client, ctx := startKube(t)
	a, err := Start(ctx, client, Options{Namespace: ns, Node: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Start(ctx, client, Options{Namespace: ns, Node: "node-b"})
	if err != nil {
		t.Fatal(err)
	}
	pa := peer.Peer{ID: "node-a", Addr: "10.0.0.1:7400"}
	pb := peer.Peer{ID: "node-b", Addr: "10.0.0.2:7400"}
	for _, g := range []string{"g-keep", "g-stale-1", "g-stale-2"} {
		if err := a.Advertise(ctx, g, pa); err != nil {
			t.Fatal(err)
		}
		if err := b.Advertise(ctx, g, pb); err != nil {
			t.Fatal(err)
		}
	}
	waitPeers(t, b.Group("g-stale-2"), []peer.Peer{pa, pb})
	n, err := a.Retain(ctx, []string{"g-keep"})
	if err != nil || n != 2 {
		t.Fatalf("retain: %d deleted, %v; want 2", n, err)
	}
	waitPeers(t, b.Group("g-stale-1"), []peer.Peer{pb})
	waitPeers(t, b.Group("g-stale-2"), []peer.Peer{pb})
	waitPeers(t, b.Group("g-keep"), []peer.Peer{pa, pb})
	for _, g := range []string{"g-stale-1", "g-stale-2"} {
		if _, err := client.CoordinationV1().Leases(ns).Get(ctx, LeaseName(g, "node-a"), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("stale lease of %s: %v", g, err)
		}
	}
	if n, err := a.Retain(ctx, []string{"g-keep"}); err != nil || n != 0 {
		t.Errorf("second retain: %d, %v", n, err)
	}
}

// TestDirectoryIgnoresForged: Leases that do not follow the scheme are not
// peers: one whose name is not its holder's (another node's name, a
// squatted entry), one without a renew time, one with a malformed or
// oversized peer value.
func TestDirectoryIgnoresForged(t *testing.T) {
	client, ctx := startKube(t)
	a, err := Start(ctx, client, Options{Namespace: ns, Node: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.NewMicroTime(time.Now())
	mk := func(name, holder, value string, renew *metav1.MicroTime) {
		t.Helper()
		l := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{GroupLabel: "g-1"},
				Annotations: map[string]string{PeerAnnotation: value}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To(int32(60)), RenewTime: renew},
		}
		if _, err := client.CoordinationV1().Leases(ns).Create(ctx, l, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mk(LeaseName("g-1", "node-x"), "node-y", "node-y=10.0.0.9:7400", &now)
	mk(LeaseName("g-1", "node-z"), "node-z", "node-z=10.0.0.9:7400", nil)
	mk(LeaseName("g-1", "node-w"), "node-w", "not a peer", &now)
	mk(LeaseName("g-1", "node-v"), "node-v", "node-v=10.0.0.9:7400;capacity="+strings.Repeat("9", 2000), &now)
	good := peer.Peer{ID: "node-u", Addr: "10.0.0.8:7400"}
	mk(LeaseName("g-1", "node-u"), "node-u", peer.FormatPeer(good), &now)
	waitPeers(t, a.Group("g-1"), []peer.Peer{good})
}

func TestNames(t *testing.T) {
	long := "n" + strings.Repeat("ab", 100)
	for _, n := range []string{"node-a", long, "h-x"} {
		if v := NodeLabelValue(n); len(v) > 63 || v == "" {
			t.Errorf("label value of %q: %q", n, v)
		}
		if name := LeaseName("g-0123456789abcdef01234567", n); len(name) > 63 {
			t.Errorf("lease name %q", name)
		}
	}
	if NodeLabelValue("h-x") == "h-x" {
		t.Error("a node name that looks like a hash is taken as is")
	}
	if LeaseName("g-1", "a") == LeaseName("g-1", "b") {
		t.Error("two nodes, one lease name")
	}
}

func waitPeers(t *testing.T, m peer.Membership, want []peer.Peer) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := m.Peers()
		if reflect.DeepEqual(got, want) || (len(got) == 0 && len(want) == 0) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("peers %v, want %v", got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
