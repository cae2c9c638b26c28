package mount_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/epochfs/epochfs/pkg/manifest"
	"github.com/epochfs/epochfs/pkg/manifest/manifesttest"
	"github.com/epochfs/epochfs/pkg/mount"
	"github.com/epochfs/epochfs/pkg/mount/exitcode"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// TestManifestMaxMemory: a mount refuses, before decompressing anything, a
// manifest whose header announces more memory than --manifest-max-memory:
// a valid but hostile manifest (200,000 files with 1 KiB versions, 2.3
// MB on disk, some 200 MiB once loaded) under a 128 MiB limit, and the
// 2.1 MB file announcing a 512 MiB body under the default (256 MiB). The
// error wraps manifest.ErrTooLarge and names the flag and the limit; Start
// allocates under 32 MiB. Before: no such limit; the first loaded
// (leaving 589 MiB live), the second allocated 512 MiB before failing.
func TestManifestMaxMemory(t *testing.T) {
	long, err := manifesttest.LongVersions(200_000)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name      string
		data      []byte
		limit     int64
		wantLimit string
	}{
		{"200k files with 1 KiB versions, 128 MiB limit", long, 128 << 20, "now 128MiB"},
		{"512 MiB announced, default limit", manifesttest.SkippableBomb(512 << 20), 0, "now 256MiB"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "manifest")
			if err := os.WriteFile(path, tc.data, 0o644); err != nil {
				t.Fatal(err)
			}
			m, err := mount.New(mount.Config{Source: t.TempDir(), Mountpoint: t.TempDir(), CacheDir: t.TempDir(), CacheSize: 1 << 20,
				Manifest: path, ManifestMaxMemory: tc.limit})
			if err != nil {
				t.Fatal(err)
			}
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			err = m.Start(context.Background())
			runtime.ReadMemStats(&after)
			if err == nil {
				_ = m.Unmount()
				t.Fatal("mounted")
			}
			if !errors.Is(err, manifest.ErrTooLarge) || !strings.Contains(err.Error(), "--"+mountapi.FlagManifestMaxMemory) ||
				!strings.Contains(err.Error(), tc.wantLimit) {
				t.Errorf("Start: %v, want ErrTooLarge naming --%s (%s)", err, mountapi.FlagManifestMaxMemory, tc.wantLimit)
			}
			if code := mount.ExitCode(err); code != exitcode.Internal {
				t.Errorf("exit code %v", code)
			}
			if n := after.TotalAlloc - before.TotalAlloc; n > 32<<20 {
				t.Errorf("Start allocated %d MiB before refusing", n>>20)
			}
			t.Logf("refused, %.1f MiB allocated: %v", float64(after.TotalAlloc-before.TotalAlloc)/(1<<20), err)
		})
	}
	if _, err := mount.New(mount.Config{Source: t.TempDir(), Mountpoint: t.TempDir(), CacheDir: t.TempDir(), CacheSize: 1 << 20,
		ManifestMaxMemory: -1}); !errors.Is(err, mount.ErrInvalidConfig) {
		t.Errorf("a negative limit: %v, want ErrInvalidConfig", err)
	}
}
