package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/epochfs/epochfs/internal/benchproc"
	"github.com/epochfs/epochfs/internal/epoch"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// benchP3 is P3, the cold epoch from MinIO: mounts with an empty cache
// (plain, with readahead, from a manifest) and `cachefs prefetch` vs a
// concurrent minio-go GET loop over the same objects.
func benchP3(ctx context.Context, cfg Config, ds dataset, rep *Report, logw io.Writer) error {
	// Every cold run fills a cache directory of its own, and all of them
	// are removed at the end, not between runs: the work directory's file
	// system may be ext4 without a journal (this VM's is), which avoids
	// reusing inodes freed in the last dirty_expire interval (30 s) by
	// scanning the inode tables, so a run creating 2,000 files right after
	// the last run's 2,000 were deleted would pay a cost (12% of a
	// prefetch's CPU, perf) that a node filling its cache does not.
	stale, _ := filepath.Glob(filepath.Join(cfg.Dir, "cache-cold*"))
	for _, d := range stale {
		if err := os.RemoveAll(d); err != nil {
			return err
		}
	}
	var caches []string
	defer func() {
		for _, d := range caches {
			_ = os.RemoveAll(d)
		}
	}()
	newCache := func(round int, what string) string {
		d := filepath.Join(cfg.Dir, fmt.Sprintf("cache-cold-%d-%s", round, what))
		caches = append(caches, d)
		return d
	}
	mdir := filepath.Join(cfg.Dir, "minio")
	if err := os.RemoveAll(mdir); err != nil {
		return err
	}
	srv, err := benchproc.StartMinIO(cfg.MinIO, mdir)
	if err != nil {
		return err
	}
	defer srv.Stop()
	const bucket = "dataset"
	start := time.Now()
	if err := srv.Upload(ctx, bucket, ds.root, ds.paths, 16, nil); err != nil {
		return err
	}
	fmt.Fprintf(logw, "P3 uploaded %d objects in %.1fs\n", len(ds.paths), time.Since(start).Seconds())
	capacity := capacityFor(ds.bytes)
	minioPid := srv.Pid()
	if cfg.S3Latency > 0 {
		lp, err := benchproc.StartLatencyProxy(srv.Host, cfg.S3Latency)
		if err != nil {
			return err
		}
		defer lp.Close()
		far := *srv // every reader connects through the proxy
		far.Host = lp.Addr
		srv = &far
		rep.S3Latency = cfg.S3Latency
	}
	client, err := benchproc.NewClient(srv.Host, srv.AccessKey, srv.SecretKey, cfg.Workers)
	if err != nil {
		return err
	}
	hasPrefetch := cfg.CacheFS != "" && exec.Command(cfg.CacheFS, "prefetch", "--help").Run() == nil
	if !hasPrefetch {
		rep.Notes = append(rep.Notes, "prefetch not measured yet: no `cachefs prefetch` in "+cfg.CacheFS)
	}
	// The dataset's manifest, as `cachefs index` writes it once per dataset
	// (not timed): the "prefetch, manifest" row reads it instead of walking
	// the bucket.
	manPath := filepath.Join(cfg.Dir, "p3.manifest")
	if hasPrefetch {
		cmd := exec.CommandContext(ctx, cfg.CacheFS, "index", srv.URL(bucket), "--out", manPath)
		cmd.Env = append(os.Environ(), srv.Env()...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("cachefs index: %v: %s", err, out)
		}
	}
	for round := 1; round <= cfg.Rounds; round++ {
		row := map[string]float64{}
		// A: cold epoch through a mount with an empty cache (a fresh
		// cache directory per run) and the mount options opts (their source,
		// mount point, cache directory and, unless set, cache size filled
		// in); after is called with the mount still up.
		mnt := filepath.Join(cfg.Dir, "mnt-cold")
		cold := func(name, tag string, after func(*benchproc.Proc), opts mountapi.CommandOptions) error {
			opts.Source, opts.Mountpoint, opts.CacheDir = srv.URL(bucket), mnt, newCache(round, tag)
			opts.CacheSize = cmp.Or(opts.CacheSize, capacity)
			m, err := startEpochFS(opts, srv.Env())
			if err != nil {
				return err
			}
			pids := map[string]int{"minio": minioPid, "mount": m.Cmd.Process.Pid}
			prof := profile(cfg, m, fmt.Sprintf("p3-%s-round%d", tag, round))
			fps, use, err := readEpoch(ctx, cfg, ds, mnt, uint64(100+round), pids)
			prof()
			if err == nil && after != nil {
				after(m)
			}
			m.Stop()
			if err != nil {
				return err
			}
			row[name] = fps
			fmt.Fprintf(logw, "P3 round %d  %-10s %7.0f files/s\n", round, name, fps)
			rep.addCPU(logw, round, name, use)
			return nil
		}
		readAhead := func(name string) func(*benchproc.Proc) {
			return func(m *benchproc.Proc) {
				if c, err := counters(m); err == nil {
					fmt.Fprintf(logw, "P3 round %d  %s: %d of %d files read ahead\n", round, name, c.FilesReadAhead, len(ds.paths))
					rep.ReadAhead = append(rep.ReadAhead, fmt.Sprintf("round %d %s: %d of %d", round, name, c.FilesReadAhead, len(ds.paths)))
				}
			}
		}
		// A: the default flags (--readahead-files auto).
		if err := cold(mountCol, "cold", readAhead(mountCol), mountapi.CommandOptions{}); err != nil {
			return err
		}
		// A2 (-p3-floor): the same mount admitting nothing (a one-byte
		// cache): every miss read through and served from memory in READ
		// replies, no cache file written. What a cold epoch costs without
		// the cache write; not a strict bound on a caching mount, whose
		// hits of the just-written file go through passthrough instead.
		if cfg.Floor {
			if err := cold(mountNone, "none", nil, mountapi.CommandOptions{CacheSize: 1}); err != nil {
				return err
			}
		}
		// A0: readahead off (--readahead-files 0), the default before auto.
		if err := cold(mountOff, "off", nil, mountapi.CommandOptions{ReadaheadFiles: "0"}); err != nil {
			return err
		}
		// A': the same with a pinned readahead of whole files.
		if cfg.ReadaheadFiles > 0 {
			if err := cold(mountRA, "readahead", readAhead(mountRA), mountapi.CommandOptions{ReadaheadFiles: fmt.Sprint(cfg.ReadaheadFiles)}); err != nil {
				return err
			}
		}
		// A'': the plain cold mount of the same bucket from its manifest:
		// no LIST before the first GETs.
		if hasPrefetch {
			if err := cold(mountMan, "manifest", nil, mountapi.CommandOptions{Manifest: manPath}); err != nil {
				return err
			}
		}

		// B: the GET loop.
		if cfg.Drop {
			if err := dropPageCache(); err != nil {
				return err
			}
		}
		minioPids := map[string]int{"minio": minioPid}
		s0 := sampleCPU(minioPids)
		fps, err := getLoopEpoch(ctx, client, bucket, ds, cfg.Workers, uint64(100+round))
		if err != nil {
			return err
		}
		row[getLoop] = fps
		fmt.Fprintf(logw, "P3 round %d  %-10s %7.0f files/s\n", round, getLoop, fps)
		rep.addCPU(logw, round, getLoop, since(s0, sampleCPU(minioPids), len(ds.paths), nil))

		// C: cachefs prefetch into an empty cache, walking the bucket;
		// C': the same from the dataset's manifest (no listing).
		if hasPrefetch {
			for i, pf := range []struct{ name, manifest string }{{prefetch, "none"}, {prefetchMan, manPath}} {
				cacheDir := newCache(round, fmt.Sprintf("prefetch%d", i))
				if cfg.Drop {
					if err := dropPageCache(); err != nil {
						return err
					}
				}
				cmd := exec.CommandContext(ctx, cfg.CacheFS, "prefetch", srv.URL(bucket), "--cache-dir", cacheDir,
					"--cache-size", fmt.Sprint(capacity), "--workers", fmt.Sprint(cfg.Workers), "--manifest", pf.manifest, "--progress", "none")
				cmd.Env = append(os.Environ(), srv.Env()...)
				s0 := sampleCPU(minioPids)
				start := time.Now()
				if out, err := cmd.CombinedOutput(); err != nil {
					return fmt.Errorf("cachefs prefetch: %v: %s", err, out)
				}
				fps := float64(len(ds.paths)) / time.Since(start).Seconds()
				s1 := sampleCPU(minioPids)
				row[pf.name] = fps
				fmt.Fprintf(logw, "P3 round %d  %-10s %7.0f files/s\n", round, pf.name, fps)
				cpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
				rep.addCPU(logw, round, pf.name, since(s0, s1, len(ds.paths), map[string]float64{"prefetch": cpu.Seconds()}))
			}
		}
		rep.P3 = append(rep.P3, row)
	}
	return nil
}

// getLoopEpoch GETs every object once in a shuffled order with workers
// concurrent requests, hashing each body with sha256 like the epoch reader
// does (it is the epoch reader, reading with GETs), and returns files/s.
func getLoopEpoch(ctx context.Context, c *minio.Client, bucket string, ds dataset, workers int, seed uint64) (float64, error) {
	res, err := epoch.Run(ctx, epoch.Options{Paths: ds.paths, Workers: workers, Seed: seed, Want: ds.want,
		Open: func(ctx context.Context, key string) (io.ReadCloser, error) {
			return c.GetObject(ctx, bucket, key, minio.GetObjectOptions{})
		}})
	if err != nil {
		return 0, err
	}
	if len(res.Mismatches) > 0 {
		return 0, fmt.Errorf("GET %s: sha256 mismatch", res.Mismatches[0])
	}
	return res.FilesPerSec(), nil
}
