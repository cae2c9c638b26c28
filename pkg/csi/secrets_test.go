package csi_test

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/pkg/csi"
)

// TestSecretsNeverInArgsOrLogs stages an S3 volume with node-stage secrets
// and greps for the secret in the mount process's arguments, the driver's
// log (at debug level, which logs every request), the mount's log and every
// state file but the 0600 secrets file.
func TestSecretsNeverInArgsOrLogs(t *testing.T) {
	mi := testenv.StartMinIO(t)
	mi.MakeBucket(t, "secret")
	files := datagen.Spec{Files: 10, Classes: 2, MedianSize: 5000, MinSize: 100, MaxSize: 20000, Seed: 2}.Plan()
	mi.PutFiles(t, "secret", "ds/", files)
	logs := &testenv.SyncBuffer{}
	td := startDriver(t, func(c *csi.Config) {
		c.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	staging := filepath.Join(td.workDir(t), "staging")
	if err := os.MkdirAll(staging, 0o750); err != nil {
		t.Fatal(err)
	}
	vctx := map[string]string{"source": "s3://secret/ds?endpoint=" + mi.Endpoint, "cacheSize": "16Mi"}
	_, err := node(td).NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
		VolumeId: "vol-s", StagingTargetPath: staging, VolumeCapability: readerCap, VolumeContext: vctx,
		Secrets: map[string]string{"AWS_ACCESS_KEY_ID": mi.AccessKey, "AWS_SECRET_ACCESS_KEY": mi.SecretKey},
	})
	if err != nil {
		t.Fatal(err)
	}
	checkFiles(t, view(t, td, "vol-s", staging), files)

	secret := []byte(mi.SecretKey)
	cmdline := mountCmdline(t, td)
	if bytes.Contains(cmdline, secret) || bytes.Contains(cmdline, []byte(mi.AccessKey)) {
		t.Error("the mount process's arguments hold the credentials")
	}
	if strings.Contains(logs.String(), mi.SecretKey) {
		t.Error("the driver's log holds the secret key")
	}
	if !strings.Contains(logs.String(), "NodeStageVolume") {
		t.Error("the driver did not log the call at all: the grep proves nothing")
	}
	err = filepath.Walk(td.stateDir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() || strings.Contains(p, "/node/mnt/") {
			return nil
		}
		b, rerr := os.ReadFile(p)
		if rerr != nil {
			return nil
		}
		if strings.HasSuffix(p, ".env") {
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("secrets file %s has mode %v, want 0600", p, fi.Mode().Perm())
			}
			return nil
		}
		if bytes.Contains(b, secret) {
			t.Errorf("%s holds the secret key", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	unstage(t, td, "vol-s", staging)
	if m, _ := filepath.Glob(filepath.Join(td.stateDir, "node", "secrets", "*")); len(m) != 0 {
		t.Errorf("secrets files left after the last unstage: %v", m)
	}
}
