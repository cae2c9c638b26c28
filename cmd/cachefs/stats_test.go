package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/epochfs/epochfs/internal/cliusage"
	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/epoch"
	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/pkg/mount"
)

// runStats runs `cachefs stats ARGS` in process and returns its stdout.
func runStats(t *testing.T, args ...string) string {
	t.Helper()
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(io.Discard)
	root.SetArgs(append([]string{"stats"}, args...))
	if err := root.Execute(); err != nil {
		t.Fatalf("cachefs stats %v: %v", args, err)
	}
	return out.String()
}

func ptrTo(f float64) *float64 { return &f }

// TestStatsGolden: every -o format of one report, as the golden files in
// testdata/stats hold them (go test -run TestStatsGolden -update rewrites
// them): snake_case JSON and YAML keys, a table, a wide table, a name.
func TestStatsGolden(t *testing.T) {
	r := statsReport{CacheDir: "/var/cache/epochfs/ds-1", Policy: "nr", Entries: 1200, UsedBytes: 3 << 30, CapacityBytes: 4 << 30, TempFiles: 2,
		Live: true, Mount: &mountReport{
			Source: "s3://imagenet/train?endpoint=http%3A%2F%2F127.0.0.1%3A9000&region=us-east-1", DatasetID: "0123456789abcdef",
			Manifest: true, DatasetBytes: 6 << 30, DatasetFiles: 2400,
			Hits: 1800, Misses: 3000, HitBytes: 4 << 30, MissBytes: 5 << 30, PrefetchFillBytes: 1 << 30, PrefetchedHitBytes: 1 << 30,
			ByteHitRatio: ptrTo(4.0 / 9), NRHitRatio: ptrTo(3.0 / 9),
			Epoch: 2, EpochHitBytes: 3 << 29, EpochMissBytes: 3 << 29, EpochByteHitRatio: ptrTo(0.5), EpochNRHitRatio: ptrTo(0.5),
			ResidentMemoryBytes: 300 << 20, HeapAllocBytes: 120 << 20, HeapInuseBytes: 140 << 20, SysBytes: 200 << 20,
		}}
	noMount := statsReport{CacheDir: "/var/cache/epochfs/ds-2", Policy: "nr", Entries: 3, UsedBytes: 3000, CapacityBytes: 1 << 20}
	for _, tc := range []struct {
		name   string
		format string
		r      statsReport
	}{
		{"live.json", "json", r}, {"live.yaml", "yaml", r}, {"live.table", "", r}, {"live.wide", "wide", r},
		{"live.name", "name", r}, {"offline.json", "json", noMount}, {"offline.table", "", noMount},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := printStats(&b, tc.format, tc.r); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", "stats", tc.name)
			if *updateGolden {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (go test -run TestStatsGolden -update writes it)", err)
			}
			if b.String() != string(want) {
				t.Errorf("-o %s:\n%s\nwant (%s):\n%s", tc.format, b.String(), path, want)
			}
		})
	}
}

// TestStatsLiveMount: `cachefs stats -o json` of a cache directory a mount
// serves shows that mount's source, hits, misses and byte hit ratios (since
// mount and of the current epoch, as its store counts them) and its
// memory; once it is gone, it says no mount is live and shows the
// directory only. --json stays an alias of -o json.
func TestStatsLiveMount(t *testing.T) {
	testenv.RequireFUSE(t)
	src, files := testenv.WriteDataset(t, datagen.Spec{Files: 60, Classes: 3, MedianSize: 20_000, MinSize: 1000, MaxSize: 100_000, Seed: 8})
	root := newRoot()
	root.SetOut(io.Discard)
	root.SetErr(io.Discard)
	root.SetArgs([]string{"index", src, "--upload", "--log-level", "warn"})
	if err := root.Execute(); err != nil {
		t.Fatalf("index --upload: %v", err)
	}
	total := datagen.TotalSize(files)
	cacheDir, mnt := t.TempDir(), t.TempDir()
	m, err := mount.New(mount.Config{Source: src, Mountpoint: mnt, CacheDir: cacheDir, CacheSize: total / 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	mounted := true
	defer func() {
		if mounted {
			_ = m.Unmount()
		}
	}()
	// Epoch 1 whole, then a third of epoch 2.
	paths := datagen.Paths(files)
	if _, err := epoch.Run(context.Background(), epoch.Options{Root: mnt, Paths: paths, Workers: 4, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	for _, p := range paths[:len(paths)/3] {
		if _, err := os.ReadFile(filepath.Join(mnt, p)); err != nil {
			t.Fatal(err)
		}
	}
	st := m.Stats()
	var r statsReport
	if err := json.Unmarshal([]byte(runStats(t, "--cache-dir", cacheDir, "-o", "json")), &r); err != nil {
		t.Fatal(err)
	}
	mr := r.Mount
	if !r.Live || mr == nil {
		t.Fatalf("stats of a live mount's cache dir: %+v (mount error %q)", r, r.MountError)
	}
	if mr.Source != src || !mr.Manifest || mr.DatasetBytes != total || mr.DatasetFiles != int64(len(files)) {
		t.Errorf("dataset %+v, want source %s with its manifest of %d bytes in %d files", mr, src, total, len(files))
	}
	if mr.Hits != st.Hits || mr.Misses != st.Misses || mr.HitBytes != st.HitBytes || mr.MissBytes != st.MissBytes || mr.Hits == 0 {
		t.Errorf("counters %+v, want the mount's %+v (with hits)", mr, st)
	}
	wantRatio := float64(st.HitBytes) / float64(st.HitBytes+st.MissBytes)
	if mr.ByteHitRatio == nil || *mr.ByteHitRatio != wantRatio || mr.NRHitRatio == nil || *mr.NRHitRatio != wantRatio {
		t.Errorf("ratios since mount %v, NR %v; want %v (nothing prefetched)", mr.ByteHitRatio, mr.NRHitRatio, wantRatio)
	}
	wantEpoch := float64(st.EpochHitBytes) / float64(st.EpochHitBytes+st.EpochMissBytes)
	if mr.Epoch != 2 || st.Epoch != 2 || mr.EpochByteHitRatio == nil || *mr.EpochByteHitRatio != wantEpoch || st.EpochHitBytes == 0 {
		t.Errorf("epoch %d ratio %v, want epoch 2 with the store's %v (hit %d of %d bytes)", mr.Epoch, mr.EpochByteHitRatio, wantEpoch,
			st.EpochHitBytes, st.EpochHitBytes+st.EpochMissBytes)
	}
	if mr.ResidentMemoryBytes <= 0 || mr.HeapAllocBytes <= 0 || mr.SysBytes <= 0 {
		t.Errorf("memory %+v, want the mount process's", mr)
	}
	if table := runStats(t, "--cache-dir", cacheDir); !strings.Contains(table, "mount           live") || !strings.Contains(table, "epoch           2: byte hit ratio") {
		t.Errorf("table:\n%s", table)
	}

	if err := m.Unmount(); err != nil {
		t.Fatal(err)
	}
	mounted = false
	var off statsReport
	out := runStats(t, "--cache-dir", cacheDir, "--json")
	// In process cobra's deprecation notice shares the buffer (the binary
	// prints it on stderr).
	notice, out, _ := strings.Cut(out, "\n")
	if !strings.Contains(notice, "--json has been deprecated, use -o json") {
		t.Errorf("no deprecation notice for --json: %q", notice)
	}
	if err := json.Unmarshal([]byte(out), &off); err != nil {
		t.Fatal(err)
	}
	if off.Live || off.Mount != nil || off.MountError != "" || off.Entries == 0 {
		t.Errorf("after unmount: %+v, want the on-disk info only", off)
	}
	if table := runStats(t, "--cache-dir", cacheDir); !strings.Contains(table, "none live (on-disk information only)") {
		t.Errorf("table after unmount:\n%s", table)
	}
}

// TestStatsBadFormat: an unknown -o is a usage error.
func TestStatsBadFormat(t *testing.T) {
	root := newRoot()
	root.SetOut(io.Discard)
	root.SetErr(io.Discard)
	root.SetArgs([]string{"stats", "--cache-dir", t.TempDir(), "-o", "xml"})
	if err := root.Execute(); !cliusage.Is(err) || !strings.Contains(err.Error(), `-o "xml": unknown output format; allowed: json, yaml, wide, name`) {
		t.Fatalf("stats -o xml: %v, want a usage error (exit 2) naming the formats", err)
	}
}
