package csi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/epochfs/epochfs/pkg/cache"
	"github.com/epochfs/epochfs/pkg/mount"
)

// nodeState is the node service's view of its volumes and dataset mounts,
// mirrored in the state directory (one JSON file each) so that a restarted
// driver re-adopts them.
//
// d and dir are immutable. mu serialises every node operation and guards
// datasets and volumes; node calls are rare and a stage may wait for a
// mount, so one lock keeps the state simple and consistent.
type nodeState struct {
	d        *Driver
	dir      string
	launcher launcher
	labeler  *nodeLabeler // nil unless Config.NodeLabels
	sizes    datasetSizes
	ctx      context.Context // parent of background prefetches

	repairs   atomic.Int64
	lastStats atomic.Pointer[NodeStats] // counts as of the last NodeStats that got mu

	mu          sync.Mutex
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

func (n *nodeState) volumePath(id string) string { return filepath.Join(n.dir, "volumes", id+".json") }

// newNodeState loads the state directory and re-adopts dataset mounts whose
// processes still run; broken ones are repaired by the first health check or
// the next stage/publish.
func newNodeState(d *Driver) (*nodeState, error) {
	n := &nodeState{d: d, dir: filepath.Join(d.cfg.StateDir, "node"), datasets: map[string]*datasetMount{}, volumes: map[string]*nodeVolume{},
		prefetching: map[string]*prefetchRun{}, ctx: context.Background(), sizes: datasetSizes{sizes: map[string]int64{}}}
	n.launcher = localLauncher{binary: d.cfg.CachefsBinary}
	if d.cfg.MounterEndpoint != "" {
		ml, err := newMounterLauncher(d.cfg.MounterEndpoint)
		if err != nil {
			return nil, err
		}
		n.launcher = ml
	}
	if d.cfg.NodeLabels {
		client, err := kubeClient(d.cfg.Kubeconfig)
		if err != nil {
			return nil, err
		}
		n.labeler = &nodeLabeler{client: client, node: d.cfg.NodeID}
	}
	for _, sub := range []string{"datasets", "volumes", "secrets", "logs", "mnt"} {
		if err := os.MkdirAll(filepath.Join(n.dir, sub), 0o700); err != nil {
			return nil, fmt.Errorf("csi: state dir: %w", err)
		}
	}
	if err := os.MkdirAll(d.cfg.CacheRoot, 0o700); err != nil {
		return nil, fmt.Errorf("csi: cache root: %w", err)
	}
	files, _ := filepath.Glob(filepath.Join(n.dir, "datasets", "*.json"))
	for _, f := range files {
		var ds datasetMount
		if err := readJSON(f, &ds); err != nil {
			d.log.Error("skipping unreadable dataset state", "file", f, "err", err)
			continue
		}
		n.datasets[ds.Key] = &ds
		if err := n.healthy(&ds); err != nil {
			d.log.Warn("dataset mount needs repair", "key", ds.Key, "source", ds.Params.Source, "err", err)
		} else {
			d.log.Info("re-adopted dataset mount", "key", ds.Key, "source", ds.Params.Source, "pid", ds.PID)
			if ds.Params.Prefetch {
				n.startPrefetch(&ds) // resumes: what is cached is skipped
			}
		}
	}
	files, _ = filepath.Glob(filepath.Join(n.dir, "volumes", "*.json"))
	for _, f := range files {
		var v nodeVolume
		if err := readJSON(f, &v); err != nil {
			d.log.Error("skipping unreadable volume state", "file", f, "err", err)
			continue
		}
		n.volumes[v.ID] = &v
	}
	return n, nil
}

func (n *nodeState) usable() error {
	for _, dir := range []string{n.dir, n.d.cfg.CacheRoot} {
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return fmt.Errorf("csi: %s is not usable: %v", dir, err)
		}
	}
	return nil
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
	key := datasetKey(params)
	if err := n.writeSecrets(key, secrets); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	ds, ok := n.datasets[key]
	if !ok {
		ds = &datasetMount{Key: key, Params: params, MountPoint: n.mountPath(key), CacheDir: filepath.Join(n.d.cfg.CacheRoot, key)}
		if err := n.start(ds); err != nil {
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
			n.d.log.Warn("prefetch stopped", "key", key, "source", source, "err", err)
			return
		}
		n.d.log.Info("prefetch finished", "key", key, "source", source, "state", sum.State, "message", sum.Message)
	}()
}

// mountError maps a failure to start a mount: a source that does not exist
// or refuses our credentials is the caller's problem, the rest is Internal.
func mountError(err error) error {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "no such file or directory") || strings.Contains(msg, "NoSuchBucket"):
		return status.Error(codes.NotFound, msg)
	case strings.Contains(msg, "permission denied") || strings.Contains(msg, "AccessDenied") || strings.Contains(msg, "InvalidAccessKeyId") || strings.Contains(msg, "SignatureDoesNotMatch"):
		return status.Error(codes.PermissionDenied, msg)
	case strings.Contains(msg, "invalid source URL") || strings.Contains(msg, "unsupported source"):
		return status.Error(codes.InvalidArgument, msg)
	}
	return status.Error(codes.Internal, msg)
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

// repair restarts a broken dataset mount and re-binds every staging path and
// target that uses it. Pods see the new mount through a target only if their
// mount propagation lets it in (HostToContainer); otherwise they need a
// restart. Called with mu held.
func (n *nodeState) repair(ds *datasetMount, why error) error {
	n.d.log.Warn("repairing dataset mount", "key", ds.Key, "source", ds.Params.Source, "reason", why.Error())
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
	n.d.log.Info("dataset mount repaired", "key", ds.Key, "pid", ds.PID, "volumes", len(ds.Users))
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
		if n.labeler != nil {
			if err := n.labeler.sync(ctx, n); err != nil {
				n.d.log.Warn("node cache labels not updated", "err", err)
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
				n.d.log.Error("dataset mount repair failed", "key", ds.Key, "err", err)
			}
		}
	}
}

func (d *Driver) NodeGetCapabilities(context.Context, *csipb.NodeGetCapabilitiesRequest) (*csipb.NodeGetCapabilitiesResponse, error) {
	var caps []*csipb.NodeServiceCapability
	for _, t := range []csipb.NodeServiceCapability_RPC_Type{
		csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
		csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS,
	} {
		caps = append(caps, &csipb.NodeServiceCapability{Type: &csipb.NodeServiceCapability_Rpc{Rpc: &csipb.NodeServiceCapability_RPC{Type: t}}})
	}
	return &csipb.NodeGetCapabilitiesResponse{Capabilities: caps}, nil
}

func (d *Driver) NodeGetInfo(context.Context, *csipb.NodeGetInfoRequest) (*csipb.NodeGetInfoResponse, error) {
	return &csipb.NodeGetInfoResponse{NodeId: d.cfg.NodeID}, nil
}

func (d *Driver) NodeStageVolume(ctx context.Context, req *csipb.NodeStageVolumeRequest) (*csipb.NodeStageVolumeResponse, error) {
	id, staging := req.GetVolumeId(), req.GetStagingTargetPath()
	if err := checkVolumeAndPath(id, "staging target path", staging); err != nil {
		return nil, err
	}
	if err := d.checkCapability(req.GetVolumeCapability(), false, false); err != nil {
		return nil, err
	}
	params, err := parseParams(req.GetVolumeContext(), d.cfg.DefaultCacheSize)
	if err != nil {
		return nil, err
	}
	secrets, err := checkSecrets(req.GetSecrets())
	if err != nil {
		return nil, err
	}
	n := d.node
	n.mu.Lock()
	defer n.mu.Unlock()
	if v, ok := n.volumes[id]; ok {
		if v.StagingPath != staging {
			return nil, status.Errorf(codes.AlreadyExists, "volume %q is already staged at %s", id, v.StagingPath)
		}
		if v.DatasetKey != datasetKey(params) {
			return nil, status.Errorf(codes.AlreadyExists, "volume %q is already staged with other parameters", id)
		}
		if checkMount(staging) == nil {
			if ds := n.datasets[v.DatasetKey]; ds != nil && n.healthy(ds) == nil {
				return &csipb.NodeStageVolumeResponse{}, nil // idempotent
			}
		}
	}
	if err := os.MkdirAll(staging, 0o750); err != nil {
		return nil, status.Errorf(codes.Internal, "staging path: %v", err)
	}
	ds, err := n.acquire(params, secrets, id)
	if err != nil {
		return nil, err
	}
	v := &nodeVolume{ID: id, DatasetKey: ds.Key, StagingPath: staging}
	if old, ok := n.volumes[id]; ok {
		v.Targets = old.Targets
	}
	if err := rebind(ds.MountPoint, staging); err != nil {
		if len(v.Targets) == 0 {
			_ = n.release(ds.Key, id)
		}
		return nil, status.Errorf(codes.Internal, "stage: %v", err)
	}
	if err := n.putVolume(v); err != nil {
		return nil, err
	}
	return &csipb.NodeStageVolumeResponse{}, nil
}

func (d *Driver) NodeUnstageVolume(ctx context.Context, req *csipb.NodeUnstageVolumeRequest) (*csipb.NodeUnstageVolumeResponse, error) {
	id, staging := req.GetVolumeId(), req.GetStagingTargetPath()
	if err := checkVolumeAndPath(id, "staging target path", staging); err != nil {
		return nil, err
	}
	n := d.node
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := unmountAll(staging); err != nil {
		return nil, status.Errorf(codes.Internal, "unstage: %v", err)
	}
	v, ok := n.volumes[id]
	if !ok || v.StagingPath != staging {
		return &csipb.NodeUnstageVolumeResponse{}, nil // idempotent
	}
	for _, t := range v.Targets { // kubelet unpublishes first; be safe if it did not
		if err := unmountAll(t); err != nil {
			return nil, status.Errorf(codes.Internal, "unstage: %v", err)
		}
	}
	if err := n.release(v.DatasetKey, id); err != nil {
		return nil, status.Errorf(codes.Internal, "unstage: %v", err)
	}
	delete(n.volumes, id)
	if err := removeFile(n.volumePath(id)); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csipb.NodeUnstageVolumeResponse{}, nil
}

func (d *Driver) NodePublishVolume(ctx context.Context, req *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	id, target, staging := req.GetVolumeId(), req.GetTargetPath(), req.GetStagingTargetPath()
	if err := checkVolumeAndPath(id, "target path", target); err != nil {
		return nil, err
	}
	if err := d.checkCapability(req.GetVolumeCapability(), req.GetReadonly(), true); err != nil {
		return nil, err
	}
	ephemeral := req.GetVolumeContext()[ephemeralKey] == "true"
	if !ephemeral {
		if err := checkPath("staging target path", staging); err != nil {
			return nil, err
		}
	}
	n := d.node
	n.mu.Lock()
	defer n.mu.Unlock()

	var src string
	var v *nodeVolume
	if ephemeral {
		params, err := parseParams(req.GetVolumeContext(), d.cfg.DefaultCacheSize)
		if err != nil {
			return nil, err
		}
		secrets, err := checkSecrets(req.GetSecrets())
		if err != nil {
			return nil, err
		}
		if old, ok := n.volumes[id]; ok && (!old.Ephemeral || old.DatasetKey != datasetKey(params)) {
			return nil, status.Errorf(codes.AlreadyExists, "volume %q is already in use with other parameters", id)
		}
		ds, err := n.acquire(params, secrets, id)
		if err != nil {
			return nil, err
		}
		src = ds.MountPoint
		v = n.volumes[id]
		if v == nil {
			v = &nodeVolume{ID: id, DatasetKey: ds.Key, Ephemeral: true}
		}
	} else {
		var ok bool
		v, ok = n.volumes[id]
		if !ok || v.StagingPath != staging {
			return nil, status.Errorf(codes.FailedPrecondition, "volume %q is not staged at %s", id, staging)
		}
		if ds := n.datasets[v.DatasetKey]; ds != nil {
			if err := n.healthy(ds); err != nil {
				if err := n.repair(ds, err); err != nil {
					return nil, mountError(err)
				}
			}
		}
		if err := checkMount(staging); err != nil {
			return nil, status.Errorf(codes.FailedPrecondition, "volume %q: staging path: %v", id, err)
		}
		src = staging
	}

	if slices.Contains(v.Targets, target) && checkMount(target) == nil {
		return &csipb.NodePublishVolumeResponse{}, nil // idempotent
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return nil, status.Errorf(codes.Internal, "target path: %v", err)
	}
	if err := rebind(src, target); err != nil {
		return nil, status.Errorf(codes.Internal, "publish: %v", err)
	}
	if !slices.Contains(v.Targets, target) {
		v.Targets = append(v.Targets, target)
	}
	if err := n.putVolume(v); err != nil {
		return nil, err
	}
	return &csipb.NodePublishVolumeResponse{}, nil
}

func (d *Driver) NodeUnpublishVolume(ctx context.Context, req *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	id, target := req.GetVolumeId(), req.GetTargetPath()
	if err := checkVolumeAndPath(id, "target path", target); err != nil {
		return nil, err
	}
	n := d.node
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := unmountAll(target); err != nil {
		return nil, status.Errorf(codes.Internal, "unpublish: %v", err)
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, status.Errorf(codes.Internal, "unpublish: remove target: %v", err)
	}
	v, ok := n.volumes[id]
	if !ok {
		return &csipb.NodeUnpublishVolumeResponse{}, nil // idempotent
	}
	v.Targets = slices.DeleteFunc(v.Targets, func(t string) bool { return t == target })
	if v.Ephemeral && len(v.Targets) == 0 {
		if err := n.release(v.DatasetKey, id); err != nil {
			return nil, status.Errorf(codes.Internal, "unpublish: %v", err)
		}
		delete(n.volumes, id)
		if err := removeFile(n.volumePath(id)); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		return &csipb.NodeUnpublishVolumeResponse{}, nil
	}
	if err := n.saveVolume(v); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csipb.NodeUnpublishVolumeResponse{}, nil
}

// NodeGetVolumeStats reports the dataset's size (from its manifest; else
// the cache capacity) as the total, the bytes cached as used. A dead mount is
// Unavailable (the health check repairs it).
func (d *Driver) NodeGetVolumeStats(ctx context.Context, req *csipb.NodeGetVolumeStatsRequest) (*csipb.NodeGetVolumeStatsResponse, error) {
	id, path := req.GetVolumeId(), req.GetVolumePath()
	if err := checkVolumeID(id); err != nil {
		return nil, err
	}
	if path == "" {
		return nil, status.Error(codes.InvalidArgument, "volume path is required")
	}
	n := d.node
	n.mu.Lock()
	v, ok := n.volumes[id]
	var ds *datasetMount
	if ok {
		ds = n.datasets[v.DatasetKey]
	}
	n.mu.Unlock()
	if !ok || ds == nil {
		return nil, status.Errorf(codes.NotFound, "volume %q is not staged or published on this node", id)
	}
	if path != v.StagingPath && !slices.Contains(v.Targets, path) {
		return nil, status.Errorf(codes.NotFound, "volume %q is not at %s", id, path)
	}
	if err := checkMount(path); err != nil {
		if errors.Is(err, errDeadMount) {
			return nil, status.Errorf(codes.Unavailable, "volume %q: %v; the driver's health check repairs it", id, err)
		}
		return nil, status.Errorf(codes.NotFound, "volume %q: %v", id, err)
	}
	info, err := cache.ReadInfo(ds.CacheDir)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "read cache %s: %v", ds.CacheDir, err)
	}
	// Total is the dataset's size when its manifest tells it, else the
	// cache's capacity; Used is what the cache holds of it; Available is
	// what it could still take.
	total, room := info.CapacityBytes, info.CapacityBytes
	if size := n.datasetBytes(ctx, ds); size >= 0 {
		total, room = size, min(size, info.CapacityBytes)
	}
	return &csipb.NodeGetVolumeStatsResponse{
		Usage: []*csipb.VolumeUsage{
			{Unit: csipb.VolumeUsage_BYTES, Total: total, Used: info.UsedBytes, Available: max(room-info.UsedBytes, 0)},
		},
	}, nil
}

// checkVolumeAndPath validates the volume id and path every node call takes.
func checkVolumeAndPath(id, what, path string) error {
	if err := checkVolumeID(id); err != nil {
		return err
	}
	return checkPath(what, path)
}
