package csi

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	utilnet "k8s.io/apimachinery/pkg/util/net"

	"github.com/epochfs/epochfs/pkg/mount/mountapi"
	"github.com/epochfs/epochfs/pkg/peer"
	"github.com/epochfs/epochfs/pkg/volattr"
)

// Cluster scope (volume attribute cacheScope: cluster; pkg/peer).
//
// Each cluster-scope dataset mount on a node gets its own peer port, the
// lowest free one of the node plugin's --peer-port-range, recorded with
// the dataset (so a repaired or re-adopted mount keeps it), and listens on
// --peer-listen (the node's address) at that port. The node plugin
// advertises HOST:PORT under the dataset's peer group as a Lease in its
// namespace (package kubepeer), renews it at every health check, deletes
// it at the last unstage and, at start and at every health check, deletes
// its Leases of groups it no longer mounts (Retain); it writes the group's
// current peers, from the Leases it watches, into a peers file per dataset
// that the mount reloads (`cachefs mount --peers-file`): the mount process
// needs no Kubernetes credentials, and no extra process runs per dataset.
//
// The peer group is an HMAC, under the shared peer token, of the source,
// the manifest and the volume's credentials: nodes join one group only for
// the same data read with the same credentials, and without the token the
// group names tell nothing of either.

// peerDirectory is the discovery of peer groups (kubepeer.Directory; a
// fake in tests).
type peerDirectory interface {
	Advertise(ctx context.Context, group string, p peer.Peer) error
	Withdraw(ctx context.Context, group string) error
	// Retain removes this node's entries of every group not in groups
	// and returns how many it removed.
	Retain(ctx context.Context, groups []string) (int, error)
	Peers(group string) []peer.Peer
	OnChange(func())
}

// peerConfig is the node plugin's cluster-scope setup (nodeConfig.peer);
// nil: cluster-scope volumes are refused.
type peerConfig struct {
	host           string // --peer-listen: the node's address for peer traffic
	id             string // --peer-id (default: the node name)
	tokenFile      string // --peer-token-file
	portLo, portHi int    // --peer-port-range
	metrics        string // --peer-metrics, passed to every cluster-scope mount
	dir            peerDirectory
}

// DefaultPeerPortRange is --peer-port-range's default.
const DefaultPeerPortRange = "7400-7463"

// ParsePortRange parses a port range, LO-HI (also PORT or LO+N), with
// k8s.io/apimachinery's ParsePortRange, and refuses what that accepts but a
// listener cannot use: an empty range and port 0.
func ParsePortRange(s string) (lo, hi int, err error) {
	pr, err := utilnet.ParsePortRange(s)
	switch {
	case err != nil:
	case pr.Size == 0:
		err = errors.New("empty")
	case pr.Base < 1:
		err = errors.New("port 0 is not a port")
	default:
		return pr.Base, pr.Base + pr.Size - 1, nil
	}
	return 0, 0, fmt.Errorf("csi: --peer-port-range %q: %v (want LO-HI, ports from 1 to 65535)", s, err)
}

// checkPeerConfig validates the peer settings of Config (New).
func checkPeerConfig(c *Config) error {
	if _, err := peer.ParseMetricsMode(c.PeerMetrics); err != nil {
		return fmt.Errorf("csi: --peer-metrics: %w", err)
	}
	if c.PeerListen == "" {
		return nil
	}
	if strings.Contains(c.PeerListen, ":") && net.ParseIP(c.PeerListen) == nil {
		return fmt.Errorf("csi: --peer-listen %q: want the node's address (a host, no port: ports come from --peer-port-range)", c.PeerListen)
	}
	if c.PeerDirectory == nil && c.Namespace == "" {
		return fmt.Errorf("csi: --peer-listen needs --namespace (the driver's namespace, which holds the peer Leases; default $POD_NAMESPACE)")
	}
	if c.PeerDirectory == nil && c.HealthInterval <= 0 {
		return fmt.Errorf("csi: --peer-listen needs --health-interval above 0: the health check renews the peer Leases")
	}
	if c.PeerTokenFile == "" {
		return fmt.Errorf("csi: --peer-listen needs --peer-token-file (the shared peer token, from a Kubernetes Secret)")
	}
	if c.PeerID == "" {
		c.PeerID = c.NodeID
	}
	if err := peer.ValidID(c.PeerID); err != nil {
		return fmt.Errorf("csi: --peer-id (default: --nodeid): %w", err)
	}
	if c.PeerPortRange == "" {
		c.PeerPortRange = DefaultPeerPortRange
	}
	if _, _, err := ParsePortRange(c.PeerPortRange); err != nil {
		return err
	}
	return nil
}

// checkScope refuses a cluster-scope volume on a node without peer
// settings.
func (n *nodeState) checkScope(p volumeParams) error {
	if p.Cluster() && n.cfg.peer == nil {
		return status.Errorf(codes.FailedPrecondition, "parameter %q: %q needs this node plugin's peer settings, and its --peer-listen is empty (the admin enables cluster scope: chart value node.clusterCache.enabled)",
			volattr.CacheScope, volattr.CacheScopeCluster)
	}
	return nil
}

// peerGroup is the discovery group of a cluster-scope dataset (see above).
func peerGroup(token []byte, p volumeParams, secrets map[string]string) string {
	m := hmac.New(sha256.New, token)
	for _, s := range []string{p.Source, p.Manifest} {
		fmt.Fprintf(m, "%d:%s\n", len(s), s)
	}
	keys := make([]string, 0, len(secrets))
	for k := range secrets {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(m, "%d:%s=%d:%s\n", len(k), k, len(secrets[k]), secrets[k])
	}
	return "g-" + hex.EncodeToString(m.Sum(nil))[:24]
}

// peerPorts hands out the ports of --peer-port-range to cluster-scope
// dataset mounts.
type peerPorts struct {
	mu    sync.Mutex
	taken map[int]string // port → dataset key
}

// take returns key's port: want when it is free or key's (a recorded
// mount's), else the lowest free one.
func (pp *peerPorts) take(key string, want, lo, hi int) (int, error) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if pp.taken == nil {
		pp.taken = map[int]string{}
	}
	if want >= lo && want <= hi {
		if k, ok := pp.taken[want]; !ok || k == key {
			pp.taken[want] = key
			return want, nil
		}
	}
	for p := lo; p <= hi; p++ {
		if _, ok := pp.taken[p]; !ok {
			pp.taken[p] = key
			return p, nil
		}
	}
	return 0, status.Errorf(codes.ResourceExhausted, "no free peer port in --peer-port-range %d-%d: one per cluster-scope dataset on this node", lo, hi)
}

func (pp *peerPorts) free(key string) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	for p, k := range pp.taken {
		if k == key {
			delete(pp.taken, p)
		}
	}
}

// peersPath is the peers file of a cluster-scope dataset mount.
func (n *nodeState) peersPath(key string) string {
	return filepath.Join(n.cfg.dir, "peers", key+".peers")
}

// self is this node's peer in ds's group.
func (n *nodeState) self(ds *datasetMount) peer.Peer {
	// The capacity it advertises is the dataset's cacheSize: with a
	// manifest, the peers' ownership is byte-balanced and capacity-aware
	// (peer.Assign).
	return peer.Peer{ID: n.cfg.peer.id, Addr: net.JoinHostPort(n.cfg.peer.host, strconv.Itoa(ds.PeerPort)),
		Capacity: ds.Params.CacheSize}
}

// prepareCluster gives a new cluster-scope dataset mount its group and
// port (before start). Called with its dataset lock held.
func (n *nodeState) prepareCluster(ds *datasetMount, secrets map[string]string) error {
	c := n.cfg.peer
	tok, err := peer.ReadToken(c.tokenFile)
	if err != nil {
		return status.Errorf(codes.FailedPrecondition, "cluster scope: --peer-token-file: %v", err)
	}
	ds.PeerGroup = peerGroup(tok, ds.Params, secrets)
	n.mu.Lock()
	for _, o := range n.datasets {
		if o.PeerGroup == ds.PeerGroup && o.Key != ds.Key {
			n.mu.Unlock()
			// One node is one peer of a group (its Node carries one
			// address per group).
			return status.Errorf(codes.FailedPrecondition, "cluster scope: this node already mounts the dataset %s in cluster scope with other parameters (cacheSize, policy or readaheadFiles): a node is one peer of a dataset; use the same parameters", ds.Params.Source)
		}
	}
	n.mu.Unlock()
	ds.PeerPort, err = n.ports.take(ds.Key, 0, c.portLo, c.portHi)
	if err != nil {
		return err
	}
	n.mu.Lock()
	if n.joining == nil {
		n.joining = map[string]string{}
	}
	n.joining[ds.Key] = ds.PeerGroup
	n.mu.Unlock()
	return nil
}

// joinCluster advertises ds in its group and writes its peers file
// (start, before the mount process runs).
func (n *nodeState) joinCluster(ds *datasetMount) error {
	if err := os.MkdirAll(filepath.Dir(n.peersPath(ds.Key)), 0o755); err != nil {
		return fmt.Errorf("csi: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.cfg.peer.dir.Advertise(ctx, ds.PeerGroup, n.self(ds)); err != nil {
		return fmt.Errorf("csi: cluster scope: %w", err)
	}
	return n.writePeers(ds.Key, ds.PeerGroup, n.self(ds))
}

// writePeers writes the peers file of dataset key: its group's peers as
// discovered, with self in place of any stale entry of its id (its own
// annotation may not have come back through the watch yet).
func (n *nodeState) writePeers(key, group string, self peer.Peer) error {
	list := []peer.Peer{self}
	for _, p := range n.cfg.peer.dir.Peers(group) {
		if p.ID != self.ID {
			list = append(list, p)
		}
	}
	sort.Slice(list, func(i, j int) bool { return list[i].ID < list[j].ID })
	if err := peer.WritePeersFile(n.peersPath(key), list); err != nil {
		return fmt.Errorf("csi: peers file: %w", err)
	}
	return nil
}

// refreshPeers rewrites the peers file of every cluster-scope dataset
// mount (the directory's OnChange).
func (n *nodeState) refreshPeers() {
	n.peersMu.Lock()
	defer n.peersMu.Unlock()
	n.mu.Lock()
	type rec struct {
		key, group string
		self       peer.Peer
	}
	var recs []rec
	for _, ds := range n.datasets {
		if ds.PeerGroup != "" {
			recs = append(recs, rec{ds.Key, ds.PeerGroup, n.self(ds)})
		}
	}
	n.mu.Unlock()
	for _, r := range recs {
		if err := n.writePeers(r.key, r.group, r.self); err != nil {
			n.cfg.log.Warn("cannot rewrite a peers file", "key", r.key, "err", err)
		}
	}
}

// leaveCluster withdraws ds from its group and removes its peers file and
// port (release).
func (n *nodeState) leaveCluster(ds *datasetMount) {
	if ds.PeerGroup == "" || n.cfg.peer == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Not under peersMu: a directory may call OnChange (refreshPeers)
	// from within.
	if err := n.cfg.peer.dir.Withdraw(ctx, ds.PeerGroup); err != nil {
		// Its entry expires unless renewed, and the next health check
		// removes it (retainPeers).
		n.cfg.log.Warn("cannot withdraw from a peer group (the next health check retries)", "key", ds.Key, "group", ds.PeerGroup, "err", err)
	}
	// ds is out of n.datasets: after a refresh in flight ends, none
	// writes its file again.
	n.peersMu.Lock()
	_ = removeFile(n.peersPath(ds.Key))
	n.peersMu.Unlock()
	n.ports.free(ds.Key)
	n.mu.Lock()
	delete(n.joining, ds.Key)
	n.mu.Unlock()
}

// clusterArgs fills the cluster-scope flags of ds's command line.
func (n *nodeState) clusterArgs(ds *datasetMount, o *mountapi.CommandOptions) {
	if ds.PeerGroup == "" {
		return
	}
	self := n.self(ds)
	o.CacheScope = mountapi.ScopeCluster
	o.PeersFile = n.peersPath(ds.Key)
	o.PeerListen = self.Addr
	o.PeerID = self.ID
	o.PeerTokenFile = n.cfg.peer.tokenFile
	o.PeerGroup = ds.PeerGroup // the mount's peer server serves this group only
	o.PeerMetrics = n.cfg.peer.metrics
}

// readvertise advertises every cluster-scope dataset mount again at each
// health check: it renews its entry (a Lease expires unless renewed) and
// restores one that was deleted. A dataset whose lock is held is left to
// the next round. Then it removes this node's entries of groups it no
// longer mounts (retainPeers).
//
// (Two node plugins never run on one node; within this one, a start in
// progress is protected by n.joining, set by prepareCluster.)
func (n *nodeState) readvertise(ctx context.Context) {
	for _, key := range n.datasetKeys() {
		unlock, ok := n.dsLocks.tryLock(key)
		if !ok {
			continue
		}
		if ds := n.dataset(key); ds != nil && ds.PeerGroup != "" {
			self := n.self(ds)
			listed := false
			for _, p := range n.cfg.peer.dir.Peers(ds.PeerGroup) {
				listed = listed || p == self
			}
			if err := n.cfg.peer.dir.Advertise(ctx, ds.PeerGroup, self); err != nil {
				n.cfg.log.Warn("cannot renew the peer entry of a cluster-scope dataset mount", "key", key, "err", err)
			} else if !listed {
				n.cfg.log.Info("advertised a cluster-scope dataset mount again", "key", key, "group", ds.PeerGroup)
			}
		}
		unlock()
	}
	n.retainPeers(ctx)
}

// retainPeers removes this node's peer entries of groups none of its
// dataset mounts serves (at start, and at each health check): a withdraw
// that failed, or a node plugin killed between stopping a mount and
// withdrawing it. A group being joined right now is kept: its dataset is
// recorded only once started, so the groups of starts in progress
// (n.joining: dataset key → group, from prepareCluster to leaveCluster)
// count too.
func (n *nodeState) retainPeers(ctx context.Context) {
	n.mu.Lock()
	var groups []string
	for _, ds := range n.datasets {
		if ds.PeerGroup != "" {
			groups = append(groups, ds.PeerGroup)
		}
	}
	for _, g := range n.joining {
		groups = append(groups, g)
	}
	n.mu.Unlock()
	removed, err := n.cfg.peer.dir.Retain(ctx, groups)
	if err != nil {
		n.cfg.log.Warn("cannot remove stale peer entries of this node", "err", err)
	}
	if removed > 0 {
		n.cfg.log.Info("removed stale peer entries of groups this node no longer mounts", "count", removed)
	}
}
