//go:build ceph

package cephfs_test

import (
	"os"
	"testing"

	"github.com/epochfs/epochfs/internal/testenv/ceph"
)

// TestMain stops the Ceph cluster (ceph.Start) that this package's tests
// start once for this test binary.
func TestMain(m *testing.M) { os.Exit(ceph.Main(m)) }
