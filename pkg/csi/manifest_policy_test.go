package csi_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/epochfs/epochfs/pkg/csi"
)

// TestManifestPolicy: the hostile manifest attributes that the driver once
// accepted with strict network rules and the pod's own S3 keys (the mount
// then read host files, another bucket, the metadata endpoint, another
// export or Ceph as admin) are refused with PermissionDenied naming the
// rule, through NodeStage, an inline NodePublish and CreateVolume, before
// anything is created and before any connection (the refusal comes from
// the policy, never from a mount). Before the fix, stage and publish
// started mounts for all six and CreateVolume recorded them.
func TestManifestPolicy(t *testing.T) {
	// The source's endpoint is a closed loopback port: nothing here dials it.
	const source = "s3://bkt/ds?endpoint=http://127.0.0.1:9"
	td := startDriver(t, func(c *csi.Config) {
		c.NetworkRules = []string{source, "nfs://filer/exports"}
	})
	work := td.workDir(t)
	secrets := map[string]string{"AWS_ACCESS_KEY_ID": "podkey", "AWS_SECRET_ACCESS_KEY": "podsecret"}
	for _, h := range []struct{ name, manifest, stage, inline, create string }{
		{"proc root shadow", "/proc/1/root/etc/shadow", "overlaps /proc", "takes no local manifest", "overlaps /proc"},
		{"dev zero", "/dev/zero", "overlaps /dev", "takes no local manifest", "overlaps /dev"},
		{"internal filer", "nfs://internal-filer/x", "matches none of the node's network rules", "matches none", "matches none"},
		{"other team bucket", "s3://other-team-bucket/m", "matches none of the node's network rules", "matches none", "matches none"},
		// Not s3://b/…: "b" is no valid bucket name
		// (InvalidArgument, also checked below).
		{"metadata endpoint", "s3://bkt/m?endpoint=http://169.254.169.254", "matches none of the node's network rules", "matches none", "matches none"},
		{"ceph admin", "cephfs://admin@mon/x", "has no credentials of its own", "has no credentials of its own", "matches none"},
	} {
		t.Run(h.name, func(t *testing.T) {
			vctx := map[string]string{"source": source, "manifest": h.manifest, "cacheSize": "16Mi"}
			staging := filepath.Join(work, "staging-"+strings.ReplaceAll(h.name, " ", "-"))
			_, err := node(td).NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
				VolumeId: "vol-m", StagingTargetPath: staging, VolumeCapability: readerCap, VolumeContext: vctx, Secrets: secrets,
			})
			wantRefused(t, "stage", err, h.stage)
			wantRefused(t, "stage", err, "manifest")
			inline := map[string]string{"source": source, "manifest": h.manifest, "cacheSize": "16Mi", "csi.storage.k8s.io/ephemeral": "true"}
			target := filepath.Join(work, "target-"+strings.ReplaceAll(h.name, " ", "-"))
			_, err = node(td).NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{
				VolumeId: "vol-mi", TargetPath: target, VolumeCapability: readerCap, Readonly: true, VolumeContext: inline, Secrets: secrets,
			})
			wantRefused(t, "inline publish", err, h.inline)
			_, err = controller(td).CreateVolume(ctx, &csipb.CreateVolumeRequest{
				Name: "pvc-m", VolumeCapabilities: []*csipb.VolumeCapability{readerCap}, Parameters: vctx,
			})
			wantRefused(t, "create", err, h.create)
			for _, p := range []string{staging, target} {
				if _, err := os.Stat(p); !os.IsNotExist(err) {
					t.Errorf("%s was made: %v", p, err)
				}
			}
			nothingLeft(t, td, work)
		})
	}
	// A manifest value no mount could read as one object is malformed.
	for _, m := range []string{"s3://b/m?endpoint=http://169.254.169.254", "s3://bkt/ds/a%20b?endpoint=http://127.0.0.1:9"} {
		_, err := node(td).NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
			VolumeId: "vol-m", StagingTargetPath: filepath.Join(work, "staging-bad"), VolumeCapability: readerCap,
			VolumeContext: map[string]string{"source": source, "manifest": m}, Secrets: secrets,
		})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `parameter "manifest"`) {
			t.Errorf("stage with manifest %s: %v, want InvalidArgument naming the parameter", m, err)
		}
	}
	nothingLeft(t, td, work)
}

// TestManifestNoHostFileOracle: an admin's volume (a PersistentVolume)
// naming a local manifest outside every allowed root is refused by name,
// with the same message whether the file exists or not. Before the fix
// the mount read it, and the FailedMount error said "not a manifest (bad
// magic) (file /etc/passwd)" for a file that exists, another error for
// one that does not.
func TestManifestNoHostFileOracle(t *testing.T) {
	td := startDriver(t, nil)
	data, _ := dataset(t)
	work := td.workDir(t)
	refusal := func(m string) string {
		t.Helper()
		_, err := node(td).NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
			VolumeId: "vol-o", StagingTargetPath: filepath.Join(work, "staging"), VolumeCapability: readerCap,
			VolumeContext: map[string]string{"source": data, "manifest": m, "cacheSize": "16Mi"},
		})
		wantRefused(t, "stage with manifest "+m, err, "not under an allowed local root")
		return strings.ReplaceAll(status.Convert(err).Message(), m, "PATH")
	}
	for _, pair := range [][2]string{{"/etc/passwd", "/etc/no-such-file-epochfs"}, {"/root/.bashrc", "/root/no-such-file-epochfs"}} {
		if a, b := refusal(pair[0]), refusal(pair[1]); a != b {
			t.Errorf("the refusals tell an existing file from a missing one:\n %s\n %s", a, b)
		}
	}
	nothingLeft(t, td, work)
}

// TestManifestAllowed: a valid manifest still works: a local manifest
// under an allowed root, named through a symlink, is mounted by its
// resolved path, and the mount serves the dataset from it.
func TestManifestAllowed(t *testing.T) {
	td := startDriver(t, nil)
	data, files := dataset(t)
	m := indexDataset(t, data)
	dir := t.TempDir()
	file := filepath.Join(dir, "imagenet.efm")
	if _, err := m.WriteFile(file); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "current")
	if err := os.Symlink("imagenet.efm", link); err != nil {
		t.Fatal(err)
	}
	real, _ := filepath.EvalSymlinks(file)
	staging := filepath.Join(td.workDir(t), "staging")
	vctx := map[string]string{"source": data, "manifest": link, "cacheSize": "64Mi"}
	stage(t, td, "vol-a", staging, vctx)
	checkFiles(t, view(t, td, "vol-a", staging), files)
	if args := string(mountCmdline(t, td)); !strings.Contains(args, "\x00--manifest\x00"+real+"\x00") {
		t.Errorf("mount argv %q does not name the resolved manifest %s", args, real)
	}
	unstage(t, td, "vol-a", staging)
}
