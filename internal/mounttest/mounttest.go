// Package mounttest mounts a dataset with pkg/mount for one test, as the
// tests of pkg/mount and reliability/ do.
//
// It lives apart from internal/testenv because testenv must not import
// EpochFS packages: their own tests import testenv.
package mounttest

import (
	"context"
	"syscall"
	"testing"

	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/pkg/mount"
)

// Start mounts cfg in this process (empty Mountpoint and CacheDir become
// temporary directories of t) and unmounts it in t.Cleanup, detaching the
// mount point when a clean unmount fails. The test is skipped (failed
// under CI=true) where FUSE is unavailable, and fails if the mount does.
func Start(t testing.TB, cfg mount.Config) *mount.Mount {
	t.Helper()
	testenv.RequireFUSE(t)
	if cfg.Mountpoint == "" {
		cfg.Mountpoint = t.TempDir()
	}
	if cfg.CacheDir == "" {
		cfg.CacheDir = t.TempDir()
	}
	m, err := mount.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
			_ = syscall.Unmount(cfg.Mountpoint, syscall.MNT_DETACH)
		}
	})
	return m
}
