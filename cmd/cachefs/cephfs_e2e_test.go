//go:build ceph

package main_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/internal/testenv/ceph"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// cephSpec is the CephFS mount test's dataset: 2,000 files in 10 classes.
var cephSpec = datagen.Spec{Files: 2000, Classes: 10, MedianSize: 20_000, MinSize: 1000, MaxSize: 200_000, Seed: 14}

// TestMountBinaryCephFS mounts a cephfs:// dataset of 2,000 files with a
// cachefs built with the ceph tag (go-ceph, libcephfs; no kernel mount),
// reads it byte for byte through three shuffled epochs and checks the NR
// byte hit ratio of each from /metrics (runE2EBin). The dataset is written
// into CephFS with python3-cephfs (ceph.Cluster.CopyIn); the key comes
// from the keyring that CEPH_CONF names.
func TestMountBinaryCephFS(t *testing.T) {
	testenv.RequireFUSE(t)
	c := ceph.Start(t)
	local, files := testenv.WriteDataset(t, cephSpec)
	dir := fmt.Sprintf("/epochfs-e2e/%d/train", os.Getpid())
	c.CopyIn(t, local, dir)
	// A sibling directory that must not show through the mount.
	c.WriteFiles(t, dir+"2", map[string][]byte{"decoy.jpg": []byte("not part of the dataset")})
	bin := testenv.GoBuildTags(t, "./cmd/cachefs", "ceph,pacific")
	runE2EBin(t, bin, c.URL(dir), files, []string{"CEPH_CONF=" + c.Conf}, mountapi.CommandOptions{})
}
