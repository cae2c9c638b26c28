package mount_test

import (
	"testing"

	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/manifest"
	"github.com/epochfs/epochfs/pkg/metrics"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// TestContractNames: the names that mountapi, pkg/metrics and the node
// plugin spell without importing the packages that implement them equal
// those packages' own.
func TestContractNames(t *testing.T) {
	for _, tc := range []struct{ what, got, want string }{
		{"mountapi.FlagMaxDirEntries", mountapi.FlagMaxDirEntries, backend.CapDirEntries},
		{"mountapi.FlagMaxListingMemory", mountapi.FlagMaxListingMemory, backend.CapListingMemory},
		{"metrics.CapDirEntries", metrics.CapDirEntries, backend.CapDirEntries},
		{"metrics.CapListingMemory", metrics.CapListingMemory, backend.CapListingMemory},
		{"metrics.CapListingPages", metrics.CapListingPages, backend.CapListingPages},
		{"mountapi.ManifestAuto", mountapi.ManifestAuto, manifest.LocAuto},
		{"mountapi.ManifestNone", mountapi.ManifestNone, manifest.LocNone},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %q, want %q", tc.what, tc.got, tc.want)
		}
	}
}
