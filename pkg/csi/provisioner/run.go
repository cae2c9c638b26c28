package provisioner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller/metrics"

	"github.com/epochfs/epochfs/pkg/volattr"
)

// Options of Run. Durations left zero take the library's defaults.
type Options struct {
	// LeaderElection makes one replica provision at a time: it holds the
	// Lease named volattr.DriverName in LeaderElectionNamespace (required
	// then). A replica that loses the Lease exits (the library's choice),
	// and its pod restarts as a standby.
	LeaderElection          bool
	LeaderElectionNamespace string
	// LeaseDuration (default 15s) is how long standbys wait before taking
	// an unrenewed Lease; RenewDeadline (10s) how long the leader retries
	// renewing before it gives up; RetryPeriod (2s) the time between tries.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Registerer, when set, gets the library's provisioning metrics
	// (controller_persistentvolumeclaim_provision_total, ...).
	Registerer prometheus.Registerer
	Logger     *slog.Logger
}

// Defaults of Options, the library's.
const (
	DefaultLeaseDuration = controller.DefaultLeaseDuration
	DefaultRenewDeadline = controller.DefaultRenewDeadline
	DefaultRetryPeriod   = controller.DefaultRetryPeriod
)

// check fills the defaults and checks what client-go's leader election
// would otherwise panic on.
func (o *Options) check() error {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.LeaseDuration == 0 {
		o.LeaseDuration = DefaultLeaseDuration
	}
	if o.RenewDeadline == 0 {
		o.RenewDeadline = DefaultRenewDeadline
	}
	if o.RetryPeriod == 0 {
		o.RetryPeriod = DefaultRetryPeriod
	}
	if !o.LeaderElection {
		return nil
	}
	if o.LeaderElectionNamespace == "" {
		return errors.New("provisioner: --leader-election needs --leader-election-namespace (default: --namespace, $POD_NAMESPACE)")
	}
	if o.RetryPeriod <= 0 || o.RenewDeadline <= o.RetryPeriod || o.LeaseDuration <= o.RenewDeadline {
		return fmt.Errorf("provisioner: leader election wants 0 < retry period (%v) < renew deadline (%v) < lease duration (%v)", o.RetryPeriod, o.RenewDeadline, o.LeaseDuration)
	}
	return nil
}

// Run provisions the claims of StorageClasses naming volattr.DriverName
// until ctx is done. With leader election it waits for the Lease first;
// note that the library then ends the process when ctx is done or the
// Lease is lost (klog.FlushAndExit), as external-provisioner does.
func Run(ctx context.Context, client kubernetes.Interface, p *Provisioner, o Options) error {
	if err := o.check(); err != nil {
		return err
	}
	// The library logs through klog's contextual logger: give it our slog.
	// (Its global logger, which client-go's leader election uses, is the
	// caller's to set, once at start: klog.SetLogger is not safe while
	// other goroutines log.)
	ctx = klog.NewContext(ctx, logr.FromSlogHandler(o.Logger.Handler()))
	m := metrics.New("controller")
	if o.Registerer != nil {
		for _, c := range []prometheus.Collector{
			m.PersistentVolumeClaimProvisionTotal, m.PersistentVolumeClaimProvisionFailedTotal,
			m.PersistentVolumeClaimProvisionDurationSeconds, m.PersistentVolumeDeleteTotal,
			m.PersistentVolumeDeleteFailedTotal, m.PersistentVolumeDeleteDurationSeconds,
		} {
			if err := o.Registerer.Register(c); err != nil {
				return fmt.Errorf("provisioner: metrics: %w", err)
			}
		}
	}
	opts := []func(*controller.ProvisionController) error{
		controller.LeaderElection(o.LeaderElection),
		controller.MetricsInstance(m),
		controller.LeaseDuration(o.LeaseDuration),
		controller.RenewDeadline(o.RenewDeadline),
		controller.RetryPeriod(o.RetryPeriod),
	}
	if o.LeaderElection {
		opts = append(opts, controller.LeaderElectionNamespace(o.LeaderElectionNamespace))
	}
	pc := controller.NewProvisionController(ctx, client, volattr.DriverName, p, opts...)
	o.Logger.Info("provisioning", "provisioner", volattr.DriverName, "leaderElection", o.LeaderElection,
		"leaseNamespace", o.LeaderElectionNamespace, "lease", volattr.DriverName)
	pc.Run(ctx)
	return nil
}
