package mount_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/testenv"
	"github.com/epochfs/epochfs/pkg/mount"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// BenchmarkListingWalk: a cold find-style walk (readdir of every
// directory, lstat of every entry) of a fresh listing mount (no manifest)
// of 10,000 small files in 100 directories, with the node table (every
// node id appended to <cache-dir>/connection/nodes before its reply: the
// default) and without it (what a listing mount did before). One op is
// one walk of a new mount, so every LOOKUP and READDIRPLUS creates node
// ids; the mount itself is made outside the timer. Record results in
// bench/RESULTS.md, "Listing node table".
//
//	go test -run '^$' -bench BenchmarkListingWalk -benchtime 10x ./pkg/mount/
func BenchmarkListingWalk(b *testing.B) {
	testenv.RequireFUSE(b)
	src, files := testenv.WriteDataset(b, datagen.Spec{Files: 10_000, Classes: 100, MedianSize: 1 << 10, MinSize: 100, MaxSize: 4 << 10, Seed: 34})
	for _, mode := range []string{"no-table", "node-table"} {
		b.Run(mode, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				cfg := mount.Config{Source: src, Mountpoint: b.TempDir(), CacheDir: b.TempDir(), CacheSize: 1 << 30,
					Manifest: mountapi.ManifestNone}
				if mode == "no-table" {
					mount.WithoutNodeTable(&cfg)
				}
				m, err := mount.New(cfg)
				if err != nil {
					b.Fatal(err)
				}
				if err := m.Start(context.Background()); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				n := 0
				err = filepath.WalkDir(cfg.Mountpoint, func(p string, d fs.DirEntry, err error) error {
					if err != nil {
						return err
					}
					if _, err := os.Lstat(p); err != nil {
						return err
					}
					if !d.IsDir() {
						n++
					}
					return nil
				})
				b.StopTimer()
				if err != nil || n != len(files) {
					b.Fatalf("walk: %v, %d files, want %d", err, n, len(files))
				}
				if err := m.Unmount(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(files)), "ns/file")
		})
	}
}
