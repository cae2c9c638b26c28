package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/epochfs/epochfs/internal/benchproc"
	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/backend/all"
	"github.com/epochfs/epochfs/pkg/fusefs"
	"github.com/epochfs/epochfs/pkg/manifest"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
	"github.com/epochfs/epochfs/pkg/source"
)

// p2Reader is one way of reading the dataset in P2: a name, the directory
// read, and the processes whose CPU time counts for it.
type p2Reader struct {
	name string
	root string
	pids map[string]int
}

// benchP2 is P2, the cached epoch: an EpochFS mount whose cache holds the
// whole dataset (and, with cfg.P2Manifest, one mounted from a manifest) vs
// a native read of the same files and vs a warm `rclone mount`.
func benchP2(ctx context.Context, cfg Config, ds dataset, rep *Report, logw io.Writer) error {
	capacity := capacityFor(ds.bytes)
	efsMnt, efsCache := filepath.Join(cfg.Dir, "mnt-epochfs"), filepath.Join(cfg.Dir, "cache-epochfs")
	for _, d := range []string{efsCache, filepath.Join(cfg.Dir, "cache-rclone")} {
		if err := os.RemoveAll(d); err != nil {
			return err
		}
	}
	efs, err := startEpochFS(mountapi.CommandOptions{Source: ds.root, Mountpoint: efsMnt, CacheDir: efsCache, CacheSize: capacity}, nil)
	if err != nil {
		return err
	}
	defer efs.Stop()
	readers := []p2Reader{{native, ds.root, nil}, {epochfs, efsMnt, pidOf("mount", efs)}}
	if cfg.P2Manifest {
		// The same dataset mounted from a manifest (go-fuse raw API).
		man := filepath.Join(cfg.Dir, "p2.manifest")
		if err := writeManifest(ctx, ds.root, man); err != nil {
			return err
		}
		cacheDir := filepath.Join(cfg.Dir, "cache-epochfs-manifest")
		if err := os.RemoveAll(cacheDir); err != nil {
			return err
		}
		m, err := startEpochFS(mountapi.CommandOptions{Source: ds.root, Mountpoint: filepath.Join(cfg.Dir, "mnt-epochfs-manifest"),
			CacheDir: cacheDir, CacheSize: capacity, Manifest: man}, nil)
		if err != nil {
			return err
		}
		defer m.Stop()
		readers = append(readers, p2Reader{epochfsMan, m.Mnt, pidOf("mount", m)})
	}
	if cfg.RClone != "" {
		rc, err := benchproc.StartRclone(cfg.RClone, ds.root, filepath.Join(cfg.Dir, "mnt-rclone"), filepath.Join(cfg.Dir, "cache-rclone"), capacity, nil)
		if err != nil {
			return err
		}
		defer rc.Stop()
		readers = append(readers, p2Reader{rcloneR, rc.Mnt, pidOf("rclone", rc)})
	} else {
		rep.Notes = append(rep.Notes, "rclone not run: no rclone binary (make bench-tools)")
	}
	// Epoch 1 fills both caches.
	for _, r := range readers[1:] {
		fps, _, err := readEpoch(ctx, cfg, ds, r.root, 1, nil)
		if err != nil {
			return err
		}
		fmt.Fprintf(logw, "P2 warm-up (epoch 1, fills the cache)  %-8s %7.0f files/s\n", r.name, fps)
	}
	var cached, other uint64
	for round := 1; round <= cfg.Rounds; round++ {
		row := map[string]float64{}
		for _, r := range readers {
			var before fusefs.Counters
			if r.name == epochfs {
				if before, err = counters(efs); err != nil {
					return err
				}
			}
			var prof func()
			if r.name == epochfs {
				prof = profile(cfg, efs, fmt.Sprintf("p2-cached-round%d", round))
			}
			fps, use, err := readEpoch(ctx, cfg, ds, r.root, uint64(1+round), r.pids)
			if err != nil {
				return err
			}
			if r.name == epochfs {
				prof()
				after, err := counters(efs)
				if err != nil {
					return err
				}
				rep.CachedOpens += after.Opens - before.Opens
				cached += after.CachedReads - before.CachedReads
				other += after.MemReads + after.BlockReads - before.MemReads - before.BlockReads
			}
			row[r.name] = fps
			fmt.Fprintf(logw, "P2 round %d  %-8s %7.0f files/s\n", round, r.name, fps)
			rep.addCPU(logw, round, r.name, use)
		}
		rep.P2 = append(rep.P2, row)
	}
	rep.CachedReads, rep.OtherReads = cached, other
	return nil
}

// writeManifest indexes the directory root into a manifest file.
func writeManifest(ctx context.Context, root, path string) error {
	src, err := source.Parse(root)
	if err != nil {
		return err
	}
	b, err := all.Open(ctx, src, backend.Options{})
	if err != nil {
		return err
	}
	defer b.Close()
	m, _, err := manifest.Index(ctx, b, manifest.IndexOptions{Workers: 4})
	if err != nil {
		return err
	}
	_, err = m.WriteFile(path)
	return err
}
