// Command throughput measures EpochFS's throughput goals P2 (cached epoch)
// and P3 (cold epoch from an object store). Each comparison
// runs side by side in one run, interleaved A B A B … over -rounds rounds
// (single runs on these shared VMs vary up to 5×), with N parallel readers
// reading whole files in a shuffled order like a data loader
// (internal/epoch, sha256 of every file), and dirty pages written back and
// the page cache dropped before every run (as root).
//
//   - P2, cached epoch: files/s of an epoch through an EpochFS mount whose
//     cache holds the whole dataset vs a native read of the same files from
//     the same disk (goal ≥ 0.9×), and vs `rclone mount --vfs-cache-mode
//     full` over the same source with the same cache size, also warm (goal
//     ≥ 1.5×).
//   - P3, cold epoch from MinIO: files/s of the first epoch through a mount
//     with an empty cache vs a concurrent minio-go GET loop over the same
//     objects with the same concurrency (goal ≥ 1.0×), and `cachefs
//     prefetch` vs the same loop (goal ≥ 0.9×) when bin/cachefs has it.
//
// EpochFS mounts run in a child process of this binary that does exactly
// what `cachefs mount` does (pkg/mount) and also serves /debug/pprof and the
// fusefs request counters at /debug/vars (see child.go); the run reports how
// many READ requests reached the daemon during cached epochs (0 when FUSE
// passthrough is engaged).
//
//	go run ./bench/throughput -dir /var/tmp/epochfs-throughput -rounds 3
//	go run ./bench/throughput -tiny     # 200 small files, 1 round: seconds (CI)
//
// Needs root (FUSE, dropping the page cache). rclone and MinIO come from
// .tools/bin (make tools, bench/setup.sh); a missing one skips its column.
//
// throughput.go holds the run and what both comparisons share, p2.go and
// p3.go one comparison each, report.go the markdown report, child.go the
// mount child, cpu.go the CPU accounting.
package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/epochfs/epochfs/internal/benchproc"
	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/epoch"
)

// Config of one run.
type Config struct {
	Dir     string // work directory
	Spec    datagen.Spec
	Workers int // parallel readers (and GET loop / prefetch workers)
	Rounds  int
	Drop    bool   // drop the page cache before every run
	RClone  string // rclone binary; "" skips the rclone comparison
	MinIO   string // minio binary; "" skips P3
	CacheFS string // cachefs binary with a prefetch command; "" skips the prefetch row
	P2, P3  bool
	// P2Manifest adds a P2 reader: the dataset mounted from its manifest.
	P2Manifest bool
	// ReadaheadFiles > 0 adds a P3 row: the cold epoch through a mount with
	// that many files read ahead per miss (`cachefs mount --readahead-files`).
	// ("mount cold" has the default flags: --readahead-files auto; "mount
	// cold, readahead off" has --readahead-files 0, the default before.)
	ReadaheadFiles int
	// S3Latency > 0 puts a proxy adding this much to every request's time
	// to first byte between MinIO and every P3 reader (the mounts, the GET
	// loop, prefetch): a far object store instead of one on the same
	// machine.
	S3Latency time.Duration
	Log       io.Writer
	// ProfileDir, when set, receives a CPU profile of the mount process
	// (ProfileSeconds long, from the start) of every EpochFS epoch.
	ProfileDir     string
	ProfileSeconds int
	// Floor adds the P3 row "mount cold, nothing cached" (-p3-floor).
	Floor bool
}

// Report holds every measurement.
type Report struct {
	Files int
	Bytes int64
	P2    []map[string]float64 // per round: reader → files/s
	P3    []map[string]float64
	// Daemon counters during the cached EpochFS epochs of P2.
	CachedOpens, CachedReads, OtherReads uint64
	// S3Latency is the latency added to every P3 request (0: none).
	S3Latency time.Duration
	// CPU is where the machine's CPU time went during each run of a
	// reader (one per round), per 1000 files.
	CPU   map[string][]cpuUse
	Notes []string
	// ReadAhead notes, per round, how many files the P3 mounts read ahead.
	ReadAhead []string
}

// addCPU records one run's CPU use and logs it.
func (rep *Report) addCPU(logw io.Writer, round int, name string, u cpuUse) {
	if rep.CPU == nil {
		rep.CPU = map[string][]cpuUse{}
	}
	rep.CPU[name] = append(rep.CPU[name], u)
	fmt.Fprintf(logw, "    round %d  %-10s %s\n", round, name, u)
}

// Reader names.
const (
	native  = "native"
	epochfs = "epochfs"
	// epochfsMan is EpochFS mounting the same directory from a manifest.
	epochfsMan = "epochfs, manifest"
	rcloneR    = "rclone"
	mountCol   = "mount cold"
	mountRA    = "mount cold, readahead"
	mountOff   = "mount cold, readahead off"
	mountNone  = "mount cold, nothing cached"
	mountMan   = "mount cold, manifest"
	getLoop    = "GET loop"
	prefetch   = "prefetch"
	// prefetchMan is `cachefs prefetch --manifest` (no listing).
	prefetchMan = "prefetch, manifest"
)

type dataset struct {
	root  string
	paths []string
	want  map[string][sha256.Size]byte
	bytes int64
}

// Bench runs cfg.
func Bench(ctx context.Context, cfg Config) (*Report, error) {
	logw := cfg.Log
	if logw == nil {
		logw = io.Discard
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	setWorkDisk(cfg.Dir)
	ds := dataset{root: filepath.Join(cfg.Dir, "data")}
	if err := os.RemoveAll(ds.root); err != nil {
		return nil, err
	}
	files, err := datagen.Write(ds.root, cfg.Spec)
	if err != nil {
		return nil, err
	}
	ds.paths, ds.want = datagen.Paths(files), datagen.Sums(files)
	ds.bytes = datagen.TotalSize(files)
	fmt.Fprintf(logw, "dataset: %d files, %.1f MB\n", len(files), float64(ds.bytes)/1e6)
	rep := &Report{Files: len(files), Bytes: ds.bytes}
	if cfg.P2 {
		if err := benchP2(ctx, cfg, ds, rep, logw); err != nil {
			return nil, fmt.Errorf("P2: %w", err)
		}
	}
	if cfg.P3 {
		if cfg.MinIO == "" {
			rep.Notes = append(rep.Notes, "P3 not run: no minio binary (make tools)")
		} else if err := benchP3(ctx, cfg, ds, rep, logw); err != nil {
			return nil, fmt.Errorf("P3: %w", err)
		}
	}
	return rep, nil
}

// capacityFor is the cache size of the runs: the dataset plus 1/8, so that
// everything fits with room for rclone's bookkeeping.
func capacityFor(bytes int64) int64 { return bytes + bytes/8 }

// dropPageCache writes dirty pages back (sync) and drops the page cache, so
// that a run neither starts with another run's data cached nor pays for the
// writeback of what the run before it wrote (a cold mount or prefetch
// leaves the whole dataset dirty in the cache directory).
func dropPageCache() error {
	unix.Sync()
	return epoch.DropPageCache()
}

// readEpoch drops the page cache (if asked) and reads one epoch under root.
// It also measures the CPU time of the machine, of this process and of
// pids during the epoch.
func readEpoch(ctx context.Context, cfg Config, ds dataset, root string, seed uint64, pids map[string]int) (float64, cpuUse, error) {
	if cfg.Drop {
		if err := dropPageCache(); err != nil {
			return 0, cpuUse{}, fmt.Errorf("drop the page cache: %w (run as root, or -drop-caches=false)", err)
		}
	}
	s0 := sampleCPU(pids)
	res, err := epoch.Run(ctx, epoch.Options{Root: root, Paths: ds.paths, Workers: cfg.Workers, Seed: seed, Want: ds.want})
	use := since(s0, sampleCPU(pids), len(ds.paths), nil)
	if err != nil {
		return 0, use, err
	}
	if len(res.Mismatches) > 0 || res.Files != len(ds.paths) {
		return 0, use, fmt.Errorf("%s: read %d of %d files, %d sha256 mismatches", root, res.Files, len(ds.paths), len(res.Mismatches))
	}
	return res.FilesPerSec(), use, nil
}

// pidOf names a child process for the CPU accounting.
func pidOf(name string, p *benchproc.Proc) map[string]int {
	if p == nil || p.Cmd.Process == nil {
		return nil
	}
	return map[string]int{name: p.Cmd.Process.Pid}
}

// profile starts a CPU profile of a mount child when cfg.ProfileDir is set;
// the returned func waits for it and writes DIR/name.pprof.
func profile(cfg Config, p *benchproc.Proc, name string) func() {
	if cfg.ProfileDir == "" {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", p.Debug, max(cfg.ProfileSeconds, 1))
		resp, err := http.Get(url)
		if err != nil {
			return
		}
		defer resp.Body.Close()
		f, err := os.Create(filepath.Join(cfg.ProfileDir, name+".pprof"))
		if err != nil {
			return
		}
		_, _ = io.Copy(f, resp.Body)
		f.Close()
	}()
	return func() { <-done }
}
