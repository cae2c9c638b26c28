package csi

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/epochfs/epochfs/pkg/manifest"
	"github.com/epochfs/epochfs/pkg/manifest/manifesttest"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// datasetBytesChild names the cache directory of the mount a child process
// of TestDatasetBytesMemory asks for its dataset's size.
const datasetBytesChild = "EPOCHFS_TEST_DATASETBYTES_CACHEDIR"

// TestDatasetBytesMemory: the node plugin's path to a dataset's size (node
// labels and NodeGetVolumeStats both call datasetBytes) over a tenant's
// manifest — the 200,000 files of 1 KiB versions (2.3 MB on disk), the
// 2.1 MB file announcing a 512 MiB body padded by a skippable frame, a 1 MB
// frame of 200 MiB of garbage — asks the dataset's mount (a real cachefs
// process) and never reads the manifest: the mount that loaded the first
// reports its bytes; the mounts of the other two refuse their manifests,
// exit, and their datasets have no size. Each datasetBytes runs in a child
// process (this test binary), which reports its peak RSS (VmHWM of
// /proc/self/status) and the bytes it allocated (TotalAlloc), asserted far
// under the node plugin's 256 MiB memory limit (chart values nodePlugin
// resources): peak RSS < 128 MiB and allocations < 32 MiB.
func TestDatasetBytesMemory(t *testing.T) {
	if dir := os.Getenv(datasetBytesChild); dir != "" {
		datasetBytesInChild(dir)
		return
	}
	cachefs, _ := buildBinaries(t)
	long, err := manifesttest.LongVersions(200_000)
	if err != nil {
		t.Fatal(err)
	}
	garbage, err := manifesttest.GarbageFrame(200, 7)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		data    []byte
		refused bool  // the mount refuses the manifest and exits
		size    int64 // what datasetBytes returns
	}{
		{"200k files with 1 KiB versions", long, false, 200_000},
		{"512 MiB announced, skippable padding", manifesttest.SkippableBomb(512 << 20), true, -1},
		{"200 MiB of garbage in one frame", manifesttest.Envelope(manifesttest.Header{Files: 1, Dirs: 1, BodyLen: 200 << 20}, garbage), true, -1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := t.TempDir()
			if err := os.MkdirAll(filepath.Join(src, ".epochfs"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(src, manifest.DefaultPath), tc.data, 0o644); err != nil {
				t.Fatal(err)
			}
			cacheDir := filepath.Join(t.TempDir(), "cache")
			refused := startSizeMount(t, cachefs, mountapi.CommandOptions{Source: src, Mountpoint: t.TempDir(), CacheDir: cacheDir, CacheSize: 1 << 30})
			if refused != tc.refused {
				t.Fatalf("mount refused its manifest: %v, want %v", refused, tc.refused)
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestDatasetBytesMemory$", "-test.count=1")
			cmd.Env = append(os.Environ(), datasetBytesChild+"="+cacheDir)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("child: %v\n%s", err, out)
			}
			var size, hwmKiB, alloc int64
			found := false
			for _, line := range strings.Split(string(out), "\n") {
				if _, err := fmt.Sscanf(line, "datasetBytes size=%d hwm_kib=%d alloc=%d", &size, &hwmKiB, &alloc); err == nil {
					found = true
				}
			}
			if !found {
				t.Fatalf("no result from the child:\n%s", out)
			}
			t.Logf("%d-byte manifest: size %d, peak RSS %.1f MiB, allocated %.1f MiB", len(tc.data), size, float64(hwmKiB)/1024, float64(alloc)/(1<<20))
			if size != tc.size {
				t.Errorf("datasetBytes = %d, want %d", size, tc.size)
			}
			if hwmKiB > 128<<10 {
				t.Errorf("peak RSS %d MiB, want < 128 MiB (the node plugin's limit is 256 MiB)", hwmKiB>>10)
			}
			if alloc > 32<<20 {
				t.Errorf("allocated %d MiB, want < 32 MiB", alloc>>20)
			}
		})
	}
}

// startSizeMount starts `cachefs mount` with opts and waits until it
// answers on its control socket (false) or exits (true: it refused to
// start). A running mount is stopped at cleanup.
func startSizeMount(t *testing.T, cachefs string, opts mountapi.CommandOptions) (exited bool) {
	t.Helper()
	cmd := exec.Command(cachefs, opts.Args()...)
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-done
	})
	deadline := time.After(30 * time.Second)
	for {
		select {
		case err := <-done:
			done <- err // for the cleanup
			t.Logf("the mount exited (%v):\n%s", err, log.String())
			return true
		case <-deadline:
			t.Fatalf("the mount neither answers nor exits after 30 s:\n%s", log.String())
		case <-time.After(50 * time.Millisecond):
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := mountapi.RemoteDataset(ctx, opts.CacheDir)
		cancel()
		if err == nil {
			return false
		}
	}
}

// datasetBytesInChild sizes the dataset whose mount serves cacheDir as the
// node plugin does and prints the result with the process's peak RSS and
// allocations.
func datasetBytesInChild(cacheDir string) {
	n := &nodeState{
		cfg:   nodeConfig{dir: filepath.Join(os.TempDir(), "epochfs-no-state"), log: slog.New(slog.NewTextHandler(os.Stderr, nil))},
		sizes: datasetSizes{sizes: map[string]int64{}},
	}
	size := n.datasetBytes(context.Background(), &datasetMount{Key: "ds-test", CacheDir: cacheDir})
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fmt.Printf("datasetBytes size=%d hwm_kib=%d alloc=%d\n", size, peakRSSKiB(), ms.TotalAlloc)
}

// peakRSSKiB is VmHWM of /proc/self/status, in KiB (-1 when unknown).
func peakRSSKiB() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err == nil {
				return n
			}
		}
	}
	return -1
}
