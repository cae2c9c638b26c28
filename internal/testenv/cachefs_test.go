package testenv

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// TestStartCachefs mounts a directory with a real `cachefs mount`, reads a
// file through it, and finds the mount gone after the test's cleanup; a
// mount that cannot start fails the test with its output.
func TestStartCachefs(t *testing.T) {
	RequireFUSE(t)
	bin := GoBuild(t, "./cmd/cachefs")
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "a.txt"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	var mnt string
	t.Run("mounted", func(t *testing.T) {
		c := StartCachefs(t, bin, mountapi.CommandOptions{
			Source: src, Mountpoint: t.TempDir(), CacheDir: t.TempDir(), CacheSize: 1 << 20, Manifest: mountapi.ManifestNone,
		})
		mnt = c.Opts.Mountpoint
		if b, err := os.ReadFile(filepath.Join(mnt, "a.txt")); err != nil || string(b) != "hello" {
			t.Fatalf("read through the mount: %q, %v", b, err)
		}
	})
	if mnt == "" {
		return
	}
	if ok, err := Mounted(mnt); err != nil || ok {
		t.Errorf("after cleanup: Mounted(%s) = %v, %v; want false", mnt, ok, err)
	}
	end := RunHelper(t, func(tb testing.TB) {
		StartCachefs(tb, bin, mountapi.CommandOptions{
			Source: filepath.Join(src, "missing"), Mountpoint: t.TempDir(), CacheDir: t.TempDir(), CacheSize: 1 << 20,
		})
	})
	if !end.Fatal {
		t.Errorf("a mount of a missing source: fatal=%v skip=%v, want the test failed (%q)", end.Fatal, end.Skip, end.Msg)
	}
}
