package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
)

// fakeKubelet plays the one kubelet endpoint kube-apiserver proxies pod
// logs to: GET /containerLogs/{namespace}/{pod}/{container} over HTTPS
// (kube-apiserver skips verifying the kubelet's certificate when it has no
// --kubelet-certificate-authority, as in kube.Start). With
// follow=true it sends the logs, flushes, and keeps the stream open until
// release is closed, then sends followTail and ends the stream.
type fakeKubelet struct {
	srv        *httptest.Server
	logs       map[string]string // "ns/pod/container" → log text; read-only
	followTail string            // read-only
	release    chan struct{}

	mu       sync.Mutex
	requests []string // "path?query", guarded by mu
}

func startFakeKubelet(t *testing.T, logs map[string]string, followTail string) *fakeKubelet {
	t.Helper()
	k := &fakeKubelet{logs: logs, followTail: followTail, release: make(chan struct{})}
	k.srv = httptest.NewUnstartedServer(http.HandlerFunc(k.serve))
	k.srv.StartTLS()
	t.Cleanup(func() {
		select {
		case <-k.release:
		default:
			close(k.release)
		}
		k.srv.Close()
	})
	return k
}

func (k *fakeKubelet) port() int32 { return int32(k.srv.Listener.Addr().(*net.TCPAddr).Port) }

func (k *fakeKubelet) seen() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.requests...)
}

func (k *fakeKubelet) serve(w http.ResponseWriter, r *http.Request) {
	k.mu.Lock()
	k.requests = append(k.requests, r.URL.Path+"?"+r.URL.RawQuery)
	k.mu.Unlock()
	key, ok := strings.CutPrefix(r.URL.Path, "/containerLogs/")
	text, found := k.logs[key]
	if !ok || !found || r.Method != http.MethodGet {
		http.Error(w, "fake kubelet: no container "+r.URL.Path, http.StatusNotFound)
		return
	}
	q := r.URL.Query()
	if n, err := strconv.Atoi(q.Get("tailLines")); err == nil {
		lines := strings.SplitAfter(strings.TrimSuffix(text, "\n"), "\n")
		if n < len(lines) {
			lines = lines[len(lines)-n:]
		}
		text = strings.Join(lines, "") + "\n"
	}
	w.Header().Set("Content-Type", "text/plain")
	fmt.Fprint(w, text)
	if q.Get("follow") != "true" {
		return
	}
	w.(http.Flusher).Flush()
	select {
	case <-k.release:
		fmt.Fprint(w, k.followTail)
	case <-r.Context().Done():
	}
}

// TestJobLogs checks `cachefs job logs` end to end: the CLI asks the real
// kube-apiserver, which proxies to the kubelet at the pod's Node
// (status.addresses InternalIP and daemonEndpoints.kubeletEndpoint.Port).
func TestJobLogs(t *testing.T) {
	const ns = "ml"
	kube, c := startJobKube(t, ns)
	ctx := context.Background()
	tj := &v1alpha1.TrainingJob{ObjectMeta: metav1.ObjectMeta{Name: "resnet", Namespace: ns},
		Spec: v1alpha1.TrainingJobSpec{Image: "pytorch/pytorch:2.4.0", Workers: 2, Mode: v1alpha1.ModePyTorch}}
	if err := c.Create(ctx, tj); err != nil {
		t.Fatal(err)
	}
	bert := &v1alpha1.TrainingJob{ObjectMeta: metav1.ObjectMeta{Name: "bert", Namespace: ns},
		Spec: v1alpha1.TrainingJobSpec{Image: "tensorflow/tensorflow:2.17.0", Workers: 1, ParameterServers: 1, Mode: v1alpha1.ModeTensorFlow}}
	if err := c.Create(ctx, bert); err != nil {
		t.Fatal(err)
	}

	kubelet := startFakeKubelet(t, map[string]string{
		ns + "/resnet-0-abcde/" + v1alpha1.ContainerName:  "rank 0: epoch 1 loss 2.31\nrank 0: epoch 2 loss 1.87\nrank 0: epoch 3 loss 1.52\n",
		ns + "/resnet-1-fghij/" + v1alpha1.ContainerName:  "rank 1: epoch 1 loss 2.30\n",
		ns + "/resnet-1-klmno/" + v1alpha1.ContainerName:  "rank 1 (restarted): epoch 1 loss 2.29\n",
		ns + "/bert-ps-0-pqrst/" + v1alpha1.ContainerName: "ps 0: serving 110M parameters\n",
	}, "rank 0: epoch 4 loss 1.33\nrank 0: done\n")
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-a"}}
	if err := c.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	node.Status = corev1.NodeStatus{
		Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: kubelet.port()}},
		Conditions:      []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
	}
	if err := c.Status().Update(ctx, node); err != nil {
		t.Fatal(err)
	}
	// Worker 1's first pod failed and was replaced: logs must pick the
	// newer one. Creation timestamps have one-second resolution.
	for i, p := range []struct {
		job, replica, name, index string
		phase                     corev1.PodPhase
	}{
		{"resnet", v1alpha1.ReplicaWorker, "resnet-0-abcde", "0", corev1.PodRunning},
		{"resnet", v1alpha1.ReplicaWorker, "resnet-1-fghij", "1", corev1.PodFailed},
		{"resnet", v1alpha1.ReplicaWorker, "resnet-1-klmno", "1", corev1.PodRunning},
		{"bert", v1alpha1.ReplicaPS, "bert-ps-0-pqrst", "0", corev1.PodRunning},
	} {
		if i == 2 {
			time.Sleep(1100 * time.Millisecond)
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: ns, Labels: map[string]string{
				v1alpha1.LabelJobName: p.job, v1alpha1.LabelReplica: p.replica, batchCompletionIndex: p.index,
			}},
			Spec: corev1.PodSpec{NodeName: node.Name, Containers: []corev1.Container{{Name: v1alpha1.ContainerName, Image: tj.Spec.Image}}},
		}
		if err := c.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		state := corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}
		if p.phase == corev1.PodFailed {
			state = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}}
		}
		pod.Status.Phase = p.phase
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: v1alpha1.ContainerName, State: state}}
		if err := c.Status().Update(ctx, pod); err != nil {
			t.Fatal(err)
		}
	}

	kc := "--kubeconfig=" + kube.Kubeconfig
	var b strings.Builder
	for _, args := range [][]string{
		{"logs", "resnet", "-n", ns},
		{"logs", "resnet", "-n", ns, "--worker", "1"},
		{"logs", "resnet", "-n", ns, "--tail", "1"},
		{"logs", "bert", "-n", ns, "--ps"},
	} {
		out, stderr, err := runJob(t, append([]string{"job", kc}, args...)...)
		if err != nil {
			t.Fatalf("cachefs job %v: %v\n%s", args, err, stderr)
		}
		b.WriteString("$ cachefs job " + strings.Join(args, " ") + "\n" + out + stderr)
	}

	// -f streams: the first lines arrive while the stream is open, and the
	// command ends when the kubelet ends the stream.
	args := []string{"logs", "resnet", "-n", ns, "-f"}
	out := &testenv.SyncBuffer{}
	done := make(chan error, 1)
	fctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	go func() {
		root := newRoot()
		root.SetOut(out)
		root.SetErr(out)
		root.SetArgs(append([]string{"job", kc}, args...))
		done <- root.ExecuteContext(fctx)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "epoch 3") {
		select {
		case err := <-done:
			t.Fatalf("cachefs job %v ended before the stream did: %v\n%s", args, err, out)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("cachefs job %v: no output while following: %q", args, out)
		}
	}
	if strings.Contains(out.String(), "epoch 4") {
		t.Fatalf("follow: got lines the kubelet has not sent yet: %q", out)
	}
	close(kubelet.release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("cachefs job %v: %v", args, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("cachefs job %v did not end when the kubelet ended the stream: %q", args, out)
	}
	b.WriteString("$ cachefs job " + strings.Join(args, " ") + "\n" + out.String())
	b.WriteString("\nkubelet requests:\n" + strings.Join(kubelet.seen(), "\n") + "\n")
	golden(t, "logs.txt", "", b.String())
}
