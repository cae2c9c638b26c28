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
	"testing"

	"github.com/epochfs/epochfs/pkg/manifest"
	"github.com/epochfs/epochfs/pkg/manifest/manifesttest"
)

// datasetBytesChild names the dataset directory a child process of
// TestDatasetBytesMemory sizes.
const datasetBytesChild = "EPOCHFS_TEST_DATASETBYTES_SOURCE"

// TestDatasetBytesMemory: the node plugin's path to a dataset's size (node
// labels and NodeGetVolumeStats both call datasetBytes) over a tenant's
// manifest — the 200,000 files of 1 KiB versions (2.3 MB on
// disk), the 2.1 MB file announcing a 512 MiB body padded by a skippable
// frame, a 1 MB frame of 200 MiB of garbage — keeps the process far under
// the node plugin's 256 MiB memory limit (chart values nodePlugin
// resources): each case runs datasetBytes in a child process (this test
// binary), which reports its peak RSS (VmHWM of /proc/self/status) and
// the bytes it allocated (TotalAlloc). Asserted: peak RSS < 128 MiB, half
// the limit (~42 MiB measured, ~94 MiB under -race), and
// allocations < 32 MiB. Before: datasetBytes loaded the manifest
// (manifest.DiscoverLimit, a 64 MiB cap on the compressed file only): the
// first case took some 600 MiB and the second allocated 512 MiB.
func TestDatasetBytesMemory(t *testing.T) {
	if src := os.Getenv(datasetBytesChild); src != "" {
		datasetBytesInChild(src)
		return
	}
	long, err := manifesttest.LongVersions(200_000)
	if err != nil {
		t.Fatal(err)
	}
	garbage, err := manifesttest.GarbageFrame(200, 7)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		data []byte
		size int64 // what datasetBytes returns
	}{
		{"200k files with 1 KiB versions", long, 200_000},
		{"512 MiB announced, skippable padding", manifesttest.SkippableBomb(512 << 20), -1},
		// The header is intact and checksummed: its total (0) is what
		// the node plugin reports; the mount refuses the body.
		{"200 MiB of garbage in one frame", manifesttest.Envelope(manifesttest.Header{Files: 1, Dirs: 1, BodyLen: 200 << 20}, garbage), 0},
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
			cmd := exec.Command(os.Args[0], "-test.run=^TestDatasetBytesMemory$", "-test.count=1")
			cmd.Env = append(os.Environ(), datasetBytesChild+"="+src)
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

// datasetBytesInChild sizes the dataset at src as the node plugin does and
// prints the result with the process's peak RSS and allocations.
func datasetBytesInChild(src string) {
	n := &nodeState{
		cfg:   nodeConfig{dir: filepath.Join(os.TempDir(), "epochfs-no-state"), log: slog.New(slog.NewTextHandler(os.Stderr, nil))},
		sizes: datasetSizes{sizes: map[string]int64{}},
	}
	size := n.datasetBytes(context.Background(), &datasetMount{Key: "ds-test", Params: volumeParams{Source: src}})
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
