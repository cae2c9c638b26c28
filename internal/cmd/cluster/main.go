// Command cluster starts, stops and describes the single-node test
// Kubernetes of docs/CLUSTER.md (internal/cluster.Up) for `make
// cluster-up`, `make cluster-down` and `make cluster-status`:
//
//	go run ./internal/cmd/cluster up|down|status [-dir .cluster] [-images bin/images] [-chart DIR|-chart '']
//
// `up` leaves the cluster running (its processes outlive this command),
// imports the project's images (`make images`) and installs the chart
// with the values the end-to-end tests use (cluster.Cluster.InstallChart),
// waits for the node plugin to register with the kubelet, and prints the
// kubeconfig path; `down` stops it and cleans up (every pod, process and
// mount under the state dir, the chart's dataset mounts included), also
// after a failed or half-done `up`, and is idempotent.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/internal/testenv/cluster"
	"github.com/epochfs/epochfs/pkg/csi"
)

func main() {
	fs := flag.NewFlagSet("cluster", flag.ExitOnError)
	dir := fs.String("dir", ".cluster", "state directory")
	images := fs.String("images", "bin/images", "directory of epochfs.tar and test-reader.tar (`make images`) to import; empty: none")
	chart := fs.String("chart", "deploy/helm/epochfs", "chart to install with the e2e's values (needs -images); empty: none")
	fs.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: cluster up|down|status [-dir DIR]")
		fs.PrintDefaults()
	}
	if len(os.Args) < 2 {
		fs.Usage()
		os.Exit(2)
	}
	cmd := os.Args[1]
	_ = fs.Parse(os.Args[2:])
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	switch cmd {
	case "up":
		if missing := cluster.Missing(); len(missing) > 0 {
			fmt.Fprintf(os.Stderr, "cluster up: missing %v (run `make cluster-tools` as root)\n", missing)
			os.Exit(1)
		}
		c, err := cluster.Up(context.Background(), *dir, logf)
		if err != nil {
			fmt.Fprintf(os.Stderr, "cluster up: %v\n(logs in %s/logs)\n", err, *dir)
			os.Exit(1)
		}
		fmt.Printf("cluster up in %.1fs; node %s Ready\n", c.UpTime.Seconds(), cluster.NodeName)
		if *images != "" {
			if err := install(c, *images, *chart); err != nil {
				fmt.Fprintf(os.Stderr, "cluster up: %v\n(the cluster runs; logs in %s/logs; `make cluster-down` stops it)\n", err, *dir)
				os.Exit(1)
			}
		}
		fmt.Printf("kubeconfig: %s\n", c.Kubeconfig)
		fmt.Printf("  export KUBECONFIG=%s; kubectl get nodes\n", c.Kubeconfig)
	case "down":
		if err := cluster.Down(*dir, logf); err != nil {
			fmt.Fprintf(os.Stderr, "cluster down: %v\n", err)
			os.Exit(1)
		}
		fmt.Println("cluster down")
	case "status":
		s, err := cluster.Status(*dir)
		fmt.Print(s)
		if err != nil {
			fmt.Fprintf(os.Stderr, "cluster status: %v\n", err)
			os.Exit(1)
		}
	default:
		fs.Usage()
		os.Exit(2)
	}
}

// install imports the images of imagesDir into the cluster and, unless
// chartDir is empty, installs the chart as the end-to-end tests do: the
// node plugin's state and caches under the cluster's shared host dir
// (Dir/host/state, Dir/host/cache, unmounted by `down`). It returns once
// the kubelet lists the driver in CSINode.
func install(c *cluster.Cluster, imagesDir, chartDir string) error {
	start := time.Now()
	refs := map[string]string{}
	for _, name := range []string{"epochfs", "test-reader"} {
		tar := filepath.Join(imagesDir, name+".tar")
		ref, err := cluster.ImageRef(tar)
		if err != nil {
			return fmt.Errorf("%w (run `make images`)", err)
		}
		if err := c.ImportImage(tar); err != nil {
			return err
		}
		refs[name] = ref
		fmt.Printf("imported %s\n", ref)
	}
	if chartDir == "" {
		return nil
	}
	helm, err := testenv.FindTool("helm")
	if err != nil {
		return fmt.Errorf("%w (run `make tools`)", err)
	}
	ports, err := testenv.FreePorts(2)
	if err != nil {
		return err
	}
	ref := refs["epochfs"]
	// Imported, not from a registry: the cluster outlives this command and
	// any registry it would serve (the end-to-end tests pull from one).
	setup := cluster.ChartSetup{
		ImageTag: ref[strings.LastIndexByte(ref, ':')+1:], LocalImages: true,
		StateDir: filepath.Join(c.HostDir, "state"), CacheRoot: filepath.Join(c.HostDir, "cache"),
		MetricsPort: ports[0], RegistrarHealthPort: ports[1],
	}
	if _, err := c.InstallChart(helm, chartDir, setup, "--wait", "--timeout", "3m"); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.WaitCSIDriver(ctx, csi.DriverName); err != nil {
		return err
	}
	fmt.Printf("chart %s installed as %s in namespace %s in %.1fs: node plugin Ready, %s registered with the kubelet\n",
		chartDir, cluster.ChartRelease, cluster.ChartNamespace, time.Since(start).Seconds(), csi.DriverName)
	fmt.Printf("  node plugin /metrics: http://127.0.0.1:%d/metrics; state %s, caches %s\n", setup.MetricsPort, setup.StateDir, setup.CacheRoot)
	fmt.Printf("  test-reader image for pods: %s (imagePullPolicy: Never)\n", refs["test-reader"])
	return nil
}
