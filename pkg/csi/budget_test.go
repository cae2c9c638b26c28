package csi_test

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/epochfs/epochfs/pkg/csi"
)

// mibDataset writes files of 1 MiB each under a new directory.
func mibDataset(t *testing.T, files int) string {
	t.Helper()
	dir := t.TempDir()
	b := make([]byte, 1<<20)
	for i := range files {
		_, _ = rand.Read(b)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%02d.bin", i)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// readAll reads every file under dir once (through a mount: the NR cache
// admits them).
func readAll(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if _, err := os.ReadFile(filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
}

// cacheKeys lists the dataset cache directories under the cache root.
func cacheKeys(t *testing.T, td *testDriver) []string {
	t.Helper()
	ents, _ := os.ReadDir(td.cacheDir)
	var keys []string
	for _, e := range ents {
		keys = append(keys, e.Name())
	}
	return keys
}

// newKey returns the one key in after that is not in before.
func newKey(t *testing.T, before, after []string) string {
	t.Helper()
	var out []string
	for _, k := range after {
		if !slices.Contains(before, k) {
			out = append(out, k)
		}
	}
	if len(out) != 1 {
		t.Fatalf("cache root: %v -> %v, want one new cache", before, after)
	}
	return out[0]
}

// TestCacheRootBudget: the running mounts' cacheSize plus what idle caches
// hold stays within the budget. A volume that does not fit next to the
// running mounts is refused (ResourceExhausted, naming the flag) and
// removes nothing; one that fits once idle caches go removes the oldest
// idle cache first, and only as many as it needs.
func TestCacheRootBudget(t *testing.T) {
	td := startDriver(t, func(c *csi.Config) { c.CacheRootBudget = csi.CacheBudget{Bytes: 32 << 20} })
	work := td.workDir(t)
	cycle := func(id, dir string) string { // stage, read all, unstage: leaves an idle cache
		before := cacheKeys(t, td)
		vctx := map[string]string{"source": dir, "cacheSize": "16Mi"}
		staging := filepath.Join(work, id)
		stage(t, td, id, staging, vctx)
		readAll(t, view(t, td, id, staging))
		unstage(t, td, id, staging)
		return newKey(t, before, cacheKeys(t, td))
	}
	keyA := cycle("vol-a", mibDataset(t, 4)) // 4 MiB idle, oldest
	time.Sleep(10 * time.Millisecond)
	keyB := cycle("vol-b", mibDataset(t, 4)) // 4 MiB idle

	// 26 MiB + 8 MiB idle > 32 MiB: A (the oldest) goes, B stays.
	stagingC := filepath.Join(work, "vol-c")
	stage(t, td, "vol-c", stagingC, map[string]string{"source": mibDataset(t, 1), "cacheSize": "26Mi"})
	keys := cacheKeys(t, td)
	if slices.Contains(keys, keyA) || !slices.Contains(keys, keyB) {
		t.Errorf("after a 26 MiB mount: caches %v; want A (%s) removed, B (%s) kept", keys, keyA, keyB)
	}

	// 26 MiB running + 8 MiB > 32 MiB even with every idle cache gone.
	stagingD := filepath.Join(work, "vol-d")
	if err := os.MkdirAll(stagingD, 0o750); err != nil {
		t.Fatal(err)
	}
	_, err := node(td).NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
		VolumeId: "vol-d", StagingTargetPath: stagingD, VolumeCapability: readerCap,
		VolumeContext: map[string]string{"source": mibDataset(t, 1), "cacheSize": "8Mi"},
	})
	expectCode(t, err, codes.ResourceExhausted, "--cache-root-budget")
	if got := cacheKeys(t, td); !slices.Contains(got, keyB) || len(got) != 2 {
		t.Errorf("a refused volume changed the caches: %v, want B and C", got)
	}
	if m := mountsUnder(t, stagingD); len(m) > 0 {
		t.Errorf("the refused volume is mounted: %v", m)
	}
	unstage(t, td, "vol-c", stagingC)
}

// TestMaxMounts: a volume that needs one mount process more than the cap is
// refused; one that shares a running mount is not.
func TestMaxMounts(t *testing.T) {
	td := startDriver(t, func(c *csi.Config) { c.MaxMounts = 1 })
	work := td.workDir(t)
	dir, files := dataset(t)
	vctx := map[string]string{"source": dir, "cacheSize": "16Mi"}
	stage(t, td, "vol-1", filepath.Join(work, "1"), vctx)
	stage(t, td, "vol-2", filepath.Join(work, "2"), vctx) // same dataset: same mount
	checkFiles(t, view(t, td, "vol-2", filepath.Join(work, "2")), files)

	other := filepath.Join(work, "3")
	if err := os.MkdirAll(other, 0o750); err != nil {
		t.Fatal(err)
	}
	_, err := node(td).NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
		VolumeId: "vol-3", StagingTargetPath: other, VolumeCapability: readerCap,
		VolumeContext: map[string]string{"source": mibDataset(t, 1), "cacheSize": "16Mi"},
	})
	expectCode(t, err, codes.ResourceExhausted, "--max-mounts")
	if p := mountProcesses(t, td.stateDir); len(p) != 1 {
		t.Errorf("%d mount processes, want 1", len(p))
	}
	unstage(t, td, "vol-1", filepath.Join(work, "1"))
	unstage(t, td, "vol-2", filepath.Join(work, "2"))
	stage(t, td, "vol-3", other, map[string]string{"source": mibDataset(t, 1), "cacheSize": "16Mi"})
	unstage(t, td, "vol-3", other)
}

// TestIdleCacheRetention: a cache is kept while its dataset is staged and
// for the retention after, then removed by the health loop; staging the
// dataset again within the retention reuses it.
func TestIdleCacheRetention(t *testing.T) {
	const retention = 2 * time.Second
	td := startDriver(t, func(c *csi.Config) { c.CacheRetention = retention; c.HealthInterval = 100 * time.Millisecond })
	work := td.workDir(t)
	dir, files := dataset(t)
	vctx := map[string]string{"source": dir, "cacheSize": "16Mi"}
	staging := filepath.Join(work, "s")
	stage(t, td, "vol", staging, vctx)
	checkFiles(t, view(t, td, "vol", staging), files)
	unstage(t, td, "vol", staging)
	keys := cacheKeys(t, td)
	if len(keys) != 1 {
		t.Fatalf("caches after unstage: %v, want 1 (kept)", keys)
	}
	stage(t, td, "vol", staging, vctx) // within the retention: the same cache
	if got := cacheKeys(t, td); !slices.Equal(got, keys) {
		t.Fatalf("caches after a second stage: %v, want %v", got, keys)
	}
	time.Sleep(retention + 500*time.Millisecond)
	if got := cacheKeys(t, td); !slices.Equal(got, keys) {
		t.Fatalf("the cache of a staged dataset was removed: %v", got)
	}
	unstage(t, td, "vol", staging)
	// The health loop removes the cache, then its idle record: wait for
	// both, or a check between the two sees the record.
	idle := filepath.Join(td.stateDir, "node", "idle")
	waitFor(t, retention+10*time.Second, "the idle cache and its record to be removed after the retention", func() bool {
		ents, _ := os.ReadDir(idle)
		return len(cacheKeys(t, td)) == 0 && len(ents) == 0
	})
}

func TestParseCacheBudget(t *testing.T) {
	for in, want := range map[string]csi.CacheBudget{"80%": {Percent: 80}, " 100% ": {Percent: 100}, "500GiB": {Bytes: 500 << 30}, "2Ti": {Bytes: 2 << 40}} {
		got, err := csi.ParseCacheBudget(in)
		if err != nil || got != want {
			t.Errorf("ParseCacheBudget(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0%", "101%", "-5%", "1.5%", "%", "0", "-1Gi", "lots"} {
		if got, err := csi.ParseCacheBudget(in); err == nil {
			t.Errorf("ParseCacheBudget(%q) = %+v, want an error", in, got)
		}
	}
}
