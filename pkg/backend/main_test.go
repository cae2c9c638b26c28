package backend_test

import (
	"os"
	"testing"

	"github.com/epochfs/epochfs/internal/testenv/ceph"
)

// TestMain stops the Ceph cluster (ceph.Start) that the RGW tests start
// once for this test binary.
func TestMain(m *testing.M) { os.Exit(ceph.Main(m)) }
