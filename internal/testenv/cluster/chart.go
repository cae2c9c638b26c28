package cluster

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/epochfs/epochfs/internal/imagebuild"
)

// The namespace and release name the chart (deploy/helm/epochfs) is
// installed as on the test cluster, by the end-to-end tests and by
// `make cluster-up`.
const (
	ChartNamespace = "epochfs-system"
	ChartRelease   = "epochfs"
)

// ChartSetup is what differs between installs of the chart on a test
// cluster; ChartValues turns it into helm flags.
type ChartSetup struct {
	// ImageTag is the tag of the epochfs/epochfs image (`make images`;
	// ImageRef reads it from the archive).
	ImageTag string
	// Registry is where the kubelet pulls the images from, as on any
	// cluster: image.registry, the chart's default pull policy
	// (IfNotPresent). The end-to-end tests push the images to a Registry
	// on 127.0.0.1 (Cluster.StartRegistry). Required unless LocalImages.
	Registry string
	// LocalImages installs with global.localImages instead of Registry:
	// the images imported into containerd (ImportImage), pull policy
	// Never. One end-to-end test and `make cluster-up` (whose cluster
	// outlives any registry in its process) install so.
	LocalImages bool
	// StateDir and CacheRoot are the node plugin's --state-dir and
	// --cache-root: host dirs under the cluster's shared HostDir.
	StateDir, CacheRoot string
	// MetricsPort is the node plugin's /metrics port and
	// RegistrarHealthPort the registrar's health port, both on the node's
	// loopback (node.hostNetwork).
	MetricsPort, RegistrarHealthPort int
}

// ChartValues returns the helm flags (`--set …`) that install the chart on
// this cluster as the end-to-end tests do (docs/CLUSTER.md, "The chart on
// the test cluster"): the images from s.Registry (image.registry, the
// chart's default pull policy) or imported (global.localImages), the tag,
// the cluster's kubelet dir, the state and cache dirs of s, the node
// plugin on the node's network (MinIO and the API server listen on its
// loopback and there is no Service proxy) with the API server's address as
// KUBERNETES_SERVICE_HOST/PORT, and a 2 s health interval. Everything else
// is the chart's default.
func (c *Cluster) ChartValues(s ChartSetup) ([]string, error) {
	hostPort := strings.TrimPrefix(c.Config.Host, "https://")
	i := strings.LastIndexByte(hostPort, ':')
	if i < 0 {
		return nil, fmt.Errorf("cluster: API server address %q has no port", c.Config.Host)
	}
	apiHost, apiPort := hostPort[:i], hostPort[i+1:]
	images := []string{"--set", "global.localImages=true"}
	switch {
	case s.LocalImages && s.Registry != "":
		return nil, fmt.Errorf("cluster: chart setup: Registry %q and LocalImages both set", s.Registry)
	case !s.LocalImages && s.Registry == "":
		return nil, fmt.Errorf("cluster: chart setup: no Registry (Cluster.StartRegistry) and not LocalImages")
	case !s.LocalImages:
		images = []string{"--set-string", "image.registry=" + s.Registry}
	}
	return append(images,
		"--set-string", "image.tag="+s.ImageTag,
		"--set", "kubeletDir="+c.KubeletDir,
		"--set", "stateDir="+s.StateDir, "--set", "cacheRoot="+s.CacheRoot,
		"--set", "metrics.port="+strconv.Itoa(s.MetricsPort),
		"--set", "sidecars.nodeDriverRegistrar.healthPort="+strconv.Itoa(s.RegistrarHealthPort),
		"--set", "healthInterval=2s",
		"--set", "node.hostNetwork=true",
		"--set", "node.extraEnv[0].name=KUBERNETES_SERVICE_HOST", "--set-string", "node.extraEnv[0].value="+apiHost,
		"--set", "node.extraEnv[1].name=KUBERNETES_SERVICE_PORT", "--set-string", "node.extraEnv[1].value="+apiPort,
	), nil
}

// InstallChart runs `helm install` of chartDir (deploy/helm/epochfs) as
// ChartRelease in ChartNamespace with ChartValues(s) and extra flags, and
// returns helm's output.
func (c *Cluster) InstallChart(helm, chartDir string, s ChartSetup, extra ...string) (string, error) {
	values, err := c.ChartValues(s)
	if err != nil {
		return "", err
	}
	args := append([]string{"install", ChartRelease, chartDir,
		"--namespace", ChartNamespace, "--create-namespace"}, values...)
	args = append(args, extra...)
	args = append(args, "--kubeconfig", c.Kubeconfig)
	out, err := exec.Command(helm, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("cluster: helm install: %v\n%s", err, out)
	}
	return string(out), nil
}

// WaitCSIDriver waits until the kubelet lists driver in the node's CSINode
// (the node plugin registered through the kubelet's plugin registration).
func (c *Cluster) WaitCSIDriver(ctx context.Context, driver string) error {
	for {
		n, err := c.Client.StorageV1().CSINodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err == nil {
			for _, d := range n.Spec.Drivers {
				if d.Name == driver {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: %s not registered in CSINode %s: %w (last error: %v)", driver, NodeName, ctx.Err(), err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// ImageRef returns the one image name a Docker-archive tar (`make images`,
// package imagebuild) holds, as containerd imports it: "docker.io/NAME:TAG".
func ImageRef(tarPath string) (string, error) {
	ref, err := imagebuild.ArchiveRef(tarPath)
	if err != nil {
		return "", fmt.Errorf("cluster: %w", err)
	}
	return "docker.io/" + ref, nil
}
