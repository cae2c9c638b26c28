package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/epochfs/epochfs/internal/testenv"
)

// Down stops the cluster whose state is in dir and cleans up after
// it, whether it started fully or not: it deletes every pod through the API
// (the kubelet stops their containers and tears down their networks), stops
// the kubelet, kills and deletes what containerd still runs, stops
// containerd, the controllers, kube-apiserver and etcd (each by its recorded
// PID: SIGTERM, then SIGKILL), and unmounts everything under dir (lazily
// when busy). Logs stay in dir/logs. Idempotent; it returns the first of
// the errors it met but always goes on.
func Down(dir string, logf func(string, ...any)) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	p := clusterPaths{dir}
	var errs []error
	note := func(err error) {
		if err != nil {
			errs = append(errs, err)
			logf("cluster down: %v", err)
		}
	}
	// No new pods: controllers and scheduler first.
	note(stopProc(p, "kube-controller-manager", 10*time.Second))
	note(stopProc(p, "kube-scheduler", 10*time.Second))
	if procAlive(p, "kubelet") && procAlive(p, "kube-apiserver") && procAlive(p, "containerd") {
		if err := deleteAllPods(p, 45*time.Second); err != nil {
			logf("cluster down: pods not all gone through the API, killing them in containerd: %v", err)
		}
	}
	note(stopProc(p, "kubelet", 15*time.Second))
	if procAlive(p, "containerd") {
		note(killContainerdTasks(p))
	}
	note(stopProc(p, "containerd", 15*time.Second))
	note(killShims(p))
	// The machine-wide leftovers are this cluster's unless another one runs.
	owner, _, ownerAlive := clusterOwner()
	machineWide := !ownerAlive || owner == dir
	if machineWide {
		if n, err := killKubepods(); n > 0 || err != nil {
			logf("cluster down: killed %d container processes the kubelet and containerd left", n)
			note(err)
		}
	}
	note(stopProc(p, "kube-apiserver", 15*time.Second))
	note(stopProc(p, "etcd", 15*time.Second))
	note(p.unmount())
	note(removeContainerLogLinks(p))
	if machineWide {
		removeMachineLeftovers()
	}
	if _, err := os.Stat(filepath.Join("/sys/class/net", cniBridge)); err == nil && machineWide {
		if out, err := exec.Command("ip", "link", "delete", cniBridge).CombinedOutput(); err != nil {
			note(fmt.Errorf("ip link delete %s: %v: %s", cniBridge, err, out))
		}
	}
	if owner, _, _ := clusterOwner(); owner == dir {
		note(os.Remove(clusterOwnerFile))
	}
	return errors.Join(errs...)
}

// deleteAllPods deletes every pod (grace period 1 s) and waits until the
// API has none left, i.e. the kubelet has stopped them. DaemonSets' pods
// (a CSI node plugin) go last, once every other pod is gone: the kubelet
// needs a volume's driver to unmount it from a pod being deleted.
func deleteAllPods(p clusterPaths, timeout time.Duration) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", p.kubeconfig())
	if err != nil {
		return err
	}
	cfg.Timeout = 10 * time.Second
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	grace := int64(1)
	for {
		pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(pods.Items) == 0 {
			return nil
		}
		others := 0
		for i := range pods.Items {
			if !ownedByDaemonSet(&pods.Items[i]) {
				others++
			}
		}
		for _, pod := range pods.Items {
			if others > 0 && ownedByDaemonSet(&pod) {
				continue
			}
			if len(pod.Finalizers) > 0 { // Jobs' pods: the Job controller is stopped already
				_, _ = client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType,
					[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
			}
			if pod.DeletionTimestamp == nil {
				_ = client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
			} else if pod.Spec.NodeName == "" {
				_ = client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d pods left: %w", len(pods.Items), ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func ownedByDaemonSet(pod *corev1.Pod) bool {
	for _, o := range pod.OwnerReferences {
		if o.Kind == "DaemonSet" {
			return true
		}
	}
	return false
}

// killContainerdTasks kills and deletes every task and container in the
// cluster containerd's k8s.io namespace (what the kubelet left).
func killContainerdTasks(p clusterPaths) error {
	ctr, err := exec.LookPath("ctr")
	if err != nil {
		return err
	}
	run := func(args ...string) (string, error) {
		full := append([]string{"--address", p.containerdSock(), "-n", "k8s.io", "--timeout", "20s"}, args...)
		out, err := exec.Command(ctr, full...).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("ctr %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return string(out), nil
	}
	var errs []error
	out, err := run("tasks", "ls", "-q")
	if err != nil {
		return err
	}
	failed := map[string]error{}
	for _, id := range strings.Fields(out) {
		_, _ = run("tasks", "kill", "-s", "SIGKILL", id)
		if _, err := run("tasks", "delete", "-f", id); err != nil && !strings.Contains(err.Error(), "not found") {
			failed[id] = err // "not found": it went between the list and the delete
		}
	}
	if len(failed) > 0 {
		// A task whose shim exited while it was deleted fails with "ttrpc:
		// closed", yet is gone: only those still listed are errors.
		left, err := run("tasks", "ls", "-q")
		if err != nil {
			return err
		}
		for _, id := range strings.Fields(left) {
			if failed[id] != nil {
				errs = append(errs, failed[id])
			}
		}
	}
	out, err = run("containers", "ls", "-q")
	if err != nil {
		return err
	}
	for _, id := range strings.Fields(out) {
		if _, err := run("containers", "delete", id); err != nil && !strings.Contains(err.Error(), "not found") {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// killShims kills the containerd-shim-runc-v2 processes of this cluster's
// containerd (their command line names its socket) that outlived it.
func killShims(p clusterPaths) error {
	sock := p.containerdSock()
	_, err := testenv.Processes(func(pid int, args []string) bool {
		if filepath.Base(args[0]) != "containerd-shim-runc-v2" {
			return false
		}
		flags := map[string]string{}
		for i := 1; i+1 < len(args); i++ {
			if strings.HasPrefix(args[i], "-") {
				flags[args[i]] = args[i+1]
			}
		}
		if flags["-address"] != sock {
			return false
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
		// A killed shim leaves its socket, named as containerd 1.6 names it
		// (runtime/v2/shim SocketAddress).
		sum := sha256.Sum256([]byte(filepath.Join(sock, flags["-namespace"], flags["-id"])))
		_ = os.Remove(filepath.Join("/run/containerd/s", hex.EncodeToString(sum[:])))
		return true
	})
	return err
}

// removeContainerLogLinks removes the kubelet's /var/log/containers links
// into this cluster's pod log dir (that path is fixed in the kubelet).
func removeContainerLogLinks(p clusterPaths) error {
	ents, err := os.ReadDir("/var/log/containers")
	if err != nil {
		return nil
	}
	prefix := p.join("pod-logs") + "/"
	for _, e := range ents {
		link := filepath.Join("/var/log/containers", e.Name())
		if target, err := os.Readlink(link); err == nil && strings.HasPrefix(target, prefix) {
			_ = os.Remove(link)
		}
	}
	return nil
}
