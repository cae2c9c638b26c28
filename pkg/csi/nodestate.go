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

	"github.com/epochfs/epochfs/pkg/mount"
)

// nodeConfig is what the node state needs, taken from the driver's Config
// by New. Immutable.
type nodeConfig struct {
	dir          string        // <state dir>/node: datasets, volumes, secrets, logs, mnt
	cacheRoot    string        // one cache directory per dataset mount under it
	launcher     launcher      // starts `cachefs mount` processes
	labeler      *nodeLabeler  // nil unless Config.NodeLabels
	mountTimeout time.Duration // bounds waiting for a new mount to become live
	log          *slog.Logger

	mountLogMaxSize int64 // mount logs are rotated above it (mountlogs.go)
}

// nodeState is the node service's view of its volumes and dataset mounts,
// mirrored in the state directory (one JSON file each) so that a restarted
// driver re-adopts them. It knows nothing of gRPC but the status codes its
// acquire returns (node.go holds the handlers).
//
// cfg is immutable; sizes has its own lock; repairs and
// lastStats are atomics. mu serialises every node operation and guards
// ctx, datasets, volumes and prefetching; node calls are rare and a stage may
// wait for a mount, so one lock keeps the state simple and consistent.
// sizes.mu is never taken with mu held, nor mu with sizes.mu held.
type nodeState struct {
	cfg     nodeConfig
	nodeKey []byte // HMAC key of credentialsID; immutable
	sizes   datasetSizes

	repairs   atomic.Int64
	lastStats atomic.Pointer[NodeStats] // counts as of the last NodeStats that got mu

	mu          sync.Mutex
	ctx         context.Context          // from run (the driver's Run): parent of background prefetches
	datasets    map[string]*datasetMount // by key
	volumes     map[string]*nodeVolume   // by volume id
	prefetching map[string]*prefetchRun  // by dataset key, while a prefetch runs
}

// NodeStats counts what the node service manages.
type NodeStats struct {
	DatasetMounts, Volumes int
	Repairs                int64
}

// NodeStats returns the node service's counts (zero in controller mode).
func (d *Driver) NodeStats() NodeStats {
	n := d.node
	if n == nil {
		return NodeStats{}
	}
	// A stage may hold mu for up to MountTimeout: a metrics scrape then gets
	// the counts seen last instead of waiting.
	if n.mu.TryLock() {
		n.lastStats.Store(&NodeStats{DatasetMounts: len(n.datasets), Volumes: len(n.volumes)})
		n.mu.Unlock()
	}
	st := NodeStats{}
	if last := n.lastStats.Load(); last != nil {
		st = *last
	}
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
	for _, sub := range []string{"datasets", "volumes", "secrets", "logs", "mnt"} {
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
		if err := n.healthy(ds); err != nil {
			cfg.log.Warn("dataset mount needs repair", "key", ds.Key, "source", ds.Params.Source, "err", err)
		} else {
			cfg.log.Info("re-adopted dataset mount", "key", ds.Key, "source", ds.Params.Source, "pid", ds.PID)
		}
	})
	loadState(cfg, "volumes", func(v *nodeVolume) { n.volumes[v.ID] = v })
	n.removeOrphanSecrets()
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
	for _, ds := range n.datasets {
		if ds.Params.Prefetch && n.healthy(ds) == nil {
			n.startPrefetch(ds)
		}
	}
	n.mu.Unlock()
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

// putVolume records v in memory and in the state dir. Called with mu held.
func (n *nodeState) putVolume(v *nodeVolume) error {
	n.volumes[v.ID] = v
	if err := n.saveVolume(v); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	return nil
}
func (n *nodeState) saveDataset(ds *datasetMount) error {
	return writeJSON(n.datasetPath(ds.Key), ds)
}

// acquire returns a live dataset mount for params used by volume id,
// starting or repairing it as needed. Called with mu held.
func (n *nodeState) acquire(params volumeParams, secrets map[string]string, id string) (*datasetMount, error) {
	key := n.datasetKey(params, secrets)
	ds, ok := n.datasets[key]
	if !ok {
		// A new dataset mount: its secrets file is this volume's. The file
		// of a live dataset is never rewritten: another volume reaches it
		// only with equal credentials (they are part of the key).
		if err := n.writeSecrets(key, secrets); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		ds = &datasetMount{Key: key, Params: params, MountPoint: n.mountPath(key), CacheDir: filepath.Join(n.cfg.cacheRoot, key)}
		if err := n.start(ds); err != nil {
			// No dataset record: nothing else would remove these, and
			// unstage of an unrecorded volume does nothing.
			_ = removeFile(n.secretPath(key))
			_ = os.Remove(ds.MountPoint) // only if empty and not mounted
			return nil, mountError(err)
		}
		n.datasets[key] = ds
	} else if err := n.healthy(ds); err != nil {
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

// prefetchRun is one background prefetch.
type prefetchRun struct{ cancel context.CancelFunc }

// startPrefetch fills ds's cache in the background through its mount's
// control socket, unless a prefetch of it already runs. A driver restart
// cancels it; the re-adopting driver starts it again, and it resumes.
// Called with mu held, or before the node serves.
func (n *nodeState) startPrefetch(ds *datasetMount) {
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
		sum, err := mount.RemotePrefetch(ctx, cacheDir, mount.ControlRequest{Source: source}, nil)
		if err != nil {
			n.cfg.log.Warn("prefetch stopped", "key", key, "source", source, "err", err)
			return
		}
		n.cfg.log.Info("prefetch finished", "key", key, "source", source, "state", sum.State, "message", sum.Message)
	}()
}

// release drops volume id from its dataset mount and stops the mount when no
// volume uses it. Called with mu held.
func (n *nodeState) release(key, id string) error {
	ds, ok := n.datasets[key]
	if !ok {
		return nil
	}
	ds.Users = slices.DeleteFunc(ds.Users, func(u string) bool { return u == id })
	if len(ds.Users) > 0 {
		return n.saveDataset(ds)
	}
	if run, ok := n.prefetching[key]; ok {
		run.cancel()
		delete(n.prefetching, key)
	}
	if err := n.stop(ds); err != nil {
		return err
	}
	delete(n.datasets, key)
	_ = removeFile(n.secretPath(key))
	return removeFile(n.datasetPath(key))
}

// dropVolume releases volume id's dataset mount and forgets the volume, in
// memory and in the state dir. Called with mu held.
func (n *nodeState) dropVolume(v *nodeVolume) error {
	if err := n.release(v.DatasetKey, v.ID); err != nil {
		return err
	}
	delete(n.volumes, v.ID)
	return removeFile(n.volumePath(v.ID))
}

// repair restarts a broken dataset mount and re-binds every staging path and
// target that uses it. Pods see the new mount through a target only if their
// mount propagation lets it in (HostToContainer); otherwise they need a
// restart. Called with mu held.
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
		v, ok := n.volumes[id]
		if !ok {
			continue
		}
		src := ds.MountPoint
		if v.StagingPath != "" {
			if err := rebind(src, v.StagingPath); err != nil {
				return err
			}
			src = v.StagingPath
		}
		for _, t := range v.Targets {
			if err := rebind(src, t); err != nil {
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
		n.maintainMountLogs()
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

func (n *nodeState) checkAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, ds := range n.datasets {
		if err := n.healthy(ds); err != nil && len(ds.Users) > 0 {
			if err := n.repair(ds, err); err != nil {
				n.cfg.log.Error("dataset mount repair failed", "key", ds.Key, "err", err)
			}
		}
	}
}
