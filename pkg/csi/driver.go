// Package csi is EpochFS's CSI driver, cachefs.epochfs.io: an Identity
// service, a light Controller service that turns StorageClass parameters into
// volume ids and contexts (it touches no data), and a Node service that
// stages a dataset by starting one `cachefs mount` process per dataset per
// node and bind-mounts it read-only into pods.
//
// Mount processes are not tied to the driver's life: they run in their own
// session, their state is written to the state directory, and a restarted
// driver re-adopts them; a dead one (ENOTCONN) is repaired on the next
// stage/publish and by a periodic health check.
//
// The package drives mounts; it does not serve bytes (that is the cachefs
// mount process: pkg/mount, pkg/fusefs, pkg/cache).
package csi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"

	"k8s.io/client-go/kubernetes"

	"github.com/epochfs/epochfs/pkg/csiprobe"
	"github.com/epochfs/epochfs/pkg/peer/kubepeer"
	"github.com/epochfs/epochfs/pkg/sourcepolicy"
	"github.com/epochfs/epochfs/pkg/units"
	"github.com/epochfs/epochfs/pkg/volattr"
)

// DriverName is the CSI driver name (defined with the volume attributes).
const DriverName = volattr.DriverName

// Modes of Config.Mode.
const (
	ModeNode       = "node"
	ModeController = "controller"
	ModeAll        = "all"
)

// Config of a Driver. Validated by New.
type Config struct {
	// Endpoint: unix:///path/csi.sock (or unix:/path) or tcp://host:port.
	Endpoint string
	// NodeID names this node (required in node and all modes).
	NodeID string
	// Mode: node, controller or all.
	Mode string
	// StateDir holds the driver's state: controller volumes, node volumes
	// and dataset mounts (for re-adoption after a restart), mount logs and
	// 0600 credential files (on a tmpfs the node mounts at node/secrets).
	// Must survive driver restarts on the node.
	StateDir string
	// CacheRoot holds one NR cache directory per dataset mount.
	CacheRoot string
	// CachefsBinary is the cachefs executable started for each mount.
	CachefsBinary string
	// MounterEndpoint, when set (unix:///path/mounter.sock), makes the node
	// service ask a separate mounter process (RunMounter) to start mount
	// processes, so that they live outside the driver's container.
	MounterEndpoint string
	// DefaultCacheSize applies when a volume has no cacheSize parameter.
	DefaultCacheSize int64
	// MaxCacheSize refuses volumes whose cacheSize is larger (default
	// 1TiB); DefaultCacheSize must not exceed it.
	MaxCacheSize int64
	// AllowInlineVolumes accepts CSI inline ephemeral volumes (a pod spec's
	// csi: volume). Off by default: a pod author could otherwise name any
	// source. When on, an inline volume must be a network source with the
	// pod's own nodePublishSecretRef (never a local path, never the node's
	// identity).
	AllowInlineVolumes bool
	// HealthInterval is the period of the dataset-mount health check;
	// 0 disables it.
	HealthInterval time.Duration
	// MountTimeout bounds waiting for a new mount to become live.
	MountTimeout time.Duration
	// NodeLabels makes the node service record which datasets it holds
	// cached (pkg/cachelabel) in a Lease of Namespace, renewed at every
	// health check, using Kubeconfig or, when empty, the in-cluster
	// config. No Node object is written.
	NodeLabels bool
	Kubeconfig string
	// Namespace is the driver's namespace: it holds the Leases of the
	// cache locations (NodeLabels) and of cluster-scope peers. Required
	// with either.
	Namespace string
	// StrictReadOnly refuses single-node writer access modes unless a
	// publish asks for readonly (see checkCapability).
	StrictReadOnly bool
	// KubeletDir is kubelet's root directory (default /var/lib/kubelet).
	// No volume source may be, lie under or contain it.
	KubeletDir string
	// AllowedLocalRoots are the directories under which a local source
	// (/path, file://) may lie, compared after resolving symlinks. Empty:
	// every local source is refused (package sourcepolicy).
	AllowedLocalRoots []string
	// NetworkRules restrict network sources to these source URLs (an s3://
	// bucket and prefix on an endpoint, cephfs://, nfs://). Empty: any.
	NetworkRules []string
	// AllowNodeCredentials lets a network source without secrets of its
	// own read with the node's identity. Off: such volumes are refused.
	AllowNodeCredentials bool
	// CacheRootBudget bounds the sum of the dataset caches under CacheRoot:
	// the cacheSize of every running mount plus what idle caches hold.
	// Zero: DefaultCacheRootBudget.
	CacheRootBudget CacheBudget
	// MaxMounts caps the dataset mount processes on the node (0:
	// DefaultMaxMounts).
	MaxMounts int
	// MaxNamespaceCacheBytes bounds the cacheSize of the dataset mounts one
	// namespace holds on the node: a size, or a percentage of the cache
	// root budget (zero: DefaultMaxNamespaceCacheBytes, half of it).
	// MaxNamespaceMounts caps the dataset mounts one namespace holds (0:
	// DefaultMaxNamespaceMounts). How a volume's namespace is known and how
	// a shared mount counts: nsbudget.go.
	MaxNamespaceCacheBytes CacheBudget
	MaxNamespaceMounts     int
	// MaxInlineCacheSize refuses inline ephemeral volumes whose cacheSize
	// is larger (0: DefaultMaxInlineCacheSize, but never over
	// MaxCacheSize).
	MaxInlineCacheSize int64
	// CacheRetention: the cache of a dataset no longer staged is kept this
	// long for its next stage, then removed (0: DefaultCacheRetention;
	// negative: kept until a new mount needs its room).
	CacheRetention time.Duration
	// AllowDiskSecrets lets the node keep volumes' credentials (for
	// restarts of their mount processes) in a 0700 directory on the state
	// dir's disk when it cannot mount a tmpfs there (not root). Off: the
	// node plugin refuses to start then.
	AllowDiskSecrets bool
	// PeerListen is this node's address (a host, no port) for the peer
	// traffic of cluster-scope dataset mounts (volume attribute cacheScope:
	// cluster); empty: cluster-scope volumes are refused. Each such mount
	// listens on its own port of PeerPortRange (default
	// DefaultPeerPortRange). PeerTokenFile (required with PeerListen) holds
	// the token the peers share, from a Kubernetes Secret; PeerID is this
	// node's peer id (default: NodeID). Peers are discovered through the
	// Kubernetes API (Leases in Namespace, package kubepeer, renewed at
	// every health check: HealthInterval must be on), with Kubeconfig or
	// the in-cluster config; PeerDirectory, when set, replaces that
	// discovery (tests).
	PeerListen    string
	PeerPortRange string
	PeerTokenFile string
	PeerID        string
	PeerDirectory peerDirectory
	// MountLogMaxSize caps each mount process's log (node/logs/<key>.log):
	// the health check copies a larger one to <key>.log.1 and truncates
	// it. Default 10MiB.
	MountLogMaxSize int64
	// MountMaxDirEntries is the --max-dir-entries of every mount the node
	// starts; 0 leaves the mount's default. Not a driver flag (the default
	// is the documented cap); tests set it to pass the cap with a small
	// directory.
	MountMaxDirEntries int
	Version            string
	Logger             *slog.Logger
}

// Defaults of Config's node-wide bounds.
const (
	DefaultMaxMounts      = 64
	DefaultCacheRetention = 72 * time.Hour
)

// DefaultCacheRootBudget is 80% of the cache root's filesystem.
var DefaultCacheRootBudget = CacheBudget{Percent: 80}

// Driver implements the CSI services.
type Driver struct {
	csipb.UnimplementedIdentityServer
	csipb.UnimplementedControllerServer
	csipb.UnimplementedNodeServer

	cfg    Config
	log    *slog.Logger
	policy *sourcepolicy.Checker // immutable
	// kubeletReal is KubeletDir with symlinks resolved (as cleaned when it
	// does not exist). Immutable.
	kubeletReal string
	ready       atomic.Bool

	controller *controllerState // nil in node mode
	node       *nodeState       // nil in controller mode
}

// New validates cfg and prepares the driver; in node mode it re-adopts the
// mounts recorded in the state directory.
func New(cfg Config) (*Driver, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Mode == "" {
		cfg.Mode = ModeAll
	}
	if cfg.DefaultCacheSize == 0 {
		cfg.DefaultCacheSize = 10 << 30
	}
	if cfg.MaxCacheSize == 0 {
		cfg.MaxCacheSize = 1 << 40
	}
	if cfg.DefaultCacheSize > cfg.MaxCacheSize {
		return nil, fmt.Errorf("csi: --default-cache-size %s is over --max-cache-size %s", units.FormatSize(cfg.DefaultCacheSize), units.FormatSize(cfg.MaxCacheSize))
	}
	if cfg.MountTimeout == 0 {
		cfg.MountTimeout = 60 * time.Second
	}
	if cfg.CacheRootBudget == (CacheBudget{}) {
		cfg.CacheRootBudget = DefaultCacheRootBudget
	}
	if cfg.MaxMounts == 0 {
		cfg.MaxMounts = DefaultMaxMounts
	}
	if cfg.MaxMounts < 0 {
		return nil, fmt.Errorf("csi: --max-mounts %d must be positive", cfg.MaxMounts)
	}
	if cfg.MaxNamespaceCacheBytes == (CacheBudget{}) {
		cfg.MaxNamespaceCacheBytes = DefaultMaxNamespaceCacheBytes
	}
	if cfg.MaxNamespaceMounts == 0 {
		cfg.MaxNamespaceMounts = DefaultMaxNamespaceMounts
	}
	if cfg.MaxNamespaceMounts < 0 {
		return nil, fmt.Errorf("csi: --max-namespace-mounts %d must be positive", cfg.MaxNamespaceMounts)
	}
	if cfg.MaxInlineCacheSize == 0 {
		cfg.MaxInlineCacheSize = min(DefaultMaxInlineCacheSize, cfg.MaxCacheSize)
	}
	if cfg.MaxInlineCacheSize < 0 || cfg.MaxInlineCacheSize > cfg.MaxCacheSize {
		return nil, fmt.Errorf("csi: --max-inline-cache-size %s must be more than 0 and at most --max-cache-size %s", units.FormatSize(cfg.MaxInlineCacheSize), units.FormatSize(cfg.MaxCacheSize))
	}
	if cfg.CacheRetention == 0 {
		cfg.CacheRetention = DefaultCacheRetention
	}
	if cfg.MountLogMaxSize == 0 {
		cfg.MountLogMaxSize = 10 << 20
	}
	if cfg.MountLogMaxSize < minMountLogMaxSize {
		return nil, fmt.Errorf("csi: --mount-log-max-size %s is under the minimum %s", units.FormatSize(cfg.MountLogMaxSize), units.FormatSize(minMountLogMaxSize))
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	if cfg.KubeletDir == "" {
		cfg.KubeletDir = "/var/lib/kubelet"
	}
	switch cfg.Mode {
	case ModeNode, ModeController, ModeAll:
	default:
		return nil, fmt.Errorf("csi: --mode %q: want node, controller or all", cfg.Mode)
	}
	if cfg.Endpoint == "" {
		return nil, errors.New("csi: --endpoint is required")
	}
	if cfg.StateDir == "" || !filepath.IsAbs(cfg.StateDir) {
		return nil, fmt.Errorf("csi: --state-dir %q must be an absolute path", cfg.StateDir)
	}
	if !filepath.IsAbs(cfg.KubeletDir) {
		return nil, fmt.Errorf("csi: --kubelet-dir %q must be an absolute path", cfg.KubeletDir)
	}
	forbidden := []string{cfg.StateDir, cfg.KubeletDir}
	if cfg.CacheRoot != "" {
		forbidden = append(forbidden, cfg.CacheRoot)
	}
	policy, err := sourcepolicy.New(sourcepolicy.Policy{
		AllowedLocalRoots:    cfg.AllowedLocalRoots,
		Forbidden:            forbidden,
		Network:              cfg.NetworkRules,
		AllowNodeCredentials: cfg.AllowNodeCredentials,
	})
	if err != nil {
		return nil, fmt.Errorf("csi: source policy: %w", err)
	}
	cfg.KubeletDir = filepath.Clean(cfg.KubeletDir)
	d := &Driver{cfg: cfg, log: cfg.Logger, policy: policy, kubeletReal: cfg.KubeletDir}
	if r, err := filepath.EvalSymlinks(cfg.KubeletDir); err == nil {
		d.kubeletReal = r
	}
	if cfg.Mode != ModeNode {
		cs, err := newControllerState(filepath.Join(cfg.StateDir, "controller"))
		if err != nil {
			return nil, err
		}
		d.controller = cs
	}
	if cfg.Mode != ModeController {
		if cfg.NodeID == "" {
			return nil, errors.New("csi: --nodeid is required in node mode")
		}
		if err := checkPeerConfig(&d.cfg); err != nil {
			return nil, err
		}
		if cfg.CacheRoot == "" || !filepath.IsAbs(cfg.CacheRoot) {
			return nil, fmt.Errorf("csi: --cache-root %q must be an absolute path", cfg.CacheRoot)
		}
		if cfg.MounterEndpoint == "" { // else the mounter starts cachefs
			if cfg.CachefsBinary == "" {
				return nil, errors.New("csi: --cachefs-binary is required in node mode")
			}
			if _, err := os.Stat(cfg.CachefsBinary); err != nil {
				return nil, fmt.Errorf("csi: --cachefs-binary: %w", err)
			}
		}
		ncfg, err := d.nodeConfig()
		if err != nil {
			return nil, err
		}
		if err := prepareSecretsDir(filepath.Join(ncfg.dir, "secrets"), cfg.AllowDiskSecrets, d.log); err != nil {
			return nil, err
		}
		markCredentialed(ncfg.dir, d.log)
		ns, err := newNodeState(ncfg)
		if err != nil {
			return nil, err
		}
		d.node = ns
	}
	return d, nil
}

// nodeConfig takes the node state's dependencies from the driver's Config:
// its launcher (local, or the mounter's) and, with NodeLabels, its labeler.
func (d *Driver) nodeConfig() (nodeConfig, error) {
	cfg := nodeConfig{
		dir:             filepath.Join(d.cfg.StateDir, "node"),
		cacheRoot:       d.cfg.CacheRoot,
		launcher:        localLauncher{binary: d.cfg.CachefsBinary},
		mountTimeout:    d.cfg.MountTimeout,
		budget:          d.cfg.CacheRootBudget,
		maxMounts:       d.cfg.MaxMounts,
		nsBytes:         d.cfg.MaxNamespaceCacheBytes,
		nsMounts:        d.cfg.MaxNamespaceMounts,
		retention:       max(d.cfg.CacheRetention, 0),
		mountLogMaxSize: d.cfg.MountLogMaxSize,
		maxDirEntries:   d.cfg.MountMaxDirEntries,
		log:             d.log,
	}
	// One kube client for the node's Leases and events, when it talks to
	// the API server at all (--node-labels, or cluster scope without an
	// injected directory).
	var client kubernetes.Interface
	kube := func() (kubernetes.Interface, error) {
		if client == nil {
			c, err := kubeClient(d.cfg.Kubeconfig)
			if err != nil {
				return nil, err
			}
			client = c
		}
		return client, nil
	}
	// The rules were checked by sourcepolicy.New.
	cfg.egressRules = d.cfg.NetworkRules
	if d.cfg.MounterEndpoint != "" {
		ml, err := newMounterLauncher(d.cfg.MounterEndpoint)
		if err != nil {
			return nodeConfig{}, err
		}
		cfg.launcher = ml
	}
	if d.cfg.NodeLabels {
		if d.cfg.Namespace == "" {
			return nodeConfig{}, errors.New("csi: --node-labels needs --namespace (the driver's namespace, which holds the cache-location Lease; default $POD_NAMESPACE)")
		}
		client, err := kube()
		if err != nil {
			return nodeConfig{}, err
		}
		cfg.labeler = &nodeLabeler{client: client, node: d.cfg.NodeID, namespace: d.cfg.Namespace,
			duration: leaseDuration(d.cfg.HealthInterval)}
	}
	if d.cfg.PeerListen != "" {
		lo, hi, _ := ParsePortRange(d.cfg.PeerPortRange) // checked by New
		pc := &peerConfig{host: d.cfg.PeerListen, id: d.cfg.PeerID, tokenFile: d.cfg.PeerTokenFile,
			portLo: lo, portHi: hi, dir: d.cfg.PeerDirectory}
		if pc.dir == nil {
			client, err := kube()
			if err != nil {
				return nodeConfig{}, err
			}
			dir, err := kubepeer.Start(context.Background(), client, kubepeer.Options{Namespace: d.cfg.Namespace,
				Node: d.cfg.NodeID, LeaseDuration: leaseDuration(d.cfg.HealthInterval)})
			if err != nil {
				return nodeConfig{}, fmt.Errorf("csi: cluster scope: %w", err)
			}
			pc.dir = dir
		}
		cfg.peer = pc
	}
	if client != nil {
		cfg.events = newListingEvents(client, d.cfg.NodeID, d.cfg.HealthInterval)
	}
	return cfg, nil
}

// leaseDuration is how long the node plugin's Leases (peers, cache
// locations) live unless renewed: three health intervals, at least 30s, so
// that one slow round does not drop them.
func leaseDuration(health time.Duration) time.Duration { return max(3*health, 30*time.Second) }

// Run serves CSI on the endpoint until ctx is done, then stops gracefully.
// Mount processes keep running: they outlive the driver by design.
func (d *Driver) Run(ctx context.Context) error {
	ln, err := listen(d.cfg.Endpoint)
	if err != nil {
		return err
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(d.logRequests))
	csipb.RegisterIdentityServer(srv, d)
	if d.controller != nil {
		csipb.RegisterControllerServer(srv, d)
	}
	if d.node != nil {
		csipb.RegisterNodeServer(srv, d)
		d.node.run(ctx, d.cfg.HealthInterval)
	}
	d.ready.Store(true)
	d.log.Info("serving CSI", "driver", DriverName, "version", d.cfg.Version, "mode", d.cfg.Mode, "endpoint", d.cfg.Endpoint, "node", d.cfg.NodeID)

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("csi: serve: %w", err)
	case <-ctx.Done():
	}
	d.ready.Store(false)
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		srv.Stop()
	}
	if d.node != nil && d.node.cfg.events != nil {
		d.node.cfg.events.broadcaster.Shutdown()
	}
	d.log.Info("stopped; mount processes keep running", "endpoint", d.cfg.Endpoint)
	return nil
}

// listen opens a unix or tcp endpoint, replacing a stale unix socket.
func listen(endpoint string) (net.Listener, error) {
	network, address, err := csiprobe.ParseEndpoint(endpoint)
	if err != nil {
		return nil, fmt.Errorf("csi: --%w", err)
	}
	if network == "unix" {
		if err := os.MkdirAll(filepath.Dir(address), 0o750); err != nil {
			return nil, fmt.Errorf("csi: endpoint: %w", err)
		}
		if err := os.Remove(address); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("csi: remove stale socket: %w", err)
		}
	}
	ln, err := net.Listen(network, address)
	if err != nil {
		return nil, fmt.Errorf("csi: listen: %w", err)
	}
	return ln, nil
}
