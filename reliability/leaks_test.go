package reliability

import (
	"context"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/epoch"
	"github.com/epochfs/epochfs/internal/mounttest"
	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/pkg/mount"
)

// TestLoadAndLeaks runs 64 concurrent readers over a mount for a bounded
// time and checks that goroutines, open file descriptors and RSS return to
// their baseline afterwards.
func TestLoadAndLeaks(t *testing.T) {
	src, files := testenv.WriteDataset(t, datagen.Spec{Files: 400, Classes: 8, MedianSize: 30_000, MinSize: 1_000, MaxSize: 300_000, Seed: 51})
	root := t.TempDir()
	mounttest.Start(t, mount.Config{Source: src, Mountpoint: root, CacheSize: datagen.TotalSize(files) / 2})
	paths := make([]string, len(files))
	for i, f := range files {
		paths[i] = f.Path
	}
	// Warm up: one epoch fills the NR set and the kernel's inode cache.
	if _, err := epoch.Run(context.Background(), epoch.Options{Root: root, Paths: paths, Workers: 8, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	g0, fd0, rss0 := baseline(t)

	duration := time.Duration(envInt("RELIABILITY_LOAD_SECONDS", 5)) * time.Second
	var reads atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(duration)
	for w := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; time.Now().Before(stop); i += 64 {
				if _, err := os.ReadFile(join(root, paths[i%len(paths)])); err != nil {
					t.Error(err)
					return
				}
				reads.Add(1)
			}
		}()
	}
	wg.Wait()
	time.Sleep(500 * time.Millisecond) // let RELEASEs and readahead settle
	g1, fd1, rss1 := baseline(t)
	t.Logf("RESULT load-and-leaks: readers=64 reads=%d goroutines %d->%d fds %d->%d rss %dMiB->%dMiB",
		reads.Load(), g0, g1, fd0, fd1, rss0>>20, rss1>>20)
	if g1 > g0+8 {
		t.Errorf("goroutines grew from %d to %d", g0, g1)
	}
	if fd1 > fd0+8 {
		t.Errorf("open fds grew from %d to %d", fd0, fd1)
	}
	if rss1 > rss0+64<<20 {
		t.Errorf("RSS grew from %d MiB to %d MiB", rss0>>20, rss1>>20)
	}
}

// baseline returns goroutines, open fds and RSS bytes of this process (the
// mount runs in it) after a GC.
func baseline(t *testing.T) (int, int, int64) {
	t.Helper()
	runtime.GC()
	debug.FreeOSMemory()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	var rss int64
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			rss = kb << 10
		}
	}
	return runtime.NumGoroutine(), len(fds), rss
}
