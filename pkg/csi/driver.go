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
	"github.com/epochfs/epochfs/pkg/volattr"
)

// DriverName is the CSI driver name (defined with the volume attributes).
const DriverName = volattr.DriverName

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
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
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
		if err := d.newNode(); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// newNode checks the node mode's part of the Config and prepares the node
// service: its secrets directory and its state, re-adopting the mounts
// recorded there.
func (d *Driver) newNode() error {
	cfg := d.cfg
	if cfg.NodeID == "" {
		return errors.New("csi: --nodeid is required in node mode")
	}
	if err := checkPeerConfig(&d.cfg); err != nil {
		return err
	}
	if cfg.CacheRoot == "" || !filepath.IsAbs(cfg.CacheRoot) {
		return fmt.Errorf("csi: --cache-root %q must be an absolute path", cfg.CacheRoot)
	}
	if cfg.MounterEndpoint == "" { // else the mounter starts cachefs
		if cfg.CachefsBinary == "" {
			return errors.New("csi: --cachefs-binary is required in node mode")
		}
		if _, err := os.Stat(cfg.CachefsBinary); err != nil {
			return fmt.Errorf("csi: --cachefs-binary: %w", err)
		}
	}
	ncfg, err := d.nodeConfig()
	if err != nil {
		return err
	}
	if err := prepareSecretsDir(filepath.Join(ncfg.dir, "secrets"), cfg.AllowDiskSecrets, d.log); err != nil {
		return err
	}
	markCredentialed(ncfg.dir, d.log)
	ns, err := newNodeState(ncfg)
	if err != nil {
		return err
	}
	d.node = ns
	return nil
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
			c, err := KubeClient(d.cfg.Kubeconfig)
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
			portLo: lo, portHi: hi, metrics: d.cfg.PeerMetrics, dir: d.cfg.PeerDirectory}
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
