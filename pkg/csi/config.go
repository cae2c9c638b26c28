package csi

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/epochfs/epochfs/pkg/units"
)

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
	// PeerMetrics is the cluster-scope mounts' --peer-metrics: "" or
	// "aggregated" (the default: peer series summed over the peers),
	// "per-peer" (labelled by peer id: N series per counter per mount).
	PeerMetrics string
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

// setDefaults fills the fields of cfg left zero that have a default.
func (cfg *Config) setDefaults() {
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
	if cfg.MountTimeout == 0 {
		cfg.MountTimeout = 60 * time.Second
	}
	if cfg.CacheRootBudget == (CacheBudget{}) {
		cfg.CacheRootBudget = DefaultCacheRootBudget
	}
	if cfg.MaxMounts == 0 {
		cfg.MaxMounts = DefaultMaxMounts
	}
	if cfg.MaxNamespaceCacheBytes == (CacheBudget{}) {
		cfg.MaxNamespaceCacheBytes = DefaultMaxNamespaceCacheBytes
	}
	if cfg.MaxNamespaceMounts == 0 {
		cfg.MaxNamespaceMounts = DefaultMaxNamespaceMounts
	}
	if cfg.MaxInlineCacheSize == 0 {
		cfg.MaxInlineCacheSize = min(DefaultMaxInlineCacheSize, cfg.MaxCacheSize)
	}
	if cfg.CacheRetention == 0 {
		cfg.CacheRetention = DefaultCacheRetention
	}
	if cfg.MountLogMaxSize == 0 {
		cfg.MountLogMaxSize = 10 << 20
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	if cfg.KubeletDir == "" {
		cfg.KubeletDir = "/var/lib/kubelet"
	}
}

// validate checks the fields of a defaulted cfg that every mode uses (the
// node mode's own: Driver.newNode).
func (cfg *Config) validate() error {
	if cfg.DefaultCacheSize > cfg.MaxCacheSize {
		return fmt.Errorf("csi: --default-cache-size %s is over --max-cache-size %s", units.FormatSize(cfg.DefaultCacheSize), units.FormatSize(cfg.MaxCacheSize))
	}
	if cfg.MaxMounts < 0 {
		return fmt.Errorf("csi: --max-mounts %d must be positive", cfg.MaxMounts)
	}
	if cfg.MaxNamespaceMounts < 0 {
		return fmt.Errorf("csi: --max-namespace-mounts %d must be positive", cfg.MaxNamespaceMounts)
	}
	if cfg.MaxInlineCacheSize < 0 || cfg.MaxInlineCacheSize > cfg.MaxCacheSize {
		return fmt.Errorf("csi: --max-inline-cache-size %s must be more than 0 and at most --max-cache-size %s", units.FormatSize(cfg.MaxInlineCacheSize), units.FormatSize(cfg.MaxCacheSize))
	}
	if cfg.MountLogMaxSize < minMountLogMaxSize {
		return fmt.Errorf("csi: --mount-log-max-size %s is under the minimum %s", units.FormatSize(cfg.MountLogMaxSize), units.FormatSize(minMountLogMaxSize))
	}
	switch cfg.Mode {
	case ModeNode, ModeController, ModeAll:
	default:
		return fmt.Errorf("csi: --mode %q: want node, controller or all", cfg.Mode)
	}
	if cfg.Endpoint == "" {
		return errors.New("csi: --endpoint is required")
	}
	if cfg.StateDir == "" || !filepath.IsAbs(cfg.StateDir) {
		return fmt.Errorf("csi: --state-dir %q must be an absolute path", cfg.StateDir)
	}
	if !filepath.IsAbs(cfg.KubeletDir) {
		return fmt.Errorf("csi: --kubelet-dir %q must be an absolute path", cfg.KubeletDir)
	}
	return nil
}
