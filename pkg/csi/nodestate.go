package csi

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// nodeConfig is what the node state needs, taken from the driver's Config
// by New. Immutable.
type nodeConfig struct {
	dir          string        // <state dir>/node: datasets, volumes, secrets, logs, mnt
	cacheRoot    string        // one cache directory per dataset mount under it
	launcher     launcher      // starts `cachefs mount` processes
	labeler      *nodeLabeler  // nil unless Config.NodeLabels
	peer         *peerConfig   // nil: cluster-scope volumes are refused
	mountTimeout time.Duration // bounds waiting for a new mount to become live
	budget       CacheBudget   // of the dataset caches under cacheRoot
	maxMounts    int           // cap on dataset mount processes; 0: none
	nsBytes      CacheBudget   // most cache bytes one namespace may hold (nsbudget.go)
	nsMounts     int           // most dataset mounts one namespace may hold; 0: none
	retention    time.Duration // of idle dataset caches; 0: until their room is needed
	log          *slog.Logger

	mountLogMaxSize int64 // mount logs are rotated above it (mountlogs.go)
	maxDirEntries   int   // --max-dir-entries of the mounts; 0: their default

	// events reports listing refusals of the mounts as Kubernetes events
	// on the pods that use them (listingevents.go); nil without a kube
	// client.
	events *listingEvents

	// egressRules are the node's network rules, handed to every mount it
	// starts (--restrict-egress --egress-rules): a tenant's mount reaches
	// the node's own, loopback or link-local addresses only where a rule
	// names the endpoint. The node plugin itself never connects to a
	// dataset.
	egressRules []string
}

// nodeState is the node service's view of its volumes and dataset mounts,
// mirrored in the state directory (one JSON file each) so that a restarted
// driver re-adopts them. It knows nothing of gRPC but the status codes its
// methods return (node.go holds the handlers).
//
// Locking: slow work (starting a mount, which may wait up to the mount
// timeout on a source that never answers; stopping one; repairing one)
// holds only the lock of the dataset it works on, so a hanging source
// delays only the volumes that use it. Three kinds of lock, always taken in
// this order:
//
//   - volLocks, one per volume id: serialises node calls on one volume.
//   - dsLocks, one per dataset key: guards that datasetMount's fields
//     (process, users, params) and the Targets/StagingPath of the volumes
//     that use it; held while the mount starts, stops or is repaired.
//   - mu: guards the maps (datasets, volumes, prefetching) and ctx; held
//     only to read or change them, never across I/O that can block.
//
// A nodeVolume's fields change only with its volume lock and its dataset's
// lock held, a datasetMount's only with its dataset lock held; a record is
// put in or taken out of its map with mu held as well. cfg and nodeKey are
// immutable; sizes has its own lock (never taken with mu held, nor mu with
// it); repairs is an atomic.
type nodeState struct {
	cfg     nodeConfig
	nodeKey []byte // HMAC key of credentialsID; immutable
	sizes   datasetSizes

	repairs atomic.Int64
	// recoveries and takeovers count the connection recoveries (recover.go)
	// and mounter takeovers (mounterfollow.go) the node plugin drove.
	recoveries, takeovers atomic.Int64
	holds                 holders // held FUSE connections (holder.go)

	noEventsOnce sync.Once // the log line: listing refusals are not reported as events
	budget       *budget   // the cache root's budget and the mount cap
	ports        peerPorts
	peersMu      sync.Mutex // serialises peers-file rewrites and withdrawals (peers.go)

	volLocks keyedLocks
	dsLocks  keyedLocks

	mu          sync.Mutex
	ctx         context.Context          // from run (the driver's Run): parent of background prefetches
	datasets    map[string]*datasetMount // by key
	volumes     map[string]*nodeVolume   // by volume id
	joining     map[string]string        // dataset key → peer group, from prepareCluster to leaveCluster (peers.go)
	prefetching map[string]*prefetchRun  // by dataset key, while a prefetch runs

	info volumeInfo // epochfs_volume_info's series; its own lock (volumeinfo.go)
}

// lockVolume takes volume id's lock (see nodeState); ctx bounds the wait.
func (n *nodeState) lockVolume(ctx context.Context, id string) (func(), error) {
	return n.volLocks.lock(ctx, id, "volume")
}

// lockDataset takes the lock of the dataset mount with key; ctx bounds the
// wait (a mount of it that is starting holds it up to the mount timeout).
func (n *nodeState) lockDataset(ctx context.Context, key string) (func(), error) {
	return n.dsLocks.lock(ctx, key, "dataset mount")
}

// volume returns the record of volume id, or nil.
func (n *nodeState) volume(id string) *nodeVolume {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.volumes[id]
}

// dataset returns the dataset mount with key, or nil.
func (n *nodeState) dataset(key string) *datasetMount {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.datasets[key]
}

// datasetKeys lists the keys of the dataset mounts.
func (n *nodeState) datasetKeys() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	keys := make([]string, 0, len(n.datasets))
	for k := range n.datasets {
		keys = append(keys, k)
	}
	return keys
}

// NodeStats counts what the node service manages.
type NodeStats struct {
	DatasetMounts, Volumes         int
	Repairs, Recoveries, Takeovers int64
}

// NodeStats returns the node service's counts (zero in controller mode).
// It never waits on a mount that is starting: mu is held only briefly.
func (d *Driver) NodeStats() NodeStats {
	n := d.node
	if n == nil {
		return NodeStats{}
	}
	n.mu.Lock()
	st := NodeStats{DatasetMounts: len(n.datasets), Volumes: len(n.volumes)}
	n.mu.Unlock()
	st.Repairs = n.repairs.Load()
	st.Recoveries, st.Takeovers = n.recoveries.Load(), n.takeovers.Load()
	return st
}

// nodeVolume is a staged or (inline) published volume on this node.
type nodeVolume struct {
	ID          string   `json:"id"`
	DatasetKey  string   `json:"datasetKey"`
	StagingPath string   `json:"stagingPath,omitempty"` // empty for inline ephemeral volumes
	Targets     []string `json:"targets"`
	Ephemeral   bool     `json:"ephemeral,omitempty"`
	// Namespace is the namespace the volume is charged to (nsbudget.go);
	// "" for an admin's volume, and for records older than the limits.
	Namespace string `json:"namespace,omitempty"`
	// Pods are the pods the volume is published to, by target path, as
	// the kubelet names them in the NodePublish volume context
	// (podInfoOnMount): the objects the node's events about the volume's
	// dataset mount are about (listingevents.go).
	Pods map[string]podRef `json:"pods,omitempty"`
	// Claim is the claim and PV the publish context names
	// (epochfs_volume_info, volumeinfo.go).
	Claim volumeClaim `json:"claim,omitzero"`
}

func (n *nodeState) volumePath(id string) string {
	return filepath.Join(n.cfg.dir, "volumes", id+".json")
}

// newNodeState loads the state directory and re-adopts dataset mounts whose
// processes still run; broken ones are repaired by the first health check or
// the next stage/publish. Prefetches of re-adopted mounts resume in run.
func newNodeState(cfg nodeConfig) (*nodeState, error) {
	if cfg.log == nil {
		cfg.log = slog.New(slog.DiscardHandler)
	}
	n := &nodeState{cfg: cfg, datasets: map[string]*datasetMount{}, volumes: map[string]*nodeVolume{},
		prefetching: map[string]*prefetchRun{}, sizes: datasetSizes{sizes: map[string]int64{}}}
	n.budget = &budget{root: cfg.cacheRoot, idleDir: filepath.Join(cfg.dir, "idle"), limit: cfg.budget,
		maxMounts: cfg.maxMounts, nsBytes: cfg.nsBytes, nsMounts: cfg.nsMounts, retention: cfg.retention, log: cfg.log,
		reserved: map[string]int64{}, holds: map[string]*nsHold{}}
	if n.budget.limit == (CacheBudget{}) {
		n.budget.limit = DefaultCacheRootBudget
	}
	for _, sub := range []string{"datasets", "volumes", "secrets", "logs", "mnt", "idle", "peers", "held"} {
		if err := os.MkdirAll(filepath.Join(cfg.dir, sub), 0o700); err != nil {
			return nil, fmt.Errorf("csi: state dir: %w", err)
		}
	}
	if err := os.MkdirAll(cfg.cacheRoot, 0o700); err != nil {
		return nil, fmt.Errorf("csi: cache root: %w", err)
	}
	key, err := loadNodeKey(filepath.Join(cfg.dir, "key"))
	if err != nil {
		return nil, err
	}
	n.nodeKey = key
	loadState(cfg, "datasets", func(ds *datasetMount) {
		n.datasets[ds.Key] = ds
		n.budget.adopt(ds.Key, ds.Params.CacheSize)
		if ds.PeerGroup != "" && cfg.peer != nil {
			_, _ = n.ports.take(ds.Key, ds.PeerPort, cfg.peer.portLo, cfg.peer.portHi)
		}
		if err := n.healthy(ds); err != nil {
			cfg.log.Warn("dataset mount needs repair", "key", ds.Key, "source", ds.Params.Source, "err", err)
		} else {
			cfg.log.Info("re-adopted dataset mount", "key", ds.Key, "source", ds.Params.Source, "pid", ds.PID)
		}
	})
	loadState(cfg, "volumes", func(v *nodeVolume) {
		n.volumes[v.ID] = v
		for _, t := range v.Targets {
			n.info.set(v, n.datasets[v.DatasetKey], t)
		}
		if ds := n.datasets[v.DatasetKey]; ds != nil {
			n.budget.adoptCharge(v.Namespace, v.DatasetKey, v.ID, ds.Params.CacheSize)
		}
	})
	n.removeOrphanSecrets()
	if cfg.peer != nil {
		cfg.peer.dir.OnChange(n.refreshPeers)
		n.refreshPeers()
		// Entries of datasets this node stopped mounting while no
		// plugin ran (or whose withdraw failed) go now.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		n.retainPeers(ctx)
		cancel()
	}
	return n, nil
}

// removeOrphanSecrets removes the secrets files of datasets the node no
// longer records (a driver killed between writing a dataset's secrets and
// recording it, or a crash mid-removal), and renameio's leftover temp files:
// credentials stay on disk only while a dataset that uses them is staged.
func (n *nodeState) removeOrphanSecrets() {
	ents, err := os.ReadDir(filepath.Join(n.cfg.dir, "secrets"))
	if err != nil {
		return
	}
	for _, e := range ents {
		key, ok := strings.CutSuffix(e.Name(), ".env")
		if ok && n.datasets[key] != nil {
			continue
		}
		p := filepath.Join(n.cfg.dir, "secrets", e.Name())
		if err := os.RemoveAll(p); err != nil {
			n.cfg.log.Warn("cannot remove an orphaned secrets file", "file", p, "err", err)
			continue
		}
		n.cfg.log.Info("removed the secrets file of a dataset no longer staged", "file", p)
	}
}

// loadState passes each JSON record of the state subdirectory sub
// (datasets, volumes) to add, skipping (and logging) unreadable ones.
func loadState[T any](cfg nodeConfig, sub string, add func(*T)) {
	files, _ := filepath.Glob(filepath.Join(cfg.dir, sub, "*.json"))
	for _, f := range files {
		v := new(T)
		if err := readJSON(f, v); err != nil {
			cfg.log.Error("skipping unreadable state", "kind", sub, "file", f, "err", err)
			continue
		}
		add(v)
	}
}

// run makes ctx (the driver's Run's, cancelled when it stops) the parent of
// background work: it holds the connections of live re-adopted mounts again
// and resumes their prefetches (what is cached is skipped), when
// healthEvery > 0 starts the health loop, and with a mounter follows its
// generations (mounterfollow.go).
// Called once, before the node serves.
func (n *nodeState) run(ctx context.Context, healthEvery time.Duration) {
	n.mu.Lock()
	n.ctx = ctx
	n.mu.Unlock()
	for _, key := range n.datasetKeys() {
		unlock, err := n.lockDataset(ctx, key)
		if err != nil {
			return // ctx ended
		}
		if ds := n.dataset(key); ds != nil && n.healthy(ds) == nil {
			n.hold(ds, 2*time.Second) // a re-adopted mount: held again
			if ds.Params.Prefetch {
				n.startPrefetch(ds)
			}
		}
		unlock()
	}
	if healthEvery > 0 {
		go n.healthLoop(ctx, healthEvery)
	}
	if m, ok := n.cfg.launcher.(*mounterLauncher); ok {
		go n.followMounter(ctx, m, time.Second)
	}
}

func (n *nodeState) usable() error {
	for _, dir := range []string{n.cfg.dir, n.cfg.cacheRoot} {
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return fmt.Errorf("csi: %s is not usable: %v", dir, err)
		}
	}
	return nil
}

// datasetKey is the key of the dataset mount serving params with secrets
// (see datasetKey and credentialsID).
func (n *nodeState) datasetKey(params volumeParams, secrets map[string]string) string {
	return datasetKey(params, credentialsID(n.nodeKey, secrets))
}

// loadNodeKey reads the node's 32-byte HMAC key from path, creating it
// (0600, random) on first start.
func loadNodeKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		if len(b) != 32 {
			return nil, fmt.Errorf("csi: node key %s: %d bytes, want 32", path, len(b))
		}
		return b, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("csi: node key: %w", err)
	}
	b = make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("csi: node key: %w", err)
	}
	if err := writeFileAtomic(path, b); err != nil {
		return nil, fmt.Errorf("csi: node key: %w", err)
	}
	return b, nil
}

func (n *nodeState) saveVolume(v *nodeVolume) error { return writeJSON(n.volumePath(v.ID), v) }

// putVolume records v in memory and in the state dir. Called with v's
// volume and dataset locks held.
func (n *nodeState) putVolume(v *nodeVolume) error {
	n.mu.Lock()
	n.volumes[v.ID] = v
	n.mu.Unlock()
	if err := n.saveVolume(v); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	return nil
}
func (n *nodeState) saveDataset(ds *datasetMount) error {
	return writeJSON(n.datasetPath(ds.Key), ds)
}
