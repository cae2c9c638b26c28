package kubepeer

import (
	"context"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/pkg/peer"
)

// TestDirectory, against a real kube-apiserver: two node plugins (two
// Directories with different node names) advertise a group and see each
// other with stable ids; another group stays apart; a node that withdraws,
// or turns NotReady, disappears; a node deleted disappears.
func TestDirectory(t *testing.T) {
	kube := testenv.StartKube(t)
	client, err := kubernetes.NewForConfig(kube.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, name := range []string{"node-a", "node-b"} {
		if _, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	a, err := Start(ctx, client, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := Start(ctx, client, "node-b")
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

	// b leaves g-1: a sees only itself; g-2 is untouched.
	if err := b.Withdraw(ctx, "g-1"); err != nil {
		t.Fatal(err)
	}
	waitPeers(t, a.Group("g-1"), []peer.Peer{pa})
	waitPeers(t, a.Group("g-2"), []peer.Peer{{ID: "node-b", Addr: "10.0.0.2:7402"}})

	// b comes back, then goes NotReady: listed, then not.
	if err := b.Advertise(ctx, "g-1", pb); err != nil {
		t.Fatal(err)
	}
	waitPeers(t, a.Group("g-1"), both)
	n, err := client.CoreV1().Nodes().Get(ctx, "node-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPeers(t, a.Group("g-1"), []peer.Peer{pa})

	// A deleted node disappears too.
	if err := client.CoreV1().Nodes().Delete(ctx, "node-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPeers(t, a.Group("g-2"), nil)

	if err := a.Advertise(ctx, "G_bad", pa); err == nil {
		t.Error("an invalid group was advertised")
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
