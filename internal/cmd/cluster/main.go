// Command cluster starts, stops and describes the single-node test
// Kubernetes of docs/CLUSTER.md (internal/testenv.UpCluster) for `make
// cluster-up`, `make cluster-down` and `make cluster-status`:
//
//	go run ./internal/cmd/cluster up|down|status [-dir .cluster]
//
// `up` leaves the cluster running (its processes outlive this command) and
// prints the kubeconfig path; `down` stops it and cleans up, also after a
// failed or half-done `up`, and is idempotent.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/epochfs/epochfs/internal/testenv"
)

func main() {
	fs := flag.NewFlagSet("cluster", flag.ExitOnError)
	dir := fs.String("dir", ".cluster", "state directory")
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
		if missing := testenv.ClusterMissing(); len(missing) > 0 {
			fmt.Fprintf(os.Stderr, "cluster up: missing %v (run `make cluster-tools` as root)\n", missing)
			os.Exit(1)
		}
		c, err := testenv.UpCluster(context.Background(), *dir, logf)
		if err != nil {
			fmt.Fprintf(os.Stderr, "cluster up: %v\n(logs in %s/logs)\n", err, *dir)
			os.Exit(1)
		}
		fmt.Printf("cluster up in %.1fs; node %s Ready\n", c.UpTime.Seconds(), testenv.ClusterNodeName)
		fmt.Printf("kubeconfig: %s\n", c.Kubeconfig)
		fmt.Printf("  export KUBECONFIG=%s; kubectl get nodes\n", c.Kubeconfig)
	case "down":
		if err := testenv.ClusterDown(*dir, logf); err != nil {
			fmt.Fprintf(os.Stderr, "cluster down: %v\n", err)
			os.Exit(1)
		}
		fmt.Println("cluster down")
	case "status":
		s, err := testenv.ClusterStatus(*dir)
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
