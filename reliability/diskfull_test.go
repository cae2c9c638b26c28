package reliability

import (
	"crypto/sha256"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/mounttest"
	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/pkg/mount"
)

// TestCacheDiskFull puts the cache on a 4 MiB tmpfs under a 64 MiB NR
// capacity: when the disk fills, reads are served through with no error,
// admissions stop, and a metric and a log line say so. A read-only cache
// disk behaves the same.
func TestCacheDiskFull(t *testing.T) {
	testenv.RequireFUSE(t)
	for _, mode := range []string{"full", "read-only"} {
		t.Run(mode, func(t *testing.T) {
			cacheDir := t.TempDir()
			opts := "size=4m"
			if err := syscall.Mount("tmpfs", cacheDir, "tmpfs", 0, opts); err != nil {
				testenv.RequireOrSkip(t, "tmpfs", "cannot mount a tmpfs for the cache: "+err.Error())
			}
			t.Cleanup(func() { _ = syscall.Unmount(cacheDir, syscall.MNT_DETACH) })
			src, files := testenv.WriteDataset(t, datagen.Spec{Files: 120, Classes: 4, MedianSize: 100_000, MinSize: 50_000, MaxSize: 200_000, Seed: 41})
			want := datagen.Sums(files)
			logs := &logBuffer{}
			root := t.TempDir()
			m := mounttest.Start(t, mount.Config{Source: src, Mountpoint: root, CacheDir: cacheDir, CacheSize: 64 << 20, Logger: logs.logger(), MetricsAddr: "127.0.0.1:0"})
			if mode == "read-only" {
				// The store has opened its lock file; now the cache dir turns
				// read-only (like ext4's errors=remount-ro): a read-only bind
				// mount over it, so new writes fail with EROFS.
				if err := syscall.Mount(cacheDir, cacheDir, "", syscall.MS_BIND, ""); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = syscall.Unmount(cacheDir, syscall.MNT_DETACH) })
				if err := syscall.Mount("", cacheDir, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY, ""); err != nil {
					t.Fatal(err)
				}
			}
			for pass := 1; pass <= 2; pass++ {
				for _, f := range files {
					b, err := os.ReadFile(join(root, f.Path))
					if err != nil {
						t.Fatalf("pass %d: %s: %v (the cache disk must never cause a reader-visible error)", pass, f.Path, err)
					}
					if sha256.Sum256(b) != want[f.Path] {
						t.Fatalf("pass %d: %s: wrong bytes", pass, f.Path)
					}
				}
			}
			st := m.Stats()
			writeErrors := scrape(t, m.MetricsAddr(), "cachefs_cache_write_errors_total")
			t.Logf("RESULT cache-disk-%s: reads=%d errors=0 admitted=%d used=%d write_errors=%v", mode, 2*len(files), st.Admissions, st.UsedBytes, writeErrors)
			if writeErrors == 0 {
				t.Error("cachefs_cache_write_errors_total is 0")
			}
			if st.UsedBytes > 4<<20 {
				t.Errorf("used %d bytes on a 4 MiB disk", st.UsedBytes)
			}
			if !strings.Contains(logs.String(), "cannot write entry") {
				t.Errorf("no log line about the cache disk:\n%s", logs.String())
			}
		})
	}
}
