package csi_test

import (
	"path/filepath"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/testenv/s3"
	"github.com/epochfs/epochfs/pkg/csi"
)

// TestInlineVolumeRules: inline ephemeral volumes are refused by a driver
// with its defaults; when enabled, only a network source with the pod's own
// secrets is mounted (not a local path, not the node's identity, even where
// persistent volumes may use it); a cacheSize over --max-cache-size is
// refused for every kind of volume. Nothing is left behind.
func TestInlineVolumeRules(t *testing.T) {
	mi := s3.StartMinIO(t)
	mi.MakeBucket(t, "inline-rules")
	mi.PutFiles(t, "inline-rules", "ds/", datagen.Spec{Files: 4, Classes: 1, MedianSize: 1000, MinSize: 10, MaxSize: 4000, Seed: 9}.Plan())
	s3 := "s3://inline-rules/ds?endpoint=" + mi.Endpoint
	secrets := map[string]string{"AWS_ACCESS_KEY_ID": mi.AccessKey, "AWS_SECRET_ACCESS_KEY": mi.SecretKey}
	local, _ := dataset(t)
	inline := func(src string) map[string]string {
		return map[string]string{"source": src, "cacheSize": "16Mi", "csi.storage.k8s.io/ephemeral": "true"}
	}
	publish := func(td *testDriver, vctx, sec map[string]string) error {
		_, err := node(td).NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{
			VolumeId: "vol-inline", TargetPath: filepath.Join(td.workDir(t), "target"), VolumeCapability: readerCap,
			Readonly: true, VolumeContext: vctx, Secrets: sec,
		})
		return err
	}

	off := startDriver(t, func(c *csi.Config) { c.AllowInlineVolumes = false })
	wantRefused(t, "inline volume on a default driver", publish(off, inline(s3), secrets), "--allow-inline-volumes")
	nothingLeft(t, off, off.workDir(t))

	on := startDriver(t, func(c *csi.Config) {
		c.NetworkRules = []string{"s3://inline-rules?endpoint=" + mi.Endpoint} // MinIO is on loopback
		c.AllowNodeCredentials = true
		c.MaxCacheSize = 1 << 30
		c.DefaultCacheSize = 64 << 20
	})
	t.Setenv("AWS_ACCESS_KEY_ID", mi.AccessKey) // the node's identity, which inline volumes never get
	t.Setenv("AWS_SECRET_ACCESS_KEY", mi.SecretKey)
	wantRefused(t, "inline local source", publish(on, inline(local), nil), "only network sources")
	wantRefused(t, "inline local source with secrets", publish(on, inline(local), secrets), "only network sources")
	wantRefused(t, "inline mirror with a local replica", publish(on, inline("mirror:"+s3+","+local), secrets), "only network sources")
	wantRefused(t, "inline network source without secrets", publish(on, inline(s3), nil), "its own credentials")
	nothingLeft(t, on, on.workDir(t))

	big := inline(s3)
	big["cacheSize"] = "2Gi"
	if err := publish(on, big, secrets); status.Code(err) != codes.OutOfRange {
		t.Errorf("inline cacheSize over the limit: %v, want OutOfRange", err)
	}
	staging := filepath.Join(on.workDir(t), "staging")
	_, err := node(on).NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
		VolumeId: "vol-big", StagingTargetPath: staging, VolumeCapability: readerCap,
		VolumeContext: map[string]string{"source": s3, "cacheSize": "2Gi"}, Secrets: secrets,
	})
	if status.Code(err) != codes.OutOfRange {
		t.Errorf("stage cacheSize over the limit: %v, want OutOfRange", err)
	}
	if _, err := controller(on).CreateVolume(ctx, &csipb.CreateVolumeRequest{
		Name: "pvc-big", VolumeCapabilities: []*csipb.VolumeCapability{readerCap}, Parameters: map[string]string{"source": s3, "cacheSize": "2Gi"},
	}); status.Code(err) != codes.OutOfRange {
		t.Errorf("create cacheSize over the limit: %v, want OutOfRange", err)
	}
	nothingLeft(t, on, on.workDir(t))

	target := filepath.Join(on.workDir(t), "target")
	if _, err := node(on).NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{
		VolumeId: "vol-inline", TargetPath: target, VolumeCapability: readerCap, Readonly: true, VolumeContext: inline(s3), Secrets: secrets,
	}); err != nil {
		t.Fatalf("inline network source with the pod's secrets: %v", err)
	}
	unpublish(t, on, "vol-inline", target)
}
