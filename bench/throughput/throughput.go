// Command throughput is the throughput benchmark of issue 5. Each comparison
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
package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"golang.org/x/sys/unix"

	"github.com/epochfs/epochfs/internal/benchproc"
	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/epoch"
	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/fusefs"
	"github.com/epochfs/epochfs/pkg/manifest"
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
	ds := dataset{root: filepath.Join(cfg.Dir, "data"), want: map[string][sha256.Size]byte{}}
	if err := os.RemoveAll(ds.root); err != nil {
		return nil, err
	}
	files, err := datagen.Write(ds.root, cfg.Spec)
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		ds.paths = append(ds.paths, f.Path)
		ds.want[f.Path] = datagen.Sum(f)
	}
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

func benchP2(ctx context.Context, cfg Config, ds dataset, rep *Report, logw io.Writer) error {
	capacity := capacityFor(ds.bytes)
	efsMnt, efsCache := filepath.Join(cfg.Dir, "mnt-epochfs"), filepath.Join(cfg.Dir, "cache-epochfs")
	for _, d := range []string{efsCache, filepath.Join(cfg.Dir, "cache-rclone")} {
		if err := os.RemoveAll(d); err != nil {
			return err
		}
	}
	efs, err := startEpochFS(ds.root, efsMnt, efsCache, capacity, nil)
	if err != nil {
		return err
	}
	defer efs.Stop()
	readers := []struct {
		name string
		root string
		pids map[string]int
	}{{native, ds.root, nil}, {epochfs, efsMnt, pidOf("mount", efs)}}
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
		m, err := startEpochFS(ds.root, filepath.Join(cfg.Dir, "mnt-epochfs-manifest"), cacheDir, capacity, nil, "-manifest", man)
		if err != nil {
			return err
		}
		defer m.Stop()
		readers = append(readers, struct {
			name string
			root string
			pids map[string]int
		}{epochfsMan, m.Mnt, pidOf("mount", m)})
	}
	if cfg.RClone != "" {
		rc, err := benchproc.StartRclone(cfg.RClone, ds.root, filepath.Join(cfg.Dir, "mnt-rclone"), filepath.Join(cfg.Dir, "cache-rclone"), capacity, nil)
		if err != nil {
			return err
		}
		defer rc.Stop()
		readers = append(readers, struct {
			name string
			root string
			pids map[string]int
		}{rcloneR, rc.Mnt, pidOf("rclone", rc)})
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
	minioPid := srv.Cmd.Process.Pid
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
	client, err := benchproc.NewClient(srv.Host, srv.Access, srv.Secret, cfg.Workers)
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
		cmd := exec.CommandContext(ctx, cfg.CacheFS, "index", srv.URL(bucket), "-o", manPath)
		cmd.Env = append(os.Environ(), srv.Env()...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("cachefs index: %v: %s", err, out)
		}
	}
	for round := 1; round <= cfg.Rounds; round++ {
		row := map[string]float64{}
		// A: cold epoch through a mount with an empty cache (a fresh
		// cache directory per run) and mount flags extra; after is called
		// with the mount still up.
		mnt := filepath.Join(cfg.Dir, "mnt-cold")
		cold := func(name, tag string, after func(*benchproc.Proc), extra ...string) error {
			m, err := startEpochFS(srv.URL(bucket), mnt, newCache(round, tag), capacity, srv.Env(), extra...)
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
		if err := cold(mountCol, "cold", nil); err != nil {
			return err
		}
		// A': the same with readahead of whole files.
		if cfg.ReadaheadFiles > 0 {
			readAhead := func(m *benchproc.Proc) {
				if c, err := counters(m); err == nil {
					fmt.Fprintf(logw, "P3 round %d  %s: %d of %d files read ahead\n", round, mountRA, c.FilesReadAhead, len(ds.paths))
				}
			}
			if err := cold(mountRA, "readahead", readAhead, "-readahead-files", fmt.Sprint(cfg.ReadaheadFiles)); err != nil {
				return err
			}
		}
		// A'': the plain cold mount of the same bucket from its manifest:
		// no LIST before the first GETs.
		if hasPrefetch {
			if err := cold(mountMan, "manifest", nil, "-manifest", manPath); err != nil {
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
// does, and returns files/s.
func getLoopEpoch(ctx context.Context, c *minio.Client, bucket string, ds dataset, workers int, seed uint64) (float64, error) {
	order := epoch.Shuffled(ds.paths, seed)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		n        int
		next     = make(chan string, workers)
	)
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 256<<10)
			for p := range next {
				err := getOne(ctx, c, bucket, p, buf, ds.want[p])
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				n++
				mu.Unlock()
			}
		}()
	}
	for _, p := range order {
		next <- p
	}
	close(next)
	wg.Wait()
	el := time.Since(start)
	if firstErr != nil {
		return 0, firstErr
	}
	return float64(n) / el.Seconds(), nil
}

func getOne(ctx context.Context, c *minio.Client, bucket, key string, buf []byte, want [sha256.Size]byte) error {
	obj, err := c.GetObject(ctx, bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return err
	}
	defer obj.Close()
	h := sha256.New()
	if _, err := io.CopyBuffer(h, obj, buf); err != nil {
		return fmt.Errorf("GET %s: %w", key, err)
	}
	var got [sha256.Size]byte
	h.Sum(got[:0])
	if got != want {
		return fmt.Errorf("GET %s: sha256 mismatch", key)
	}
	return nil
}

// Markdown renders the report's tables with per-round ratios and medians.
func (rep *Report) Markdown(header string) string {
	var b strings.Builder
	b.WriteString(header)
	if len(rep.P2) > 0 {
		b.WriteString("\n### P2: cached epoch (epoch ≥ 2, everything cached), files/s\n\n")
		cols := present(rep.P2, native, epochfs, epochfsMan, rcloneR)
		table(&b, rep.P2, cols, [][2]string{{epochfs, native}, {epochfsMan, native}, {epochfs, rcloneR}})
		fmt.Fprintf(&b, "\nDuring the cached EpochFS epochs: %d opens reached the daemon, %d READ requests on cached files "+
			"(0 = FUSE passthrough engaged: the kernel reads the cache files directly), %d other READ requests.\n",
			rep.CachedOpens, rep.CachedReads, rep.OtherReads)
	}
	if len(rep.P3) > 0 {
		if rep.S3Latency > 0 {
			fmt.Fprintf(&b, "\n### P3: cold epoch from MinIO on 127.0.0.1 behind a proxy adding %v to every request, files/s\n\n", rep.S3Latency)
		} else {
			b.WriteString("\n### P3: cold epoch from MinIO on 127.0.0.1, files/s\n\n")
		}
		cols := present(rep.P3, mountCol, mountRA, mountMan, getLoop, prefetch, prefetchMan)
		table(&b, rep.P3, cols, [][2]string{{mountCol, getLoop}, {mountRA, getLoop}, {mountMan, getLoop}, {prefetch, getLoop}, {prefetchMan, getLoop}})
	}
	if len(rep.CPU) > 0 {
		rep.cpuTable(&b)
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(&b, "\nNote: %s\n", n)
	}
	return b.String()
}

func present(rows []map[string]float64, names ...string) []string {
	var out []string
	for _, n := range names {
		if _, ok := rows[0][n]; ok {
			out = append(out, n)
		}
	}
	return out
}

func table(b *strings.Builder, rows []map[string]float64, cols []string, ratios [][2]string) {
	var rs [][2]string
	for _, r := range ratios {
		if slices.Contains(cols, r[0]) && slices.Contains(cols, r[1]) {
			rs = append(rs, r)
		}
	}
	b.WriteString("| round |")
	for _, c := range cols {
		fmt.Fprintf(b, " %s |", c)
	}
	for _, r := range rs {
		fmt.Fprintf(b, " %s / %s |", r[0], r[1])
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(cols)+len(rs)) + "\n")
	ratioVals := make([][]float64, len(rs))
	for i, row := range rows {
		fmt.Fprintf(b, "| %d |", i+1)
		for _, c := range cols {
			fmt.Fprintf(b, " %.0f |", row[c])
		}
		for j, r := range rs {
			v := row[r[0]] / row[r[1]]
			ratioVals[j] = append(ratioVals[j], v)
			fmt.Fprintf(b, " %.2f |", v)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(b, "| median |%s", strings.Repeat(" |", len(cols)))
	for j := range rs {
		fmt.Fprintf(b, " **%.2f** |", median(ratioVals[j]))
	}
	b.WriteString("\n")
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// machine describes this host for the report header.
func machine() string {
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		mem = strings.Join(strings.Fields(line)[1:], " ")
	}
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return fmt.Sprintf("nproc %d, MemTotal %s, kernel %s", runtime.NumCPU(), mem, strings.TrimSpace(string(kernel)))
}

// writeManifest indexes the directory root into a manifest file.
func writeManifest(ctx context.Context, root, path string) error {
	src, err := backend.Parse(root)
	if err != nil {
		return err
	}
	b, err := backend.Open(ctx, src, backend.Options{})
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
