package csi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/epochfs/epochfs/pkg/volattr"
)

// controllerState records created volumes so that CreateVolume is idempotent
// and a repeated name with other parameters is AlreadyExists. It holds no
// data: DeleteVolume forgets the record and never touches the dataset.
//
// dir is immutable; mu serialises changes.
type controllerState struct {
	dir string
	mu  sync.Mutex
}

type controllerVolume struct {
	Name     string       `json:"name"`
	ID       string       `json:"id"`
	Params   volumeParams `json:"params"`
	Capacity int64        `json:"capacityBytes"`
}

func newControllerState(dir string) (*controllerState, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return &controllerState{dir: dir}, nil
}

// volumeIDFor is the deterministic volume id of a CreateVolume name.
func volumeIDFor(name string) string {
	sum := sha256.Sum256([]byte(name))
	return "cfs-" + hex.EncodeToString(sum[:16])
}

func (c *controllerState) path(id string) string { return filepath.Join(c.dir, id+".json") }

func (d *Driver) ControllerGetCapabilities(context.Context, *csipb.ControllerGetCapabilitiesRequest) (*csipb.ControllerGetCapabilitiesResponse, error) {
	return &csipb.ControllerGetCapabilitiesResponse{Capabilities: []*csipb.ControllerServiceCapability{{
		Type: &csipb.ControllerServiceCapability_Rpc{Rpc: &csipb.ControllerServiceCapability_RPC{
			Type: csipb.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		}},
	}}}, nil
}

func (d *Driver) CreateVolume(ctx context.Context, req *csipb.CreateVolumeRequest) (*csipb.CreateVolumeResponse, error) {
	name := req.GetName()
	if name == "" {
		return nil, status.Error(codes.InvalidArgument, "volume name is required")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume capabilities are required")
	}
	for _, c := range req.GetVolumeCapabilities() {
		if err := d.checkCapability(c, false, false); err != nil {
			return nil, err
		}
	}
	if req.GetVolumeContentSource() != nil {
		return nil, status.Error(codes.InvalidArgument, "volume content sources (snapshots, clones) are not supported: a dataset volume is a view of its source URL")
	}
	params, err := d.params(req.GetParameters())
	if err != nil {
		return nil, err
	}
	if err := d.checkSourceEarly(params); err != nil {
		return nil, err
	}
	// The claim's identity (external-provisioner --extra-create-metadata,
	// csi-driver --mode provisioner) goes into the PV's attributes: the
	// node charges the volume to the namespace (nsbudget.go) and names the
	// claim in its metrics.
	identity, err := claimIdentityOf(req.GetParameters())
	if err != nil {
		return nil, err
	}
	capRange := req.GetCapacityRange()
	if capRange.GetLimitBytes() < 0 || capRange.GetRequiredBytes() < 0 ||
		(capRange.GetLimitBytes() > 0 && capRange.GetRequiredBytes() > capRange.GetLimitBytes()) {
		return nil, status.Error(codes.OutOfRange, "capacity range: required bytes exceed the limit or are negative")
	}
	// A dataset volume has no size of its own; the requested capacity is
	// recorded and echoed so that a repeated request can be compared.
	capacity := capRange.GetRequiredBytes()
	if capacity == 0 {
		capacity = capRange.GetLimitBytes()
	}
	v := controllerVolume{Name: name, ID: volumeIDFor(name), Params: params, Capacity: capacity}

	cs := d.controller
	cs.mu.Lock()
	defer cs.mu.Unlock()
	var old controllerVolume
	switch err := readJSON(cs.path(v.ID), &old); {
	case err == nil:
		if !reflect.DeepEqual(old, v) {
			return nil, status.Errorf(codes.AlreadyExists, "volume %q exists with other parameters or capacity", name)
		}
	case errors.Is(err, os.ErrNotExist):
		if err := writeJSON(cs.path(v.ID), v); err != nil {
			return nil, status.Errorf(codes.Internal, "record volume: %v", err)
		}
	default:
		return nil, status.Errorf(codes.Internal, "read volume record: %v", err)
	}
	vctx := params.Attributes()
	maps.Copy(vctx, identity)
	return &csipb.CreateVolumeResponse{Volume: &csipb.Volume{
		VolumeId:      v.ID,
		CapacityBytes: v.Capacity,
		VolumeContext: vctx,
	}}, nil
}

// claimIdentity are the --extra-create-metadata keys CreateVolume copies
// into the volume context, each with the check its value must pass (a
// namespace is a DNS label, the names DNS subdomains).
var claimIdentity = []struct {
	key   string
	check func(string) []string
}{
	{volattr.ClaimNamespace, validation.IsDNS1123Label},
	{volattr.ClaimName, validation.IsDNS1123Subdomain},
	{volattr.PVName, validation.IsDNS1123Subdomain},
}

// claimIdentityOf returns the claim identity keys present in params; a
// value that is no Kubernetes name is InvalidArgument.
func claimIdentityOf(params map[string]string) (map[string]string, error) {
	out := map[string]string{}
	for _, k := range claimIdentity {
		v := params[k.key]
		if v == "" {
			continue
		}
		if errs := k.check(v); len(errs) > 0 {
			return nil, status.Errorf(codes.InvalidArgument, "parameter %q: %q: %s", k.key, v, strings.Join(errs, "; "))
		}
		out[k.key] = v
	}
	return out, nil
}

// DeleteVolume forgets a volume. It never deletes dataset data.
func (d *Driver) DeleteVolume(ctx context.Context, req *csipb.DeleteVolumeRequest) (*csipb.DeleteVolumeResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id is required")
	}
	if checkVolumeID(id) != nil {
		return &csipb.DeleteVolumeResponse{}, nil // not one of ours: nothing to do
	}
	cs := d.controller
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if err := removeFile(cs.path(id)); err != nil {
		return nil, status.Errorf(codes.Internal, "forget volume: %v", err)
	}
	return &csipb.DeleteVolumeResponse{}, nil
}

func (d *Driver) ValidateVolumeCapabilities(ctx context.Context, req *csipb.ValidateVolumeCapabilitiesRequest) (*csipb.ValidateVolumeCapabilitiesResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id is required")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume capabilities are required")
	}
	var v controllerVolume
	if checkVolumeID(id) != nil || readJSON(d.controller.path(id), &v) != nil {
		return nil, status.Errorf(codes.NotFound, "volume %q not found", id)
	}
	for _, c := range req.GetVolumeCapabilities() {
		if err := d.checkCapability(c, false, false); err != nil {
			return &csipb.ValidateVolumeCapabilitiesResponse{Message: status.Convert(err).Message()}, nil
		}
	}
	if len(req.GetParameters()) > 0 {
		if p, err := parseParams(req.GetParameters(), d.cfg.DefaultCacheSize); err != nil || !reflect.DeepEqual(p, v.Params) {
			return &csipb.ValidateVolumeCapabilitiesResponse{Message: "parameters differ from the volume's"}, nil
		}
	}
	return &csipb.ValidateVolumeCapabilitiesResponse{Confirmed: &csipb.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      req.GetVolumeContext(),
		VolumeCapabilities: req.GetVolumeCapabilities(),
		Parameters:         req.GetParameters(),
	}}, nil
}
