package csi_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/testenv/s3"
	"github.com/epochfs/epochfs/pkg/csi"
)

// TestSourcePolicy stages and inline-publishes hostile sources through the
// real driver: every one is PermissionDenied naming its rule, and nothing
// is left behind (no mount, no mount process, no state or secrets file, no
// target dir). A dataset under the allowed root works, mounted by its
// resolved path.
func TestSourcePolicy(t *testing.T) {
	td := startDriver(t, nil)
	data, files := dataset(t)
	work := td.workDir(t)
	outside := filepath.Join(t.TempDir(), "links")
	if err := os.MkdirAll(outside, 0o750); err != nil {
		t.Fatal(err)
	}
	for name, to := range map[string]string{"etc": "/etc", "root": "/", "state": td.stateDir, "data": data} {
		if err := os.Symlink(to, filepath.Join(outside, name)); err != nil {
			t.Fatal(err)
		}
	}
	rel := func(from, to string) string { r, _ := filepath.Rel(from, to); return from + "/" + r }
	hostile := []struct{ name, source, rule string }{
		{"root", "/", "whole file system"},
		{"etc", "/etc", "not under an allowed local root"},
		{"etc shadow", "/etc/shadow", "not under an allowed local root"},
		{"proc 1 root", "/proc/1/root", "overlaps /proc"},
		{"proc 1 root etc", "/proc/1/root/etc", "overlaps /proc"},
		{"state dir", td.stateDir, "overlaps"},
		{"state dir secrets", filepath.Join(td.stateDir, "node", "secrets"), "overlaps"},
		{"cache root", td.cacheDir, "overlaps"},
		{"kubelet dir", td.kubeletDir, "overlaps"},
		{"allowed root itself holds the state dir", os.TempDir(), "overlaps"},
		{"symlink to etc", filepath.Join(outside, "etc"), "not under an allowed local root"},
		{"symlink to root", filepath.Join(outside, "root"), "whole file system"},
		{"symlink to the state dir", filepath.Join(outside, "state"), "overlaps"},
		{"dotdot to etc", data + "/../../../../../etc", "not under an allowed local root"},
		{"dotdot to the state dir", rel(data, td.stateDir), "overlaps"},
		{"file url to etc", "file:///tmp/../etc", "not under an allowed local root"},
	}
	for _, h := range hostile {
		t.Run(h.name, func(t *testing.T) {
			vctx := map[string]string{"source": h.source, "cacheSize": "16Mi"}
			staging := filepath.Join(work, "staging-"+strings.ReplaceAll(h.name, " ", "-"))
			_, err := node(td).NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
				VolumeId: "vol-h", StagingTargetPath: staging, VolumeCapability: readerCap, VolumeContext: vctx,
			})
			wantRefused(t, "stage", err, h.rule)
			if _, err := os.Stat(staging); !os.IsNotExist(err) {
				t.Errorf("stage made the staging path: %v", err)
			}
			inline := map[string]string{"source": h.source, "cacheSize": "16Mi", "csi.storage.k8s.io/ephemeral": "true"}
			target := filepath.Join(work, "target-"+strings.ReplaceAll(h.name, " ", "-"))
			_, err = node(td).NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{
				VolumeId: "vol-i", TargetPath: target, VolumeCapability: readerCap, Readonly: true, VolumeContext: inline,
			})
			wantRefused(t, "inline publish", err, h.rule)
			if _, err := os.Stat(target); !os.IsNotExist(err) {
				t.Errorf("publish made the target path: %v", err)
			}
			_, err = controller(td).CreateVolume(ctx, &csipb.CreateVolumeRequest{
				Name: "pvc-h", VolumeCapabilities: []*csipb.VolumeCapability{readerCap}, Parameters: vctx,
			})
			wantRefused(t, "create", err, "")
			nothingLeft(t, td, work)
		})
	}

	t.Run("allowed root", func(t *testing.T) {
		staging, target := filepath.Join(work, "ok-staging"), filepath.Join(work, "ok-target")
		vctx := map[string]string{"source": filepath.Join(outside, "data"), "cacheSize": "64Mi"}
		stage(t, td, "vol-ok", staging, vctx)
		publish(t, td, "vol-ok", staging, target, vctx)
		checkFiles(t, target, files)
		if args := strings.Split(string(mountCmdline(t, td)), "\x00"); args[2] != data {
			t.Errorf("mounted source %q, want the resolved path %q", args[2], data)
		}
		unpublish(t, td, "vol-ok", target)
		unstage(t, td, "vol-ok", staging)
		for _, dir := range []string{work, td.stateDir} {
			if m := mountsUnder(t, dir); len(m) > 0 {
				t.Errorf("mounted after unstage: %v", m)
			}
		}
	})
}

// TestSourcePolicyNetwork: an S3 source without secrets would read with
// the node's identity, so it is refused unless AllowNodeCredentials.
func TestSourcePolicyNetwork(t *testing.T) {
	mi := s3.StartMinIO(t)
	mi.MakeBucket(t, "private")
	files := datagen.Spec{Files: 8, Classes: 2, MedianSize: 4000, MinSize: 100, MaxSize: 10000, Seed: 5}.Plan()
	mi.PutFiles(t, "private", "ds/", files)
	// The node's own identity: what a mount process without secrets inherits.
	t.Setenv("AWS_ACCESS_KEY_ID", mi.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", mi.SecretKey)
	vctx := map[string]string{"source": "s3://private/ds?endpoint=" + mi.Endpoint, "cacheSize": "16Mi"}

	td := startDriver(t, nil)
	work := td.workDir(t)
	staging := filepath.Join(work, "staging")
	_, err := node(td).NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
		VolumeId: "vol-n", StagingTargetPath: staging, VolumeCapability: readerCap, VolumeContext: vctx,
	})
	wantRefused(t, "stage without secrets", err, "--allow-node-credentials")
	// CephFS secrets are no S3 credentials: with only those, the s3 source
	// would read with the node's AWS identity.
	_, err = node(td).NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
		VolumeId: "vol-c", StagingTargetPath: staging, VolumeCapability: readerCap, VolumeContext: vctx,
		Secrets: map[string]string{"userID": "reader", "userKey": "QVFBPT0="},
	})
	wantRefused(t, "stage with only CephFS secrets", err, "--allow-node-credentials")
	// An nfs export reads with the node's address whatever the secrets say:
	// without a rule naming it, refused.
	_, err = node(td).NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
		VolumeId: "vol-nfs", StagingTargetPath: staging, VolumeCapability: readerCap,
		VolumeContext: map[string]string{"source": "nfs://127.0.0.1/exports/ds", "cacheSize": "16Mi"},
		Secrets:       map[string]string{"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"},
	})
	wantRefused(t, "nfs stage without a rule", err, "--network-rules nfs://")
	_, err = node(td).NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
		VolumeId: "vol-c", StagingTargetPath: staging, VolumeCapability: readerCap, VolumeContext: vctx,
		Secrets: map[string]string{"userID": "reader"},
	})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "userID and userKey") {
		t.Errorf("stage with half a CephFS pair: %v, want InvalidArgument naming userID and userKey", err)
	}
	inline := map[string]string{"source": vctx["source"], "csi.storage.k8s.io/ephemeral": "true"}
	_, err = node(td).NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{
		VolumeId: "vol-i", TargetPath: filepath.Join(work, "target"), VolumeCapability: readerCap, Readonly: true, VolumeContext: inline,
	})
	wantRefused(t, "inline publish without secrets", err, "--allow-node-credentials")
	nothingLeft(t, td, work)

	// CreateVolume sees no secrets: it does not judge credentials.
	if _, err := controller(td).CreateVolume(ctx, &csipb.CreateVolumeRequest{
		Name: "pvc-n", VolumeCapabilities: []*csipb.VolumeCapability{readerCap}, Parameters: vctx,
	}); err != nil {
		t.Errorf("create: %v", err)
	}

	// Network rules: a bucket outside them is refused even with secrets.
	ruled := startDriver(t, func(c *csi.Config) {
		c.NetworkRules = []string{"s3://other?endpoint=" + mi.Endpoint}
	})
	staging = filepath.Join(ruled.workDir(t), "staging")
	_, err = node(ruled).NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
		VolumeId: "vol-r", StagingTargetPath: staging, VolumeCapability: readerCap, VolumeContext: vctx,
		Secrets: map[string]string{"AWS_ACCESS_KEY_ID": mi.AccessKey, "AWS_SECRET_ACCESS_KEY": mi.SecretKey},
	})
	wantRefused(t, "stage outside the network rules", err, "network rules")
	nothingLeft(t, ruled, work)

	lending := startDriver(t, func(c *csi.Config) {
		c.AllowNodeCredentials = true
		c.NetworkRules = []string{"s3://private?endpoint=" + mi.Endpoint} // MinIO is on loopback
	})
	staging = filepath.Join(lending.workDir(t), "staging")
	stage(t, lending, "vol-n", staging, vctx)
	checkFiles(t, view(t, lending, "vol-n", staging), files)
	unstage(t, lending, "vol-n", staging)
}

func wantRefused(t *testing.T, what string, err error, rule string) {
	t.Helper()
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("%s: got %v, want PermissionDenied", what, err)
		return
	}
	if !strings.Contains(status.Convert(err).Message(), rule) {
		t.Errorf("%s: %q does not name the rule (%q)", what, status.Convert(err).Message(), rule)
	}
}

// nothingLeft fails the test if the driver left a mount under work or its
// state dir, a mount process, a record, secrets file or mount point, or a
// cache directory.
func nothingLeft(t *testing.T, td *testDriver, work string) {
	t.Helper()
	nothingLeftBut(t, td, work, 0)
}

// nothingLeftBut is nothingLeft where the cache root may keep the caches of
// keepCaches datasets that were staged and released (they are kept for the
// next stage of the dataset).
func nothingLeftBut(t *testing.T, td *testDriver, work string, keepCaches int) {
	t.Helper()
	for _, dir := range []string{work, td.stateDir, td.cacheDir} {
		if m := mountsUnder(t, dir); len(m) > 0 {
			t.Errorf("mounted: %v", m)
		}
	}
	if p := mountProcesses(t, td.stateDir); len(p) > 0 {
		t.Errorf("mount processes left: %v", p)
	}
	for _, sub := range []string{"datasets", "volumes", "secrets", "mnt"} {
		if ents, _ := os.ReadDir(filepath.Join(td.stateDir, "node", sub)); len(ents) > 0 {
			t.Errorf("node/%s holds %d entries", sub, len(ents))
		}
	}
	if ents, _ := os.ReadDir(td.cacheDir); len(ents) != keepCaches {
		t.Errorf("cache root holds %d entries, want %d", len(ents), keepCaches)
	}
}

// TestNodePathsUnderKubeletDir: staging paths and targets outside the
// kubelet dir, or led out of it by a symlink, are refused before anything
// is mounted, created or removed.
func TestNodePathsUnderKubeletDir(t *testing.T) {
	td := startDriver(t, nil)
	data, _ := dataset(t)
	work := td.workDir(t)
	elsewhere := t.TempDir()
	if err := os.Symlink(elsewhere, filepath.Join(work, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(work, "etc")); err != nil {
		t.Fatal(err)
	}
	vctx := map[string]string{"source": data, "cacheSize": "16Mi"}
	inline := map[string]string{"source": data, "cacheSize": "16Mi", "csi.storage.k8s.io/ephemeral": "true"}
	for _, tc := range []struct{ name, path, rule string }{
		{"outside", filepath.Join(elsewhere, "staging"), "outside the kubelet dir"},
		{"etc", "/etc/x", "outside the kubelet dir"},
		{"symlinked parent", filepath.Join(work, "escape", "staging"), "through a symlink"},
		{"symlink itself", filepath.Join(work, "etc"), "through a symlink"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := node(td).NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
				VolumeId: "vol-p", StagingTargetPath: tc.path, VolumeCapability: readerCap, VolumeContext: vctx,
			})
			wantRefused(t, "stage", err, tc.rule)
			_, err = node(td).NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{
				VolumeId: "vol-i", TargetPath: tc.path, VolumeCapability: readerCap, Readonly: true, VolumeContext: inline,
			})
			wantRefused(t, "inline publish", err, tc.rule)
			_, err = node(td).NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: "vol-i", TargetPath: tc.path})
			wantRefused(t, "unpublish", err, tc.rule)
			_, err = node(td).NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: "vol-p", StagingTargetPath: tc.path})
			wantRefused(t, "unstage", err, tc.rule)
			if ents, _ := os.ReadDir(elsewhere); len(ents) != 0 {
				t.Errorf("something was created outside the kubelet dir: %d entries", len(ents))
			}
			if _, err := os.Lstat(filepath.Join(work, "etc")); err != nil {
				t.Errorf("the symlink was removed: %v", err)
			}
			nothingLeft(t, td, work)
			if m := mountsUnder(t, elsewhere); len(m) > 0 {
				t.Errorf("mounted: %v", m)
			}
		})
	}
}
