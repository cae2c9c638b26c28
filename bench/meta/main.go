// Command meta is the metadata benchmark of issue 4: it generates a
// deterministic dataset of tiny files on local disk, builds its manifest,
// then mounts it with `cachefs mount` twice, side by side in one run — with
// the manifest and without (lazy listings) — and reports for each the
// mount-to-ready time, a full parallel walk (readdir of every directory and
// lstat of every file by -walkers goroutines, the first after mounting) and
// the mount process's RSS before and after the walk.
//
//	go run ./bench/meta -dir /var/tmp/epochfs-meta -files 1000000 -walkers 8
//
// The dataset is kept in -dir and reused when it already has -files files.
// Needs root (FUSE).
package main

import (
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

	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/manifest"
)

func main() {
	dir := flag.String("dir", "/var/tmp/epochfs-meta", "work directory (dataset, manifest, cache, mount points)")
	files := flag.Int("files", 1_000_000, "number of files")
	perDir := flag.Int("per-dir", 1000, "files per directory")
	walkers := flag.Int("walkers", 8, "parallel walkers")
	rounds := flag.Int("rounds", 1, "interleaved rounds of (manifest, no manifest)")
	flag.Parse()
	if err := run(*dir, *files, *perDir, *walkers, *rounds); err != nil {
		log.Fatal(err)
	}
}

func run(dir string, files, perDir, walkers, rounds int) error {
	data := filepath.Join(dir, "data")
	if err := generate(data, files, perDir); err != nil {
		return err
	}
	bin := filepath.Join(dir, "cachefs")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/cachefs").CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %v\n%s", err, out)
	}

	// Manifest build (library call, the same code as `cachefs index`).
	ctx := context.Background()
	src, _ := backend.Parse(data)
	b, err := backend.Open(ctx, src, backend.Options{})
	if err != nil {
		return err
	}
	start := time.Now()
	m, st, err := manifest.Index(ctx, b, manifest.IndexOptions{Workers: 16})
	b.Close()
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
		time.Since(start).Seconds(), float64(st.Files)/time.Since(start).Seconds(), size, float64(size)/float64(st.Files),
		float64(m.OverheadBytes())/float64(st.Files), float64(m.NameBytes())/float64(st.Files))
	start = time.Now()
	if _, err := manifest.ReadFile(manPath, 0); err != nil {
		return err
	}
	fmt.Printf("load:    %.0f ms\n", time.Since(start).Seconds()*1000)
	m = nil
	runtime.GC()

	fmt.Printf("\n| round | mode | mount→ready | walk (readdir + lstat, %d walkers) | lstat/s | RSS ready | RSS after walk | (after − ready)/file |\n|---|---|---|---|---|---|---|---|\n", walkers)
	for r := 1; r <= rounds; r++ {
		for _, mode := range []string{manPath, "none"} {
			res, err := measure(bin, dir, data, mode, walkers)
			if err != nil {
				return err
			}
			name := "manifest"
			if mode == "none" {
				name = "no manifest"
			}
			fmt.Printf("| %d | %s | %.2fs | %.2fs (%d files) | %.0f | %s | %s | %.0f B |\n", r, name,
				res.ready.Seconds(), res.walk.Seconds(), res.files, float64(res.files)/res.walk.Seconds(),
				mib(res.rssReady), mib(res.rssWalk), float64(res.rssWalk-res.rssReady)/float64(res.files))
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

// measure mounts data with --manifest mode, waits until the mount answers,
// walks it, and unmounts.
func measure(bin, dir, data, mode string, walkers int) (result, error) {
	var res result
	mnt := filepath.Join(dir, "mnt")
	cache := filepath.Join(dir, "cache")
	os.RemoveAll(cache)
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return res, err
	}
	dropCaches()
	start := time.Now()
	cmd := exec.Command(bin, "mount", data, mnt, "--cache-dir", cache, "--cache-size", "1GiB", "--manifest", mode, "--log-level", "warn")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return res, err
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	for !isMounted(mnt) {
		if time.Since(start) > 5*time.Minute {
			return res, fmt.Errorf("mount not ready after 5 minutes")
		}
		time.Sleep(2 * time.Millisecond)
	}
	if _, err := os.ReadDir(mnt); err != nil {
		return res, err
	}
	res.ready = time.Since(start)
	res.rssReady = rss(cmd.Process.Pid)

	start = time.Now()
	n, err := walk(mnt, walkers)
	if err != nil {
		return res, err
	}
	res.walk, res.files = time.Since(start), n
	runtime.GC()
	res.rssWalk = rss(cmd.Process.Pid)
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

func isMounted(mnt string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	return strings.Contains(string(b), " "+mnt+" ")
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
