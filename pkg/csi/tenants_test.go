package csi_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/testenv/s3"
	"github.com/epochfs/epochfs/pkg/csi"
)

// TestTenantCredentialIsolation: volumes of one private bucket with other
// credentials never share a mount process. Tenant A (the owner's keys) and
// tenant B (other valid keys, from STS) get two mounts; tenants with wrong
// or no credentials cannot read A's data, and A's mount and secrets file
// are untouched by their attempts.
func TestTenantCredentialIsolation(t *testing.T) {
	mi := s3.StartMinIO(t)
	mi.MakeBucket(t, "private")
	files := datagen.Spec{Files: 8, Classes: 2, MedianSize: 4000, MinSize: 100, MaxSize: 10000, Seed: 9}.Plan()
	mi.PutFiles(t, "private", "ds/", files)
	sts, err := credentials.NewSTSAssumeRole("http://"+mi.Host, credentials.STSAssumeRoleOptions{
		AccessKey: mi.AccessKey, SecretKey: mi.SecretKey, Location: "us-east-1",
	})
	if err != nil {
		t.Fatal(err)
	}
	bCreds, err := sts.GetWithContext(nil)
	if err != nil {
		t.Fatalf("STS AssumeRole: %v", err)
	}
	// No credentials in the driver's environment: the node lends nothing.
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	td := startDriver(t, func(c *csi.Config) {
		c.AllowNodeCredentials = true
		c.NetworkRules = []string{"s3://private?endpoint=" + mi.Endpoint} // MinIO is on loopback
	})
	vctx := map[string]string{"source": "s3://private/ds?endpoint=" + mi.Endpoint + "&region=us-east-1", "cacheSize": "16Mi"}
	work := td.workDir(t)
	// stageWith stages volume id with secrets and, when that works,
	// publishes it; it returns the staging path and the target to read.
	stageWith := func(id string, secrets map[string]string) (staging, target string, err error) {
		staging = filepath.Join(work, id)
		if err := os.MkdirAll(staging, 0o750); err != nil {
			t.Fatal(err)
		}
		_, err = node(td).NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
			VolumeId: id, StagingTargetPath: staging, VolumeCapability: readerCap, VolumeContext: vctx, Secrets: secrets,
		})
		if err != nil {
			return staging, "", err
		}
		return staging, view(t, td, id, staging), nil
	}

	a := map[string]string{"AWS_ACCESS_KEY_ID": mi.AccessKey, "AWS_SECRET_ACCESS_KEY": mi.SecretKey}
	stagingA, readA, err := stageWith("vol-a", a)
	if err != nil {
		t.Fatalf("stage A: %v", err)
	}
	checkFiles(t, readA, files)
	secretFiles := func() map[string][]byte {
		m := map[string][]byte{}
		ents, _ := filepath.Glob(filepath.Join(td.stateDir, "node", "secrets", "*.env"))
		for _, e := range ents {
			b, _ := os.ReadFile(e)
			m[e] = b
		}
		return m
	}
	aFiles := secretFiles()
	if len(aFiles) != 1 {
		t.Fatalf("%d secrets files after A, want 1", len(aFiles))
	}

	b := map[string]string{"AWS_ACCESS_KEY_ID": bCreds.AccessKeyID, "AWS_SECRET_ACCESS_KEY": bCreds.SecretAccessKey, "AWS_SESSION_TOKEN": bCreds.SessionToken}
	stagingB, readB, err := stageWith("vol-b", b)
	if err != nil {
		t.Fatalf("stage B: %v", err)
	}
	checkFiles(t, readB, files)
	if p := mountProcesses(t, td.stateDir); len(p) != 2 {
		t.Errorf("%d mount processes for two tenants with other credentials, want 2", len(p))
	}

	for name, secrets := range map[string]map[string]string{
		"wrong secret key": {"AWS_ACCESS_KEY_ID": mi.AccessKey, "AWS_SECRET_ACCESS_KEY": "not-the-secret-0123456789"},
		"no credentials":   nil,
	} {
		t.Run(name, func(t *testing.T) {
			staging, read, err := stageWith("vol-x", secrets)
			if err == nil {
				// Its own mount: it must read nothing of A's.
				if _, rerr := os.ReadFile(filepath.Join(read, files[0].Path)); rerr == nil {
					t.Fatal("a tenant without A's credentials reads A's data")
				}
				unstage(t, td, "vol-x", staging)
			} else if status.Code(err) != codes.PermissionDenied {
				t.Fatalf("stage: %v, want PermissionDenied", err)
			}
			checkFiles(t, readA, files)
			for f, want := range aFiles {
				if got, err := os.ReadFile(f); err != nil || !bytes.Equal(got, want) {
					t.Errorf("A's secrets file %s changed (%v)", f, err)
				}
			}
		})
	}
	unstage(t, td, "vol-b", stagingB)
	checkFiles(t, readA, files)
	unstage(t, td, "vol-a", stagingA)
	if m, _ := filepath.Glob(filepath.Join(td.stateDir, "node", "secrets", "*")); len(m) != 0 {
		t.Errorf("secrets files left: %v", m)
	}
}

// TestFailedStartLeavesNoSecrets: a stage whose mount process fails (wrong
// credentials) leaves no secrets file, record or mount point behind, though
// the volume was never recorded (so unstage has nothing to clean).
func TestFailedStartLeavesNoSecrets(t *testing.T) {
	mi := s3.StartMinIO(t)
	mi.MakeBucket(t, "private")
	mi.Put(t, "private", "ds/a.jpg", []byte("data"))
	td := startDriver(t, func(c *csi.Config) { c.NetworkRules = []string{"s3://private?endpoint=" + mi.Endpoint} }) // MinIO is on loopback
	staging := filepath.Join(td.workDir(t), "staging")
	_, err := node(td).NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
		VolumeId: "vol-f", StagingTargetPath: staging, VolumeCapability: readerCap,
		VolumeContext: map[string]string{"source": "s3://private/ds?endpoint=" + mi.Endpoint + "&region=us-east-1", "cacheSize": "16Mi"},
		Secrets:       map[string]string{"AWS_ACCESS_KEY_ID": mi.AccessKey, "AWS_SECRET_ACCESS_KEY": "wrong-secret-0123456789"},
	})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("stage: %v, want PermissionDenied", err)
	}
	unstage(t, td, "vol-f", staging)
	for _, sub := range []string{"secrets", "datasets", "volumes", "mnt"} {
		if ents, _ := os.ReadDir(filepath.Join(td.stateDir, "node", sub)); len(ents) > 0 {
			t.Errorf("node/%s holds %d entries after a failed stage", sub, len(ents))
		}
	}
}

// TestOrphanSecretsRemovedAtStart: secrets files the node has no dataset
// for (a driver killed between writing them and recording the dataset) are
// removed when the driver starts; a recorded dataset's are kept.
func TestOrphanSecretsRemovedAtStart(t *testing.T) {
	mi := s3.StartMinIO(t)
	mi.MakeBucket(t, "orphans")
	mi.PutFiles(t, "orphans", "ds/", datagen.Spec{Files: 4, Classes: 1, MedianSize: 1000, MinSize: 10, MaxSize: 4000, Seed: 3}.Plan())
	secrets := map[string]string{"AWS_ACCESS_KEY_ID": mi.AccessKey, "AWS_SECRET_ACCESS_KEY": mi.SecretKey}
	var stateDir string
	rules := []string{"s3://orphans?endpoint=" + mi.Endpoint} // MinIO is on loopback
	td := startDriver(t, func(c *csi.Config) { stateDir = c.StateDir; c.NetworkRules = rules })
	staging := filepath.Join(td.workDir(t), "staging")
	vctx := map[string]string{"source": "s3://orphans/ds?endpoint=" + mi.Endpoint, "cacheSize": "16Mi"}
	if _, err := node(td).NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
		VolumeId: "vol-o", StagingTargetPath: staging, VolumeCapability: readerCap, VolumeContext: vctx, Secrets: secrets,
	}); err != nil {
		t.Fatal(err)
	}
	live, _ := filepath.Glob(filepath.Join(stateDir, "node", "secrets", "*.env"))
	if len(live) != 1 {
		t.Fatalf("secrets files of the staged dataset: %v, want one", live)
	}
	orphans := []string{filepath.Join(stateDir, "node", "secrets", "ds-0123456789abcdef01234567.env"), filepath.Join(stateDir, "node", "secrets", ".ds-x.env123")}
	for _, o := range orphans {
		if err := os.WriteFile(o, []byte("AWS_ACCESS_KEY_ID=x\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	// A second driver on the same state dir: what a restart sees.
	startDriver(t, func(c *csi.Config) {
		c.StateDir = stateDir
		c.CacheRoot = td.cacheDir
		c.KubeletDir = td.kubeletDir
		c.NetworkRules = rules
	})
	for _, o := range orphans {
		if _, err := os.Stat(o); !os.IsNotExist(err) {
			t.Errorf("orphaned secrets file %s still there after a driver start (%v)", filepath.Base(o), err)
		}
	}
	if _, err := os.Stat(live[0]); err != nil {
		t.Errorf("the staged dataset's secrets file was removed: %v", err)
	}
	unstage(t, td, "vol-o", staging)
}
