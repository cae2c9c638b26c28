package mount_test

import (
	"context"
	"crypto/sha256"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/epoch"
	"github.com/epochfs/epochfs/pkg/mount"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// TestWriteBehindMount: with --write-behind, a cold epoch through a real
// FUSE mount reads every file byte for byte (misses served from memory
// while their cache files are written, including files of several
// blocks), every entry is then written and verified, and the next epoch
// hits every byte from the cache files. Another mount of the same cache
// directory (recovery verifies every entry) hits everything too.
func TestWriteBehindMount(t *testing.T) {
	src := t.TempDir()
	files, err := datagen.Write(src, datagen.Spec{Files: 120, Classes: 4, Seed: 7, MedianSize: 40_000, MinSize: 1, MaxSize: 3 << 20})
	if err != nil {
		t.Fatal(err)
	}
	paths, want := datagen.Paths(files), datagen.Sums(files)
	total := datagen.TotalSize(files)
	cfg := mount.Config{Source: src, Mountpoint: t.TempDir(), CacheDir: t.TempDir(), CacheSize: 2 * total,
		Manifest: mountapi.ManifestNone, WriteBehind: 1 << 20, WholeFileMax: 1 << 20, BlockSize: 512 << 10, ReadaheadFiles: 0}
	readEpoch := func(seed uint64) {
		t.Helper()
		res, err := epoch.Run(context.Background(), epoch.Options{Root: cfg.Mountpoint, Paths: paths, Want: want, Workers: 8, Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Mismatches) > 0 || res.Files != len(paths) {
			t.Fatalf("epoch %d: %d of %d files, wrong bytes in %v", seed, res.Files, len(paths), res.Mismatches)
		}
	}
	mountOnce(t, cfg, func(m *mount.Mount) {
		readEpoch(1)
		st := settledStats(t, m)
		if st.WrittenBehind == 0 || st.WriteErrors != 0 || st.Rejections != 0 || st.UsedBytes != total || st.HitBytes != 0 {
			t.Fatalf("after the cold epoch: %+v (dataset %d bytes)", st, total)
		}
		// Concurrent opens of one file while it may be pending: same bytes.
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				b, err := os.ReadFile(filepath.Join(cfg.Mountpoint, paths[0]))
				if err != nil || sha256.Sum256(b) != want[paths[0]] {
					t.Errorf("concurrent read of %s: %v", paths[0], err)
				}
			})
		}
		wg.Wait()
		dropPageCache(t)
		readEpoch(2)
		st2 := m.Stats()
		if st2.MissBytes != st.MissBytes || st2.Admissions != st.Admissions {
			t.Fatalf("epoch 2 missed: before %+v, after %+v", st, st2)
		}
	})
	mountOnce(t, cfg, func(m *mount.Mount) {
		readEpoch(3)
		if st := m.Stats(); st.MissBytes != 0 || st.CorruptDropped != 0 || st.HitBytes != total {
			t.Fatalf("remount over the same cache: %+v (dataset %d bytes)", st, total)
		}
	})
}

func dropPageCache(t *testing.T) {
	t.Helper()
	if err := epoch.DropPageCache(); err != nil {
		t.Logf("page cache not dropped (%v): epoch 2 may be served by the kernel, which only adds hits", err)
	}
}
