package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/epoch"
	"github.com/epochfs/epochfs/pkg/mount"
	"github.com/epochfs/epochfs/pkg/units"
)

type demoConfig struct {
	files         int
	epochs        int
	workers       int
	cacheFraction float64
	seed          uint64
	keep          bool
	noDrop        bool
}

func newDemoCmd(g *globalFlags) *cobra.Command {
	var c demoConfig
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Generate an image-like dataset, mount it through the cache, read shuffled epochs, print hit ratios",
		Long: `demo needs no server: it writes a small ImageNet-like dataset (class directories,
log-normal sizes 16 KB–5 MB around 110 KB) to a temporary directory, mounts it
with a cache of --cache-fraction of its bytes, reads --epochs epochs in a fresh
shuffled order with parallel readers, prints each epoch's byte hit ratio and
files/s, checks every file's sha256, then unmounts and cleans up.

Under NR expect a hit ratio of ≈0 in epoch 1 and ≈cache/dataset after.
It needs root (or fuse3's fusermount3). As root it drops the kernel page cache
before each epoch so files/s measures the cache, not the kernel.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runDemo(cmd, g, c)
		},
	}
	f := cmd.Flags()
	f.IntVar(&c.files, "files", 2000, "number of files in the generated dataset")
	f.IntVar(&c.epochs, "epochs", 3, "epochs to read")
	f.IntVar(&c.workers, "workers", 8, "parallel readers, like a data loader's workers")
	f.Float64Var(&c.cacheFraction, "cache-fraction", 0.5, "cache capacity as a fraction of the dataset's bytes")
	f.Uint64Var(&c.seed, "seed", 1, "dataset and shuffle seed")
	f.BoolVar(&c.keep, "keep", false, "keep the temporary directory (dataset, cache) for inspection")
	f.BoolVar(&c.noDrop, "no-drop-caches", false, "do not drop the kernel page cache between epochs")
	return cmd
}

func runDemo(cmd *cobra.Command, g *globalFlags, c demoConfig) (err error) {
	ctx := cmd.Context()
	out := cmd.OutOrStdout()
	if c.files <= 0 || c.epochs <= 0 || c.workers <= 0 {
		return errors.New("demo: --files, --epochs and --workers must be positive")
	}
	if c.cacheFraction <= 0 || math.IsNaN(c.cacheFraction) {
		return errors.New("demo: --cache-fraction must be positive")
	}
	if !cmd.Flags().Changed("log-level") {
		g.logLevel = "warn" // the demo prints its own report; logs only for trouble
	}
	log, err := g.logger()
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "epochfs-demo-")
	if err != nil {
		return err
	}
	if c.keep {
		defer fmt.Fprintf(out, "kept %s (dataset in data/, cache in cache/)\n", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}
	data, cacheDir, mnt := filepath.Join(tmp, "data"), filepath.Join(tmp, "cache"), filepath.Join(tmp, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		return err
	}

	start := time.Now()
	files, err := datagen.Write(data, datagen.Spec{Files: c.files, Seed: c.seed})
	if err != nil {
		return err
	}
	total := datagen.TotalSize(files)
	paths, want := datagen.Paths(files), datagen.Sums(files)
	capacity := int64(float64(total) * c.cacheFraction)
	fmt.Fprintf(out, "dataset: %d files, %s in %s (generated in %.1fs)\n", len(files), units.FormatSize(total), data, time.Since(start).Seconds())
	fmt.Fprintf(out, "cache:   %s = %.2f of the dataset, policy nr\n", units.FormatSize(capacity), c.cacheFraction)

	m, err := mount.New(mount.Config{
		Source: data, Mountpoint: mnt, CacheDir: cacheDir, CacheSize: capacity,
		Logger: log,
	})
	if err != nil {
		return err
	}
	if err := m.Start(ctx); err != nil {
		return fmt.Errorf("demo: %w (mounting needs root or fuse3's fusermount3)", err)
	}
	defer func() {
		if uerr := m.Unmount(); uerr != nil && err == nil {
			err = uerr
		}
	}()
	fmt.Fprintf(out, "mounted: %s\n\n", mnt)

	expect := min(c.cacheFraction, 1)
	dropWarned := false
	var bad int
	for e := 1; e <= c.epochs; e++ {
		if !c.noDrop {
			if derr := epoch.DropPageCache(); derr != nil && !dropWarned {
				fmt.Fprintf(out, "note: cannot drop the page cache (%v); files/s may include kernel cache hits\n", derr)
				dropWarned = true
			}
		}
		before := m.Stats()
		res, err := epoch.Run(ctx, epoch.Options{Root: mnt, Paths: paths, Workers: c.workers, Seed: c.seed*1000 + uint64(e), Want: want})
		if err != nil {
			return err
		}
		after := m.Stats()
		hit := after.HitBytes - before.HitBytes
		miss := after.MissBytes - before.MissBytes
		ratio := 0.0
		if hit+miss > 0 {
			ratio = float64(hit) / float64(hit+miss)
		}
		exp := expect
		if e == 1 {
			exp = 0
		}
		fmt.Fprintf(out, "epoch %d: %d files, %s, %7.0f files/s, byte hit ratio %.3f (NR expects %.3f), %d mismatches\n",
			e, res.Files, units.FormatSize(res.Bytes), res.FilesPerSec(), ratio, exp, len(res.Mismatches))
		bad += len(res.Mismatches)
	}
	st := m.Stats()
	fmt.Fprintf(out, "\ncache holds %d entries, %s of %s; every file's sha256 checked: ", st.Entries, units.FormatSize(st.UsedBytes), units.FormatSize(st.CapacityBytes))
	if bad > 0 {
		fmt.Fprintf(out, "%d MISMATCHES\n", bad)
		return &exitError{code: 1, err: fmt.Errorf("demo: %d files read wrong bytes", bad)}
	}
	fmt.Fprintln(out, "all match")
	return nil
}
