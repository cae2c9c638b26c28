// Command nfs measures a cold epoch over NFS: files/s through a
// `cachefs mount` of an nfs:// source with an empty cache vs the same NFS
// server read directly through the nfs backend (the pure-Go client the mount
// uses, no cache, no FUSE) with the same number of parallel readers. The
// server is NFS-Ganesha in a network namespace of its own
// (scripts/nfs-server.sh), serving a generated dataset from local disk.
//
// Rounds are interleaved (mount, direct; then direct, mount; ...), each run
// after `sync` and a drop of the page cache, and every file's sha256 is
// checked. The listing is taken before the clock starts in both (a walk of
// the mount, a walk of the backend): the epoch times reads.
//
//	go run ./bench/nfs -cachefs bin/cachefs [-files 2000] [-workers 8] [-rounds 3]
//
// Needs root (FUSE, namespaces, dropping caches) and `make nfs-deps`.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/epochfs/epochfs/internal/benchproc"
	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/epoch"
	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/backend/all"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
	"github.com/epochfs/epochfs/pkg/source"
)

func main() {
	files := flag.Int("files", 2000, "number of files")
	workers := flag.Int("workers", 8, "parallel readers (both sides)")
	rounds := flag.Int("rounds", 3, "interleaved rounds")
	conns := flag.Int("conns", 0, "nfs conns option (0: the default, 8)")
	cachefs := flag.String("cachefs", "bin/cachefs", "cachefs binary")
	script := flag.String("server", "scripts/nfs-server.sh", "the NFS-Ganesha start/stop script")
	dirFlag := flag.String("dir", "", "work directory (default: a temporary one under /var/tmp, removed afterwards)")
	mflags := flag.String("mount-flags", "", "extra flags for `cachefs mount` (space-separated), e.g. \"--readahead-files 8\"")
	posix := flag.Bool("posix", true, "also read a cold epoch through a mount of the local directory (posix), for scale")
	bflags := flag.String("mount-flags-b", "", "also read a cold epoch through a second mount of nfs:// with these extra flags instead of -mount-flags, interleaved with the others (e.g. \"--readahead-files 0\", to compare a change in the same run)")
	flag.Parse()
	withPosix = *posix
	mountFlags = strings.Fields(*mflags)
	mountFlagsB = strings.Fields(*bflags)
	if err := run(*files, *workers, *rounds, *conns, *cachefs, *script, *dirFlag); err != nil {
		fmt.Fprintln(os.Stderr, "bench-nfs:", err)
		os.Exit(1)
	}
}

var (
	withPosix   bool
	mountFlags  []string
	mountFlagsB []string // nil: no second mount column
)

func run(nfiles, workers, rounds, conns int, cachefs, script, dirFlag string) error {
	ctx := context.Background()
	dir, cleanup, err := benchproc.WorkDir(dirFlag, "epochfs-bench-nfs-")
	if err != nil {
		return err
	}
	defer cleanup()
	data := filepath.Join(dir, "data")
	spec := datagen.Spec{Files: nfiles, Seed: 1} // bench/throughput's dataset
	fmt.Fprintf(os.Stderr, "generating %d files in %s\n", nfiles, data)
	files, err := datagen.Write(data, spec)
	if err != nil {
		return err
	}
	paths, want := datagen.Paths(files), datagen.Sums(files)
	total := datagen.TotalSize(files)

	out, err := exec.Command("bash", script, "start", data, strconv.Itoa(os.Getpid())).Output()
	if err != nil {
		var ee *exec.ExitError
		if ok := asExit(err, &ee); ok {
			return fmt.Errorf("start NFS-Ganesha: %v: %s", err, ee.Stderr)
		}
		return fmt.Errorf("start NFS-Ganesha: %v", err)
	}
	vals := map[string]string{}
	for _, l := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			vals[k] = v
		}
	}
	defer func() { _ = exec.Command("bash", script, "stop", vals["NAME"]).Run() }()
	src := "nfs://" + vals["ADDR"] + data
	if conns > 0 {
		src += "?conns=" + strconv.Itoa(conns)
	}
	fmt.Fprintf(os.Stderr, "serving %s (%s)\n", src, vals["NAME"])

	type row struct{ mount, direct, posix, mountB float64 }
	var rows []row
	for r := 1; r <= rounds; r++ {
		var rw row
		order := []string{"mount", "direct"}
		if mountFlagsB != nil {
			order = append(order, "mountB")
		}
		// Rotate the order every round, so no reader always goes first.
		for range r - 1 {
			order = append(order[1:], order[0])
		}
		if withPosix {
			order = append(order, "posix")
		}
		for _, what := range order {
			var fps float64
			var err error
			switch what {
			case "posix":
				fps, err = mountEpoch(ctx, cachefs, data, filepath.Join(dir, fmt.Sprintf("cache-posix-%d", r)), filepath.Join(dir, "mnt"), total, paths, want, workers, uint64(100+r), mountFlags)
				rw.posix = fps
			case "mount":
				fps, err = mountEpoch(ctx, cachefs, src, filepath.Join(dir, fmt.Sprintf("cache-%d", r)), filepath.Join(dir, "mnt"), total, paths, want, workers, uint64(100+r), mountFlags)
				rw.mount = fps
			case "mountB":
				fps, err = mountEpoch(ctx, cachefs, src, filepath.Join(dir, fmt.Sprintf("cache-b-%d", r)), filepath.Join(dir, "mnt"), total, paths, want, workers, uint64(100+r), mountFlagsB)
				rw.mountB = fps
			default:
				fps, err = directEpoch(ctx, src, paths, want, workers, uint64(100+r))
				rw.direct = fps
			}
			if err != nil {
				return fmt.Errorf("round %d %s: %w", r, what, err)
			}
			fmt.Fprintf(os.Stderr, "round %d  %-6s %7.0f files/s\n", r, what, fps)
		}
		rows = append(rows, rw)
	}
	host, _ := os.Hostname()
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("NFS-Ganesha 4.3 (VFS FSAL, in a network namespace over a veth pair) serving %d files (%s), %d readers, nfs conns %s, mount flags %q; %d CPUs, %s, %s, load average at the end %s\n\n",
		nfiles, mib(total), workers, orDefault(conns), strings.Join(mountFlags, " "), runtime.NumCPU(), host, time.Now().UTC().Format("2006-01-02 15:04"), strings.Join(strings.Fields(string(load))[:3], " "))
	bName := fmt.Sprintf("mount with %q, cold (files/s)", strings.Join(mountFlagsB, " "))
	if mountFlagsB == nil {
		fmt.Println("| round | mount of nfs://, cold (files/s) | nfs backend direct (files/s) | mount / direct | mount of the local dir (posix), cold (files/s) |")
		fmt.Println("|---|---|---|---|---|")
	} else {
		fmt.Printf("| round | mount of nfs://, cold (files/s) | nfs backend direct (files/s) | mount / direct | %s | B / direct | mount of the local dir (posix), cold (files/s) |\n", bName)
		fmt.Println("|---|---|---|---|---|---|---|")
	}
	var ms, ds, ps, bs []float64
	for i, rw := range rows {
		if mountFlagsB == nil {
			fmt.Printf("| %d | %.0f | %.0f | %.2f | %s |\n", i+1, rw.mount, rw.direct, rw.mount/rw.direct, orDash(rw.posix))
		} else {
			fmt.Printf("| %d | %.0f | %.0f | %.2f | %.0f | %.2f | %s |\n", i+1, rw.mount, rw.direct, rw.mount/rw.direct, rw.mountB, rw.mountB/rw.direct, orDash(rw.posix))
		}
		ms, ds, ps, bs = append(ms, rw.mount), append(ds, rw.direct), append(ps, rw.posix), append(bs, rw.mountB)
	}
	m, d, b := median(ms), median(ds), median(bs)
	if mountFlagsB == nil {
		fmt.Printf("| median | %.0f | %.0f | **%.2f** | %s |\n", m, d, m/d, orDash(median(ps)))
	} else {
		fmt.Printf("| median | %.0f | %.0f | **%.2f** | %.0f | **%.2f** | %s |\n", m, d, m/d, b, b/d, orDash(median(ps)))
	}
	return nil
}

func asExit(err error, ee **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	*ee = e
	return ok
}

func orDash(v float64) string {
	if v == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f", v)
}

func orDefault(n int) string {
	if n == 0 {
		return strconv.Itoa(source.DefaultNFSConns) + " (default)"
	}
	return strconv.Itoa(n)
}

func mib(n int64) string { return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20)) }

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

func dropCaches() error {
	syscall.Sync()
	return epoch.DropPageCache()
}

// mountEpoch mounts src with an empty cache as large as the dataset, walks
// it (not timed), drops the page cache and reads one epoch.
func mountEpoch(ctx context.Context, cachefs, src, cacheDir, mnt string, total int64, paths []string, want map[string][32]byte, workers int, seed uint64, mountFlags []string) (float64, error) {
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return 0, err
	}
	// The cache directory stays until the work directory goes: removing it
	// now would make the next cold run pay for ext4's scan for inodes freed
	// in the last dirty_expire interval (bench/RESULTS.md, P3 notes), a cost
	// a node filling its cache does not pay.
	args := mountapi.CommandOptions{Source: src, Mountpoint: mnt, CacheDir: cacheDir, CacheSize: total + total/10, Extra: mountFlags}.Args()
	cmd := exec.Command(cachefs, args...)
	p, err := benchproc.Start("cachefs mount", cmd, mnt)
	if err != nil {
		return 0, err
	}
	defer p.Stop()
	if err := p.WaitMounted(30 * time.Second); err != nil {
		return 0, fmt.Errorf("%w: %s", err, p.Out.String())
	}
	if err := filepath.WalkDir(mnt, func(string, fs.DirEntry, error) error { return nil }); err != nil {
		return 0, err
	}
	if err := dropCaches(); err != nil {
		return 0, err
	}
	res, err := epoch.Run(ctx, epoch.Options{Root: mnt, Paths: paths, Workers: workers, Seed: seed, Want: want})
	if err != nil {
		return 0, err
	}
	if len(res.Mismatches) > 0 {
		return 0, fmt.Errorf("%d files with wrong bytes through the mount", len(res.Mismatches))
	}
	return res.FilesPerSec(), nil
}

// directEpoch opens the nfs backend, lists the dataset (not timed), drops
// the page cache and reads every file whole with one ReadAt at its listed
// version, as the mount's cache misses do.
func directEpoch(ctx context.Context, raw string, paths []string, want map[string][32]byte, workers int, seed uint64) (float64, error) {
	src, err := source.Parse(raw)
	if err != nil {
		return 0, err
	}
	b, err := all.Open(ctx, src, backend.Options{})
	if err != nil {
		return 0, err
	}
	defer b.Close()
	entries := map[string]backend.Entry{}
	var walk func(dir string) error
	walk = func(dir string) error {
		es, err := b.List(ctx, dir)
		if err != nil {
			return err
		}
		for _, e := range es {
			p := path.Join(dir, e.Name)
			if e.IsDir {
				if err := walk(p); err != nil {
					return err
				}
				continue
			}
			entries[p] = e
		}
		return nil
	}
	if err := walk(""); err != nil {
		return 0, err
	}
	if err := dropCaches(); err != nil {
		return 0, err
	}
	res, err := epoch.Run(ctx, epoch.Options{Paths: paths, Workers: workers, Seed: seed, Want: want,
		Open: func(ctx context.Context, p string) (io.ReadCloser, error) {
			e, ok := entries[p]
			if !ok {
				return nil, fmt.Errorf("%s: not listed", p)
			}
			buf := make([]byte, e.Size)
			if err := backend.ReadFull(ctx, b, p, e.Version, buf, 0); err != nil {
				return nil, err
			}
			return io.NopCloser(bytes.NewReader(buf)), nil
		}})
	if err != nil {
		return 0, err
	}
	if len(res.Mismatches) > 0 {
		return 0, fmt.Errorf("%d files with wrong bytes read directly", len(res.Mismatches))
	}
	return res.FilesPerSec(), nil
}
