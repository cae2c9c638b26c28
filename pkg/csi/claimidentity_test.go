package csi_test

import (
	"context"
	"path/filepath"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/epochfs/epochfs/pkg/csi"
	"github.com/epochfs/epochfs/pkg/volattr"
)

// TestCreateVolumeClaimIdentity: the --extra-create-metadata keys go into
// the volume context as they are; a value that is no Kubernetes name is
// InvalidArgument naming the key.
func TestCreateVolumeClaimIdentity(t *testing.T) {
	dir := t.TempDir()
	d, err := csi.New(csi.Config{Endpoint: "unix://" + filepath.Join(dir, "csi.sock"), Mode: csi.ModeController, StateDir: filepath.Join(dir, "state")})
	if err != nil {
		t.Fatal(err)
	}
	caps := []*csipb.VolumeCapability{{AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY}}}
	params := map[string]string{volattr.Source: "s3://bucket/p?endpoint=http://127.0.0.1:9",
		volattr.ClaimName: "imagenet", volattr.ClaimNamespace: "team-a", volattr.PVName: "pvc-1", "csi.storage.k8s.io/other": "x"}
	resp, err := d.CreateVolume(context.Background(), &csipb.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: caps, Parameters: params})
	if err != nil {
		t.Fatal(err)
	}
	vctx := resp.GetVolume().GetVolumeContext()
	for _, k := range []string{volattr.ClaimName, volattr.ClaimNamespace, volattr.PVName} {
		if vctx[k] != params[k] {
			t.Errorf("volume context %s = %q, want %q", k, vctx[k], params[k])
		}
	}
	if _, ok := vctx["csi.storage.k8s.io/other"]; ok {
		t.Error("volume context carries a csi.storage.k8s.io/ key that is no claim identity")
	}
	if _, err := volattr.Parse(vctx, 1<<20); err != nil {
		t.Errorf("the node's volattr.Parse refuses the volume context: %v", err)
	}
	for _, bad := range []map[string]string{{volattr.ClaimNamespace: "Team_A"}, {volattr.ClaimName: "a/b"}, {volattr.PVName: string(make([]byte, 300))}} {
		bad[volattr.Source] = params[volattr.Source]
		_, err := d.CreateVolume(context.Background(), &csipb.CreateVolumeRequest{Name: "pvc-2", VolumeCapabilities: caps, Parameters: bad})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("CreateVolume with %v: %v, want InvalidArgument", bad, err)
		}
	}
}
