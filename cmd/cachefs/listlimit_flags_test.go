package main

import (
	"testing"

	"github.com/epochfs/epochfs/pkg/fusefs"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
	"github.com/epochfs/epochfs/pkg/units"
)

// TestListingCapFlags: `cachefs mount` has the listing caps' flags, with
// fusefs's defaults (the ones docs/DESIGN.md states).
func TestListingCapFlags(t *testing.T) {
	cmd, rest, err := newRoot().Find(mountapi.CommandOptions{Source: "/d", Mountpoint: "/m", CacheDir: "/c", CacheSize: 1}.Args())
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.ParseFlags(rest); err != nil {
		t.Fatal(err)
	}
	n, err := cmd.Flags().GetInt(mountapi.FlagMaxDirEntries)
	if err != nil || n != fusefs.DefaultMaxDirEntries {
		t.Errorf("--%s default %d, %v; want %d", mountapi.FlagMaxDirEntries, n, err, fusefs.DefaultMaxDirEntries)
	}
	v := cmd.Flags().Lookup(mountapi.FlagMaxListingMemory).Value.String()
	if size, err := units.ParseSize(v); err != nil || size != fusefs.DefaultMaxListingMemory {
		t.Errorf("--%s default %q = %d, %v; want %d", mountapi.FlagMaxListingMemory, v, size, err, fusefs.DefaultMaxListingMemory)
	}
}
