// Command job-controller runs the TrainingJob controller (pkg/job/controller)
// in a cluster: it turns TrainingJobs into Indexed Jobs, a headless Service, a
// gang PodGroup and EpochFS dataset volumes, and reports their status.
//
// Mains are thin: flags become a Config, the package validates it and runs.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/epochfs/epochfs/pkg/job/api/v1alpha1"
	"github.com/epochfs/epochfs/pkg/job/controller"
	"github.com/epochfs/epochfs/pkg/metrics"
	"github.com/epochfs/epochfs/pkg/sourcepolicy"
)

var version = "dev"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "job-controller:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		metricsAddr   = flag.String("metrics-addr", ":8080", "Prometheus /metrics address; 0 turns it off")
		probeAddr     = flag.String("health-addr", ":8081", "/healthz and /readyz address")
		leaderElect   = flag.Bool("leader-elect", true, "elect a leader so that only one replica reconciles")
		leaderNS      = flag.String("leader-election-namespace", "", "namespace of the leader-election Lease (default: the pod's namespace)")
		volcano       = flag.String("volcano-scheduler", "volcano", "schedulerName of Volcano's scheduler")
		schedPlugins  = flag.String("scheduler-plugins-scheduler", "scheduler-plugins-scheduler", "schedulerName of the scheduler-plugins scheduler")
		capacityRetry = flag.Duration("capacity-retry", 30*time.Second, "how often a job waiting for capacity is checked again")
		skipCapacity  = flag.Bool("skip-capacity-check", false, "create jobs without checking that the cluster can fit them")
		localRoots    = flag.String("allowed-local-roots", "", "comma-separated absolute directories under which a dataset source may be a local path, as on the CSI node plugin (default: none, local sources are refused)")
		networkRules  = flag.String("network-rules", "", "comma-separated network source URLs (s3://bucket[/prefix][?endpoint=URL], cephfs://host/path, nfs://host/export) that network sources must lie within, as on the CSI node plugin (default: any network source)")
		cacheNS       = flag.String("cache-location-namespace", os.Getenv("POD_NAMESPACE"), "namespace of the CSI node plugins' cache-location Leases (the driver's; default: $POD_NAMESPACE): pods prefer nodes that cache their datasets; empty: no cache-aware placement")
		printVersion  = flag.Bool("version", false, "print the version and exit")
	)
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	if *printVersion {
		fmt.Println("job-controller", version)
		return nil
	}
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))

	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), v1alpha1.AddToScheme(scheme)); err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	// The manager serves controller-runtime's global registry on --metrics-addr.
	ctrlmetrics.Registry.MustRegister(metrics.BuildInfo("job-controller", version))
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: *metricsAddr},
		HealthProbeBindAddress:  *probeAddr,
		LeaderElection:          *leaderElect,
		LeaderElectionID:        "job-controller.jobs.epochfs.io",
		LeaderElectionNamespace: *leaderNS,
		Cache:                   controller.CacheOptions(),
	})
	if err != nil {
		return fmt.Errorf("manager: %w", err)
	}
	r, err := controller.New(controller.Config{
		Client:            mgr.GetClient(),
		APIReader:         mgr.GetAPIReader(),
		Scheme:            scheme,
		Recorder:          mgr.GetEventRecorder("job-controller"),
		Schedulers:        controller.Schedulers{Volcano: *volcano, SchedulerPlugins: *schedPlugins},
		CapacityRetry:     *capacityRetry,
		SkipCapacityCheck: *skipCapacity,
		SourcePolicy:      sourcepolicy.Policy{AllowedLocalRoots: splitList(*localRoots), Network: splitList(*networkRules)},

		CacheLocationNamespace: *cacheNS,
	})
	if err != nil {
		return err
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return err
	}
	if err := errors.Join(mgr.AddHealthzCheck("ping", healthz.Ping), mgr.AddReadyzCheck("ping", healthz.Ping)); err != nil {
		return err
	}
	return mgr.Start(ctrl.SetupSignalHandler())
}

// splitList splits a comma-separated flag, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
