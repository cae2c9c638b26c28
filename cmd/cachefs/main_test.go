package main_test

import (
	"os"
	"testing"

	"github.com/epochfs/epochfs/internal/testenv"
)

// TestMain stops the Ceph cluster (testenv.StartCeph) that the RGW and
// CephFS mount tests start once for this test binary.
func TestMain(m *testing.M) { os.Exit(testenv.CephMain(m)) }
