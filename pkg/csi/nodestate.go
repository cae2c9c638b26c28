package csi

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/epochfs/epochfs/pkg/mount/mountapi"
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
	DatasetMounts, Volumes int
	Repairs                int64
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
	for _, sub := range []string{"datasets", "volumes", "secrets", "logs", "mnt", "idle", "peers"} {
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
// background work: it resumes the prefetches of live re-adopted mounts (what
// is cached is skipped) and, when healthEvery > 0, starts the health loop.
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
		if ds := n.dataset(key); ds != nil && ds.Params.Prefetch && n.healthy(ds) == nil {
			n.startPrefetch(ds)
		}
		unlock()
	}
	if healthEvery > 0 {
		go n.healthLoop(ctx, healthEvery)
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

// acquire is acquireAs for a volume of no namespace (not limited).
func (n *nodeState) acquire(key string, params volumeParams, secrets map[string]string, id string) (*datasetMount, error) {
	return n.acquireAs(key, params, secrets, id, "")
}

// acquireAs returns a live dataset mount with key (n.datasetKey of params
// and secrets) for volume id of namespace ns, starting or repairing it as
// needed; ns is charged for the mount first (nsbudget.go). Called with the
// dataset's lock held, which the start of a new mount may hold up to the
// mount timeout; no other dataset waits on it.
func (n *nodeState) acquireAs(key string, params volumeParams, secrets map[string]string, id, ns string) (ds *datasetMount, err error) {
	if err := n.checkScope(params); err != nil {
		return nil, err
	}
	charged, err := n.budget.charge(ns, key, id, params.CacheSize)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil && charged {
			n.budget.discharge(key, id)
		}
	}()
	ds = n.dataset(key)
	if ds == nil {
		// A new dataset mount: its secrets file is this volume's. The file
		// of a live dataset is never rewritten: another volume reaches it
		// only with equal credentials (they are part of the key).
		if err := n.budget.reserve(key, params.CacheSize); err != nil {
			return nil, err
		}
		if err := n.writeSecrets(key, secrets); err != nil {
			n.budget.release(key)
			return nil, status.Error(codes.Internal, err.Error())
		}
		ds = &datasetMount{Key: key, Params: params, MountPoint: n.mountPath(key), CacheDir: filepath.Join(n.cfg.cacheRoot, key)}
		if params.Cluster() {
			if err := n.prepareCluster(ds, secrets); err != nil {
				_ = removeFile(n.secretPath(key))
				n.ports.free(key)
				n.budget.release(key)
				return nil, err
			}
		}
		_, statErr := os.Stat(ds.CacheDir)
		newCache := errors.Is(statErr, os.ErrNotExist)
		if err := n.start(ds); err != nil {
			// No dataset record: nothing else would remove these, and
			// unstage of an unrecorded volume does nothing. A cache
			// directory this start made holds nothing worth keeping.
			_ = removeFile(n.secretPath(key))
			_ = os.Remove(ds.MountPoint) // only if empty and not mounted
			if newCache {
				_ = os.RemoveAll(ds.CacheDir)
			}
			n.leaveCluster(ds)
			n.budget.release(key)
			return nil, mountError(err)
		}
		n.mu.Lock()
		n.datasets[key] = ds
		n.mu.Unlock()
		if ds.PeerGroup != "" {
			n.refreshPeers() // peers that joined while it started
		}
	} else if err := n.healthy(ds); err != nil {
		// After a node reboot the tmpfs holding the secrets is empty: a
		// volume that stages the dataset again brings them. Equal keys
		// mean equal credentials (they are part of the key), so this is
		// never another tenant's.
		if ds.Credentials && len(secrets) > 0 {
			if _, serr := os.Stat(n.secretPath(key)); errors.Is(serr, os.ErrNotExist) {
				if err := n.writeSecrets(key, secrets); err != nil {
					return nil, status.Error(codes.Internal, err.Error())
				}
			}
		}
		if err := n.repair(ds, err); err != nil {
			return nil, mountError(err)
		}
	}
	if !slices.Contains(ds.Users, id) {
		ds.Users = append(ds.Users, id)
	}
	if params.Prefetch && !ds.Params.Prefetch {
		ds.Params.Prefetch = true
	}
	if err := n.saveDataset(ds); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if ds.Params.Prefetch {
		n.startPrefetch(ds)
	}
	return ds, nil
}

// controlSocketWait bounds how long a prefetch waits for a new mount's
// control socket.
const controlSocketWait = 30 * time.Second

// prefetchRun is one background prefetch.
type prefetchRun struct{ cancel context.CancelFunc }

// startPrefetch fills ds's cache in the background through its mount's
// control socket, unless a prefetch of it already runs. A driver restart
// cancels it; the re-adopting driver starts it again, and it resumes.
// Called with ds's lock held.
func (n *nodeState) startPrefetch(ds *datasetMount) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, running := n.prefetching[ds.Key]; running {
		return
	}
	ctx, cancel := context.WithCancel(n.ctx)
	run := &prefetchRun{cancel: cancel}
	n.prefetching[ds.Key] = run
	key, cacheDir, source := ds.Key, ds.CacheDir, ds.Params.Source
	go func() {
		defer func() {
			n.mu.Lock()
			if n.prefetching[key] == run {
				delete(n.prefetching, key)
			}
			n.mu.Unlock()
			cancel()
		}()
		// A mount serves its control socket a moment after its FUSE mount
		// answers (what start waits for): until then, ask again.
		var sum mountapi.PrefetchSummary
		var err error
		for wait := time.Now().Add(controlSocketWait); ; {
			sum, err = mountapi.RemotePrefetch(ctx, cacheDir, mountapi.ControlRequest{Source: source}, nil)
			if !errors.Is(err, mountapi.ErrNoControl) || time.Now().After(wait) || ctx.Err() != nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			n.cfg.log.Warn("prefetch stopped", "key", key, "source", source, "err", err)
			return
		}
		n.cfg.log.Info("prefetch finished", "key", key, "source", source, "state", sum.State, "message", sum.Message)
	}()
}

// release drops volume id from its dataset mount and stops the mount when no
// volume uses it. Called with the dataset's lock held.
func (n *nodeState) release(key, id string) error {
	n.budget.discharge(key, id)
	ds := n.dataset(key)
	if ds == nil {
		return nil
	}
	ds.Users = slices.DeleteFunc(ds.Users, func(u string) bool { return u == id })
	if len(ds.Users) > 0 {
		return n.saveDataset(ds)
	}
	n.mu.Lock()
	if run, ok := n.prefetching[key]; ok {
		run.cancel()
		delete(n.prefetching, key)
	}
	n.mu.Unlock()
	if err := n.stop(ds); err != nil {
		return err
	}
	n.mu.Lock()
	delete(n.datasets, key)
	n.mu.Unlock()
	n.leaveCluster(ds)
	n.budget.release(key) // its cache stays, idle, for the next stage
	n.removeLog(key)
	_ = removeFile(n.secretPath(key))
	return removeFile(n.datasetPath(key))
}

// dropVolume releases volume v's dataset mount and forgets the volume, in
// memory and in the state dir. Called with v's volume and dataset locks
// held.
func (n *nodeState) dropVolume(v *nodeVolume) error {
	if err := n.release(v.DatasetKey, v.ID); err != nil {
		return err
	}
	n.mu.Lock()
	delete(n.volumes, v.ID)
	n.mu.Unlock()
	return removeFile(n.volumePath(v.ID))
}

// repair restarts a broken dataset mount and re-binds every target that
// uses it. Pods see the new mount through a target only if their
// mount propagation lets it in (HostToContainer); otherwise they need a
// restart. Called with ds's lock held.
func (n *nodeState) repair(ds *datasetMount, why error) error {
	n.cfg.log.Warn("repairing dataset mount", "key", ds.Key, "source", ds.Params.Source, "reason", why.Error())
	n.repairs.Add(1)
	if processAlive(ds.PID, ds.StartTicks) {
		if err := n.stop(ds); err != nil {
			return err
		}
	}
	if err := n.start(ds); err != nil {
		return err
	}
	if err := n.saveDataset(ds); err != nil {
		return err
	}
	for _, id := range ds.Users {
		v := n.volume(id)
		if v == nil {
			continue
		}
		for _, t := range v.Targets {
			if err := rebind(ds.MountPoint, t); err != nil {
				return err
			}
		}
	}
	n.cfg.log.Info("dataset mount repaired", "key", ds.Key, "pid", ds.PID, "volumes", len(ds.Users))
	return nil
}

func rebind(src, dst string) error {
	if err := unmountAll(dst); err != nil {
		return err
	}
	return bindReadOnly(src, dst)
}

// healthLoop repairs broken dataset mounts every interval until ctx ends.
func (n *nodeState) healthLoop(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		n.checkAll()
		n.reportListingRefusals(ctx)
		n.budget.expire(time.Now())
		n.maintainMountLogs()
		if n.cfg.peer != nil {
			n.readvertise(ctx)
		}
		if n.cfg.labeler != nil {
			if err := n.cfg.labeler.sync(ctx, n); err != nil {
				n.cfg.log.Warn("node cache labels not updated", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// checkAll repairs every broken dataset mount that volumes use. A dataset
// whose lock is held (a start, stop or repair in progress) is left to the
// next round instead of making the loop wait on it.
func (n *nodeState) checkAll() {
	for _, key := range n.datasetKeys() {
		unlock, ok := n.dsLocks.tryLock(key)
		if !ok {
			continue
		}
		if ds := n.dataset(key); ds != nil && len(ds.Users) > 0 {
			if err := n.healthy(ds); err != nil {
				if err := n.repair(ds, err); err != nil {
					n.cfg.log.Error("dataset mount repair failed", "key", ds.Key, "err", err)
				}
			}
		}
		unlock()
	}
}
