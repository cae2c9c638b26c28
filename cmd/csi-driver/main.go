// Command csi-driver serves the cachefs.epochfs.io CSI driver: Identity,
// a light Controller (volume ids and contexts, no data), and the Node service
// that runs one `cachefs mount` process per dataset and binds it into pods.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/epochfs/epochfs/internal/logging"
	"github.com/epochfs/epochfs/pkg/csi"
	"github.com/epochfs/epochfs/pkg/units"
)

// version is set at build time: -ldflags "-X main.version=…".
var version = "dev"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "csi-driver:", err)
		os.Exit(1)
	}
}

func run() error {
	f := defineFlags(flag.CommandLine)
	flag.Parse()
	if f.showVersion {
		fmt.Println("csi-driver", version)
		return nil
	}
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	log, err := logging.New(os.Stderr, f.logFormat, f.logLevel)
	if err != nil {
		return err
	}
	cfg, err := f.config()
	if err != nil {
		return err
	}
	cfg.Version, cfg.Logger = version, log
	// A mount must outlive whoever reads its output: with SIGPIPE ignored, a
	// closed stdout/stderr pipe makes writes fail instead of killing the
	// process and leaving a dead mount behind.
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	if cfg.Mode == "registrar" {
		return runRegistrar(ctx, cfg.Endpoint, f.reg, f.metricsAddr, log)
	}
	if cfg.Mode == modeProvisioner {
		return runProvisioner(ctx, cfg, f.prov, f.metricsAddr, log)
	}
	if cfg.Mode == "probe-mounter" {
		return csi.ProbeMounter(ctx, cfg.MounterEndpoint)
	}
	if cfg.Mode == "mounter" {
		sock, ok := strings.CutPrefix(cfg.MounterEndpoint, "unix://")
		if !ok {
			return fmt.Errorf("--mode mounter needs --mounter-endpoint unix:///path/mounter.sock")
		}
		return csi.RunMounter(ctx, csi.MounterConfig{Socket: sock, CachefsBinary: cfg.CachefsBinary, StateDir: cfg.StateDir, Logger: log})
	}
	d, err := csi.New(cfg)
	if err != nil {
		return err
	}
	if f.metricsAddr != "" {
		if err := serveMetrics(ctx, f.metricsAddr, d, cfg.Endpoint); err != nil {
			return err
		}
	}
	return d.Run(ctx)
}

// flags is the command line: the Config's fields that a flag sets as they
// are, and the values that config parses into it.
type flags struct {
	cfg                 csi.Config
	logFormat, logLevel string
	showVersion         bool
	localRoots          string
	networkRules        string
	metricsAddr         string
	reg                 registrarFlags
	prov                provisionerFlags
}

// defineFlags defines the command's flags on fs.
func defineFlags(fs *flag.FlagSet) *flags {
	host, _ := os.Hostname()
	f := &flags{}
	fs.StringVar(&f.cfg.Endpoint, "endpoint", "unix:///csi/csi.sock", "CSI endpoint: unix:///path/csi.sock or tcp://host:port")
	fs.StringVar(&f.cfg.NodeID, "nodeid", host, "this node's id (the Kubernetes node name)")
	fs.StringVar(&f.cfg.Mode, "mode", csi.ModeAll, "services to run: node, controller or all; or mounter (only start mount processes for a node plugin, see --mounter-endpoint); or probe-mounter (exit 0 iff the mounter at --mounter-endpoint is ready: every live dataset mount of the node is its child; for its readiness probe); or registrar (register the driver at --endpoint with the kubelet, see --kubelet-registration-path); or provisioner (create and delete the PersistentVolumes of StorageClasses naming cachefs.epochfs.io, in place of the external-provisioner sidecar; no CSI endpoint; see --leader-election)")
	fs.StringVar(&f.cfg.MounterEndpoint, "mounter-endpoint", "", "unix:///path/mounter.sock: in node mode, ask the mounter there to start mount processes (so they live outside this container); in mounter mode, serve there")
	fs.StringVar(&f.cfg.StateDir, "state-dir", "/var/lib/epochfs/state", "driver state (volumes, dataset mounts, mount logs; credentials on a tmpfs at node/secrets); must survive driver restarts")
	fs.StringVar(&f.cfg.CacheRoot, "cache-root", "/var/lib/epochfs/cache", "parent of the per-dataset NR cache directories")
	fs.StringVar(&f.cfg.CachefsBinary, "cachefs-binary", defaultCachefs(), "the cachefs executable started for each dataset mount")
	// Sizes and budgets are flag values (units.Size, csi.CacheBudget): a bad
	// one is refused at parsing, with the grammar's message.
	f.cfg.DefaultCacheSize, f.cfg.MaxCacheSize, f.cfg.MountLogMaxSize = 10<<30, 1<<40, 10<<20
	f.cfg.CacheRootBudget, f.cfg.MaxNamespaceCacheBytes = csi.DefaultCacheRootBudget, csi.DefaultMaxNamespaceCacheBytes
	fs.Var((*units.Size)(&f.cfg.DefaultCacheSize), "default-cache-size", "cache size (a `SIZE`: 10GiB, 500Gi, 2T) of volumes without a cacheSize parameter")
	fs.Var((*units.Size)(&f.cfg.MaxCacheSize), "max-cache-size", "refuse volumes whose cacheSize is larger than this `SIZE` (OutOfRange)")
	fs.BoolVar(&f.cfg.AllowInlineVolumes, "allow-inline-volumes", false, "accept CSI inline ephemeral volumes (pod-spec csi: volumes); they must then name a network source with the pod's own nodePublishSecretRef")
	fs.DurationVar(&f.cfg.HealthInterval, "health-interval", 30*time.Second, "how often dataset mounts are checked and repaired (0 disables)")
	fs.DurationVar(&f.cfg.MountTimeout, "mount-timeout", time.Minute, "how long a new dataset mount may take to become live")
	fs.BoolVar(&f.cfg.StrictReadOnly, "strict-readonly", false, "refuse single-node writer access modes unless the publish is readOnly (csi-sanity and kubelet's inline volumes use SINGLE_NODE_WRITER)")
	fs.BoolVar(&f.cfg.NodeLabels, "node-labels", false, "record which datasets this node holds cached (annotations cache.epochfs.io/<dataset-id>=<percent> on Lease cache-<node hash> in --namespace, renewed every --health-interval; for the job controller's cache-aware placement; needs leases get/create/update/delete there, no Node access)")
	fs.StringVar(&f.cfg.Kubeconfig, "kubeconfig", "", "kubeconfig for --node-labels and cluster-scope peer discovery (default: the in-cluster config)")
	fs.StringVar(&f.cfg.Namespace, "namespace", os.Getenv("POD_NAMESPACE"), "the driver's namespace, which holds the Leases of --node-labels and of cluster-scope peers (default: $POD_NAMESPACE)")
	fs.StringVar(&f.cfg.KubeletDir, "kubelet-dir", "/var/lib/kubelet", "kubelet's root directory: no volume source may be, lie under or contain it")
	fs.StringVar(&f.localRoots, "allowed-local-roots", "", "comma-separated absolute directories under which local sources (/path, file://) may lie, after resolving symlinks (empty: local sources are refused)")
	fs.StringVar(&f.networkRules, "network-rules", "", "comma-separated source URLs (s3://bucket[/prefix]?endpoint=URL, cephfs://mon/path, nfs://host/export) that network sources must lie within (empty: any network source that brings credentials; an nfs source, which has no credentials of its own, always needs a rule naming its export or --allow-node-credentials)")
	fs.Var(&f.cfg.CacheRootBudget, "cache-root-budget", "how much of the cache root the dataset caches may take, a `SIZE|PERCENT`: a size (500GiB) or a percentage of its filesystem (80%): the cacheSize of every running mount plus what idle caches hold; a volume that does not fit is refused (ResourceExhausted), idle caches are removed oldest first to make room")
	fs.IntVar(&f.cfg.MaxMounts, "max-mounts", csi.DefaultMaxMounts, "most dataset mount processes on this node; a volume that needs one more is refused (ResourceExhausted)")
	fs.Var(&f.cfg.MaxNamespaceCacheBytes, "max-namespace-cache-bytes", "most cache bytes one namespace may hold on this node, a `SIZE|PERCENT`: a size (200GiB) or a percentage of --cache-root-budget (50%): the cacheSize of every dataset mount its volumes use, a shared mount counting whole for each namespace using it; a volume over it is refused (ResourceExhausted). A volume's namespace: its pod's (inline) or its claim's (PersistentVolume attribute csi.storage.k8s.io/pvc/namespace); an admin's PV without one is not limited")
	fs.IntVar(&f.cfg.MaxNamespaceMounts, "max-namespace-mounts", csi.DefaultMaxNamespaceMounts, "most dataset mounts one namespace may hold on this node; a volume that needs one more is refused (ResourceExhausted)")
	fs.Var((*optionalSize)(&f.cfg.MaxInlineCacheSize), "max-inline-cache-size", "refuse inline ephemeral volumes whose cacheSize is larger than this `SIZE` (ResourceExhausted); at most --max-cache-size (empty: "+units.FormatSize(csi.DefaultMaxInlineCacheSize)+", or --max-cache-size if smaller); inline volumes without a cacheSize get the smaller of it and --default-cache-size")
	fs.DurationVar(&f.cfg.CacheRetention, "cache-retention", csi.DefaultCacheRetention, "how long the cache of a dataset no longer staged is kept for its next stage before it is removed (negative: until a new mount needs its room)")
	fs.BoolVar(&f.cfg.AllowNodeCredentials, "allow-node-credentials", false, "let network sources without secrets of their own read with this node's identity (environment, shared files, instance role)")
	fs.BoolVar(&f.cfg.AllowDiskSecrets, "allow-disk-secrets", false, "when no tmpfs can be mounted on <state-dir>/node/secrets (not root), keep volumes' credentials there on disk (0600 files in a 0700 directory) instead of refusing to start")
	fs.StringVar(&f.cfg.PeerListen, "peer-listen", "", "cluster scope (volume attribute cacheScope: cluster): this node's address for peer traffic, a host without port (the pod's status.hostIP); each cluster-scope dataset mount listens on its own port of --peer-port-range there. Empty: cluster-scope volumes are refused (FailedPrecondition)")
	fs.StringVar(&f.cfg.PeerPortRange, "peer-port-range", csi.DefaultPeerPortRange, "cluster scope: LO-HI, the ports handed to cluster-scope dataset mounts, one per dataset on this node")
	fs.StringVar(&f.cfg.PeerTokenFile, "peer-token-file", "", "cluster scope: file holding the token the peers share (from a Kubernetes Secret; at least 16 bytes); required with --peer-listen")
	fs.StringVar(&f.cfg.PeerMetrics, "peer-metrics", "aggregated", "cluster scope: the mounts' peer series summed over the peers (aggregated) or labelled with each peer's id (per-peer: a series per peer per counter on every node, for debugging a small cluster)")
	fs.StringVar(&f.cfg.PeerID, "peer-id", "", "cluster scope: this node's peer id, stable across restarts (default: --nodeid)")
	fs.Var((*units.Size)(&f.cfg.MountLogMaxSize), "mount-log-max-size", "rotate a mount process's log (<state-dir>/node/logs/<key>.log) to <key>.log.1 when larger than this `SIZE`, at each health check (min 64KiB)")
	fs.StringVar(&f.reg.kubeletRegistrationPath, "kubelet-registration-path", "", "registrar mode: the driver's CSI socket as the kubelet sees it on the host (/var/lib/kubelet/plugins/"+csi.DriverName+"/csi.sock)")
	fs.StringVar(&f.reg.pluginRegistrationDir, "plugin-registration-dir", "/registration", "registrar mode: the kubelet's plugin-registration directory (the host's /var/lib/kubelet/plugins_registry) as mounted here")
	fs.StringVar(&f.metricsAddr, "metrics-addr", "", "serve Prometheus metrics and /healthz at HOST:PORT (off when empty); /healthz fails when the CSI endpoint does not answer Probe as ready (registrar mode: when the registration socket is gone)")
	fs.StringVar(&f.logFormat, "log-format", "json", "log format: json or text")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.BoolVar(&f.showVersion, "version", false, "print the version and exit")
	defineProvisionerFlags(fs, &f.prov)
	return f
}

// config parses the flags' lists into the Config and checks the counts
// that must be positive (sizes and budgets are parsed by their flags).
func (f *flags) config() (csi.Config, error) {
	cfg := f.cfg
	if cfg.MaxMounts < 1 {
		return cfg, fmt.Errorf("--max-mounts %d: must be at least 1", cfg.MaxMounts)
	}
	if cfg.MaxNamespaceMounts < 1 {
		return cfg, fmt.Errorf("--max-namespace-mounts %d: must be at least 1", cfg.MaxNamespaceMounts)
	}
	cfg.AllowedLocalRoots, cfg.NetworkRules = splitList(f.localRoots), splitList(f.networkRules)
	return cfg, nil
}

// optionalSize is a units.Size flag value that also takes "" (unset: the
// driver's default), as --max-inline-cache-size documents.
type optionalSize units.Size

func (s *optionalSize) Set(v string) error {
	if strings.TrimSpace(v) == "" {
		*s = 0
		return nil
	}
	return (*units.Size)(s).Set(v)
}
func (s optionalSize) String() string { return units.Size(s).String() }

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// defaultCachefs is cachefs next to this binary, else /usr/local/bin/cachefs
// (where the image installs it).
func defaultCachefs() string {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "cachefs")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "/usr/local/bin/cachefs"
}
