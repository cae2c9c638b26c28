// Command meta measures the metadata goals at 1M files (mount ready time,
// walk rate, memory per file): it generates a deterministic dataset of tiny files on local disk, builds its manifest,
// then mounts it with `cachefs mount` twice, side by side in one run — with
// the manifest and without (lazy listings) — and reports for each the
// mount-to-ready time, a full parallel walk (readdir of every directory and
// lstat of every file by -walkers goroutines, the first after mounting) and
// the mount process's RSS before and after the walk.
//
// With -s3, the same files (the first -s3-files of them) are also uploaded
// to a MinIO started here (kept in -dir and reused by later runs), indexed
// from S3, the manifest stored next to the dataset at .epochfs/manifest, and
// three mounts of the bucket are compared the same way in one run: EpochFS
// finding that manifest by itself, EpochFS without a manifest (lazy
// listings), and `rclone mount` (pinned, built by `make bench-tools`).
//
//	go run ./bench/meta -dir /var/tmp/epochfs-meta -files 1000000 -walkers 8
//	go run ./bench/meta -dir /var/tmp/epochfs-meta -files 1000000 -s3 -s3-files 1000000
//
// The dataset is kept in -dir and reused when it already has -files files.
// Needs root (FUSE).
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/epochfs/epochfs/internal/testenv"

	"github.com/minio/minio-go/v7"

	"github.com/epochfs/epochfs/internal/benchproc"
	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/backend/all"
	"github.com/epochfs/epochfs/pkg/manifest"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
	"github.com/epochfs/epochfs/pkg/source"
)

func main() {
	dir := flag.String("dir", "/var/tmp/epochfs-meta", "work directory (dataset, manifest, cache, mount points)")
	files := flag.Int("files", 1_000_000, "number of files")
	perDir := flag.Int("per-dir", 1000, "files per directory")
	walkers := flag.Int("walkers", 8, "parallel walkers")
	rounds := flag.Int("rounds", 1, "interleaved rounds of (manifest, no manifest[, S3 modes])")
	local := flag.Bool("local", true, "compare mounts of the local dataset")
	s3 := flag.Bool("s3", false, "also compare mounts of the dataset in MinIO: EpochFS with and without a manifest, and rclone mount")
	s3Files := flag.Int("s3-files", 0, "files uploaded to MinIO (0: -files)")
	minioBin := flag.String("minio", ".tools/bin/minio", "minio binary (make tools)")
	rcloneBin := flag.String("rclone", ".tools/bin/rclone", "rclone binary (make bench-tools)")
	flag.Parse()
	data := filepath.Join(*dir, "data")
	if err := generate(data, *files, *perDir); err != nil {
		log.Fatal(err)
	}
	bin, err := testenv.Build("./cmd/cachefs", "", *dir)
	if err != nil {
		log.Fatal(err)
	}
	if *local {
		if err := runLocal(bin, *dir, data, *walkers, *rounds); err != nil {
			log.Fatal(err)
		}
	}
	if *s3 {
		n := *s3Files
		if n == 0 {
			n = *files
		}
		if err := runS3(bin, *dir, data, min(n, *files), *perDir, *walkers, *rounds, *minioBin, *rcloneBin); err != nil {
			log.Fatal(err)
		}
	}
}

// index builds the manifest of the dataset at url with the library (the
// code of `cachefs index`, 16 listing workers) and returns how long the
// listing took (opening the backend not included).
func index(ctx context.Context, url string) (*manifest.Manifest, manifest.IndexStats, time.Duration, error) {
	src, err := source.Parse(url)
	if err != nil {
		return nil, manifest.IndexStats{}, 0, err
	}
	b, err := all.Open(ctx, src, backend.Options{})
	if err != nil {
		return nil, manifest.IndexStats{}, 0, err
	}
	defer b.Close()
	start := time.Now()
	m, st, err := manifest.Index(ctx, b, manifest.IndexOptions{Workers: 16})
	return m, st, time.Since(start), err
}

// mtimeSizeOnly rebuilds m with each posix version
// "MTIMENANOS-SIZE-CTIMENANOS-INO" cut to "MTIMENANOS-SIZE", as builds
// before the ctime and inode recorded it: the manifest's size before.
func mtimeSizeOnly(m *manifest.Manifest) (*manifest.Manifest, error) {
	var files []manifest.File
	m.Walk(func(i int, p string) bool {
		v := m.Version(i)
		if f := strings.Split(v, "-"); len(f) == 4 {
			v = f[0] + "-" + f[1]
		}
		files = append(files, manifest.File{Path: p, Size: m.Size(i), Version: v})
		return true
	})
	old, _, err := manifest.Build(files, manifest.BuildOptions{Info: m.Info()})
	return old, err
}

func runLocal(bin, dir, data string, walkers, rounds int) error {

	// Manifest build (library call, the same code as `cachefs index`).
	ctx := context.Background()
	m, st, took, err := index(ctx, data)
	if err != nil {
		return err
	}
	manPath := filepath.Join(dir, "manifest")
	size, err := m.WriteFile(manPath)
	if err != nil {
		return err
	}
	fmt.Printf("dataset: %d files in %d directories, %d bytes\n", st.Files, st.Dirs, st.Bytes)
	fmt.Printf("index:   %.2fs (%.0f files/s), manifest %d bytes (%.1f B/file), in memory %.1f B/file beyond %.1f B/file of names\n",
		took.Seconds(), float64(st.Files)/took.Seconds(), size, float64(size)/float64(st.Files),
		float64(m.OverheadBytes())/float64(st.Files), float64(m.NameBytes())/float64(st.Files))
	if old, err := mtimeSizeOnly(m); err != nil {
		return err
	} else if data, err := old.Encode(); err != nil {
		return err
	} else {
		fmt.Printf("         the same with posix versions of mtime+size only (builds before ctime and inode): manifest %.1f B/file, in memory %.1f B/file\n",
			float64(len(data))/float64(st.Files), float64(old.OverheadBytes())/float64(st.Files))
	}
	start := time.Now()
	if _, err := manifest.ReadFile(manPath, 16<<30); err != nil { // no limit: a benchmark's own manifest
		return err
	}
	fmt.Printf("load:    %.0f ms\n", time.Since(start).Seconds()*1000)
	m = nil
	runtime.GC()

	tableHeader(walkers)
	for r := 1; r <= rounds; r++ {
		for _, mode := range []string{manPath, "none"} {
			name := "manifest"
			if mode == "none" {
				name = "no manifest"
			}
			res, err := measure(cachefsMount(bin, data, mode, nil), dir, walkers)
			if err != nil {
				return err
			}
			res.print(r, name)
		}
	}
	return nil
}

func tableHeader(walkers int) {
	fmt.Printf("\n| round | mode | mount→ready | walk (readdir + lstat, %d walkers) | lstat/s | RSS ready | RSS after walk | (after − ready)/file |\n|---|---|---|---|---|---|---|---|\n", walkers)
}

func (res result) print(round int, name string) {
	fmt.Printf("| %d | %s | %.2fs | %.2fs (%d files) | %.0f | %s | %s | %.0f B |\n", round, name,
		res.ready.Seconds(), res.walk.Seconds(), res.files, float64(res.files)/res.walk.Seconds(),
		mib(res.rssReady), mib(res.rssWalk), float64(res.rssWalk-res.rssReady)/float64(res.files))
}

// runS3 uploads the first files files of data to MinIO (once: a marker
// object records a finished upload), indexes the bucket into
// .epochfs/manifest, and compares EpochFS with that manifest, EpochFS
// without one, and rclone mount, interleaved.
func runS3(bin, dir, data string, files, perDir, walkers, rounds int, minioBin, rcloneBin string) error {
	for _, b := range []string{minioBin, rcloneBin} {
		if _, err := os.Stat(b); err != nil {
			return fmt.Errorf("%w (run make tools bench-tools)", err)
		}
	}
	srv, err := benchproc.StartMinIO(minioBin, filepath.Join(dir, "minio"))
	if err != nil {
		return err
	}
	defer srv.Stop()
	ctx := context.Background()
	const bucket = "meta"
	marker := fmt.Sprintf(".bench/uploaded-%d-%d", files, perDir)
	if _, err := srv.Client().StatObject(ctx, bucket, marker, minio.StatObjectOptions{}); err != nil {
		var paths []string
		for i := range files {
			paths = append(paths, fmt.Sprintf("d%04d/f%07d.jpg", i/perDir, i))
		}
		start := time.Now()
		err := srv.Upload(ctx, bucket, data, paths, 32, func(done int) {
			if done%100_000 == 0 {
				fmt.Printf("upload: %d/%d files, %.0f files/s\n", done, files, float64(done)/time.Since(start).Seconds())
			}
		})
		if err != nil {
			return err
		}
		if _, err := srv.Client().PutObject(ctx, bucket, marker, strings.NewReader(""), 0, minio.PutObjectOptions{}); err != nil {
			return err
		}
		fmt.Printf("uploaded %d files to MinIO in %.1fs\n", files, time.Since(start).Seconds())
	}

	// Index from S3 with the library (the code of `cachefs index`), and
	// store the manifest where mounts look for it by themselves.
	url := srv.URL(bucket)
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		os.Setenv(k, v)
	}
	m, st, took, err := index(ctx, url)
	if err != nil {
		return err
	}
	enc, err := m.Encode()
	if err != nil {
		return err
	}
	if _, err := srv.Client().PutObject(ctx, bucket, manifest.DefaultPath, bytes.NewReader(enc), int64(len(enc)), minio.PutObjectOptions{}); err != nil {
		return err
	}
	fmt.Printf("\nS3 dataset: %d files in %d directories in MinIO\n", st.Files, st.Dirs)
	fmt.Printf("index from S3: %.2fs (%.0f files/s, 16 listing workers), manifest %d bytes (%.1f B/file), stored at %s\n",
		took.Seconds(), float64(st.Files)/took.Seconds(), len(enc), float64(len(enc))/float64(st.Files), manifest.DefaultPath)
	m = nil
	runtime.GC()

	tableHeader(walkers)
	for r := 1; r <= rounds; r++ {
		for _, mode := range []string{"epochfs, manifest found in the bucket", "epochfs, no manifest", "rclone mount"} {
			var start starter
			switch mode {
			case "rclone mount":
				start = func(mnt, cache string) (*benchproc.Proc, error) {
					return benchproc.StartRclone(rcloneBin, srv.RcloneRemote(bucket), mnt, cache, 1<<30, srv.Env())
				}
			case "epochfs, no manifest":
				start = cachefsMount(bin, url, "none", srv.Env())
			default:
				start = cachefsMount(bin, url, "", srv.Env())
			}
			res, err := measure(start, dir, walkers)
			if err != nil {
				return fmt.Errorf("%s: %w", mode, err)
			}
			res.print(r, "S3, "+mode)
		}
	}
	return nil
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

// generate writes files tiny files (1–64 bytes) named dNNNN/fNNNNNNN.jpg,
// perDir per directory, unless data already holds that many.
func generate(data string, files, perDir int) error {
	stamp := data + ".generated"
	if b, err := os.ReadFile(stamp); err == nil && strings.TrimSpace(string(b)) == fmt.Sprintf("%d/%d", files, perDir) {
		return nil
	}
	start := time.Now()
	var wg sync.WaitGroup
	var firstErr atomic.Value
	dirs := (files + perDir - 1) / perDir
	work := make(chan int)
	for range 2 * runtime.NumCPU() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 64)
			for d := range work {
				p := filepath.Join(data, fmt.Sprintf("d%04d", d))
				if err := os.MkdirAll(p, 0o755); err != nil {
					firstErr.Store(err)
					return
				}
				for i := d * perDir; i < min((d+1)*perDir, files); i++ {
					n := 1 + (i*7919)%64
					for k := range n {
						buf[k] = byte(i + k)
					}
					if err := os.WriteFile(filepath.Join(p, fmt.Sprintf("f%07d.jpg", i)), buf[:n], 0o644); err != nil {
						firstErr.Store(err)
						return
					}
				}
			}
		}()
	}
	for d := range dirs {
		work <- d
	}
	close(work)
	wg.Wait()
	if err, ok := firstErr.Load().(error); ok {
		return err
	}
	fmt.Printf("generated %d files in %.1fs\n", files, time.Since(start).Seconds())
	return os.WriteFile(stamp, []byte(fmt.Sprintf("%d/%d\n", files, perDir)), 0o644)
}

type result struct {
	ready, walk       time.Duration
	files             int64
	rssReady, rssWalk int64
}

// starter starts a mount at mnt with its cache in cache and waits until it
// is mounted.
type starter func(mnt, cache string) (*benchproc.Proc, error)

// cachefsMount starts `cachefs mount source` with --manifest manifest ("":
// the default, found next to the dataset).
func cachefsMount(bin, source, man string, env []string) starter {
	return func(mnt, cache string) (*benchproc.Proc, error) {
		args := mountapi.CommandOptions{Source: source, Mountpoint: mnt, CacheDir: cache, CacheSize: 1 << 30, LogLevel: "warn", Manifest: man}.Args()
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), env...)
		p, err := benchproc.Start("cachefs mount", cmd, mnt)
		if err != nil {
			return nil, err
		}
		if err := p.WaitMounted(5 * time.Minute); err != nil {
			return nil, err
		}
		return p, nil
	}
}

// measure mounts with start on a fresh cache, waits until the mount
// answers, walks it, and unmounts.
func measure(start starter, dir string, walkers int) (result, error) {
	var res result
	mnt := filepath.Join(dir, "mnt")
	cache := filepath.Join(dir, "cache")
	os.RemoveAll(cache)
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return res, err
	}
	dropCaches()
	t0 := time.Now()
	p, err := start(mnt, cache)
	if err != nil {
		return res, err
	}
	defer p.Stop()
	if _, err := os.ReadDir(mnt); err != nil {
		return res, err
	}
	res.ready = time.Since(t0)
	res.rssReady = rss(p.Cmd.Process.Pid)

	t0 = time.Now()
	n, err := walk(mnt, walkers)
	if err != nil {
		return res, err
	}
	res.walk, res.files = time.Since(t0), n
	res.rssWalk = rss(p.Cmd.Process.Pid)
	return res, nil
}

// walk reads every directory and lstats every file with walkers
// goroutines, directories handed out as they are found.
func walk(root string, walkers int) (int64, error) {
	var files atomic.Int64
	var mu sync.Mutex
	var firstErr error
	queue := make(chan string, 1<<20)
	var pending sync.WaitGroup
	pending.Add(1)
	queue <- root
	var wg sync.WaitGroup
	for range walkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := range queue {
				ents, err := os.ReadDir(d)
				if err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
				}
				for _, e := range ents {
					p := filepath.Join(d, e.Name())
					if e.IsDir() {
						pending.Add(1)
						queue <- p
						continue
					}
					var st syscall.Stat_t
					if err := syscall.Lstat(p, &st); err != nil {
						mu.Lock()
						firstErr = err
						mu.Unlock()
					}
					files.Add(1)
				}
				pending.Done()
			}
		}()
	}
	pending.Wait()
	close(queue)
	wg.Wait()
	return files.Load(), firstErr
}

// rss returns the resident set of a process in bytes.
func rss(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// dropCaches empties the kernel's page, dentry and inode caches (root only).
func dropCaches() {
	syscall.Sync()
	_ = os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0o644)
}
