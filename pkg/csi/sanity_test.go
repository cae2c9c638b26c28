package csi_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
)

// TestSanity runs the official csi-sanity suite against the real driver
// making real FUSE mounts of a posix dataset.
func TestSanity(t *testing.T) {
	td := startDriver(t, nil)
	data := t.TempDir()
	if err := os.WriteFile(filepath.Join(data, "hello.txt"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	work := td.workDir(t)
	cfg := sanity.NewTestConfig()
	cfg.Address = "unix://" + td.sock
	cfg.TargetPath = filepath.Join(work, "target")
	cfg.StagingPath = filepath.Join(work, "staging")
	cfg.TestVolumeParameters = map[string]string{"source": data, "cacheSize": "64MiB"}
	sanity.Test(t, cfg)
}
