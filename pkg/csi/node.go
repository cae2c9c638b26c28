package csi

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/epochfs/epochfs/pkg/cache"
	"github.com/epochfs/epochfs/pkg/mount/exitcode"
)

// The node service's gRPC handlers. They validate requests, take the node
// state's lock and translate its errors to gRPC status codes; the state
// itself is in nodestate.go (volumes), acquire.go (dataset mounts and their
// users) and health.go (repairs).

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

// NodeStageVolume starts (or joins) the volume's dataset mount: one mount
// process per dataset per node, at its own mount point under the state dir.
// It mounts nothing at the staging path, though the driver advertises
// STAGE_UNSTAGE_VOLUME: NodePublishVolume binds the dataset's mount point
// straight to each target.
//
// Kubelet calls NodeUnstageVolume only after its UnmountDevice check finds
// no other mount of the device mounted at the staging path
// (GetDeviceMountRefs). Every bind of one FUSE mount is a mount of the same
// device, so with the staging path bound to the dataset's mount, the
// driver's own mount point and every other volume's staging path of that
// dataset were such references: kubelet refused UnmountDevice forever and
// the mount process outlived every pod. With nothing mounted at the staging
// path the check looks at a plain directory, finds no reference, and the
// unstage comes; the dataset mount is counted by the volumes staging it.
func (d *Driver) NodeStageVolume(ctx context.Context, req *csipb.NodeStageVolumeRequest) (*csipb.NodeStageVolumeResponse, error) {
	id, staging := req.GetVolumeId(), req.GetStagingTargetPath()
	if err := d.checkVolumeAndPath(id, "staging target path", staging); err != nil {
		return nil, err
	}
	if err := d.checkCapability(req.GetVolumeCapability(), false, false); err != nil {
		return nil, err
	}
	params, err := d.params(req.GetVolumeContext())
	if err != nil {
		return nil, err
	}
	secrets, err := checkSecrets(req.GetSecrets())
	if err != nil {
		return nil, err
	}
	if err := d.checkSource(&params, secrets, false); err != nil {
		return nil, err
	}
	n := d.node
	unlockVol, err := n.lockVolume(ctx, id)
	if err != nil {
		return nil, err
	}
	defer unlockVol()
	key := n.datasetKey(params, secrets)
	unlockDS, err := n.lockDataset(ctx, key)
	if err != nil {
		return nil, err
	}
	defer unlockDS()
	if v := n.volume(id); v != nil {
		if v.StagingPath != staging {
			return nil, status.Errorf(codes.AlreadyExists, "volume %q is already staged at %s", id, v.StagingPath)
		}
		if v.DatasetKey != key {
			return nil, status.Errorf(codes.AlreadyExists, "volume %q is already staged with other parameters", id)
		}
		if ds := n.dataset(key); ds != nil && n.healthy(ds) == nil {
			return &csipb.NodeStageVolumeResponse{}, nil // idempotent
		}
	}
	if err := os.MkdirAll(staging, 0o750); err != nil {
		return nil, status.Errorf(codes.Internal, "staging path: %v", err)
	}
	// Nothing is mounted at the staging path; a bind left there by an
	// older driver version is removed.
	if err := unmountAll(staging); err != nil {
		return nil, status.Errorf(codes.Internal, "stage: %v", err)
	}
	ns := volumeNamespace(req.GetVolumeContext(), false)
	ds, err := n.acquireAs(key, params, secrets, id, ns)
	if err != nil {
		return nil, err
	}
	v := &nodeVolume{ID: id, DatasetKey: ds.Key, StagingPath: staging, Namespace: ns}
	if old := n.volume(id); old != nil {
		v.Targets = old.Targets
	}
	if err := n.putVolume(v); err != nil {
		if len(v.Targets) == 0 {
			_ = n.release(ds.Key, id)
		}
		return nil, err
	}
	return &csipb.NodeStageVolumeResponse{}, nil
}

func (d *Driver) NodeUnstageVolume(ctx context.Context, req *csipb.NodeUnstageVolumeRequest) (*csipb.NodeUnstageVolumeResponse, error) {
	id, staging := req.GetVolumeId(), req.GetStagingTargetPath()
	if err := d.checkVolumeAndPath(id, "staging target path", staging); err != nil {
		return nil, err
	}
	n := d.node
	unlockVol, err := n.lockVolume(ctx, id)
	if err != nil {
		return nil, err
	}
	defer unlockVol()
	if err := unmountAll(staging); err != nil {
		return nil, status.Errorf(codes.Internal, "unstage: %v", err)
	}
	v := n.volume(id)
	if v == nil || v.StagingPath != staging {
		return &csipb.NodeUnstageVolumeResponse{}, nil // idempotent
	}
	unlockDS, err := n.lockDataset(ctx, v.DatasetKey)
	if err != nil {
		return nil, err
	}
	defer unlockDS()
	for _, t := range v.Targets { // kubelet unpublishes first; be safe if it did not
		if err := unmountAll(t); err != nil {
			return nil, status.Errorf(codes.Internal, "unstage: %v", err)
		}
	}
	if err := n.dropVolume(v); err != nil {
		return nil, status.Errorf(codes.Internal, "unstage: %v", err)
	}
	return &csipb.NodeUnstageVolumeResponse{}, nil
}

// NodePublishVolume binds the volume's dataset mount read-only to the
// target: the mount of a staged volume (repaired if broken), or, for an
// inline ephemeral volume, the mount it acquires here.
func (d *Driver) NodePublishVolume(ctx context.Context, req *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	id, target, staging := req.GetVolumeId(), req.GetTargetPath(), req.GetStagingTargetPath()
	if err := d.checkVolumeAndPath(id, "target path", target); err != nil {
		return nil, err
	}
	if err := d.checkCapability(req.GetVolumeCapability(), req.GetReadonly(), true); err != nil {
		return nil, err
	}
	ephemeral := req.GetVolumeContext()[ephemeralKey] == "true"
	if !ephemeral {
		if err := d.checkNodePath("staging target path", staging); err != nil {
			return nil, err
		}
	}
	n := d.node
	unlockVol, err := n.lockVolume(ctx, id)
	if err != nil {
		return nil, err
	}
	defer unlockVol()

	var v *nodeVolume
	var src string
	var unlockDS func()
	if ephemeral {
		v, src, unlockDS, err = d.publishInline(ctx, req)
	} else {
		v, src, unlockDS, err = d.publishStaged(ctx, id, staging)
	}
	if err != nil {
		return nil, err
	}
	defer unlockDS()
	if err := n.bindTarget(v, src, target, req.GetVolumeContext()); err != nil {
		return nil, err
	}
	return &csipb.NodePublishVolumeResponse{}, nil
}

// publishInline acquires the dataset mount of an inline ephemeral volume
// and returns the volume's record (new, or the one it has), the mount
// point to bind and its dataset's unlock: the dataset's lock is held when
// err is nil. Called with the volume's lock held.
func (d *Driver) publishInline(ctx context.Context, req *csipb.NodePublishVolumeRequest) (v *nodeVolume, src string, unlock func(), err error) {
	id, n := req.GetVolumeId(), d.node
	params, err := d.inlineParams(req.GetVolumeContext())
	if err != nil {
		return nil, "", nil, err
	}
	secrets, err := checkSecrets(req.GetSecrets())
	if err != nil {
		return nil, "", nil, err
	}
	if err := d.checkInlineEnabled(); err != nil {
		return nil, "", nil, err
	}
	if err := d.checkSource(&params, secrets, true); err != nil {
		return nil, "", nil, err
	}
	key := n.datasetKey(params, secrets)
	if old := n.volume(id); old != nil && (!old.Ephemeral || old.DatasetKey != key) {
		return nil, "", nil, status.Errorf(codes.AlreadyExists, "volume %q is already in use with other parameters", id)
	}
	unlock, err = n.lockDataset(ctx, key)
	if err != nil {
		return nil, "", nil, err
	}
	ns := volumeNamespace(req.GetVolumeContext(), true)
	ds, err := n.acquireAs(key, params, secrets, id, ns)
	if err != nil {
		unlock()
		return nil, "", nil, err
	}
	if v = n.volume(id); v == nil {
		v = &nodeVolume{ID: id, DatasetKey: ds.Key, Ephemeral: true, Namespace: ns}
	}
	return v, ds.MountPoint, unlock, nil
}

// publishStaged returns the record of volume id, staged at staging, the
// mount point of its dataset mount (repaired if broken) and its dataset's
// unlock: the dataset's lock is held when err is nil. Called with the
// volume's lock held.
func (d *Driver) publishStaged(ctx context.Context, id, staging string) (v *nodeVolume, src string, unlock func(), err error) {
	n := d.node
	v = n.volume(id)
	if v == nil || v.StagingPath != staging {
		return nil, "", nil, status.Errorf(codes.FailedPrecondition, "volume %q is not staged at %s", id, staging)
	}
	unlock, err = n.lockDataset(ctx, v.DatasetKey)
	if err != nil {
		return nil, "", nil, err
	}
	ds := n.dataset(v.DatasetKey)
	if ds == nil {
		unlock()
		return nil, "", nil, status.Errorf(codes.FailedPrecondition, "volume %q: its dataset mount is gone; stage it again", id)
	}
	if err := n.healthy(ds); err != nil {
		if err := n.repair(ds, err); err != nil {
			unlock()
			return nil, "", nil, mountError(err)
		}
	}
	return v, ds.MountPoint, unlock, nil // not the staging path: see NodeStageVolume
}

// bindTarget binds src read-only to target, unless it is bound there
// already, and records target, and the pod of the publish's volume context
// vctx, in v. Called with v's volume and dataset locks held.
func (n *nodeState) bindTarget(v *nodeVolume, src, target string, vctx map[string]string) error {
	if slices.Contains(v.Targets, target) && checkMount(target) == nil {
		return nil // idempotent
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return status.Errorf(codes.Internal, "target path: %v", err)
	}
	if err := rebind(src, target); err != nil {
		return status.Errorf(codes.Internal, "publish: %v", err)
	}
	if !slices.Contains(v.Targets, target) {
		v.Targets = append(v.Targets, target)
	}
	if pod, ok := publishPod(vctx); ok {
		if v.Pods == nil {
			v.Pods = map[string]podRef{}
		}
		v.Pods[target] = pod
	}
	v.Claim = publishClaim(v.ID, vctx, v.Ephemeral)
	if err := n.putVolume(v); err != nil {
		return err
	}
	n.info.set(v, n.dataset(v.DatasetKey), target)
	return nil
}

func (d *Driver) NodeUnpublishVolume(ctx context.Context, req *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	id, target := req.GetVolumeId(), req.GetTargetPath()
	if err := d.checkVolumeAndPath(id, "target path", target); err != nil {
		return nil, err
	}
	n := d.node
	unlockVol, err := n.lockVolume(ctx, id)
	if err != nil {
		return nil, err
	}
	defer unlockVol()
	if err := unmountAll(target); err != nil {
		return nil, status.Errorf(codes.Internal, "unpublish: %v", err)
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, status.Errorf(codes.Internal, "unpublish: remove target: %v", err)
	}
	n.info.drop(id, target) // unmounted: no longer published there
	v := n.volume(id)
	if v == nil {
		return &csipb.NodeUnpublishVolumeResponse{}, nil // idempotent
	}
	unlockDS, err := n.lockDataset(ctx, v.DatasetKey)
	if err != nil {
		return nil, err
	}
	defer unlockDS()
	v.Targets = slices.DeleteFunc(v.Targets, func(t string) bool { return t == target })
	delete(v.Pods, target)
	if v.Ephemeral && len(v.Targets) == 0 {
		if err := n.dropVolume(v); err != nil {
			return nil, status.Errorf(codes.Internal, "unpublish: %v", err)
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
	// Copy what is needed under the volume's and its dataset's locks:
	// stage, publish and unpublish change them while the checks below run.
	n := d.node
	unlockVol, err := n.lockVolume(ctx, id)
	if err != nil {
		return nil, err
	}
	var ds *datasetMount
	atPath, atStaging := false, false
	if v := n.volume(id); v != nil {
		unlockDS, err := n.lockDataset(ctx, v.DatasetKey)
		if err != nil {
			unlockVol()
			return nil, err
		}
		if m := n.dataset(v.DatasetKey); m != nil {
			snap := *m
			snap.Users = nil
			ds = &snap
		}
		atStaging = path == v.StagingPath
		atPath = atStaging || slices.Contains(v.Targets, path)
		unlockDS()
	}
	unlockVol()
	if ds == nil {
		return nil, status.Errorf(codes.NotFound, "volume %q is not staged or published on this node", id)
	}
	if !atPath {
		return nil, status.Errorf(codes.NotFound, "volume %q is not at %s", id, path)
	}
	live := path
	if atStaging {
		live = ds.MountPoint // nothing is mounted at the staging path
	}
	if err := checkMount(live); err != nil {
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
func (d *Driver) checkVolumeAndPath(id, what, path string) error {
	if err := checkVolumeID(id); err != nil {
		return err
	}
	return d.checkNodePath(what, path)
}

// checkNodePath accepts a staging or target path only when it is clean and
// lies under the kubelet dir, also once symlinks are resolved: the nearest
// existing of the path and its ancestors is resolved, so that neither a
// symlinked parent nor a symlink at the path itself (mount(2) follows it)
// can lead a bind mount, an unmount or a removal elsewhere. Malformed is
// InvalidArgument; outside the kubelet dir is PermissionDenied.
func (d *Driver) checkNodePath(what, path string) error {
	if err := checkPath(what, path); err != nil {
		return err
	}
	kd := d.cfg.KubeletDir
	if !within(path, kd) && !within(path, d.kubeletReal) {
		return status.Errorf(codes.PermissionDenied, "%s %q is outside the kubelet dir %s (--kubelet-dir)", what, path, kd)
	}
	p := path
	for {
		if _, err := os.Lstat(p); err == nil {
			break
		}
		if p == "/" {
			return nil
		}
		p = filepath.Dir(p)
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return status.Errorf(codes.PermissionDenied, "%s %q: %s cannot be resolved: %v", what, path, p, err)
	}
	if !within(real, d.kubeletReal) {
		return status.Errorf(codes.PermissionDenied, "%s %q leads through a symlink to %s, outside the kubelet dir %s (--kubelet-dir)", what, path, real, kd)
	}
	return nil
}

// within reports whether clean absolute path p is dir or lies under it.
func within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// mountError translates a failure to start a dataset mount into a gRPC
// status: a mount process's exit code (package exitcode, read from its log)
// says whose problem it is; every other failure (the driver's own: state
// dir, launcher, a mount that never became live) is Internal.
func mountError(err error) error {
	var e *mountExit
	if !errors.As(err, &e) {
		return status.Error(codes.Internal, err.Error())
	}
	return status.Error(exitCodeToGRPC(e.failure.Code), err.Error())
}

// exitCodeToGRPC maps the exit codes of `cachefs mount` to gRPC codes.
func exitCodeToGRPC(c exitcode.Code) codes.Code {
	switch c {
	case exitcode.NotFound:
		return codes.NotFound
	case exitcode.PermissionDenied:
		return codes.PermissionDenied
	case exitcode.Usage:
		return codes.InvalidArgument
	case exitcode.Unavailable:
		return codes.Unavailable
	case exitcode.CacheLocked:
		return codes.Aborted // another store holds the cache: a retry may succeed
	case exitcode.CacheUnusable:
		return codes.FailedPrecondition // the node's cache root needs fixing
	}
	return codes.Internal // exitcode.Internal, exitcode.Mountpoint (the driver made it), unknown codes
}
