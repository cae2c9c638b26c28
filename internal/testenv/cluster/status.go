package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Status describes the cluster in dir: which of its processes run
// and, when the API answers, the node's Ready condition and the pod count.
func Status(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	p := clusterPaths{dir}
	var b strings.Builder
	fmt.Fprintf(&b, "state dir: %s\n", dir)
	for _, name := range clusterProcs {
		if pid, ok := readPid(p, name); ok {
			fmt.Fprintf(&b, "  %-24s running (pid %d)\n", name, pid)
		} else {
			fmt.Fprintf(&b, "  %-24s stopped\n", name)
		}
	}
	if !procAlive(p, "kube-apiserver") {
		return b.String(), nil
	}
	fmt.Fprintf(&b, "kubeconfig: %s\n", p.kubeconfig())
	cfg, err := clientcmd.BuildConfigFromFlags("", p.kubeconfig())
	if err != nil {
		return b.String(), err
	}
	cfg.Timeout = 5 * time.Second
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return b.String(), err
	}
	ctx := context.Background()
	if n, err := client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{}); err != nil {
		fmt.Fprintf(&b, "node %s: %v\n", NodeName, err)
	} else {
		ready := "Unknown"
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				ready = string(c.Status)
			}
		}
		fmt.Fprintf(&b, "node %s: Ready=%s, kubelet %s\n", NodeName, ready, n.Status.NodeInfo.KubeletVersion)
	}
	if pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); err == nil {
		fmt.Fprintf(&b, "pods: %d\n", len(pods.Items))
	}
	return b.String(), nil
}
