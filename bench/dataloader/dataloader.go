// Command dataloader (make bench-dataloader) measures one epoch of a real
// PyTorch DataLoader (loader.py: Debian's torch 1.13, batch 64, shuffled,
// Resize((64,64)) + ToTensor, 2 and 8 workers) over the same JPEG tree read
// from (a) local disk, (b) an EpochFS mount over MinIO with default flags,
// cold (fresh cache) and then warm (same mount, cache ≥ dataset), (c) boto3
// straight from MinIO in the workers, (d) `rclone mount --vfs-cache-mode
// full` cold and warm, each of (b)–(d) over MinIO on 127.0.0.1 ("near") and
// behind a proxy adding 20 ms to every request ("far"), and (e) `cachefs
// prefetch` into a fresh cache, then the epoch through a mount of it.
// Rounds are interleaved, with `sync` and drop_caches before every run, and
// every run's order-free checksum of the decoded tensors must equal local
// disk's or the benchmark fails. It writes a markdown report and a plot.
//
//	go run ./bench/dataloader -quick                  # 300 images, 1 round, 2 workers
//	make bench-dataloader                             # 2,000 images, 3 rounds, 2 and 8 workers
//
// Needs root (FUSE, drop_caches), bin/cachefs, .tools/bin/{minio,rclone}
// (make bench-tools) and python3-torch, python3-torchvision, python3-boto3.
//
// dataloader.go holds the run, loader.go loader.py's runner and its result,
// report.go the report, plot.go the plot, main.go the flags.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/epochfs/epochfs/internal/benchproc"
	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/epoch"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
)

// Config of one run.
type Config struct {
	Dir     string // work directory (dataset, MinIO data, caches, mount points)
	Files   int    // JPEGs in the dataset (datagen.JPEGSpec, its other fields at their defaults)
	Seed    uint64 // dataset seed
	Rounds  int
	Workers []int         // DataLoader worker counts
	Latency time.Duration // added to every request of the "far" store
	Drop    bool          // sync + drop_caches before every run
	Python  string        // interpreter with torch, torchvision, boto3
	CacheFS string        // bin/cachefs
	RClone  string        // "" skips the rclone rows
	MinIO   string
	Log     io.Writer
}

// validate checks cfg in one place.
func (c Config) validate() error {
	switch {
	case c.Dir == "" || c.Files <= 0 || c.Rounds <= 0 || len(c.Workers) == 0:
		return fmt.Errorf("dataloader: need a work directory, files, rounds and workers")
	case c.CacheFS == "" || c.MinIO == "" || c.Python == "":
		return fmt.Errorf("dataloader: need cachefs (make build), minio (make bench-tools) and python3 with torch")
	}
	return nil
}

// bench is one run's state.
type bench struct {
	cfg      Config
	loader   Loader
	rep      *Report
	logw     io.Writer
	data     string // the JPEG tree on local disk
	capacity int64  // cache size of mounts and rclone: ≥ the dataset
	near     *benchproc.S3
	far      *benchproc.S3 // near behind the latency proxy
	caches   int           // cache directories made so far
	want     string        // local disk's checksum
}

const bucket = "dataset"

// Run writes the dataset, uploads it, and runs every round.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	b := &bench{cfg: cfg, rep: NewReport(), logw: cfg.Log}
	if b.logw == nil {
		b.logw = io.Discard
	}
	b.rep.Rounds, b.rep.Workers, b.rep.Latency = cfg.Rounds, cfg.Workers, cfg.Latency.String()
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	script := filepath.Join(cfg.Dir, "loader.py")
	if err := os.WriteFile(script, loaderPy, 0o644); err != nil {
		return nil, err
	}
	b.loader = Loader{Python: cfg.Python, Script: script}
	b.data = filepath.Join(cfg.Dir, "data")
	paths, size, err := writeDataset(b.data, datagen.JPEGSpec{Files: cfg.Files, Seed: cfg.Seed})
	if err != nil {
		return nil, err
	}
	b.rep.Images, b.rep.Bytes = len(paths), size
	b.capacity = size + size/8
	fmt.Fprintf(b.logw, "dataset: %d JPEGs, %.1f MB in %s\n", len(paths), float64(size)/1e6, b.data)
	defer os.RemoveAll(filepath.Join(cfg.Dir, "caches"))
	mdir := filepath.Join(cfg.Dir, "minio")
	if err := os.RemoveAll(mdir); err != nil {
		return nil, err
	}
	if b.near, err = benchproc.StartMinIO(cfg.MinIO, mdir); err != nil {
		return nil, err
	}
	defer b.near.Stop()
	if err := b.near.Upload(ctx, bucket, b.data, paths, 16, nil); err != nil {
		return nil, fmt.Errorf("dataloader: upload: %w", err)
	}
	lp, err := benchproc.StartLatencyProxy(b.near.Host, cfg.Latency)
	if err != nil {
		return nil, err
	}
	defer lp.Close()
	far := *b.near
	far.Host = lp.Addr
	b.far = &far
	if cfg.RClone == "" {
		b.rep.Notes = append(b.rep.Notes, "rclone rows not run: no rclone binary (make bench-tools)")
	}
	for round := 1; round <= cfg.Rounds; round++ {
		for _, w := range cfg.Workers {
			if err := b.round(ctx, round, w); err != nil {
				return b.rep, fmt.Errorf("round %d, %d workers: %w", round, w, err)
			}
		}
	}
	return b.rep, nil
}

// round runs every cell once with w workers, in a fixed interleaved order.
func (b *bench) round(ctx context.Context, round, w int) error {
	seed := uint64(round*100 + w)
	if err := b.epoch(ctx, round, Cell{Source: srcLocal, Workers: w}, LoadArgs{Dir: b.data, Workers: w, Seed: seed}); err != nil {
		return err
	}
	for _, far := range []bool{false, true} {
		if err := b.epochFS(ctx, round, w, far, seed); err != nil {
			return err
		}
		srv := b.store(far)
		boto := LoadArgs{Bucket: bucket, Endpoint: "http://" + srv.Host, Workers: w, Seed: seed, Env: srv.Env()}
		if err := b.epoch(ctx, round, Cell{Source: srcBoto3, Far: far, Workers: w}, boto); err != nil {
			return err
		}
		if b.cfg.RClone != "" {
			if err := b.rclone(ctx, round, w, far, seed); err != nil {
				return err
			}
		}
		if err := b.prefetchEpoch(ctx, round, w, far, seed); err != nil {
			return err
		}
	}
	return nil
}

func (b *bench) store(far bool) *benchproc.S3 {
	if far {
		return b.far
	}
	return b.near
}

// epoch drops the page cache, runs one epoch, checks its checksum against
// local disk's (the first local run sets it) and records it.
func (b *bench) epoch(ctx context.Context, round int, c Cell, a LoadArgs) error {
	if b.cfg.Drop {
		unix.Sync()
		if err := epoch.DropPageCache(); err != nil {
			return fmt.Errorf("drop the page cache: %w (run as root, or -drop-caches=false)", err)
		}
	}
	e, err := b.loader.Run(ctx, a)
	if err != nil {
		return fmt.Errorf("%s: %w", c.Name(), err)
	}
	if b.want == "" && c.Source == srcLocal {
		b.want, b.rep.Checksum, b.rep.Torch = e.Checksum, e.Checksum, e.Torch
	}
	if e.Checksum != b.want || e.Images != b.rep.Images {
		return fmt.Errorf("%s, %d workers: saw %d images with checksum %s, local disk %d images with %s: not the same images",
			c.Name(), c.Workers, e.Images, e.Checksum, b.rep.Images, b.want)
	}
	b.rep.Add(c, e.ImagesPerS)
	fmt.Fprintf(b.logw, "round %d  %2d workers  %-32s %7.1f images/s  %6.2f s\n", round, c.Workers, c.Name(), e.ImagesPerS, e.Seconds)
	return nil
}

// newCache is a fresh cache directory. They are all removed at the end,
// not between runs, so that no run pays for the inodes the last one freed
// (see bench/throughput/p3.go).
func (b *bench) newCache(what string) string {
	b.caches++
	return filepath.Join(b.cfg.Dir, "caches", fmt.Sprintf("%03d-%s", b.caches, what))
}

// mount starts `cachefs mount` of the store with default flags on cacheDir.
func (b *bench) mount(srv *benchproc.S3, cacheDir string) (*benchproc.Proc, error) {
	mnt := filepath.Join(b.cfg.Dir, "mnt-epochfs")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return nil, err
	}
	opts := mountapi.CommandOptions{Source: srv.URL(bucket), Mountpoint: mnt, CacheDir: cacheDir, CacheSize: b.capacity}
	cmd := exec.Command(b.cfg.CacheFS, opts.Args()...)
	cmd.Env = append(os.Environ(), srv.Env()...)
	p, err := benchproc.Start("cachefs mount", cmd, mnt)
	if err != nil {
		return nil, err
	}
	if err := p.WaitMounted(60 * time.Second); err != nil {
		return nil, err
	}
	return p, nil
}

// epochFS runs the cold epoch through a fresh mount, then the warm one
// through the same mount.
func (b *bench) epochFS(ctx context.Context, round, w int, far bool, seed uint64) error {
	m, err := b.mount(b.store(far), b.newCache("epochfs-"+place(far)))
	if err != nil {
		return err
	}
	defer m.Stop()
	a := LoadArgs{Dir: m.Mnt, Workers: w, Seed: seed}
	if err := b.epoch(ctx, round, Cell{Source: srcEpochFS, Far: far, Workers: w}, a); err != nil {
		return err
	}
	a.Seed++
	return b.epoch(ctx, round, Cell{Source: srcEpochFS, Far: far, Warm: true, Workers: w}, a)
}

// rclone runs the cold and then the warm epoch through one rclone mount
// with a fresh cache.
func (b *bench) rclone(ctx context.Context, round, w int, far bool, seed uint64) error {
	srv := b.store(far)
	m, err := benchproc.StartRclone(b.cfg.RClone, srv.RcloneRemote(bucket), filepath.Join(b.cfg.Dir, "mnt-rclone"),
		b.newCache("rclone-"+place(far)), b.capacity, srv.Env())
	if err != nil {
		return err
	}
	defer m.Stop()
	a := LoadArgs{Dir: m.Mnt, Workers: w, Seed: seed}
	if err := b.epoch(ctx, round, Cell{Source: srcRclone, Far: far, Workers: w}, a); err != nil {
		return err
	}
	a.Seed++
	return b.epoch(ctx, round, Cell{Source: srcRclone, Far: far, Warm: true, Workers: w}, a)
}

// prefetchEpoch times `cachefs prefetch` (default flags) into a fresh
// cache, then runs the epoch through a mount of that cache.
func (b *bench) prefetchEpoch(ctx context.Context, round, w int, far bool, seed uint64) error {
	srv := b.store(far)
	cacheDir := b.newCache("prefetch-" + place(far))
	if b.cfg.Drop {
		unix.Sync()
		if err := epoch.DropPageCache(); err != nil {
			return err
		}
	}
	cmd := exec.CommandContext(ctx, b.cfg.CacheFS, "prefetch", srv.URL(bucket),
		"--cache-dir", cacheDir, "--cache-size", fmt.Sprint(b.capacity), "--progress", "none")
	cmd.Env = append(os.Environ(), srv.Env()...)
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("cachefs prefetch: %v: %s", err, tail(string(out), 2000))
	}
	secs := time.Since(start).Seconds()
	b.rep.PrefetchSeconds[far] = append(b.rep.PrefetchSeconds[far], secs)
	fmt.Fprintf(b.logw, "round %d  %2d workers  %-32s %7.2f s\n", round, w, "cachefs prefetch, "+place(far), secs)
	m, err := b.mount(srv, cacheDir)
	if err != nil {
		return err
	}
	defer m.Stop()
	if err := b.epoch(ctx, round, Cell{Source: srcPrefetch, Far: far, Workers: w}, LoadArgs{Dir: m.Mnt, Workers: w, Seed: seed}); err != nil {
		return err
	}
	m.Stop()
	return b.prefetchLiveEpoch(ctx, round, w, far, seed)
}

// prefetchLiveEpoch is prefetchEpoch through a running mount: a fresh
// mount first, then `cachefs prefetch` on its cache directory (which asks
// the mount over its control socket, so the entries are admitted live, not
// recovered from disk by a later mount), then the epoch.
func (b *bench) prefetchLiveEpoch(ctx context.Context, round, w int, far bool, seed uint64) error {
	srv := b.store(far)
	cacheDir := b.newCache("prefetch-live-" + place(far))
	m, err := b.mount(srv, cacheDir)
	if err != nil {
		return err
	}
	defer m.Stop()
	if b.cfg.Drop {
		unix.Sync()
		if err := epoch.DropPageCache(); err != nil {
			return err
		}
	}
	cmd := exec.CommandContext(ctx, b.cfg.CacheFS, "prefetch", srv.URL(bucket), "--cache-dir", cacheDir, "--progress", "none")
	cmd.Env = append(os.Environ(), srv.Env()...)
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("cachefs prefetch through the mount: %v: %s", err, tail(string(out), 2000))
	}
	secs := time.Since(start).Seconds()
	b.rep.PrefetchLiveSeconds[far] = append(b.rep.PrefetchLiveSeconds[far], secs)
	fmt.Fprintf(b.logw, "round %d  %2d workers  %-32s %7.2f s\n", round, w, "prefetch via mount, "+place(far), secs)
	return b.epoch(ctx, round, Cell{Source: srcPrefetchLive, Far: far, Workers: w}, LoadArgs{Dir: m.Mnt, Workers: w, Seed: seed})
}
