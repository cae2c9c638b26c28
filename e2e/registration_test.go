package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/pkg/csi"
)

// TestKubeletRegistersDriver runs `csi-driver --mode node` and
// `csi-driver --mode registrar` as host processes on the test cluster's
// kubelet directory, as the node DaemonSet's two containers would: the
// kubelet's plugin watcher finds the registration socket, calls GetInfo,
// asks the driver's NodeGetInfo and records the driver in the Node's
// CSINode object with the node id. Stopping the registrar (SIGTERM)
// removes its socket and the kubelet drops the driver again.
func TestKubeletRegistersDriver(t *testing.T) {
	requireE2E(t)
	c := testenv.StartCluster(t)
	bin := testenv.GoBuild(t, "./cmd/csi-driver")
	dir := t.TempDir()
	csiSock := filepath.Join(c.KubeletDir, "plugins", csi.DriverName, "csi.sock")
	registry := filepath.Join(c.KubeletDir, "plugins_registry")

	start := time.Now()
	startProc(t, "csi-driver node", bin, "--mode", "node", "--endpoint", "unix://"+csiSock,
		"--nodeid", testenv.ClusterNodeName, "--state-dir", filepath.Join(dir, "state"),
		"--cache-root", filepath.Join(dir, "cache"), "--cachefs-binary", "/bin/true",
		"--kubelet-dir", c.KubeletDir, "--health-interval", "0", "--log-format", "text")
	reg := startProc(t, "csi-driver registrar", bin, "--mode", "registrar", "--endpoint", "unix://"+csiSock,
		"--kubelet-registration-path", csiSock, "--plugin-registration-dir", registry, "--log-format", "text")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	csiNodes := c.Client.StorageV1().CSINodes()
	var nodeID string
	for nodeID == "" {
		n, err := csiNodes.Get(ctx, testenv.ClusterNodeName, metav1.GetOptions{})
		if err == nil {
			for _, d := range n.Spec.Drivers {
				if d.Name == csi.DriverName {
					nodeID = d.NodeID
				}
			}
		}
		if nodeID == "" {
			if ctx.Err() != nil {
				t.Fatalf("CSINode %s never listed %s (last: %+v, %v)", testenv.ClusterNodeName, csi.DriverName, n, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	fmt.Printf("kubelet registered %s in %.1fs (CSINode node id %q)\n", csi.DriverName, time.Since(start).Seconds(), nodeID)
	if nodeID != testenv.ClusterNodeName {
		t.Fatalf("CSINode node id %q, want %q", nodeID, testenv.ClusterNodeName)
	}
	node, err := c.Client.CoreV1().Nodes().Get(ctx, testenv.ClusterNodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ann := node.Annotations["csi.volume.kubernetes.io/nodeid"]; !strings.Contains(ann, `"`+csi.DriverName+`":"`+testenv.ClusterNodeName+`"`) {
		t.Errorf("Node annotation csi.volume.kubernetes.io/nodeid = %q", ann)
	}
	// The kubelet's NotifyRegistrationStatus(true) reached the registrar.
	for !strings.Contains(reg.out.String(), "registered with the kubelet") {
		if ctx.Err() != nil {
			t.Fatalf("registrar never heard of the registration:\n%s", reg.out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}

	if err := reg.stop(t); err != nil {
		t.Fatalf("registrar after SIGTERM: %v", err)
	}
	stopped := time.Now()
	for {
		n, err := csiNodes.Get(ctx, testenv.ClusterNodeName, metav1.GetOptions{})
		listed := false
		if err == nil {
			for _, d := range n.Spec.Drivers {
				listed = listed || d.Name == csi.DriverName
			}
		}
		if err == nil && !listed {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("CSINode still lists %s after the registrar stopped (%v)", csi.DriverName, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	fmt.Printf("registrar stopped: kubelet dropped the driver in %.1fs\n", time.Since(stopped).Seconds())
}
