package main

import (
	"context"
	"flag"
	"log/slog"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/klog/v2"

	"github.com/epochfs/epochfs/pkg/csi"
	"github.com/epochfs/epochfs/pkg/csi/provisioner"
	"github.com/epochfs/epochfs/pkg/metrics"
)

// modeProvisioner is --mode provisioner: dynamic provisioning in process
// (pkg/csi/provisioner), the upstream external-provisioner's job.
const modeProvisioner = "provisioner"

// provisionerFlags are the flags of --mode provisioner.
type provisionerFlags struct {
	leaderElection                            bool
	leaseNamespace                            string
	leaseDuration, renewDeadline, retryPeriod time.Duration
}

func defineProvisionerFlags(fs *flag.FlagSet, f *provisionerFlags) {
	fs.BoolVar(&f.leaderElection, "leader-election", true, "provisioner mode: only the replica holding Lease "+csi.DriverName+" in --leader-election-namespace provisions (the others wait as standbys; one that loses the Lease exits)")
	fs.StringVar(&f.leaseNamespace, "leader-election-namespace", "", "provisioner mode: namespace of the leader-election Lease (default: --namespace)")
	fs.DurationVar(&f.leaseDuration, "leader-election-lease-duration", provisioner.DefaultLeaseDuration, "provisioner mode: how long standbys wait before taking an unrenewed Lease")
	fs.DurationVar(&f.renewDeadline, "leader-election-renew-deadline", provisioner.DefaultRenewDeadline, "provisioner mode: how long the leader tries to renew the Lease before giving it up")
	fs.DurationVar(&f.retryPeriod, "leader-election-retry-period", provisioner.DefaultRetryPeriod, "provisioner mode: time between tries to take or renew the Lease")
}

// runProvisioner serves --mode provisioner: the driver's controller service
// in process (no CSI socket), the provisioning loop, and with metricsAddr
// its metrics and a /healthz that answers while the process runs.
func runProvisioner(ctx context.Context, cfg csi.Config, f provisionerFlags, metricsAddr string, log *slog.Logger) error {
	// client-go and the provisioning library log through klog: ours too,
	// set before any of them starts.
	klog.SetLogger(logr.FromSlogHandler(log.Handler()))
	cfg.Mode = csi.ModeController
	d, err := csi.New(cfg)
	if err != nil {
		return err
	}
	client, err := csi.KubeClient(cfg.Kubeconfig)
	if err != nil {
		return err
	}
	ns := f.leaseNamespace
	if ns == "" {
		ns = cfg.Namespace
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		metrics.BuildInfo("csi-driver", version))
	opts := provisioner.Options{LeaderElection: f.leaderElection, LeaderElectionNamespace: ns,
		LeaseDuration: f.leaseDuration, RenewDeadline: f.renewDeadline, RetryPeriod: f.retryPeriod,
		Registerer: reg, Logger: log}
	if metricsAddr != "" {
		// The library ends the process when it loses the Lease, so a live
		// process is a healthy one.
		if _, err := metrics.ServeHealth(ctx, metricsAddr, reg, func(context.Context) error { return nil }); err != nil {
			return err
		}
	}
	return provisioner.Run(ctx, client, provisioner.New(d, client), opts)
}
