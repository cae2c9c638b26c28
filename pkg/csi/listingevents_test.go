package csi_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/epochfs/epochfs/pkg/csi"
)

// TestListingRefusalEvent: a node plugin that talks to a real
// kube-apiserver as a ServiceAccount with the chart's rights (Leases of its
// namespace; create/patch events, nothing else) stages a local dataset and
// publishes it to a pod (the volume context names the pod as the kubelet
// does with podInfoOnMount), its mounts capped at 10 entries per directory.
// Listing a directory of 30 files through the target fails with EFBIG;
// the health loop's refusal step then records a Warning event
// ListingRefused on that Pod, naming the cap and its flag and saying the
// mount keeps serving, and a second step without new refusals adds no
// event (nor raises the event's count). Before the events were built the
// refusal only reached the mount log and the metric: no event.
func TestListingRefusalEvent(t *testing.T) {
	const ns, podNS, podName = "epochfs-system", "team-a", "trainer-0"
	kube, admin := startKubeWithNamespaces(t, ns, podNS)
	pod, err := admin.CoreV1().Pods(podNS).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: podName},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "train", Image: "busybox"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := leaseOnlyKubeconfig(t, kube, admin, ns)
	// The chart's ClusterRole for the node plugin's events.
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "epochfs-node-events"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "epochfs-node-events"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "epochfs-node-events"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "epochfs-node", Namespace: ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	td := startDriver(t, func(c *csi.Config) {
		c.NodeLabels, c.Kubeconfig, c.Namespace = true, kubeconfig, ns
		c.MountMaxDirEntries = 10
	})

	data := t.TempDir()
	if err := os.Mkdir(filepath.Join(data, "big"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		if err := os.WriteFile(filepath.Join(data, "big", fmt.Sprintf("f%02d", i)), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(data, "ok.txt"), []byte("fine"), 0o644); err != nil {
		t.Fatal(err)
	}
	work := td.workDir(t)
	staging, target := filepath.Join(work, "staging"), filepath.Join(work, "target")
	vctx := map[string]string{"source": data, "cacheSize": "1GiB"}
	stage(t, td, "vol-e", staging, vctx)
	defer unstage(t, td, "vol-e", staging)
	pctx := map[string]string{"source": data, "cacheSize": "1GiB",
		"csi.storage.k8s.io/pod.name": podName, "csi.storage.k8s.io/pod.namespace": podNS, "csi.storage.k8s.io/pod.uid": string(pod.UID)}
	publish(t, td, "vol-e", staging, target, pctx)
	defer unpublish(t, td, "vol-e", target)

	if _, err := os.ReadDir(filepath.Join(target, "big")); !errors.Is(err, syscall.EFBIG) {
		t.Fatalf("listing a directory past --max-dir-entries: %v, want EFBIG", err)
	}
	if b, err := os.ReadFile(filepath.Join(target, "ok.txt")); err != nil || string(b) != "fine" {
		t.Fatalf("the rest of the mount: %q, %v", b, err)
	}

	var ev corev1.Event
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; ; i++ {
		// A round whose scrape of the mount timed out (a loaded machine)
		// reports nothing: the health check's next round does, as here.
		if i%10 == 0 {
			td.driver.ReportListingRefusals(ctx)
		}
		evs := podEvents(t, admin, podNS, podName)
		if len(evs) > 0 {
			if len(evs) != 1 {
				t.Fatalf("%d ListingRefused events, want 1: %+v", len(evs), evs)
			}
			ev = evs[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no ListingRefused event on the pod after the health check")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if ev.Type != corev1.EventTypeWarning || ev.InvolvedObject.Kind != "Pod" || ev.Source.Component != "epochfs-node" || ev.Source.Host != "test-node" {
		t.Errorf("event %+v %+v", ev.InvolvedObject, ev.Source)
	}
	if ev.InvolvedObject.UID != pod.UID { // kubectl describe pod finds events by the pod's uid
		t.Errorf("event on uid %q, want the pod's %s", ev.InvolvedObject.UID, pod.UID)
	}
	for _, want := range []string{"max-dir-entries", "--max-dir-entries", "keeps serving", "EFBIG"} {
		if !strings.Contains(ev.Message, want) {
			t.Errorf("event message %q lacks %q", ev.Message, want)
		}
	}
	if strings.Contains(ev.Message, data) || strings.Contains(ev.Message, "big") {
		t.Errorf("event message %q carries the source or the directory (tenant text)", ev.Message)
	}

	// No new refusal (the refusal is remembered: a second readdir does not
	// list again), so a second check records nothing.
	_, _ = os.ReadDir(filepath.Join(target, "big"))
	td.driver.ReportListingRefusals(ctx)
	time.Sleep(2 * time.Second)
	evs := podEvents(t, admin, podNS, podName)
	if len(evs) != 1 || evs[0].Count != ev.Count {
		t.Errorf("after a check without new refusals: %d events (count %v), want the one event with count %d", len(evs), evs, ev.Count)
	}
}

// podEvents lists the ListingRefused events on a pod.
func podEvents(t *testing.T, client kubernetes.Interface, ns, name string) []corev1.Event {
	t.Helper()
	l, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Event
	for _, e := range l.Items {
		if e.InvolvedObject.Kind == "Pod" && e.InvolvedObject.Name == name && e.Reason == csi.ReasonListingRefused {
			out = append(out, e)
		}
	}
	return out
}
