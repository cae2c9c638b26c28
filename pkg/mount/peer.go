package mount

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/epochfs/epochfs/pkg/manifest"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
	"github.com/epochfs/epochfs/pkg/peer"
)

// PeerConfig is the cluster scope of a mount (Config.Peer).
type PeerConfig struct {
	// Scope is mountapi.ScopeNode ("" too) or mountapi.ScopeCluster.
	Scope string
	// Peers is the static member list (`--peers id=host:port,…`); ignored
	// when Membership is set. This mount is added (with ID and the bound
	// Listen address) when its id is missing.
	Peers []peer.Peer
	// Membership, when set, yields the members instead of Peers: the hook
	// for discovery (a Kubernetes EndpointSlice watcher). It must include
	// this mount (by ID).
	Membership peer.Membership
	// Listen is the peer server's address (required in cluster scope; a
	// host is required: 0.0.0.0 only when written out).
	Listen string
	// ID is this mount's peer id; "" takes Listen.
	ID string
	// TokenFile holds the shared token (required in cluster scope). Read
	// at Start; never logged.
	TokenFile string
	// Group is this mount's peer group (peer.ValidGroup): its requests
	// carry it with the group's key (an HMAC of the token and the group),
	// and its peer server serves this group only. "" takes
	// peer.DatasetGroup of the source ID (`cachefs mount` by hand: every
	// mount of one source is one group); the CSI node plugin passes its
	// group, which includes a keyed hash of the volume's credentials.
	Group string
	// Timeout bounds one request to a peer; 0 takes peer.DefaultTimeout.
	Timeout time.Duration
	// PerPeerMetrics labels the peer series with the peer's id
	// (`--peer-metrics per-peer`); false sums them over the peers, so that
	// a dataset on N nodes does not export N series per counter per mount.
	PerPeerMetrics bool
}

// peerState is what a cluster-scope mount runs.
type peerState struct {
	cluster *peer.Cluster
	server  *peer.Server
	metrics *peer.Metrics
	token   []byte
	group   string
	addr    string // bound address
	stop    context.CancelFunc
	done    <-chan struct{} // closed by stop
}

// validatePeer checks the cluster scope's settings (New).
func validatePeer(c *PeerConfig) error {
	switch c.Scope {
	case "", mountapi.ScopeNode:
		if c.Listen != "" || len(c.Peers) > 0 || c.Membership != nil || c.TokenFile != "" || c.Group != "" {
			return fmt.Errorf("%w: --peers, --peer-listen, --peer-token-file and --peer-group need --cache-scope %s", ErrInvalidConfig, mountapi.ScopeCluster)
		}
		c.Scope = mountapi.ScopeNode
		return nil
	case mountapi.ScopeCluster:
	default:
		return fmt.Errorf("%w: --cache-scope %q: want %s or %s", ErrInvalidConfig, c.Scope, mountapi.ScopeNode, mountapi.ScopeCluster)
	}
	if c.Listen == "" || c.TokenFile == "" || (len(c.Peers) == 0 && c.Membership == nil) {
		return fmt.Errorf("%w: --cache-scope %s needs --peers, --peer-listen and --peer-token-file", ErrInvalidConfig, mountapi.ScopeCluster)
	}
	if err := peer.CheckListenAddr(c.Listen); err != nil {
		return fmt.Errorf("%w: --peer-listen: %w", ErrInvalidConfig, err)
	}
	if c.ID == "" {
		c.ID = c.Listen
	}
	if err := peer.ValidID(c.ID); err != nil {
		return fmt.Errorf("%w: --peer-id: %w", ErrInvalidConfig, err)
	}
	if c.Group != "" {
		if err := peer.ValidGroup(c.Group); err != nil {
			return fmt.Errorf("%w: --peer-group: %w", ErrInvalidConfig, err)
		}
	}
	for _, p := range c.Peers {
		if p.Addr == c.Listen && p.ID != c.ID {
			// This mount would join as a peer of its own, under another
			// id than the others know it by: ownership would disagree.
			return fmt.Errorf("%w: --peers names this mount's address %s as peer %q, but its --peer-id is %q", ErrInvalidConfig, p.Addr, p.ID, c.ID)
		}
	}
	return nil
}

// startPeer reads the token, listens and builds the Cluster (before the
// FUSE tree exists: the server's reader is set by servePeer).
func (m *Mount) startPeer(dataset string, reg *prometheus.Registry, man *manifest.Manifest) (*peerState, error) {
	c := m.cfg.Peer
	tok, err := peer.ReadToken(c.TokenFile)
	if err != nil {
		return nil, fmt.Errorf("%w: --peer-token-file: %w", ErrInvalidConfig, err)
	}
	members := c.Membership
	if members == nil {
		list := append([]peer.Peer(nil), c.Peers...)
		found := false
		for _, p := range list {
			found = found || p.ID == c.ID
		}
		if !found {
			list = append(list, peer.Peer{ID: c.ID, Addr: c.Listen})
		}
		members = peer.Static(list)
	}
	pm := peer.NewMetrics()
	if c.PerPeerMetrics {
		pm = peer.NewPerPeerMetrics()
	}
	pm.Register(reg)
	var sums func(string) []byte
	if man != nil && man.Info().Checksums {
		// Whole files from a peer are checked against the manifest's
		// sha256, as a mirror's replicas are.
		sums = func(p string) []byte {
			if i, ok := man.Find(p); ok {
				return man.Checksum(i)
			}
			return nil
		}
	}
	var cat peer.Catalog
	if man != nil {
		cat = man // byte-balanced ownership when the peers advertise capacities
	}
	for _, p := range members.Peers() {
		if p.ID == c.ID && p.Capacity > m.cfg.CacheSize {
			m.log.Warn("the peer list gives this mount a larger capacity than its cache: it will own files it cannot keep",
				"peer_id", p.ID, "capacity", p.Capacity, "cache_size", m.cfg.CacheSize)
		}
	}
	group := c.Group
	if group == "" {
		group = peer.DatasetGroup(dataset)
	}
	cl, err := peer.NewCluster(peer.ClientOptions{Self: c.ID, Dataset: dataset, Group: group, Members: members, Token: tok,
		Timeout: c.Timeout, Metrics: pm, Checksum: sums, Catalog: cat})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return &peerState{cluster: cl, metrics: pm, token: tok, group: group}, nil
}

// servePeer starts the peer server on the mounted tree.
func (m *Mount) servePeer(ps *peerState, dataset string, r peer.Reader) error {
	c := m.cfg.Peer
	ps.server = peer.NewServer(peer.ServerOptions{Dataset: dataset, Group: ps.group, Token: ps.token, Reader: r,
		Members: membersOf(ps), Metrics: ps.metrics, Timeout: m.cfg.ReadTimeout, Logger: m.log})
	ctx, stop := context.WithCancel(context.Background())
	addr, err := peer.Listen(ctx, c.Listen, ps.server)
	if err != nil {
		stop()
		return fmt.Errorf("%w: --peer-listen: %w", ErrInvalidConfig, err)
	}
	ps.addr, ps.stop, ps.done = addr, stop, ctx.Done()
	return nil
}

func membersOf(ps *peerState) peer.Membership { return ps.cluster }

// recordShare computes this mount's owner share, sets the gauge, and
// writes it into the cache directory for `cachefs stats`.
func (m *Mount) recordShare(ps *peerState, man *manifest.Manifest) {
	var ids []string
	for _, p := range ps.cluster.Members() {
		ids = append(ids, p.ID)
	}
	s := peer.Share{Scope: mountapi.ScopeCluster, Self: m.cfg.Peer.ID, Peers: ids}
	if len(ids) > 0 {
		s.OwnedShare = 1 / float64(len(ids))
	}
	if files, owned, bytes, ok := ps.cluster.AssignedShare(); ok {
		// Byte-balanced ownership: computed once over the manifest already.
		s.Files, s.OwnedFiles, s.OwnedShare = files, owned, bytes
	} else if man != nil {
		var paths []string
		var sizes []int64
		man.Walk(func(i int, path string) bool {
			if !man.IsDir(i) {
				paths = append(paths, path)
				sizes = append(sizes, man.Size(i))
			}
			return true
		})
		files, bytes := ps.cluster.Share(len(paths), func(i int) string { return paths[i] }, func(i int) int64 { return sizes[i] })
		s.Files, s.OwnedFiles, s.OwnedShare = len(paths), int(files*float64(len(paths))+0.5), bytes
	}
	ps.metrics.OwnedRatio.Set(s.OwnedShare)
	if err := peer.WriteShare(m.cfg.CacheDir, s); err != nil {
		m.log.Warn("cannot record the owner share for cachefs stats", "err", err)
	}
	m.log.Info("cluster-scope cache", "peer_id", s.Self, "peer_group", ps.group, "peers", ids, "peer_listen", ps.addr,
		"owned_share", s.OwnedShare, "owned_files", s.OwnedFiles, "files", s.Files)
}

// followShare records the owner share again (recordShare) whenever the
// membership changes (a peers file rewritten by the node plugin, a peer
// joining or leaving), until the peer server stops. Membership has no
// change notification (it is asked on every miss), so this polls its ids.
func (m *Mount) followShare(ps *peerState, man *manifest.Manifest, every time.Duration) {
	ids := func() string {
		var b strings.Builder
		for _, p := range ps.cluster.Members() {
			b.WriteString(p.ID)
			b.WriteByte(0)
		}
		return b.String()
	}
	last := ids()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ps.done:
			return
		case <-t.C:
		}
		if now := ids(); now != last {
			last = now
			m.recordShare(ps, man)
		}
	}
}

// owns is the cluster scope's ownership test for prefetch (nil in node
// scope: every file).
func (m *Mount) owns() func(string) bool {
	if m.peer == nil {
		return nil
	}
	return m.peer.cluster.Owns
}
