//go:build ceph

// Command ceph benchmarks a cold epoch over Ceph: files/s through
// a cachefs mount (built with -tags ceph,pacific) with an empty cache vs the
// same dataset read directly with the same concurrency — CephFS through
// go-ceph (one libcephfs mount, open/read/close per file), and S3 from Ceph
// RGW and from MinIO through a minio-go GET loop — in interleaved rounds,
// with sha256 checks of every file and the page cache dropped (after a
// sync) before every epoch. It uses the Ceph cluster of EPOCHFS_CEPH_DIR
// (scripts/with-ceph.sh, make bench-ceph) and needs root (FUSE, drop_caches).
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ceph/go-ceph/cephfs"
	"github.com/minio/minio-go/v7"
	"golang.org/x/sys/unix"

	"github.com/epochfs/epochfs/internal/benchproc"
	"github.com/epochfs/epochfs/internal/datagen"
	"github.com/epochfs/epochfs/internal/epoch"
	"github.com/epochfs/epochfs/internal/testenv/ceph"
	"github.com/epochfs/epochfs/pkg/backend"
	"github.com/epochfs/epochfs/pkg/backend/all"
	"github.com/epochfs/epochfs/pkg/mount/mountapi"
	"github.com/epochfs/epochfs/pkg/source"
)

func main() {
	cachefs := flag.String("cachefs", "bin/cachefs", "cachefs built with -tags ceph,pacific (make build-ceph)")
	minioBin := flag.String("minio", ".tools/bin/minio", "minio server binary")
	files := flag.Int("files", 2000, "dataset files")
	median := flag.Int64("median", 64_000, "median file size (bytes)")
	workers := flag.Int("workers", 8, "parallel readers, for the mount and the direct reads alike")
	rounds := flag.Int("rounds", 3, "interleaved rounds")
	mflags := flag.String("mount-flags", "", "extra flags for every `cachefs mount` (space-separated)")
	bflags := flag.String("mount-flags-b", "", "also read every mounted backend through a second mount with these extra flags instead (rows \"… mount cold B\", e.g. \"--readahead-files 0\": a change compared in the same run)")
	flag.Parse()
	mountFlags, mountFlagsB := strings.Fields(*mflags), strings.Fields(*bflags)
	dir := os.Getenv("EPOCHFS_CEPH_DIR")
	if dir == "" {
		fatal(fmt.Errorf("EPOCHFS_CEPH_DIR is not set: run under scripts/with-ceph.sh (make bench-ceph)"))
	}
	cluster, err := ceph.Load(dir)
	if err != nil {
		fatal(err)
	}
	if cluster.RGW == nil {
		fatal(fmt.Errorf("the Ceph cluster in %s runs no RGW (start it with WITH_RGW=1)", dir))
	}
	os.Setenv("CEPH_CONF", cluster.Conf)
	work, err := os.MkdirTemp("/var/tmp", "epochfs-bench-ceph-")
	if err != nil {
		fatal(err)
	}
	defer os.RemoveAll(work)
	ctx := context.Background()

	spec := datagen.Spec{Files: *files, Classes: 20, MedianSize: *median, MinSize: 4096, Seed: 14}
	local := filepath.Join(work, "data")
	if err := os.Mkdir(local, 0o755); err != nil {
		fatal(err)
	}
	fl, err := datagen.Write(local, spec)
	if err != nil {
		fatal(err)
	}
	paths, want, total := datagen.Paths(fl), datagen.Sums(fl), datagen.TotalSize(fl)
	fmt.Printf("dataset: %d files, %.1f MB, median %d B; %d readers; %d rounds\n", len(fl), float64(total)/1e6, *median, *workers, *rounds)

	// CephFS: copy in with python3-cephfs.
	cephPath := fmt.Sprintf("/bench/%d", os.Getpid())
	t0 := time.Now()
	if err := cluster.CopyTree(local, cephPath); err != nil {
		fatal(err)
	}
	fmt.Printf("copied into CephFS in %.1fs\n", time.Since(t0).Seconds())
	cephURL := cluster.URL(cephPath)

	// RGW and MinIO.
	rgw, err := benchproc.OpenS3(cluster.RGW.Endpoint, cluster.RGW.AccessKey, cluster.RGW.SecretKey)
	if err != nil {
		fatal(err)
	}
	mi, err := benchproc.StartMinIO(*minioBin, filepath.Join(work, "minio"))
	if err != nil {
		fatal(err)
	}
	defer mi.Stop()
	bucket := fmt.Sprintf("bench-%d", os.Getpid())
	for _, s := range []*benchproc.S3{rgw, mi} {
		t0 := time.Now()
		if err := s.Upload(ctx, bucket, local, paths, 16, nil); err != nil {
			fatal(err)
		}
		fmt.Printf("uploaded to %s in %.1fs\n", s.Host, time.Since(t0).Seconds())
	}
	getClient := map[*benchproc.S3]*minio.Client{}
	for _, s := range []*benchproc.S3{rgw, mi} {
		c, err := benchproc.NewClient(s.Host, s.AccessKey, s.SecretKey, *workers)
		if err != nil {
			fatal(err)
		}
		getClient[s] = c
	}

	results := map[string][]float64{}
	run := func(name string, o epoch.Options) {
		unix.Sync()
		if err := epoch.DropPageCache(); err != nil {
			fatal(err)
		}
		o.Paths, o.Want, o.Workers = paths, want, *workers
		res, err := epoch.Run(ctx, o)
		if err != nil {
			fatal(fmt.Errorf("%s: %w", name, err))
		}
		if len(res.Mismatches) > 0 || res.Files != len(paths) {
			fatal(fmt.Errorf("%s: %d of %d files, %d mismatches", name, res.Files, len(paths), len(res.Mismatches)))
		}
		results[name] = append(results[name], res.FilesPerSec())
		fmt.Printf("  %-28s %8.0f files/s  %6.1f MB/s\n", name, res.FilesPerSec(), float64(res.Bytes)/1e6/res.Elapsed.Seconds())
	}
	mountEpoch := func(name, src string, extraEnv []string, round int, seed uint64, flags []string) {
		mnt := filepath.Join(work, "mnt")
		cache := filepath.Join(work, fmt.Sprintf("cache-%s-%d", strings.ReplaceAll(name, " ", "-"), round))
		if err := os.MkdirAll(mnt, 0o755); err != nil {
			fatal(err)
		}
		cmd := exec.Command(*cachefs, mountapi.CommandOptions{Source: src, Mountpoint: mnt, CacheDir: cache, CacheSize: total + total/8, Extra: flags}.Args()...)
		cmd.Env = append(os.Environ(), extraEnv...)
		p, err := benchproc.Start("cachefs mount", cmd, mnt)
		if err != nil {
			fatal(err)
		}
		if err := p.WaitMounted(60 * time.Second); err != nil {
			fatal(err)
		}
		run(name, epoch.Options{Root: mnt, Seed: seed})
		p.Stop()
		os.RemoveAll(cache)
	}
	cephDirect := func(name string, seed uint64) {
		// A fresh libcephfs mount per epoch: a cold client.
		m := cephMount(cluster.Conf, cluster.FS, cephPath)
		run(name, epoch.Options{Seed: seed, Open: func(_ context.Context, p string) (io.ReadCloser, error) {
			return m.Open("/"+p, os.O_RDONLY, 0)
		}})
		_ = m.Unmount()
		_ = m.Release()
	}
	cephBackend := func(seed uint64) {
		// The cephfs backend itself (what the mount reads through): Stat,
		// then one whole-file ReadAt with the version, as a cache fill does.
		src, err := source.Parse(cephURL)
		if err != nil {
			fatal(err)
		}
		b, err := all.Open(ctx, src, backend.Options{})
		if err != nil {
			fatal(err)
		}
		defer b.Close()
		run("cephfs backend ReadAt", epoch.Options{Seed: seed, Open: func(ctx context.Context, p string) (io.ReadCloser, error) {
			e, err := b.Stat(ctx, p)
			if err != nil {
				return nil, err
			}
			buf := make([]byte, e.Size)
			if err := backend.ReadFull(ctx, b, p, e.Version, buf, 0); err != nil {
				return nil, err
			}
			return io.NopCloser(bytes.NewReader(buf)), nil
		}})
	}
	s3Runs := func(s *benchproc.S3, what string, round int, seed uint64) []func() {
		c := getClient[s]
		src := "s3://" + bucket + "?endpoint=http://" + s.Host + "&region=us-east-1"
		fs := []func(){
			func() {
				run(what+" GET loop", epoch.Options{Seed: seed, Open: func(ctx context.Context, p string) (io.ReadCloser, error) {
					return c.GetObject(ctx, bucket, p, minio.GetObjectOptions{})
				}})
			},
			func() { mountEpoch(what+" mount cold", src, s.Env(), round, seed, mountFlags) },
		}
		if mountFlagsB != nil {
			fs = append(fs, func() { mountEpoch(what+" mount cold B", src, s.Env(), round, seed, mountFlagsB) })
		}
		return fs
	}
	// Warm the servers (OSD, RGW, MinIO) once, unrecorded, so that every
	// recorded epoch is cold on the client side only.
	cephDirect("warm-up cephfs", 0)
	for _, f := range s3Runs(rgw, "warm-up rgw", 0, 0)[:1] {
		f()
	}
	for _, f := range s3Runs(mi, "warm-up minio", 0, 0)[:1] {
		f()
	}
	for round := 1; round <= *rounds; round++ {
		seed := uint64(round)
		fmt.Printf("round %d\n", round)
		runs := []func(){
			func() { cephDirect("cephfs go-ceph direct", seed) },
			func() { cephBackend(seed) },
			func() { mountEpoch("cephfs mount cold", cephURL, nil, round, seed, mountFlags) },
		}
		if mountFlagsB != nil {
			runs = append(runs, func() { mountEpoch("cephfs mount cold B", cephURL, nil, round, seed, mountFlagsB) })
		}
		runs = append(runs, s3Runs(rgw, "rgw", round, seed)...)
		runs = append(runs, s3Runs(mi, "minio", round, seed)...)
		// Rotate the order each round so no kind always runs first.
		for i := range runs {
			runs[(i+round)%len(runs)]()
		}
	}
	med := func(name string) float64 {
		v := slices.Clone(results[name])
		slices.Sort(v)
		return v[len(v)/2]
	}
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("\nmachine: %d CPUs, %s; go %s; load average at the end %s; mount flags %q, B: %q\n", runtime.NumCPU(), kernel(), runtime.Version(),
		strings.Join(strings.Fields(string(load))[:3], " "), strings.Join(mountFlags, " "), strings.Join(mountFlagsB, " "))
	fmt.Printf("| cold epoch, %d readers, median of %d | files/s | ratio |\n|---|---|---|\n", *workers, *rounds)
	rows := [][3]string{
		{"cephfs go-ceph direct", "", ""}, {"cephfs backend ReadAt", "cephfs go-ceph direct", "backend / direct"},
		{"cephfs mount cold", "cephfs go-ceph direct", "mount / direct"},
		{"cephfs mount cold B", "cephfs go-ceph direct", "mount B / direct"},
		{"rgw GET loop", "", ""}, {"rgw mount cold", "rgw GET loop", "mount / GET loop"},
		{"rgw mount cold B", "rgw GET loop", "mount B / GET loop"},
		{"minio GET loop", "", ""}, {"minio mount cold", "minio GET loop", "mount / GET loop"},
		{"minio mount cold B", "minio GET loop", "mount B / GET loop"},
	}
	for _, r := range rows {
		if len(results[r[0]]) == 0 {
			continue
		}
		ratio := ""
		if r[1] != "" {
			ratio = fmt.Sprintf("%.2f× (%s)", med(r[0])/med(r[1]), r[2])
		}
		fmt.Printf("| %s | %.0f (%s) | %s |\n", r[0], med(r[0]), join(results[r[0]]), ratio)
	}
	fmt.Printf("| rgw / minio, GET loop | | %.2f× |\n| rgw / minio, mount cold | | %.2f× |\n",
		med("rgw GET loop")/med("minio GET loop"), med("rgw mount cold")/med("minio mount cold"))
}

func join(v []float64) string {
	var s []string
	for _, x := range v {
		s = append(s, strconv.FormatFloat(x, 'f', 0, 64))
	}
	return strings.Join(s, ", ")
}

func kernel() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return "?"
	}
	return "kernel " + unix.ByteSliceToString(u.Release[:])
}

func cephMount(conf, fs, root string) *cephfs.MountInfo {
	m, err := cephfs.CreateMount()
	if err == nil {
		err = m.ReadConfigFile(conf)
	}
	if err == nil {
		err = m.Init()
	}
	if err == nil {
		err = m.SelectFilesystem(fs)
	}
	if err == nil {
		err = m.MountWithRoot(root)
	}
	if err != nil {
		fatal(fmt.Errorf("go-ceph mount: %w", err))
	}
	return m
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "bench-ceph:", err)
	os.Exit(1)
}
